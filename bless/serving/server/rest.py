"""The OIP v2 REST API (KServe's HTTP/REST protocol as Triton serves it), on its own port.

Endpoints: ``GET /v2/health/live``, ``/v2/health/ready``, ``/v2`` (server metadata),
``/v2/models/{name}`` (metadata), ``.../ready``, ``.../config`` (Triton's model
configuration), ``.../stats`` (Triton's statistics; ``/v2/models/stats`` for every
model), ``POST .../infer`` and Triton's ``POST /v2/repository/index``; each model path
also as ``/v2/models/{name}/versions/{version}/...`` (version ``1`` only).

**One serving path.**  Every handler calls the same :class:`InferenceService` methods
the gRPC server calls, with the same protobuf messages (built by
:mod:`bless.serving.server.rest_codec`), so a REST request is validated, queued,
scheduled and counted exactly like a gRPC one.  Inference goes through
:meth:`InferenceService.infer` (the client's deadline as a plain timeout); the other
methods do not use their gRPC context, and REST passes ``None``.  The cluster's front end
serves this same API over its router (:class:`OipService` is what both provide): each
request goes to the agent of its model, as its gRPC requests do.

**Stack: Starlette on uvicorn**, the ASGI pair under KServe's Python model server and
Seldon's MLServer (both via FastAPI, which is Starlette plus request models).
Starlette alone, because the binary tensor extension needs the raw body (a JSON
header, then bytes) and errors must be Triton's ``{"error": "..."}``, not
FastAPI's generated 422 bodies.  uvicorn runs its own asyncio loop in its own
thread, on a socket bound before :meth:`RestServer.start` returns, so a port
in use is an error at start, as for gRPC; a slow JSON encoding does not hold up
the gRPC loop's event handling.

**Health answers** carry the OIP's JSON bodies (``{"live": true}``, ``{"ready": true}``,
``{"name": ..., "ready": true}``) with Triton's statuses: Triton sends no body and its
client reads only the status, while KServe's ``InferenceRESTClient`` reads the body
(``is_server_live`` failed on Triton's empty one).

**Status codes** are Triton's (its HTTP server's ``HttpCodeFromError``): invalid
request 400, unknown model or version 404, unavailable 503, internal 500 (a
kernel fault), not ready 400 on the health and model-ready endpoints.  Triton has
no code for a full queue other than UNAVAILABLE ("Exceeds maximum queue size",
503); bless's gRPC answers RESOURCE_EXHAUSTED there and REST answers 503, like
Triton, not 429.  Codes Triton lacks follow google.rpc.Code's HTTP mapping:
ABORTED (the app was unregistered while the request waited) 409.  Errors are
JSON ``{"error": message}``; an unexpected exception is logged and answered 500
with its repr, never a traceback.

**Cancellation**: a client that disconnects while its request waits cancels it,
as a gRPC cancellation does (the job is withdrawn from its queue; one already on
the GPU runs to the end and counts as cancelled).

Inference is unauthenticated, like gRPC inference; the admin API is gRPC only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

import grpc
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bless.serving.api import oip
from bless.serving.server.errors import InvalidArgument, ServiceError
from bless.serving.server.inference import MODEL_VERSION, NOT_APPLICABLE, check_version
from bless.serving.server.rest_codec import (
    HEADER_LENGTH,
    config_json,
    infer_body,
    infer_call,
    message_json,
    split_body,
)

log = logging.getLogger("bless.serving.server")
T = TypeVar("T")

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ALREADY_EXISTS: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
}
"""The HTTP status of each service error (see the module docstring for why each)."""
NOT_READY = 400
"""Triton's answer to a health or model-ready probe that is not ready."""
CLIENT_GONE = 499
"""Logged for a request whose client disconnected (nginx's code; nobody reads the answer)."""

REST_EXTENSIONS = ("binary_tensor_data", "model_configuration")
"""Extensions the REST front end adds to the inference service's (Triton's names)."""

DECOMPRESSORS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
"""Request ``Content-Encoding`` tritonclient can send, as zlib window bits (gzip framing, zlib framing)."""

STOP_GRACE = 2.0
"""Seconds uvicorn lets answered responses finish sending when the server stops (as gRPC's)."""
START_TIMEOUT = 10.0
"""Seconds to wait for uvicorn's loop to start serving the bound socket (it takes milliseconds)."""
START_POLL = 0.005
"""Seconds between checks that uvicorn has started."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _endpoint(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Answer a service error with its status and ``{"error": ...}``; anything else is a logged 500."""

    async def call(request: Request) -> Response:
        try:
            return await fn(request)
        except ServiceError as e:
            return _error(HTTP_STATUS.get(e.code, 500), str(e))
        except HTTPException as e:
            return _error(e.status_code, e.detail)
        except Exception as e:
            log.exception("REST %s %s failed", request.method, request.url.path)
            return _error(500, f"{request.method} {request.url.path} failed in the server: {e!r}")

    return call


async def _disconnected(receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
    """Return when the client goes away (after the body is read, uvicorn's ``receive`` waits for that)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T | None:
    """Run ``work``; if the client disconnects first, cancel it (the service then withdraws the
    request from the scheduler) and return None."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None
    return task.result()


NOT_APPLICABLE_PATHS = {
    "/v2/repository/models/{model}/load": "RepositoryModelLoad",
    "/v2/repository/models/{model}/unload": "RepositoryModelUnload",
    "/v2/systemsharedmemory/status": "SystemSharedMemoryStatus",
    "/v2/systemsharedmemory/region/{region}/status": "SystemSharedMemoryStatus",
    "/v2/systemsharedmemory/region/{region}/register": "SystemSharedMemoryRegister",
    "/v2/systemsharedmemory/unregister": "SystemSharedMemoryUnregister",
    "/v2/systemsharedmemory/region/{region}/unregister": "SystemSharedMemoryUnregister",
    "/v2/cudasharedmemory/status": "CudaSharedMemoryStatus",
    "/v2/cudasharedmemory/region/{region}/status": "CudaSharedMemoryStatus",
    "/v2/cudasharedmemory/region/{region}/register": "CudaSharedMemoryRegister",
    "/v2/cudasharedmemory/unregister": "CudaSharedMemoryUnregister",
    "/v2/cudasharedmemory/region/{region}/unregister": "CudaSharedMemoryUnregister",
    "/v2/trace/setting": "TraceSetting",
    "/v2/models/{model}/trace/setting": "TraceSetting",
    "/v2/logging": "LogSettings",
}
"""Triton's REST extensions that do not apply to bless, by the gRPC method that says why."""


def _not_applicable(rpc: str) -> Callable[[Request], Awaitable[Response]]:
    """Triton's HTTP status for an unimplemented call (501), with the same reason gRPC gives."""

    async def refuse(request: Request) -> Response:
        return _error(501, f"{request.url.path}: {NOT_APPLICABLE[rpc]}")

    return refuse


class OipService(Protocol):
    """What the REST API serves from, with the gRPC service's protobuf messages: the single
    server's :class:`InferenceService`, or the cluster front end's router
    (:class:`bless.cluster.frontend.FrontRest`), so both speak REST through this one module.
    The handlers' gRPC ``context`` is None here (REST has no deadline)."""

    async def server_live(self, request: Any, context: Any) -> Any: ...

    async def server_ready(self, request: Any, context: Any) -> Any: ...

    async def server_metadata(self, request: Any, context: Any) -> Any: ...

    async def model_metadata(self, request: Any, context: Any) -> Any: ...

    async def model_ready(self, request: Any, context: Any) -> Any: ...

    async def model_config(self, request: Any, context: Any) -> Any: ...

    async def model_statistics(self, request: Any, context: Any) -> Any: ...

    async def repository_index(self, request: Any, context: Any) -> Any: ...

    async def infer(self, request: Any, timeout: float | None) -> bytes:
        """The serialised ModelInferResponse of ``request`` (ServiceError: why not)."""
        ...

    async def check_model(self, name: str) -> None:
        """NotFound unless ``name`` is served."""
        ...

    def not_ready_reason(self) -> str: ...


class RestApi:
    """The endpoints, over one :class:`OipService`; :meth:`app` is the ASGI application."""

    def __init__(self, service: OipService, max_body: int) -> None:
        self.service = service
        self.max_body = max_body

    def app(self) -> Starlette:
        def model_routes(suffix: str, endpoint, methods: list[str]) -> list[Route]:
            return [
                Route(f"/v2/models/{{model}}{suffix}", _endpoint(endpoint), methods=methods),
                Route(f"/v2/models/{{model}}/versions/{{version}}{suffix}", _endpoint(endpoint), methods=methods),
            ]

        routes = [
            Route("/v2/health/live", _endpoint(self.live), methods=["GET"]),
            Route("/v2/health/ready", _endpoint(self.ready), methods=["GET"]),
            Route("/v2", _endpoint(self.server_metadata), methods=["GET"]),
            Route("/v2/models/stats", _endpoint(self.statistics), methods=["GET"]),
            Route("/v2/repository/index", _endpoint(self.repository_index), methods=["POST"]),
            *model_routes("", self.model_metadata, ["GET"]),
            *model_routes("/ready", self.model_ready, ["GET"]),
            *model_routes("/config", self.model_config, ["GET"]),
            *model_routes("/stats", self.statistics, ["GET"]),
            *model_routes("/infer", self.infer, ["POST"]),
            *(Route(path, _not_applicable(rpc), methods=["GET", "POST"]) for path, rpc in NOT_APPLICABLE_PATHS.items()),
        ]

        async def no_route(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            if exc.status_code == 404:
                return _error(404, f"no endpoint {request.url.path}; the OIP v2 REST API is under /v2")
            return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")

        return Starlette(routes=routes, exception_handlers={HTTPException: no_route})

    # ---------------------------------------------------------------- health and metadata
    async def live(self, request: Request) -> Response:
        live = (await self.service.server_live(oip.ServerLiveRequest(), None)).live
        return JSONResponse({"live": True}) if live else _error(NOT_READY, "the server is not live")

    async def ready(self, request: Request) -> Response:
        if (await self.service.server_ready(oip.ServerReadyRequest(), None)).ready:
            return JSONResponse({"ready": True})
        return _error(NOT_READY, f"the server is not ready: {self.service.not_ready_reason()}")

    async def server_metadata(self, request: Request) -> Response:
        body = message_json(await self.service.server_metadata(oip.ServerMetadataRequest(), None))
        body["extensions"] = list(dict.fromkeys([*body["extensions"], *REST_EXTENSIONS]))
        return JSONResponse(body)

    @staticmethod
    def _model(request: Request) -> tuple[str, str]:
        return request.path_params["model"], request.path_params.get("version", "")

    async def model_metadata(self, request: Request) -> Response:
        name, version = self._model(request)
        response = await self.service.model_metadata(oip.ModelMetadataRequest(name=name, version=version), None)
        return JSONResponse(message_json(response))

    async def model_ready(self, request: Request) -> Response:
        name, version = self._model(request)
        response = await self.service.model_ready(oip.ModelReadyRequest(name=name, version=version), None)
        if response.ready:
            return JSONResponse({"name": name, "ready": True})
        return _error(
            NOT_READY, f"model {name!r} is not ready: unknown, not version {MODEL_VERSION}, or the server is not ready"
        )

    async def model_config(self, request: Request) -> Response:
        name, version = self._model(request)
        response = await self.service.model_config(oip.ModelConfigRequest(name=name, version=version), None)
        return JSONResponse(config_json(response.config))

    async def statistics(self, request: Request) -> Response:
        name, version = request.path_params.get("model", ""), request.path_params.get("version", "")
        response = await self.service.model_statistics(oip.ModelStatisticsRequest(name=name, version=version), None)
        return JSONResponse(message_json(response))

    async def repository_index(self, request: Request) -> Response:
        body = await self._body(request)
        try:
            query = json.loads(body) if body.strip() else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidArgument(f"request body: not valid JSON: {e}") from None
        if not isinstance(query, dict) or not isinstance(query.get("ready", False), bool):
            raise InvalidArgument('request body: expected {} or {"ready": true|false}')
        index = await self.service.repository_index(oip.RepositoryIndexRequest(ready=query.get("ready", False)), None)
        return JSONResponse(
            [
                {k: v for k, v in message_json(m).items() if v != ""} for m in index.models
            ]  # Triton omits an empty reason
        )

    # ---------------------------------------------------------------- inference
    async def infer(self, request: Request) -> Response:
        name, version = self._model(request)
        await self.service.check_model(name)  # an unknown model is a 404 before its body is read, as in Triton
        check_version(name, version)
        header, binary = split_body(await self._body(request), request.headers.get(HEADER_LENGTH))
        call = infer_call(name, version, header, binary)
        answered = await _unless_disconnected(request, self.service.infer(call.request, timeout=None))
        if answered is None:
            return Response(status_code=CLIENT_GONE)
        response = oip.ModelInferResponse.FromString(answered)
        content, json_length = infer_body(response, call)
        if json_length is None:
            return Response(content, media_type="application/json")
        return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(json_length)})

    async def _body(self, request: Request) -> bytes:
        """The request body, decompressed, at most ``max_body`` bytes (gRPC's message limit)."""
        too_large = HTTPException(
            413, f"request body: more than {self.max_body} bytes, the server's limit; send smaller requests"
        )
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            raise too_large
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > self.max_body:
                    raise too_large
                chunks.append(chunk)
        except ClientDisconnect:
            raise HTTPException(400, "request body: the client disconnected before sending all of it") from None
        body = b"".join(chunks)
        encoding = request.headers.get("content-encoding", "identity").lower()
        if encoding == "identity":
            return body
        if encoding not in DECOMPRESSORS:
            raise InvalidArgument(f"Content-Encoding header: {encoding!r} is not supported; use gzip, deflate or none")
        inflate = zlib.decompressobj(DECOMPRESSORS[encoding])
        try:
            body = inflate.decompress(body, self.max_body + 1)
        except zlib.error as e:
            raise InvalidArgument(f"request body: not valid {encoding} data ({e})") from None
        if len(body) > self.max_body or inflate.unconsumed_tail:
            raise too_large
        return body


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free one)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise OSError(f"cannot listen on {where} ({e}); check the host") from None
    try:
        # As uvicorn's own bind: a restart may take the port while old connections sit in
        # TIME_WAIT; another live listener still makes bind fail.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen()
    except OSError as e:
        sock.close()
        raise OSError(
            f"cannot listen on {where} ({e.strerror}); is another server using the port? "
            f"(http_port: 0 picks a free one, -1 turns the REST API off)"
        ) from None
    return sock


class RestServer:
    """uvicorn serving :class:`RestApi` in its own thread: :meth:`start` returns once the port
    is bound and served, :meth:`stop` lets answered responses finish sending."""

    def __init__(
        self,
        service: OipService,
        host: str,
        port: int,
        max_body: int,
        tls: tuple[str, str, str | None] | None = None,
    ) -> None:
        """``tls``: the certificate, key and optional client CA files (already checked by
        :func:`bless.serving.server.security.http_ssl_context`), or None for plain HTTP."""
        self._api = RestApi(service, max_body)
        self._tls = tls
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> RestServer:
        self._sock = _listen(self.host, self.requested_port)
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self._api.app(),
            lifespan="off",
            log_config=None,  # the process's logging stays as `bless serve` set it up
            log_level=logging.WARNING,  # our own banner says where REST is served
            access_log=False,
            timeout_graceful_shutdown=STOP_GRACE,
            **_uvicorn_tls(self._tls),
        )
        server = self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [self._sock]}, name="bless-rest", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"the REST server on port {self.port} did not start (see the log)")
            self._thread.join(START_POLL)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join()
        if self._sock is not None:
            self._sock.close()


def _uvicorn_tls(tls: tuple[str, str, str | None] | None) -> dict:
    """uvicorn's TLS settings for the certificate, key and client CA (mutual TLS when given)."""
    if tls is None:
        return {}
    cert, key, client_ca = tls
    settings = {"ssl_certfile": cert, "ssl_keyfile": key}
    if client_ca is not None:
        settings |= {"ssl_ca_certs": client_ca, "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return settings
