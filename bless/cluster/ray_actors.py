"""The cluster on Ray: one GPU agent actor per GPU, a named detached controller actor.

Ray is the optional ``cluster`` extra (``pip install 'bless[cluster]'``) and is
imported only inside these functions.  The actors are thin: an agent actor *is*
:class:`~bless.cluster.agent.GpuAgent` (threaded, so requests of its apps run
concurrently), the controller actor wraps :class:`~bless.cluster.controller.Controller`
and reaches the agents by their actor names (:class:`RayAgents`).

Resources (:func:`agent_options`): an agent on the simulated GPU takes one unit of the
custom resource :data:`SIM_RESOURCE` and no CPU, so N simulated GPUs need a cluster that
offers N units (``bless cluster up --gpus N`` starts one that does); a CUDA agent takes one
of Ray's GPUs (``num_gpus=1``: Ray sets the actor's ``CUDA_VISIBLE_DEVICES`` to it, so its
backend sees that GPU as device 0).  The CUDA path is not run on a GPU by the tests yet.

Reach: agents listen on loopback by default (the front end on the same node).  With
``agent_host`` another address (``0.0.0.0``: every interface, which needs ``insecure``,
as agents speak clear text), each agent advertises ``advertise_host`` or, left out, its
node's IP as Ray knows it, and the front end may run on another node.

Failures: every actor is named in :data:`NAMESPACE` (agents ``bless-agent-gpu-<i>``,
the controller ``bless-controller``).  A call to a dead agent (Ray's
``RayActorError``/``ActorDiedError``, or no actor of its name) is
:class:`~bless.cluster.controller.AgentDown` to the controller, which re-places its apps;
the controller actor also runs :meth:`Controller.check` every
:data:`~bless.cluster.controller.HEALTH_INTERVAL` seconds.  :func:`start_agent` starts an
agent again for a GPU and has it join; :func:`restart_controller` starts a controller from
the state directory, which finds the agents by name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from bless.cluster.agent import WILDCARD_HOSTS, AgentConfig, GpuAgent
from bless.cluster.controller import HEALTH_INTERVAL, STATE_FILE, AgentDown, Controller
from bless.hw.gpus import DEFAULT_GPU
from bless.serving.server.admission import AdmissionLimits

NAMESPACE = "bless"
CONTROLLER = "bless-controller"
AGENT_PREFIX = "bless-agent-"
SIM_RESOURCE = "bless_sim_gpu"
"""Custom Ray resource: one unit per simulated GPU."""
ACTOR_CONCURRENCY = 64
"""Calls an actor runs at once (threads): requests wait on the GPU, not on each other."""
READY_TIMEOUT = 120.0
PING_TIMEOUT = 10.0
"""Seconds a health-check ping may take; one slower is logged, not taken for a death (only
Ray saying the actor died, or that none has the name, is)."""

log = logging.getLogger("bless.cluster")


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ValueError(
            "bless cluster needs Ray, which is not installed: pip install 'bless[cluster]' (or 'ray>=2.9')"
        ) from None
    return ray


def agent_name(gpu_id: str) -> str:
    return AGENT_PREFIX + gpu_id


class RayAgents:
    """The controller's view of agent actors, found by name in :data:`NAMESPACE`."""

    def __init__(self, gpu_ids: list[str]) -> None:
        self.gpu_ids = list(gpu_ids)
        self._handles: dict[str, Any] = {}

    def ids(self) -> list[str]:
        return list(self.gpu_ids)

    def handle(self, gpu_id: str) -> Any:
        """The agent's actor, looked up by name (AgentDown: there is none)."""
        handle = self._handles.get(gpu_id)
        if handle is None:
            try:
                handle = import_ray().get_actor(agent_name(gpu_id), namespace=NAMESPACE)
            except ValueError:
                raise AgentDown(gpu_id, f"no actor {agent_name(gpu_id)!r}") from None
            self._handles[gpu_id] = handle
        return handle

    def call(self, gpu_id: str, method: str, *args: Any) -> Any:
        ray = import_ray()
        handle = self.handle(gpu_id)
        try:
            return ray.get(getattr(handle, method).remote(*args), timeout=PING_TIMEOUT if method == "ping" else None)
        except ray.exceptions.RayTaskError as e:
            raise unwrap(e) from None
        except ray.exceptions.RayActorError as e:  # ActorDiedError, ActorUnavailableError
            if self._handles.get(gpu_id) is handle:
                del self._handles[gpu_id]  # a new actor of the same name may come: look it up again
            raise AgentDown(
                gpu_id, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'actor died'}"
            ) from None


def unwrap(error: BaseException) -> BaseException:
    """The exception an actor method raised, out of Ray's wrapper (nested through the controller)."""
    ray = import_ray()
    while isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None:
        error = error.cause
    return error


class ControllerActor:
    """The controller as a Ray actor: :class:`Controller` over :class:`RayAgents`."""

    def __init__(
        self,
        state_dir: str,
        gpu_ids: list[str],
        policy: str,
        kace_model: str | None,
        health_interval: float = HEALTH_INTERVAL,
    ) -> None:
        self.gpu_ids = gpu_ids
        self.controller = Controller(
            Path(state_dir), RayAgents(gpu_ids), policy=policy, limits=AdmissionLimits(), kace_model=kace_model
        )
        self.found = self.controller.reconcile()
        self._stop = threading.Event()
        self._health = threading.Thread(
            target=self._check_every, args=(health_interval,), name="bless-health", daemon=True
        )
        if health_interval > 0:
            self._health.start()

    def stop_checks(self) -> None:
        """No more health checks (the cluster is stopping: its agents going is no failure)."""
        self._stop.set()
        if self._health.is_alive():
            self._health.join()

    def _check_every(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.controller.check()
            except Exception:
                log.exception("health check failed")

    def check(self) -> dict[str, str]:
        return self.controller.check()

    def agent_joined(self, gpu_id: str) -> dict[str, Any]:
        return self.controller.agent_joined(gpu_id)

    def health(self) -> dict[str, Any]:
        """The GPUs down (and why), the apps unplaced (and why), what the start's check found."""
        c = self.controller
        with c.lock:
            return {"down": dict(c.down), "unplaced": {n: dict(u) for n, u in c.unplaced.items()}, "found": self.found}

    def register(self, name: str, profile: str, quota: str, **kwargs: Any) -> dict[str, Any]:
        return self.controller.register(name, profile, quota, **kwargs)

    def unregister(self, name: str) -> int:
        return self.controller.unregister(name)

    def set_quota(self, name: str, quota: str) -> dict[str, Any]:
        return self.controller.set_quota(name, quota)

    def infer(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        return self.controller.infer(name, timeout)

    def gpu_of(self, name: str) -> str:
        return self.controller.gpu_of(name)

    def placements(self) -> dict[str, dict[str, Any]]:
        with self.controller.lock:  # never in the middle of a fail-over (an app neither here nor unplaced)
            return dict(self.controller.placements)

    def status(self) -> list[dict[str, Any]]:
        return self.controller.status()

    def endpoints(self) -> dict[str, dict[str, str] | None]:
        return self.controller.endpoints()

    def agent_names(self) -> list[str]:
        return [agent_name(g) for g in self.gpu_ids]

    def ping(self) -> bool:
        return True


def _token_available() -> bool:
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return True
    return (Path.home() / ".ray" / "auth_token").is_file()


def connect(address: str | None = None, **init: Any) -> Any:
    """Join the Ray cluster at ``address`` (None: start a local one with ``init``'s options)."""
    if address is not None and "RAY_AUTH_MODE" not in os.environ and _token_available():
        # Ray >= 2.5x turns token authentication on for a local cluster it starts (`bless cluster
        # up`) and writes the token to ~/.ray/auth_token, but a driver joining by address stays in
        # mode 'disabled' and is refused: join in token mode when a token is at hand.
        os.environ["RAY_AUTH_MODE"] = "token"  # before Ray is imported: it reads the mode then
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(
            address=address,
            namespace=NAMESPACE,
            include_dashboard=False,
            logging_level="WARNING",
            log_to_driver=False,
            **init,
        )
    return ray


@dataclasses.dataclass(frozen=True)
class AgentReach:
    """Where agents listen and what they advertise (see the module docstring)."""

    host: str = "127.0.0.1"
    advertise_host: str | None = None
    insecure: bool = False


def agent_options(backend: str) -> dict[str, Any]:
    """The Ray resources of one agent actor: a simulated GPU (a unit of :data:`SIM_RESOURCE`)
    or a real one (``num_gpus=1``); no CPU, as the GPU is what agents are placed by."""
    if backend == "cuda":
        return {"num_cpus": 0, "num_gpus": 1}
    if backend == "sim":
        return {"num_cpus": 0, "resources": {SIM_RESOURCE: 1}}
    raise ValueError(f"--backend: sim or cuda, got {backend!r}")


def check_resources(ray: Any, backend: str, gpus: int) -> None:
    """ValueError unless the Ray cluster offers ``gpus`` GPUs of ``backend``'s kind, saying how to."""
    if backend == "cuda":
        have = ray.cluster_resources().get("GPU", 0)
        if have < gpus:
            raise ValueError(
                f"the Ray cluster offers {have:g} GPUs, fewer than --gpus {gpus}; start its nodes on GPU machines "
                f"(ray start --num-gpus N), or use --backend sim"
            )
        return
    have = ray.cluster_resources().get(SIM_RESOURCE, 0)
    if have < gpus:
        raise ValueError(
            f"the Ray cluster offers {have:g} simulated GPUs (resource {SIM_RESOURCE!r}), fewer than --gpus {gpus}; "
            f"start its nodes with --resources '{{\"{SIM_RESOURCE}\": {gpus}}}'"
        )


class RayGpuAgent(GpuAgent):
    """The agent actor: :class:`GpuAgent`, advertising its node's IP when it listens on every
    interface and no address was given (the driver cannot know the node beforehand)."""

    def __init__(self, config: AgentConfig) -> None:
        if config.advertise_host is None and config.grpc_host in WILDCARD_HOSTS:
            config = dataclasses.replace(config, advertise_host=import_ray().util.get_node_ip_address())
        super().__init__(config)


def agent_config(
    gpu_id: str, state_dir: Path, *, gpu: str, backend: str, warm_up: bool, reach: AgentReach
) -> AgentConfig:
    """The config of ``gpu_id``'s agent (its store in ``state_dir / gpu_id``), checked here,
    in the driver, so a bad setting is an error that names its flag, not a dead actor."""
    return AgentConfig(
        gpu_id,
        state_dir / gpu_id,
        gpu=gpu,
        backend=backend,
        warm_up=warm_up,
        grpc_host=reach.host,
        grpc_port=0,
        advertise_host=reach.advertise_host,
        insecure=reach.insecure,
    )


def start_cluster(
    gpus: int,
    state_dir: Path,
    *,
    gpu: str = DEFAULT_GPU,
    backend: str = "sim",
    policy: str = "first-fit",
    kace_model: str | None = None,
    warm_up: bool = True,
    reach: AgentReach = AgentReach(),
) -> Any:
    """Start ``gpus`` agents and the controller (detached, named) on the connected cluster;
    the controller's handle once every agent serves."""
    ray = import_ray()
    if gpus < 1:
        raise ValueError(f"--gpus: at least 1, got {gpus}")
    ids = [f"gpu-{i}" for i in range(gpus)]
    state_dir = Path(state_dir)
    configs = [agent_config(g, state_dir, gpu=gpu, backend=backend, warm_up=warm_up, reach=reach) for g in ids]
    check_resources(ray, backend, gpus)
    try:
        ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:
        pass
    else:
        raise ValueError("a bless cluster already runs on this Ray cluster: `bless cluster down` it first")
    agents = [_agent_actor(c) for c in configs]
    try:
        ray.get([a.ping.remote() for a in agents], timeout=READY_TIMEOUT)
        controller = _controller_actor(state_dir, ids, policy, kace_model)
    except BaseException:
        for a in agents:
            ray.kill(a)
        raise
    return controller


def _agent_actor(config: AgentConfig) -> Any:
    """The named, detached agent actor of ``config.gpu_id``."""
    ray = import_ray()
    return (
        ray.remote(RayGpuAgent)
        .options(
            name=agent_name(config.gpu_id),
            namespace=NAMESPACE,
            lifetime="detached",
            max_concurrency=ACTOR_CONCURRENCY,
            **agent_options(config.backend),
        )
        .remote(config)
    )


def _controller_actor(
    state_dir: Path, ids: list[str], policy: str, kace_model: str | None, health_interval: float = HEALTH_INTERVAL
) -> Any:
    ray = import_ray()
    controller = (
        ray.remote(ControllerActor)
        .options(
            name=CONTROLLER,
            namespace=NAMESPACE,
            lifetime="detached",
            num_cpus=0,
            max_concurrency=ACTOR_CONCURRENCY,
        )
        .remote(str(state_dir / "controller"), ids, policy, kace_model, health_interval)
    )
    try:
        ray.get(controller.ping.remote(), timeout=READY_TIMEOUT)
    except BaseException:
        ray.kill(controller)
        raise
    return controller


def start_agent(
    gpu_id: str,
    state_dir: Path,
    *,
    gpu: str = DEFAULT_GPU,
    backend: str = "sim",
    warm_up: bool = True,
    reach: AgentReach = AgentReach(),
) -> dict[str, Any]:
    """Start the agent of ``gpu_id`` again (its previous actor dead) on its state directory and
    have it join the running controller: what the join did (``removed``: apps of its store that
    run elsewhere now; ``placed``: unplaced apps placed again)."""
    ray = import_ray()
    try:
        ray.get_actor(agent_name(gpu_id), namespace=NAMESPACE)
    except ValueError:
        pass
    else:
        raise ValueError(f"the agent of {gpu_id} runs already ({agent_name(gpu_id)!r})")
    agent = _agent_actor(agent_config(gpu_id, Path(state_dir), gpu=gpu, backend=backend, warm_up=warm_up, reach=reach))
    try:
        ray.get(agent.ping.remote(), timeout=READY_TIMEOUT)
    except BaseException:
        ray.kill(agent)
        raise
    return call(controller_handle(), "agent_joined", gpu_id)


def restart_controller(
    state_dir: Path,
    *,
    policy: str = "first-fit",
    kace_model: str | None = None,
    health_interval: float = HEALTH_INTERVAL,
) -> Any:
    """Start the controller again (the previous one dead) from the placement state in
    ``state_dir``: its GPUs are the state's, their agents found by name.  Its handle."""
    ray = import_ray()
    try:
        ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:
        pass
    else:
        raise ValueError("a bless controller runs already on this Ray cluster")
    path = Path(state_dir) / "controller" / STATE_FILE
    try:
        ids = json.loads(path.read_text())["gpus"]
    except FileNotFoundError:
        raise ValueError(f"no placement state at {path}: start the cluster with `bless cluster up`") from None
    return _controller_actor(Path(state_dir), ids, policy, kace_model, health_interval)


def controller_handle() -> Any:
    ray = import_ray()
    try:
        return ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:
        raise ValueError(
            "no bless cluster runs on this Ray cluster (no controller): `bless cluster up` first"
        ) from None


def call(handle: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``handle.method(*args, **kwargs)`` on its actor, with the actor's own exception."""
    ray = import_ray()
    try:
        return ray.get(getattr(handle, method).remote(*args, **kwargs))
    except ray.exceptions.RayTaskError as e:
        raise unwrap(e) from None


def stop_cluster(grace: float = 1.0) -> list[str]:
    """Stop every agent (serving for ``grace`` s more) and the controller; the actors stopped.
    Their state stays in the state directory."""
    ray = import_ray()
    controller = controller_handle()
    names = ray.get(controller.agent_names.remote())
    ray.get(controller.stop_checks.remote())
    stopped = []
    for name in names:
        try:
            agent = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            continue
        try:
            ray.get(agent.close.remote(grace), timeout=grace + 30)
        except ray.exceptions.RayActorError:
            continue  # died meanwhile
        finally:
            ray.kill(agent)
        stopped.append(name)
    ray.kill(controller)
    stopped.append(CONTROLLER)
    return stopped


def wait_gone(timeout: float | None = None, period: float = 0.5) -> bool:
    """Block until no controller runs (True), or ``timeout`` s passed (False)."""
    ray = import_ray()
    end = None if timeout is None else time.monotonic() + timeout
    while end is None or time.monotonic() < end:
        try:
            ray.get_actor(CONTROLLER, namespace=NAMESPACE)
        except ValueError:
            return True
        time.sleep(period)
    return False


class ClusterClient:
    """Register apps and run inferences through the controller (Python entry).

    ``ClusterClient(address)`` joins the Ray cluster at ``address`` (``"auto"``: the one on
    this machine); inside a Ray driver that is already connected, the address is ignored.
    """

    def __init__(self, address: str | None = "auto") -> None:
        connect(address)
        self.controller = controller_handle()

    def register(self, name: str, profile: str, quota: str, **kwargs: Any) -> dict[str, Any]:
        """Place and deploy ``name``; which GPU and why (``gpu``, ``why``, ``scores``, ``rejected``)."""
        return call(self.controller, "register", name, profile, quota, **kwargs)

    def unregister(self, name: str) -> int:
        return call(self.controller, "unregister", name)

    def set_quota(self, name: str, quota: str) -> dict[str, Any]:
        """Change ``name``'s quota ("50%", "0.5"): checked against its GPU, stored, applied there."""
        return call(self.controller, "set_quota", name, quota)

    def infer(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        """One request through the controller: its timings and the GPU that ran it."""
        return call(self.controller, "infer", name, timeout)

    def status(self) -> list[dict[str, Any]]:
        return call(self.controller, "status")

    def placements(self) -> dict[str, dict[str, Any]]:
        return call(self.controller, "placements")

    def endpoints(self) -> dict[str, dict[str, str] | None]:
        """Per GPU: its agent's gRPC address and admin token (what the front end forwards to;
        None for a GPU whose agent is down)."""
        return call(self.controller, "endpoints")

    def health(self) -> dict[str, Any]:
        """The GPUs down and the apps unplaced, each with why."""
        return call(self.controller, "health")

    def check(self) -> dict[str, str]:
        """Run a health check now (the controller runs one every HEALTH_INTERVAL s anyway)."""
        return call(self.controller, "check")
