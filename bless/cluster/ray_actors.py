"""The cluster on Ray: one GPU agent actor per GPU, a named detached controller actor.

Ray is the optional ``cluster`` extra (``pip install 'bless[cluster]'``) and is
imported only inside these functions.  The actors are thin: an agent actor *is*
:class:`~bless.cluster.agent.GpuAgent` (threaded, so requests of its apps run
concurrently), the controller actor wraps :class:`~bless.cluster.controller.Controller`
and reaches the agents by their actor names (:class:`RayAgents`).

Resources: an agent on the simulated GPU takes one unit of the custom resource
:data:`SIM_RESOURCE` and no CPU, so N simulated GPUs need a cluster that offers
N units (``bless cluster up --gpus N`` starts one that does).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bless.cluster.agent import AgentConfig, GpuAgent
from bless.cluster.controller import Controller
from bless.serving.server.admission import AdmissionLimits

NAMESPACE = "bless"
CONTROLLER = "bless-controller"
AGENT_PREFIX = "bless-agent-"
SIM_RESOURCE = "bless_sim_gpu"
"""Custom Ray resource: one unit per simulated GPU."""
ACTOR_CONCURRENCY = 64
"""Calls an actor runs at once (threads): requests wait on the GPU, not on each other."""
READY_TIMEOUT = 120.0


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
        if gpu_id not in self._handles:
            self._handles[gpu_id] = import_ray().get_actor(agent_name(gpu_id), namespace=NAMESPACE)
        return self._handles[gpu_id]

    def call(self, gpu_id: str, method: str, *args: Any) -> Any:
        ray = import_ray()
        try:
            return ray.get(getattr(self.handle(gpu_id), method).remote(*args))
        except ray.exceptions.RayTaskError as e:
            raise unwrap(e) from None


def unwrap(error: BaseException) -> BaseException:
    """The exception an actor method raised, out of Ray's wrapper (nested through the controller)."""
    ray = import_ray()
    while isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None:
        error = error.cause
    return error


class ControllerActor:
    """The controller as a Ray actor: :class:`Controller` over :class:`RayAgents`."""

    def __init__(self, state_dir: str, gpu_ids: list[str], policy: str, kace_model: str | None) -> None:
        self.gpu_ids = gpu_ids
        self.controller = Controller(
            Path(state_dir), RayAgents(gpu_ids), policy=policy, limits=AdmissionLimits(), kace_model=kace_model
        )

    def register(self, name: str, profile: str, quota: str, **kwargs: Any) -> dict[str, Any]:
        return self.controller.register(name, profile, quota, **kwargs)

    def unregister(self, name: str) -> int:
        return self.controller.unregister(name)

    def infer(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        return self.controller.infer(name, timeout)

    def gpu_of(self, name: str) -> str:
        return self.controller.gpu_of(name)

    def placements(self) -> dict[str, dict[str, Any]]:
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


def start_cluster(
    gpus: int,
    state_dir: Path,
    *,
    gpu: str = "a100",
    backend: str = "sim",
    policy: str = "first-fit",
    kace_model: str | None = None,
    warm_up: bool = True,
) -> Any:
    """Start ``gpus`` agents and the controller (detached, named) on the connected cluster;
    the controller's handle once every agent serves."""
    ray = import_ray()
    if backend != "sim":
        raise ValueError(f"--backend: this version of bless cluster runs simulated GPUs only (sim), got {backend!r}")
    if gpus < 1:
        raise ValueError(f"--gpus: at least 1, got {gpus}")
    have = ray.cluster_resources().get(SIM_RESOURCE, 0)
    if have < gpus:
        raise ValueError(
            f"the Ray cluster offers {have:g} simulated GPUs (resource {SIM_RESOURCE!r}), fewer than --gpus {gpus}; "
            f"start its nodes with --resources '{{\"{SIM_RESOURCE}\": {gpus}}}'"
        )
    try:
        ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:
        pass
    else:
        raise ValueError("a bless cluster already runs on this Ray cluster: `bless cluster down` it first")
    state_dir = Path(state_dir)
    ids = [f"gpu-{i}" for i in range(gpus)]
    agent_cls = ray.remote(GpuAgent)
    agents = [
        agent_cls.options(
            name=agent_name(g),
            namespace=NAMESPACE,
            lifetime="detached",
            num_cpus=0,
            resources={SIM_RESOURCE: 1},
            max_concurrency=ACTOR_CONCURRENCY,
        ).remote(AgentConfig(g, state_dir / g, gpu=gpu, backend=backend, warm_up=warm_up, grpc_port=0))
        for g in ids
    ]
    try:
        ray.get([a.ping.remote() for a in agents], timeout=READY_TIMEOUT)
        controller = (
            ray.remote(ControllerActor)
            .options(
                name=CONTROLLER,
                namespace=NAMESPACE,
                lifetime="detached",
                num_cpus=0,
                max_concurrency=ACTOR_CONCURRENCY,
            )
            .remote(str(state_dir / "controller"), ids, policy, kace_model)
        )
        ray.get(controller.ping.remote(), timeout=READY_TIMEOUT)
    except BaseException:
        for a in agents:
            ray.kill(a)
        raise
    return controller


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
    stopped = []
    for name in names:
        try:
            agent = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            continue
        try:
            ray.get(agent.close.remote(grace), timeout=grace + 30)
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

    def infer(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        """One request through the controller: its timings and the GPU that ran it."""
        return call(self.controller, "infer", name, timeout)

    def status(self) -> list[dict[str, Any]]:
        return call(self.controller, "status")

    def placements(self) -> dict[str, dict[str, Any]]:
        return call(self.controller, "placements")

    def endpoints(self) -> dict[str, dict[str, str] | None]:
        """Per GPU: its agent's gRPC address and admin token (what the front end forwards to)."""
        return call(self.controller, "endpoints")
