"""Serving a proto service from plain async functions through gRPC's generic handlers.

The message classes come from :mod:`bless.serving.api`'s private descriptor pool, so
no generated servicer code is involved (see that module for why).  Requests are
decoded here rather than by grpc, which would answer a malformed message UNKNOWN and
log a traceback: here it is INVALID_ARGUMENT and one log line at most.  Methods are
unary or bidirectional streams (Triton's ModelStreamInfer).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from bless.serving.api import Method, methods
from bless.serving.server.errors import InvalidArgument, ServiceError

log = logging.getLogger("bless.serving.server")

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
StreamHandler = Callable[[AsyncIterator[Any], grpc.aio.ServicerContext], AsyncIterator[Any]]
"""A bidirectional-streaming method: the request stream in, an async generator of answers out."""


def _decode(name: str, raw: bytes, request_type: type, context: grpc.aio.ServicerContext) -> Any:
    try:
        return request_type.FromString(raw)
    except DecodeError as e:
        log.info("%s: malformed request from %s: %s", name, context.peer(), e)
        raise InvalidArgument(f"{name}: malformed request: {e}") from None


async def _abort(name: str, error: Exception, context: grpc.aio.ServicerContext) -> None:
    """Answer a :class:`ServiceError` with its status code; anything else is INTERNAL and logged."""
    if isinstance(error, ServiceError):
        await context.abort(error.code, str(error), retry_pushback(error))
    log.error("%s failed", name, exc_info=error)
    await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed in the server: {error!r}")


def _guarded(name: str, fn: Handler, request_type: type) -> Handler:
    """Decode the request (malformed: INVALID_ARGUMENT), then answer a :class:`ServiceError`
    with its status code; anything else is INTERNAL and logged."""

    @functools.wraps(fn)
    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(_decode(name, raw, request_type, context), context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await _abort(name, e, context)

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


def _guarded_stream(name: str, fn: StreamHandler, request_type: type) -> StreamHandler:
    """:func:`_guarded` for a bidirectional stream: a malformed message ends it INVALID_ARGUMENT."""

    @functools.wraps(fn)
    async def call(raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async def decoded() -> AsyncIterator[Any]:
            async for raw in raws:
                yield _decode(name, raw, request_type, context)

        try:
            async for answer in fn(decoded(), context):
                yield answer
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await _abort(name, e, context)

    return call


def _method_handler(service: str, spec: Method, fn: Any) -> grpc.RpcMethodHandler:
    name = f"{service}/{spec.name}"
    # request_deserializer None: bytes, decoded by the guard
    codec = {"request_deserializer": None, "response_serializer": _serialize}
    if spec.client_streaming and spec.server_streaming:
        return grpc.stream_stream_rpc_method_handler(_guarded_stream(name, fn, spec.request), **codec)
    if spec.client_streaming or spec.server_streaming:
        raise ValueError(f"{name}: only unary and bidirectional-streaming methods are supported")
    return grpc.unary_unary_rpc_method_handler(_guarded(name, fn, spec.request), **codec)


def generic_handler(service: str, implementations: dict[str, Handler | StreamHandler]) -> grpc.GenericRpcHandler:
    """A handler for every method of ``service``; each must have an implementation
    (a :data:`Handler`, or a :data:`StreamHandler` for a bidirectional stream)."""
    specs = methods(service)
    missing = sorted(set(specs) - set(implementations))
    if missing:
        raise ValueError(f"{service}: no implementation for {', '.join(missing)}")
    return grpc.method_handlers_generic_handler(
        service,
        {name: _method_handler(service, spec, implementations[name]) for name, spec in specs.items()},
    )
