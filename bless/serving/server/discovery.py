"""The standard gRPC services through which tools find and probe a server.

* **Health** (``grpc.health.v1.Health``, grpcio-health-checking): load
  balancers, Kubernetes' gRPC probes and ``grpc_health_probe`` ask it.  The
  server (service ``""``) and each bless service are SERVING while the serving
  loop accepts requests, NOT_SERVING once it stops (permanently, from the
  start of a graceful shutdown; ``Watch`` streams see that change).  Check
  also answers NOT_SERVING if the serving loop died.  Apps have no health
  entries of their own: ModelReady answers per model.
* **Reflection** (``grpc.reflection.v1alpha.ServerReflection``,
  grpcio-reflection): ``grpcurl list``/``describe`` and similar tools.  bless's
  protos live in a private descriptor pool (:mod:`bless.serving.api`), so
  reflection answers from :func:`bless.serving.api.pool_with`, that pool plus
  the health and reflection protos.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from bless.serving.api import pool_with
from bless.serving.server.core import ServingCore

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


Readiness = Callable[[], bool | Awaitable[bool]]
"""Whether the server can serve now, asked on every Check: the serving loop's ``ready`` for
``bless serve``; for the cluster's front end, whether any GPU agent can be reached (it asks
the cluster, hence awaitable)."""


class ServingHealth(health.aio.HealthServicer):
    """grpcio-health-checking's servicer, with Check following the server's readiness."""

    def __init__(self, ready: Readiness) -> None:
        super().__init__()
        self.ready = ready

    async def Check(self, request: Any, context: Any) -> Any:
        response = await super().Check(request, context)
        ready = self.ready()
        if inspect.isawaitable(ready):
            ready = await ready
        if not ready:
            response.status = NOT_SERVING
        return response


def core_ready(core: ServingCore) -> Readiness:
    """The readiness of a server with one serving loop: that loop's."""
    return lambda: core.ready


async def add_discovery(server: grpc.aio.Server, ready: Readiness, services: Sequence[str]) -> ServingHealth:
    """Serve health (every one of ``services`` SERVING while ``ready``) and reflection
    (``services``, health, reflection) on ``server``; returns the health servicer, to enter
    shutdown with."""
    servicer = ServingHealth(ready)
    for name in ("", *services):
        await servicer.set(name, SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection(
        (*services, health.SERVICE_NAME, reflection.SERVICE_NAME),
        server,
        pool=pool_with(health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR),
    )
    return servicer
