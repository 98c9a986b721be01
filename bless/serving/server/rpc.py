"""Serving a proto service from plain async functions through gRPC's generic handlers.

The message classes come from :mod:`bless.serving.api`'s private descriptor pool, so
no generated servicer code is involved (see that module for why).  Requests are
decoded here rather than by grpc, which would answer a malformed message UNKNOWN and
log a traceback: here it is INVALID_ARGUMENT and one log line at most.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from bless.serving.api import methods
from bless.serving.server.errors import ServiceError

log = logging.getLogger("bless.serving.server")

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def _guarded(name: str, fn: Handler, request_type: type) -> Handler:
    """Decode the request (malformed: INVALID_ARGUMENT), then answer a :class:`ServiceError`
    with its status code; anything else is INTERNAL and logged."""

    @functools.wraps(fn)
    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = request_type.FromString(raw)
        except DecodeError as e:
            log.info("%s: malformed request from %s: %s", name, context.peer(), e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: malformed request: {e}")
        try:
            return await fn(request, context)
        except ServiceError as e:
            await context.abort(e.code, str(e), retry_pushback(e))
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            log.exception("%s failed", name)
            await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed in the server: {e!r}")

    return call


RETRY_PUSHBACK = "grpc-retry-pushback-ms"
"""Trailing metadata by which a server tells a client when to retry (gRFC A6, honoured by
gRPC's retry policy; other clients read it as a hint)."""


def retry_pushback(error: ServiceError) -> tuple[tuple[str, str], ...]:
    """The trailing metadata of an error: the retry pushback when the error names one."""
    if error.retry_after is None:
        return ()
    return ((RETRY_PUSHBACK, str(max(round(error.retry_after * 1e3), 0))),)


def _serialize(message: Any) -> bytes:
    """Serialise a response, or pass bytes through: a handler may return its response
    already serialised (ModelInfer builds large ones off the event loop)."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def generic_handler(service: str, implementations: dict[str, Handler]) -> grpc.GenericRpcHandler:
    """A handler for every method of ``service``; each must have an implementation."""
    specs = methods(service)
    missing = sorted(set(specs) - set(implementations))
    if missing:
        raise ValueError(f"{service}: no implementation for {', '.join(missing)}")
    return grpc.method_handlers_generic_handler(
        service,
        {
            name: grpc.unary_unary_rpc_method_handler(
                _guarded(f"{service}/{name}", implementations[name], spec.request),
                request_deserializer=None,  # bytes: decoded by _guarded
                response_serializer=_serialize,
            )
            for name, spec in specs.items()
        },
    )
