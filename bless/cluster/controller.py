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
from bless.hw.gpus import get_gpu
from bless.serving.server.admission import AdmissionLimits
from bless.serving.server.errors import AlreadyExists, FailedPrecondition, NotFound
from bless.serving.server.spec import AppSpec, load_profile_for, min_quota, parse_app_spec

log = logging.getLogger("bless.cluster")

STATE_FILE = "cluster-placement.json"
STATE_VERSION = 1
DEFAULT_INPUTS = (("INPUT", "FP32", [-1, 16]),)
DEFAULT_OUTPUTS = (("OUTPUT", "FP32", [-1, 4]),)
"""The tensors an app is declared with when the registration names none (as ``bless client register``)."""


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
        self._lock = threading.Lock()
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
        apps = {}
        for name, entry in raw.get("apps", {}).items():
            if entry.get("gpu") in known:
                apps[name] = entry
            else:
                log.warning("placement of %r on %s dropped: the cluster has no such GPU now", name, entry.get("gpu"))
        return apps

    def _save(self) -> None:
        body = {"version": STATE_VERSION, "gpus": self.agents.ids(), "apps": self.placements}
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
    ) -> dict[str, Any]:
        """Place and deploy an app; the placement as a dict (``gpu``, ``why``, ``scores``, ...).

        Raises AlreadyExists for a taken name, InvalidArgument for a bad registration,
        FailedPrecondition when no GPU can take it (with every GPU's reason)."""
        policy = policy or self.policy
        with self._lock:
            if name in self.placements:
                raise AlreadyExists(
                    f"name: app {name!r} is already on {self.placements[name]['gpu']}; unregister it first"
                )
            gpus = [self.agents.call(g, "snapshot") for g in self.agents.ids()]
            models = {g.gpu for g in gpus} or {"a100"}
            mechanism = gpus[0].mechanism if gpus else "mps"
            least = max(min_quota(get_gpu(m), mechanism) for m in models)
            spec = parse_app_spec(
                name, profile, quota, memory_bytes, slo, [tuple(t) for t in inputs], [tuple(t) for t in outputs], least
            )
            if any(name in (a.name for a in g.apps) for g in gpus):
                raise AlreadyExists(f"name: app {name!r} is already registered on a GPU; unregister it first")
            profiles = {m: load_profile_for(spec, m) for m in models}
            placement = self._place(spec, profiles, gpus, policy)
            if dry_run or placement.gpu_id is None:
                if placement.gpu_id is None and not dry_run:
                    raise FailedPrecondition(f"placement rejected app {name!r}: {placement.why}")
                return placement.to_dict()
            gpu = next(g for g in gpus if g.gpu_id == placement.gpu_id)
            self.agents.call(placement.gpu_id, "register", spec, profiles[gpu.gpu])
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
        with self._lock:
            entry = self.placements.get(name)
            if entry is None:
                raise NotFound(
                    f"no app {name!r} in the cluster (registered: {', '.join(sorted(self.placements)) or 'none'})"
                )
            aborted = self.agents.call(entry["gpu"], "unregister", name)
            del self.placements[name]
            self._save()
            return aborted

    # ------------------------------------------------------------ serving
    def gpu_of(self, name: str) -> str:
        entry = self.placements.get(name)
        if entry is None:
            raise NotFound(
                f"no app {name!r} in the cluster (registered: {', '.join(sorted(self.placements)) or 'none'})"
            )
        return entry["gpu"]

    def infer(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        """One request of ``name`` on its GPU: its timings, and which GPU ran it."""
        gpu = self.gpu_of(name)
        return {"gpu": gpu, **self.agents.call(gpu, "infer", name, timeout)}

    def placement_of(self, name: str) -> dict[str, Any]:
        self.gpu_of(name)
        return dict(self.placements[name])

    def endpoints(self) -> dict[str, dict[str, str] | None]:
        """Per GPU: where its agent serves gRPC and the agent's admin token (None: it does not)."""
        return {g: self.agents.call(g, "endpoint") for g in self.agents.ids()}

    def status(self) -> list[dict[str, Any]]:
        """Per GPU, in cluster order: its agent's stats (apps, quotas, memory, utilisation, latency
        against the ISO target), or why it could not be read."""
        out = []
        for g in self.agents.ids():
            try:
                out.append(self.agents.call(g, "stats"))
            except Exception as e:
                out.append({"gpu_id": g, "error": f"{type(e).__name__}: {e}", "apps": []})
        return out
