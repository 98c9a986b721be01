"""One bless server for one GPU: the serving loop, the gRPC services, the REST API, the metrics endpoint.

Threads: the serving loop (:mod:`bless.serving.server.core`), one asyncio thread for
the gRPC server (both services through generic handlers, plus the standard health
and reflection services, :mod:`bless.serving.server.discovery`), uvicorn's thread for
the OIP v2 REST API (:mod:`bless.serving.server.rest`, the same inference service over
HTTP), and Prometheus' HTTP thread.  :meth:`BlessServer.start` returns once every port is bound;
:meth:`BlessServer.stop` is the graceful shutdown (also what SIGTERM does
under ``bless serve``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import grpc

from bless.backend.interface import Backend, create_backend
from bless.harness.warm import warm_up_policy
from bless.policies.bless import BlessPolicy
from bless.serving.api import ADMIN_SERVICE, OIP_SERVICE
from bless.serving.server.admin import AdminService
from bless.serving.server.config import ServerConfig
from bless.serving.server.core import ServingCore
from bless.serving.server.discovery import ServingHealth, add_discovery, core_ready
from bless.serving.server.errors import StartupError
from bless.serving.server.inference import InferenceService
from bless.serving.server.metrics import ServerMetrics
from bless.serving.server.rest import RestServer
from bless.serving.server.security import (
    TOKEN_FILE,
    AuthGuard,
    add_grpc_port,
    host_port,
    http_ssl_context,
    resolve_admin_token,
    rest_tls,
)
from bless.serving.server.store import StateStore

log = logging.getLogger("bless.serving.server")

GRPC_STOP_GRACE = 2.0
"""Seconds the gRPC server waits for answered RPCs to be sent when stopping."""


def make_backend(cfg: ServerConfig) -> Backend:
    if cfg.backend == "sim":
        return create_backend(
            "sim", gpu=cfg.gpu, clock="wall", noise_sigma=cfg.noise, seed=cfg.seed, mechanism=cfg.mechanism
        )
    return create_backend(cfg.backend, gpu=cfg.gpu, mechanism=cfg.mechanism)


def warm_up(cfg: ServerConfig) -> None:
    """Load the policy's compiled estimators before serving, so the first request does not wait for them."""
    warm_up_policy(bless_policy(cfg), cfg.gpu, cfg.mechanism)


def bless_policy(cfg: ServerConfig) -> BlessPolicy:
    """The BLESS policy the server config describes."""
    return BlessPolicy(
        squad_size=cfg.squad_size,
        split_ratio=cfg.split_ratio,
        mechanism=cfg.mechanism,
        pacing=cfg.pacing,
        window=cfg.window,
    )


class BlessServer:
    """Start with :meth:`start` (or ``with``), stop with :meth:`stop`."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self.metrics_port: int | None = None
        self.token = ""
        self.token_source = ""
        self.auth: AuthGuard | None = None
        """Checks admin tokens; one per server, so every front end counts a peer's guesses together."""
        self.core: ServingCore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._grpc: grpc.aio.Server | None = None
        self._health: ServingHealth | None = None
        self._httpd = None
        self._rest: RestServer | None = None
        self._store: StateStore | None = None
        self._stopped = threading.Event()

    @property
    def address(self) -> str:
        """host:port of the gRPC services."""
        return host_port(self.config.host, self.grpc_port)

    @property
    def http_address(self) -> str:
        """host:port of the OIP v2 REST API (what ``tritonclient.http`` takes)."""
        return host_port(self.config.host, self.http_port)

    def start(self) -> BlessServer:
        cfg = self.config
        try:
            self._store = StateStore(cfg.state_dir)
            self.token, self.token_source = resolve_admin_token(cfg)
            self.auth = AuthGuard(self.token)
            ssl_context = http_ssl_context(cfg)
            warm_up(cfg)
            backend = make_backend(cfg)
            policy = bless_policy(cfg)
            self.core = ServingCore(
                backend,
                policy,
                store=self._store,
                max_queue=cfg.max_queue,
                limits=cfg.admission,
                max_message_bytes=cfg.max_message_bytes,
            )
            self.core.start()
            self.core.restore()
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="bless-grpc", daemon=True)
            self._loop_thread.start()
            platform = f"bless_{backend.name}"
            self.grpc_port = asyncio.run_coroutine_threadsafe(self._start_grpc(platform), self._loop).result()
            if cfg.http_port >= 0:
                rest = InferenceService(self.core, platform)  # stateless: the core is what both front ends share
                self._rest = RestServer(rest, cfg.host, cfg.http_port, cfg.max_message_bytes, rest_tls(cfg)).start()
                self.http_port = self._rest.port
            if cfg.metrics_port >= 0:
                try:
                    self._httpd = ServerMetrics(self.core.stats).serve(cfg.host, cfg.metrics_port, ssl_context)
                except OSError as e:
                    raise StartupError(
                        f"cannot serve metrics on {host_port(cfg.host, cfg.metrics_port)}: {e.strerror}; "
                        f"pick another port with --metrics-port (0: any free port, -1: off)"
                    ) from None
                self.metrics_port = self._httpd.server_port
            self._store.owner.record(self.address)
        except BaseException:
            self._release(grace=0.0)
            raise
        log.info(
            "serving %s on %s (%s; REST port %s, metrics port %s, state %s)",
            backend.describe(),
            self.address,
            "TLS" if ssl_context else "no TLS",
            self.http_port,
            self.metrics_port,
            cfg.state_dir,
        )
        return self

    async def _start_grpc(self, platform: str) -> int:
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),  # a port in use is an error, not a silent second listener
                ("grpc.max_receive_message_length", self.config.max_message_bytes),
                ("grpc.max_send_message_length", self.config.max_message_bytes),
            ]
        )
        server.add_generic_rpc_handlers(
            (
                InferenceService(self.core, platform).handler(),
                AdminService(self.core, self.auth).handler(),
            )
        )
        self._health = await add_discovery(server, core_ready(self.core), (OIP_SERVICE, ADMIN_SERVICE))
        port = add_grpc_port(server, self.config.host, self.config.grpc_port, self.config)
        await server.start()
        self._grpc = server
        return port

    def stop(self, grace: float | None = None) -> None:
        """Graceful shutdown: new requests get UNAVAILABLE, admitted ones run for up to
        ``grace`` seconds (default: the config's ``shutdown_grace``), the rest fail explicitly."""
        if self._stopped.is_set():
            return
        self._release(self.config.shutdown_grace if grace is None else grace)
        log.info("stopped")

    def _release(self, grace: float) -> None:
        if self._health is not None:  # health checkers see the shutdown before requests are refused
            asyncio.run_coroutine_threadsafe(self._health.enter_graceful_shutdown(), self._loop).result()
        if self.core is not None and self.core.alive:
            self.core.stop(grace)
        if self._loop is not None:
            if self._grpc is not None:
                asyncio.run_coroutine_threadsafe(self._grpc.stop(GRPC_STOP_GRACE), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join()
            self._loop.close()
        if self._rest is not None:
            self._rest.stop()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._store is not None:
            self._store.close()
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server has stopped."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> BlessServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def state_token(state_dir: Path) -> str | None:
    """The generated admin token of a server with this state directory, if readable."""
    try:
        return (state_dir / TOKEN_FILE).read_text().strip() or None
    except OSError:
        return None
