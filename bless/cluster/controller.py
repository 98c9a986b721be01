"""The cluster's controller: which app is on which GPU, and placing new ones.

:class:`Controller` holds the placement state (app -> GPU, its registration and
why it went there), persisted as JSON in its state directory
(:data:`STATE_FILE`, written whole to a temporary file and renamed, so a crash
leaves the old or the new state).  To register an app it validates the
registration as ``bless serve`` does, asks every agent for its GPU's state,
places the app (:func:`bless.cluster.placement.place`) and deploys it on the
chosen agent, whose own admission has the last word.  Placements are made one
at a time (a lock), so two registrations never both count on the same free
quota or memory.

The controller talks to its agents through :class:`Agents`: plain objects in
the same process (:class:`LocalAgents`, the tests) or Ray actor handles
(:class:`bless.cluster.ray_actors.RayAgents`).

Failures.  An agent that is gone (its call raises :class:`AgentDown`: on Ray,
the actor died or no actor has its name) is marked *down* and its apps are
re-placed on the live GPUs (:meth:`Controller.agent_down`): the same
placement (feasibility first, then the policy), each deployed on its new
GPU; an app that fits on none is kept as *unplaced*, with why, and placed
again when a GPU joins.  The controller notices a dead agent on any call
to it, and :meth:`Controller.check` (which the Ray controller runs every
:data:`HEALTH_INTERVAL` seconds) pings every agent, because the front end
serves requests from the agents directly and the controller may see no call
at all.  The same check finds an agent that came back (a new actor of the same
name) and :meth:`Controller.agent_joined` makes its GPU a placement target
again; an app its store brings back that now runs elsewhere is removed from it.
The down GPUs and the unplaced apps are persisted with the placements, so a
controller restarted on the same state directory starts from them and
:meth:`Controller.reconcile` checks them against the agents it finds.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from bless.cluster.placement import DEFAULT_LIMITS, POLICIES, PlacedApp, Placement, place
from bless.colocation.kace import KaceModel
from bless.hw.gpus import GPUS, get_gpu
from bless.serving.server.admission import AdmissionLimits
from bless.serving.server.errors import AlreadyExists, FailedPrecondition, NotFound, ServiceError, Unavailable
from bless.serving.server.spec import AppSpec, load_profile_for, min_quota, parse_app_spec, quota_value

log = logging.getLogger("bless.cluster")

STATE_FILE = "cluster-placement.json"
STATE_VERSION = 1
DEFAULT_INPUTS = (("INPUT", "FP32", [-1, 16]),)
DEFAULT_OUTPUTS = (("OUTPUT", "FP32", [-1, 4]),)
"""The tensors an app is declared with when the registration names none (as ``bless client register``)."""
HEALTH_INTERVAL = 1.0
"""Seconds between two health checks (:meth:`Controller.check`).  The front end sends requests
to the agents directly, so without it a dead agent's apps would be re-placed only at the
controller's next call; 1 s bounds how long they answer UNAVAILABLE, for one cheap ping per
agent per second."""
QUOTA_EPSILON = 1e-9
"""Slack in the 100 % check of a GPU's quotas (floating-point sums of parsed percentages)."""
RETRY_AFTER = HEALTH_INTERVAL
"""The retry hint (seconds) of a request refused because its GPU's agent is down: by then
a health check has re-placed the app."""


class AgentDown(Unavailable):
    """A GPU's agent is gone (its actor died or cannot be found): UNAVAILABLE, retry later."""

    def __init__(self, gpu_id: str, reason: str) -> None:
        super().__init__(
            f"the agent of {gpu_id} is down ({reason}); its apps are being re-placed on the other GPUs: retry",
            retry_after=RETRY_AFTER,
        )
        self.gpu_id = gpu_id
        self.why = reason

    def __reduce__(self) -> tuple:
        return (type(self), (self.gpu_id, self.why))  # Ray pickles it across actors


class Agents(Protocol):
    """How the controller reaches its GPU agents."""

    def ids(self) -> list[str]: ...

    def call(self, gpu_id: str, method: str, *args: Any) -> Any: ...


class LocalAgents:
    """Agents in this process (:class:`bless.cluster.agent.GpuAgent` objects), by GPU id."""

    def __init__(self, agents: Mapping[str, Any]) -> None:
        self.agents = dict(agents)

    def ids(self) -> list[str]:
        return list(self.agents)

    def call(self, gpu_id: str, method: str, *args: Any) -> Any:
        return getattr(self.agents[gpu_id], method)(*args)


def _least_quota(gpus: Sequence[Any]) -> float:
    """The smallest quota an app may hold here: the largest of the live GPUs' smallest partitions
    (an app may move to any of them), or, with none live, of every GPU model's under either
    mechanism (the app is placed when one comes back, whichever it is)."""
    if gpus:
        return max(min_quota(get_gpu(g.gpu), g.mechanism) for g in gpus)
    return max(min_quota(gpu, mechanism) for gpu in GPUS.values() for mechanism in gpu.granularity)


class Controller:
    """Placement state and placement for a set of GPU agents."""

    def __init__(
        self,
        state_dir: Path,
        agents: Agents,
        *,
        policy: str = "first-fit",
        limits: AdmissionLimits = DEFAULT_LIMITS,
        kace_model: str | Path | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.state_dir / STATE_FILE
        self.agents = agents
        self.policy = policy
        self.limits = limits
        self.kace_model = KaceModel.load(kace_model) if kace_model else None
        self.lock = threading.RLock()
        """Held while placing, unregistering or failing over: read under it, the state is whole."""
        self.down: dict[str, str] = {}
        """GPUs whose agent is down, and why."""
        self.unplaced: dict[str, dict[str, Any]] = {}
        """Apps of a dead agent that no live GPU could take: ``spec``, ``was_on``, ``reason``."""
        self.placements: dict[str, dict[str, Any]] = self._load()

    # ------------------------------------------------------------ state
    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        if raw.get("version") != STATE_VERSION:
            raise ValueError(f"{self.path}: placement state version {raw.get('version')!r}, expected {STATE_VERSION}")
        known = set(self.agents.ids())
        self.down = {g: why for g, why in raw.get("down", {}).items() if g in known}
        self.unplaced = dict(raw.get("unplaced", {}))
        apps = {}
        for name, entry in raw.get("apps", {}).items():
            if entry.get("gpu") in known:
                apps[name] = entry
            else:
                log.warning("placement of %r on %s dropped: the cluster has no such GPU now", name, entry.get("gpu"))
        return apps

    def _save(self) -> None:
        body = {
            "version": STATE_VERSION,
            "gpus": self.agents.ids(),
            "apps": self.placements,
            "down": self.down,
            "unplaced": self.unplaced,
        }
        fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=".placement-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(body, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------ placing
    def register(
        self,
        name: str,
        profile: str,
        quota: str,
        *,
        memory_bytes: int = 0,
        slo: str = "",
        inputs: Sequence[tuple[str, str, Sequence[int]]] = DEFAULT_INPUTS,
        outputs: Sequence[tuple[str, str, Sequence[int]]] = DEFAULT_OUTPUTS,
        policy: str | None = None,
        dry_run: bool = False,
        priority: str = "",
    ) -> dict[str, Any]:
        """Place and deploy an app; the placement as a dict (``gpu``, ``why``, ``scores``, ...).

        Raises AlreadyExists for a taken name, InvalidArgument for a bad registration,
        FailedPrecondition when no GPU can take it (with every GPU's reason)."""
        policy = policy or self.policy
        with self.lock:
            if name in self.placements:
                raise AlreadyExists(
                    f"name: app {name!r} is already on {self.placements[name]['gpu']}; unregister it first"
                )
            if name in self.unplaced:
                raise AlreadyExists(f"name: app {name!r} is waiting for a GPU (unplaced); unregister it first")
            gpus = self._snapshots()
            if not gpus:
                raise FailedPrecondition(
                    f"no live GPU to place app {name!r} on (down: {', '.join(sorted(self.down)) or 'none'}); "
                    "start an agent, or register again when one is back"
                )
            least = _least_quota(gpus)
            spec = parse_app_spec(
                name,
                profile,
                quota,
                memory_bytes,
                slo,
                [tuple(t) for t in inputs],
                [tuple(t) for t in outputs],
                least,
                priority,
            )
            if any(name in (a.name for a in g.apps) for g in gpus):
                raise AlreadyExists(f"name: app {name!r} is already registered on a GPU; unregister it first")
            profiles = {m: load_profile_for(spec, m) for m in {g.gpu for g in gpus}}
            placement = self._place(spec, profiles, gpus, policy)
            if dry_run or placement.gpu_id is None:
                if placement.gpu_id is None and not dry_run:
                    raise FailedPrecondition(f"placement rejected app {name!r}: {placement.why}")
                return placement.to_dict()
            gpu = next(g for g in gpus if g.gpu_id == placement.gpu_id)
            self._call(placement.gpu_id, "register", spec, profiles[gpu.gpu])
            self.placements[name] = {"gpu": placement.gpu_id, "spec": spec.to_dict(), "placement": placement.to_dict()}
            self._save()
            log.info("placed %r on %s: %s", name, placement.gpu_id, placement.why)
            return placement.to_dict()

    def _place(self, spec: AppSpec, profiles: dict, gpus: list, policy: str) -> Placement:
        models = {g.gpu for g in gpus}
        if len(models) > 1:
            raise FailedPrecondition(
                f"this version places apps on clusters of one GPU model; this one has {', '.join(sorted(models))}"
            )
        app = PlacedApp(spec.name, profiles[next(iter(models))], spec.quota, spec.slo)
        return place(app, gpus, policy, limits=self.limits, kace_model=self.kace_model)

    def unregister(self, name: str) -> int:
        """Remove an app from its GPU; the number of its queued requests that were aborted."""
        with self.lock:
            if self.unplaced.pop(name, None) is not None:
                self._save()
                return 0
            entry = self.placements.get(name)
            if entry is None:
                raise NotFound(
                    f"no app {name!r} in the cluster (registered: {', '.join(sorted(self.placements)) or 'none'})"
                )
            try:
                aborted = self._call(entry["gpu"], "unregister", name)
            except AgentDown:
                # found dead just now: the fail-over moved the app (or left it unplaced); remove it
                # there (each retry has one live GPU fewer, so this ends)
                return self.unregister(name)
            self.placements.pop(name, None)
            self._save()
            return aborted

    def set_quota(self, name: str, quota: str) -> dict[str, Any]:
        """Change an app's quota; its placement entry as stored after.

        The controller owns it, so a restarted controller and a re-placement after a failure
        use the new quota: it checks the change against the app's GPU (its quotas stay within
        100 %), stores it, then applies it on the agent, whose admission has the last word (a
        rejection there puts the stored quota back).  An app that waits for a GPU (unplaced) gets
        the new quota recorded and is placed with it.  InvalidArgument for a bad quota,
        FailedPrecondition when the GPU cannot take it, NotFound for an unknown app."""
        with self.lock:
            waiting = self.unplaced.get(name)
            if waiting is not None:
                waiting["spec"] = {
                    **waiting["spec"],
                    "quota": quota_value(quota, minimum=_least_quota(self._snapshots())),
                }
                self._save()
                return {"gpu": None, "spec": dict(waiting["spec"]), "unplaced": waiting["reason"]}
            entry = self.placements.get(name)
            if entry is None:
                raise NotFound(
                    f"no app {name!r} in the cluster (registered: {', '.join(sorted(self.placements)) or 'none'})"
                )
            gpu_id = entry["gpu"]
            gpu = self._call(gpu_id, "snapshot")
            q = quota_value(quota, minimum=min_quota(get_gpu(gpu.gpu), gpu.mechanism))
            others = sum(a.quota for a in gpu.apps if a.name != name)
            if others + q > 1.0 + QUOTA_EPSILON:
                raise FailedPrecondition(
                    f"quota: {q:.0%} for {name!r} would put {gpu_id} at {others + q:.0%} (its other apps hold "
                    f"{others:.0%}); give at most {max(0.0, 1.0 - others):.0%}, or unregister and register the app "
                    f"again to have it placed on another GPU"
                )
            old = entry["spec"]
            entry["spec"] = {**old, "quota": q}
            self._save()
            try:
                self._call(gpu_id, "set_quota", name, q)
            except AgentDown:
                # found dead just now: the fail-over re-placed the app with the stored (new) quota
                log.warning("quota of %r stored; its agent died before applying it (re-placed)", name)
                return dict(self.placements.get(name) or {"gpu": None, "spec": self.unplaced[name]["spec"]})
            except BaseException:
                if self.placements.get(name) is entry:
                    entry["spec"] = old
                    self._save()
                raise
            log.info("app %r on %s: quota %.0f%%", name, gpu_id, q * 100)
            return dict(entry)

    # ------------------------------------------------------------ serving
    def gpu_of(self, name: str) -> str:
        entry = self.placements.get(name)
        if entry is None:
            if name in self.unplaced:
                raise Unavailable(
                    f"app {name!r} has no GPU since {self.unplaced[name]['was_on']} went down: "
                    f"{self.unplaced[name]['reason']}",
                    retry_after=RETRY_AFTER,
                )
            raise NotFound(
                f"no app {name!r} in the cluster (registered: {', '.join(sorted(self.placements)) or 'none'})"
            )
        return entry["gpu"]

    def infer(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        """One request of ``name`` on its GPU: its timings, and which GPU ran it (UNAVAILABLE,
        with a retry hint, when that GPU's agent is found dead: the app is re-placed then)."""
        gpu = self.gpu_of(name)
        return {"gpu": gpu, **self._call(gpu, "infer", name, timeout)}

    def placement_of(self, name: str) -> dict[str, Any]:
        self.gpu_of(name)
        return dict(self.placements[name])

    def endpoints(self) -> dict[str, dict[str, str] | None]:
        """Per GPU: where its agent serves gRPC and the agent's admin token (None: it does not)."""
        out: dict[str, dict[str, str] | None] = {}
        for g in self.agents.ids():
            try:
                out[g] = None if g in self.down else self._call(g, "endpoint")
            except AgentDown:
                out[g] = None
        return out

    def status(self) -> list[dict[str, Any]]:
        """Per GPU, in cluster order: its agent's stats (apps, quotas, memory, utilisation, latency
        against the ISO target), or why it could not be read."""
        out = []
        for g in self.agents.ids():
            if g in self.down:
                out.append({"gpu_id": g, "error": f"agent down: {self.down[g]}", "down": True, "apps": []})
                continue
            try:
                out.append(self._call(g, "stats"))
            except Exception as e:
                out.append({"gpu_id": g, "error": f"{type(e).__name__}: {e}", "apps": []})
        return out

    # ------------------------------------------------------------ failures
    def live(self) -> list[str]:
        """The GPUs whose agent is not known to be down, in cluster order."""
        return [g for g in self.agents.ids() if g not in self.down]

    def _call(self, gpu_id: str, method: str, *args: Any) -> Any:
        """``method`` on the agent of ``gpu_id``; a dead agent is failed over, then AgentDown raised."""
        if gpu_id in self.down:
            raise AgentDown(gpu_id, self.down[gpu_id])
        try:
            return self.agents.call(gpu_id, method, *args)
        except AgentDown as e:
            self.agent_down(gpu_id, e.why)
            raise

    def _snapshots(self) -> list:
        gpus = []
        for g in self.live():
            try:
                gpus.append(self._call(g, "snapshot"))
            except AgentDown:
                continue
        return gpus

    def agent_down(self, gpu_id: str, reason: str) -> dict[str, Any]:
        """Mark ``gpu_id`` down and re-place its apps on the live GPUs; per app, its new GPU or
        (unplaced) why none can take it.  Nothing happens if it is down already."""
        with self.lock:
            if gpu_id in self.down:
                return {}
            log.error("the agent of %s is down (%s): re-placing its apps", gpu_id, reason)
            self.down[gpu_id] = reason
            moved = [n for n, e in self.placements.items() if e["gpu"] == gpu_id]
            for name in moved:
                entry = self.placements.pop(name)
                self.unplaced[name] = {"spec": entry["spec"], "was_on": gpu_id, "reason": f"{gpu_id} down: {reason}"}
            self._save()
            return self._place_unplaced(moved)

    def _place_unplaced(self, names: list[str] | None = None) -> dict[str, Any]:
        """Place the unplaced apps (``names``: these) on the live GPUs, one at a time."""
        out: dict[str, Any] = {}
        for name in list(self.unplaced if names is None else names):
            waiting = self.unplaced.get(name)
            if waiting is None:
                continue
            spec = AppSpec.from_dict(waiting["spec"])
            gpus = self._snapshots()
            if not gpus:
                waiting["reason"] = f"{waiting['was_on']} down and no live GPU left"
                out[name] = {"gpu": None, "why": waiting["reason"]}
                continue
            try:
                profiles = {m: load_profile_for(spec, m) for m in {g.gpu for g in gpus}}
                placement = self._place(spec, profiles, gpus, self.policy)
                if placement.gpu_id is not None:
                    gpu = next(g for g in gpus if g.gpu_id == placement.gpu_id)
                    self._call(placement.gpu_id, "register", spec, profiles[gpu.gpu])
            except ServiceError as e:
                waiting["reason"] = f"{waiting['was_on']} down; re-placing failed: {e}"
                out[name] = {"gpu": None, "why": waiting["reason"]}
                log.error("app %r could not be re-placed: %s", name, e)
                continue
            if placement.gpu_id is None:
                waiting["reason"] = f"{waiting['was_on']} down; {placement.why}"
                out[name] = {"gpu": None, "why": waiting["reason"]}
                log.error("app %r is unplaced: %s", name, placement.why)
                continue
            del self.unplaced[name]
            why = f"re-placed from {waiting['was_on']} (down): {placement.why}"
            self.placements[name] = {
                "gpu": placement.gpu_id,
                "spec": spec.to_dict(),
                "placement": {**placement.to_dict(), "why": why},
            }
            out[name] = {"gpu": placement.gpu_id, "why": why}
            log.warning("app %r %s", name, why)
            self._save()
        self._save()
        return out

    def agent_joined(self, gpu_id: str) -> dict[str, Any]:
        """An agent of ``gpu_id`` serves (again): its GPU is a placement target once more; apps
        its store brought back that the controller placed elsewhere are removed from it, and
        the unplaced apps are placed again.  What was removed and placed."""
        if gpu_id not in self.agents.ids():
            raise NotFound(f"no GPU {gpu_id!r} in this cluster ({', '.join(self.agents.ids())})")
        with self.lock:
            self.agents.call(gpu_id, "ping")  # AgentDown: not back after all
            self.down.pop(gpu_id, None)
            removed = self._reconcile(gpu_id, adopt=False)
            log.warning("the agent of %s joined", gpu_id)
            self._save()
            placed = self._place_unplaced() if self.unplaced else {}
            return {"gpu": gpu_id, "removed": removed, "placed": placed}

    def _reconcile(self, gpu_id: str, *, adopt: bool) -> list[str]:
        """Make the agent's apps agree with the placements: an app it runs that is placed
        elsewhere (or, unless ``adopt``, nowhere) is unregistered from it; an unplaced one is
        placed there; with ``adopt`` an app the controller does not know is recorded as placed
        there.  The apps removed."""
        removed = []
        for name, spec in self.agents.call(gpu_id, "specs").items():
            entry = self.placements.get(name)
            if entry is not None and entry["gpu"] == gpu_id:
                self._apply_stored_quota(gpu_id, name, spec, entry)
                continue
            if entry is None and name in self.unplaced:
                # its GPU is back with it (restored from the agent's store): it stays there
                was = self.unplaced.pop(name)
                self.placements[name] = {
                    "gpu": gpu_id,
                    "spec": spec,
                    "placement": {"gpu": gpu_id, "why": f"back on {gpu_id} (unplaced since {was['reason']})"},
                }
                log.warning("app %r is back on %s", name, gpu_id)
                continue
            if entry is None and adopt:
                self.placements[name] = {
                    "gpu": gpu_id,
                    "spec": spec,
                    "placement": {"gpu": gpu_id, "why": f"found on {gpu_id} when the controller started"},
                }
                continue
            self.agents.call(gpu_id, "unregister", name)
            removed.append(name)
            log.warning("removed %r from %s: the controller has it %s", name, gpu_id, entry and entry["gpu"])
        return removed

    def _apply_stored_quota(self, gpu_id: str, name: str, running: dict[str, Any], entry: dict[str, Any]) -> None:
        """The agent runs ``name`` with another quota than stored (the controller stopped between
        storing a SetQuota and applying it): apply the stored one, the controller's word."""
        quota = float(entry["spec"]["quota"])
        if abs(float(running["quota"]) - quota) <= QUOTA_EPSILON:
            return
        try:
            self.agents.call(gpu_id, "set_quota", name, quota)
            log.warning(
                "app %r on %s: stored quota %.0f%% applied (it ran %.0f%%)",
                name,
                gpu_id,
                quota * 100,
                float(running["quota"]) * 100,
            )
        except AgentDown:
            raise
        except ServiceError as e:  # its admission refuses it now: the running quota is the truth
            log.error(
                "app %r on %s: stored quota %.0f%% refused (%s); keeping %.0f%%",
                name,
                gpu_id,
                quota * 100,
                e,
                float(running["quota"]) * 100,
            )
            entry["spec"] = {**entry["spec"], "quota": float(running["quota"])}

    def check(self) -> dict[str, str]:
        """Ping every agent: a live one found dead is failed over, a down one found serving
        joins again.  Per GPU: ``up``, ``down`` or ``joined``."""
        out = {}
        for g in self.agents.ids():
            was_down = g in self.down
            try:
                self.agents.call(g, "ping")
            except AgentDown as e:
                if not was_down:
                    self.agent_down(g, e.why)
                out[g] = "down"
                continue
            except Exception as e:  # alive but not serving (starting, stopping): not a death
                log.warning("health check of %s: %s", g, e)
                out[g] = "down" if was_down else "up"
                continue
            if was_down:
                try:
                    self.agent_joined(g)
                except AgentDown:
                    out[g] = "down"
                    continue
                out[g] = "joined"
            else:
                out[g] = "up"
        return out

    def reconcile(self) -> dict[str, str]:
        """At start: check every agent (as :meth:`check`), then the live ones' apps against the
        placements (an unknown app is adopted, one placed elsewhere removed)."""
        out = self.check()
        with self.lock:
            for g in self.live():
                try:
                    self._reconcile(g, adopt=True)
                except AgentDown:
                    continue
            self._save()
        return out
