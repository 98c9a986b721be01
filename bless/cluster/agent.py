"""One GPU of the cluster: bless's serving core on that GPU, behind plain method calls.

:class:`GpuAgent` is what ``bless serve`` runs minus its front ends: the
serving loop (:class:`~bless.serving.server.core.ServingCore`, BLESS on one
GPU), its admission, and its durable state (the SQLite store in the agent's
own state directory, so an agent restarted on the same directory brings its
apps back).  With ``grpc_port >= 0`` it also serves its GPU's OIP v2 inference
service and admin service over gRPC (:class:`AgentEndpoint`, on ``grpc_host``),
which the cluster's front end (:mod:`bless.cluster.frontend`) forwards requests
to; that admin service takes a token of its own, random, which only
:meth:`GpuAgent.endpoint` tells.  Every method is thread-safe and returns plain data, so a Ray
actor can wrap it as is (:mod:`bless.cluster.ray_actors`) and the tests can
call it without Ray.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc

from bless.cluster.placement import GpuState, PlacedApp
from bless.hw.gpus import DEFAULT_GPU
from bless.profiles.format import Profile
from bless.serving.server.admin import AdminService
from bless.serving.server.config import ServerConfig
from bless.serving.server.core import ServingCore, settle
from bless.serving.server.errors import FailedPrecondition
from bless.serving.server.exposure import is_loopback
from bless.serving.server.inference import InferenceService
from bless.serving.server.jobs import Outcome
from bless.serving.server.security import AuthGuard, host_port, new_token
from bless.serving.server.server import bless_policy, make_backend, warm_up
from bless.serving.server.spec import AppSpec
from bless.serving.server.store import StateStore

BACKENDS = ("sim", "cuda")
"""Backends an agent runs: a simulated GPU, or a real one (on Ray, the GPU the actor was given;
the CUDA path is not yet run on a GPU in the cluster's tests)."""
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
"""Bind hosts that listen on every interface: the address to dial must be advertised."""
ANSWER_TIMEOUT = 60.0
"""Seconds a register or unregister may wait for the serving loop."""


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    gpu_id: str
    state_dir: Path
    gpu: str = DEFAULT_GPU
    backend: str = "sim"
    mechanism: str = "mps"
    squad_size: int = 50
    max_queue: int = 1024
    noise: float = 0.0
    seed: int = 0
    warm_up: bool = True
    grpc_host: str = "127.0.0.1"
    """Where the agent's endpoint listens: loopback (one machine) unless the front end runs on
    another node, which needs ``insecure`` (agents speak clear text in this version)."""
    grpc_port: int = -1
    """The agent's own OIP v2 + admin gRPC endpoint (0: any free port; -1: none)."""
    advertise_host: str | None = None
    """The host the front end dials (the controller hands it out); None: ``grpc_host``, which
    must then not be a wildcard (0.0.0.0, ::)."""
    insecure: bool = False
    """Allow a ``grpc_host`` other than loopback without TLS (a trusted network between nodes)."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: bless cluster runs {' or '.join(BACKENDS)} agents, got {self.backend!r}")
        if not (self.insecure or is_loopback(self.grpc_host)):
            raise ValueError(
                f"--agent-host: {self.grpc_host} is reachable from other machines, and the agents serve "
                f"inference and their admin token in clear text (no TLS between the front end and the agents "
                f"in this version); give --insecure if only trusted machines reach the nodes, or keep agents "
                f"on 127.0.0.1 with the front end on the same node"
            )

    @property
    def dial_host(self) -> str:
        """The host in the address the controller hands to the front end (ValueError: none is
        known, the agent listening on every interface with no ``advertise_host``)."""
        if self.advertise_host is None and self.grpc_host in WILDCARD_HOSTS:
            raise ValueError(
                f"--advertise-host: the agent listens on every interface ({self.grpc_host!r}); name the address "
                f"the front end dials (on Ray, the node's IP is taken when it is left out)"
            )
        return self.advertise_host or self.grpc_host

    def server_config(self) -> ServerConfig:
        return ServerConfig(
            gpu=self.gpu,
            backend=self.backend,
            mechanism=self.mechanism,
            squad_size=self.squad_size,
            max_queue=self.max_queue,
            noise=self.noise,
            seed=self.seed,
            state_dir=self.state_dir,
            http_port=-1,
            metrics_port=-1,
        )


class GpuAgent:
    """BLESS serving on one GPU; start on construction, :meth:`close` to stop."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        dial_host = config.dial_host if config.grpc_port >= 0 else None
        cfg = config.server_config()
        self.store = StateStore(cfg.state_dir)
        try:
            if config.warm_up:
                warm_up(cfg)
            backend = make_backend(cfg)
            self.core = ServingCore(
                backend,
                bless_policy(cfg),
                store=self.store,
                max_queue=cfg.max_queue,
                limits=cfg.admission,
                max_message_bytes=cfg.max_message_bytes,
            )
            self.core.start()
            self.core.restore()
            self.endpoint_server = (
                AgentEndpoint(self.core, config.grpc_host, config.grpc_port, cfg.max_message_bytes, dial_host)
                if config.grpc_port >= 0
                else None
            )
        except BaseException:
            if getattr(self, "core", None) is not None and self.core.alive:
                self.core.stop(0.0)
            self.store.close()
            raise
        self.gpu_id = config.gpu_id
        self._closed = False

    # ------------------------------------------------------------ reads
    def snapshot(self) -> GpuState:
        """This GPU as placement sees it, read on the serving loop (between two squads)."""
        core = self.core

        def read() -> GpuState:
            apps = tuple(PlacedApp(s.name, s.state.profile, s.spec.quota, s.spec.slo) for s in core.apps())
            return GpuState(
                gpu_id=self.gpu_id,
                gpu=core.gpu.name,
                memory_used_bytes=core.backend.memory_used,
                apps=apps,
                mechanism=core.policy.mechanism,
                squad_size=core.policy.squad_size,
                max_level=core.policy.max_level,
                context_bytes=core.backend.context_bytes(core.policy.mechanism),
                memory_bytes=core.gpu.memory_bytes,
            )

        return core.call(read).result(ANSWER_TIMEOUT)

    def stats(self) -> dict[str, Any]:
        """Per app: quota, memory, requests, latency against its target (ISO unless an SLO),
        requests behind its quota's throughput now; the GPU: memory, utilisation."""
        core = self.core
        gpu = core.stats.gpu
        apps = []
        for served in core.apps():
            state = served.state
            w = served.stats.window(state.target)
            apps.append(
                {
                    "name": served.name,
                    "profile": served.spec.profile,
                    "quota": served.spec.quota,
                    "memory_bytes": state.profile.memory_bytes,
                    "iso_latency": state.iso_latency,
                    "target": state.target,
                    "received": w.received,
                    "succeeded": w.counts.get("succeeded", 0),
                    "queued": w.queued,
                    "running": w.running,
                    "latency_mean": w.latency.mean,
                    "latency_p50": w.latency.p50,
                    "latency_p99": w.latency.p99,
                    "target_violation_rate": w.target_violation_rate,
                    "behind_quota": w.behind_quota,
                }
            )
        return {
            "gpu_id": self.gpu_id,
            "gpu": core.gpu.name,
            "backend": core.backend.describe(),
            "ready": core.ready,
            "memory_used_bytes": gpu.memory_used_bytes,
            "memory_bytes": gpu.memory_bytes,
            "utilisation": core.stats.recent_utilisation,
            "quota_used": sum(a["quota"] for a in apps),
            "apps": apps,
            "unavailable": [{"name": u.name, "error": u.error} for u in core.unavailable()],
        }

    def apps(self) -> list[str]:
        return [s.name for s in self.core.apps()]

    def specs(self) -> dict[str, dict[str, Any]]:
        """Each app's registration (:meth:`AppSpec.to_dict`), by name."""
        return {s.name: s.spec.to_dict() for s in self.core.apps()}

    # ------------------------------------------------------------ mutating
    def register(self, spec: AppSpec, profile: Profile) -> dict[str, Any]:
        """Deploy the app here; the serving core's own admission has the last word
        (FailedPrecondition when it rejects)."""
        admission, _ = self.core.register(spec, profile).result(ANSWER_TIMEOUT)
        return {"accepted": admission.accepted, "reason": admission.reason, "warnings": list(admission.warnings)}

    def set_quota(self, name: str, quota: float) -> dict[str, Any]:
        """Give ``name`` a new quota (the controller checked and stored it; the serving core's
        admission has the last word: FailedPrecondition); its registration after."""
        return self.core.set_quota(name, quota).result(ANSWER_TIMEOUT).spec.to_dict()

    def unregister(self, name: str) -> int:
        """Remove the app; the number of its queued requests that were aborted."""
        return self.core.unregister(name).result(ANSWER_TIMEOUT)

    def infer(self, name: str, timeout: float | None = None) -> dict[str, float]:
        """Run one request of ``name``; its timings in seconds (raises the serving error, if any).

        Outputs are not computed here (the OIP front ends build them from the inputs).
        """
        received = time.perf_counter()
        served = self.core.lookup(name)
        fut: Future[Outcome] = Future()
        job = self.core.submit(served, lambda outcome: settle(fut, outcome), timeout)
        outcome = fut.result()
        if outcome.error is not None:
            raise outcome.error
        if job.claim():
            served.stats.answered(time.perf_counter() - received, outcome.compute)
        return {
            "latency": outcome.latency,
            "queue": outcome.queue,
            "compute": outcome.compute,
            "sync_wait": outcome.sync_wait,
        }

    def endpoint(self) -> dict[str, str] | None:
        """Where this agent serves gRPC (``address``) and its admin ``token``; None if it does not."""
        e = self.endpoint_server
        return None if e is None else {"address": e.address, "token": e.token}

    def ping(self) -> str:
        if not self.core.ready:
            raise FailedPrecondition(f"GPU agent {self.gpu_id} is not serving: {self.core.failure or 'stopped'}")
        return self.gpu_id

    def close(self, grace: float = 1.0) -> None:
        """Stop serving (admitted requests get ``grace`` seconds) and release the state directory."""
        if self._closed:
            return
        self._closed = True
        if self.endpoint_server is not None:
            self.endpoint_server.stop()
        if self.core.alive:
            self.core.stop(grace)
        self.store.close()


class AgentEndpoint:
    """The agent's serving core over gRPC: the OIP v2 inference service and the admin
    service (with a random token), on an asyncio loop of its own; serving once built."""

    def __init__(
        self, core: ServingCore, host: str, port: int, max_message_bytes: int, dial_host: str | None = None
    ) -> None:
        self.token = new_token()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="bless-agent-grpc", daemon=True)
        self._thread.start()
        platform = f"bless_{core.backend.name}"
        try:
            where = host_port(host, port)
            self._server, bound = asyncio.run_coroutine_threadsafe(
                self._start(core, platform, where, max_message_bytes), self._loop
            ).result()
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            raise
        dial = dial_host or host
        self.address = host_port(dial, bound)
        """What the front end dials (the advertised host, the bound port)."""

    async def _start(self, core: ServingCore, platform: str, where: str, max_bytes: int) -> tuple[Any, int]:
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", max_bytes),
                ("grpc.max_send_message_length", max_bytes),
            ]
        )
        server.add_generic_rpc_handlers(
            (InferenceService(core, platform).handler(), AdminService(core, AuthGuard(self.token)).handler())
        )
        port = server.add_insecure_port(where)
        await server.start()
        return server, port

    def stop(self, grace: float = 1.0) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._server.stop(grace), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
