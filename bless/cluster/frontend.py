"""The cluster's front end: one address speaking what ``bless serve`` speaks (OIP v2 over gRPC
and REST, the admin API, gRPC health and reflection), with the same TLS and admin token.

Design.  Every GPU agent serves its own serving core over gRPC
(:class:`bless.cluster.agent.AgentEndpoint`: the same inference and admin
services as ``bless serve``).  The front end is a gRPC server whose services
route by model name to the agent that holds the model:

* **Inference** (``inference.GRPCInferenceService``).  ModelInfer, ModelMetadata,
  ModelReady, ModelConfig, ModelStatistics (of one model) and each request of
  ModelStreamInfer are forwarded to that agent *as raw bytes*: the front end
  reads the model name off the wire (:func:`~bless.serving.server.wire.wire_string`, which skips the tensor
  bytes without copying them) and passes the request and the answer through
  undecoded, with the client's deadline, and an agent's error (code, message,
  trailing metadata such as the retry pushback) as the client's.  The routes
  (model -> GPU, from the controller's placements) are cached and read again on a
  miss; an unknown model is NOT_FOUND.  ServerLive, ServerReady (every agent
  ready) and ServerMetadata are answered here; RepositoryIndex and
  ModelStatistics of every model are merged over the agents.
* **Admin** (``bless.admin.v1.AdminService``, the front end's own token).
  RegisterApp asks the controller to place and deploy the app; the answer says
  on which GPU and why (``RegisterAppResponse.gpu``, ``.placement``, and the
  admission reason).  UnregisterApp goes through the controller too.  ListApps
  and GetStats are merged over the agents (``AppInfo.gpu`` names each app's GPU).
  SetQuota goes through the controller, which owns quotas like placements: it checks
  the new quota against the app's GPU, stores it, then applies it on the agent (so a
  restarted controller, or a re-placement after a failure, keeps it).  InjectFault and
  GetStats of one app are forwarded to the app's agent, ResetStats to every agent.
* **REST** (``http_port >= 0``): ``bless serve``'s own OIP v2 REST API
  (:mod:`bless.serving.server.rest`, Triton's conventions) over this routing
  (:class:`FrontRest`), so ``tritonclient.http`` works against the cluster unmodified.
* **Health and reflection** (:mod:`bless.serving.server.discovery`, as ``bless serve``):
  SERVING while some GPU agent can be reached.
* **Exposure** (:class:`FrontendConfig`): TLS (and mutual TLS) on both ports, the admin
  token from a private file or generated into the state directory, and no clear text off
  loopback without ``insecure``: ``bless serve``'s settings, checked by the same code.

Failures.  A request whose agent cannot be reached (the agent died: gRPC
UNAVAILABLE from its connection, in flight or new) is answered UNAVAILABLE with
a retry hint (``grpc-retry-pushback-ms``, :data:`~bless.cluster.controller.RETRY_AFTER`),
never INTERNAL or UNKNOWN, and drops the routes, so the next request reads them
again: by then the controller has re-placed the model (asking the agents'
endpoints is enough for it to notice a dead one) and the model is served from
its new GPU.  Every call still in flight to that agent is answered UNAVAILABLE at
once too: its channel is closed, and a call cancelled that way is answered, not
left without a status until the client's deadline.  A model whose GPU is down, or
that no GPU could take since (*unplaced*), is UNAVAILABLE too.  Models on the other
GPUs are not touched.

The cluster is reached through :class:`Cluster` (Ray: :class:`bless.cluster.ray_actors.ClusterClient`);
its calls block, so they run in threads, off the front end's event loop.

Not in this version: TLS between the front end and the agents (they listen on
loopback unless told otherwise, and then only with ``insecure``: see
:class:`~bless.cluster.agent.AgentConfig`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import grpc

import bless
from bless.cluster.controller import RETRY_AFTER
from bless.serving.api import ADMIN_SERVICE, OIP_SERVICE, admin, methods, oip
from bless.serving.server.config import ServerConfig
from bless.serving.server.discovery import ServingHealth, add_discovery
from bless.serving.server.errors import (
    InvalidArgument,
    NotFound,
    ServiceError,
    Unavailable,
    Unimplemented,
)
from bless.serving.server.inference import EXTENSIONS, NOT_APPLICABLE
from bless.serving.server.rest import RestServer
from bless.serving.server.rpc import RETRY_PUSHBACK, retry_pushback
from bless.serving.server.security import (
    AuthGuard,
    add_grpc_port,
    host_port,
    new_token,
    resolve_admin_token,
    rest_tls,
)
from bless.serving.server.streams import answer_concurrently
from bless.serving.server.wire import encode_varint, length_delimited_tag, wire_string

log = logging.getLogger("bless.cluster")

MAX_MESSAGE_BYTES = 64 * 2**20
STOP_GRACE = 2.0
REFRESH_MIN_AGE = 0.05
"""Seconds: routes read this recently are not read again on a miss (a burst of requests for a
moving model asks the controller once, not once each)."""


class Cluster(Protocol):
    """What the front end asks of the cluster (blocking calls)."""

    def placements(self) -> dict[str, dict[str, Any]]: ...

    def endpoints(self) -> dict[str, dict[str, str] | None]: ...

    def register(self, name: str, profile: str, quota: str, **kwargs: Any) -> dict[str, Any]: ...

    def unregister(self, name: str) -> int: ...

    def set_quota(self, name: str, quota: str) -> dict[str, Any]: ...

    def health(self) -> dict[str, Any]: ...


STREAM_RESPONSE_TAG = length_delimited_tag(oip.ModelStreamInferResponse, "infer_response")


class AgentError(ServiceError):
    """An agent's gRPC error, answered to the client as it is (over REST: its code's HTTP status)."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        super().__init__(error.details() or "")
        self.code = error.code()
        self.details = error.details() or ""
        self.trailing = tuple((k, v) for k, v in (error.trailing_metadata() or ()))


# ---------------------------------------------------------------------------- routing
class Routes:
    """Model -> GPU and GPU -> agent endpoint, cached from the cluster and read again on a miss."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.models: dict[str, str] = {}
        self.endpoints: dict[str, dict[str, str]] = {}
        self.unplaced: dict[str, str] = {}
        """Models no GPU could take since theirs went down, and why."""
        self._channels: dict[str, grpc.aio.Channel] = {}
        """By agent incarnation (its token)."""
        self._closing: weakref.WeakSet[grpc.aio.Channel] = weakref.WeakSet()
        """Channels of lost agents, closed under their in-flight calls."""
        self._lost: set[str] = set()
        """Agent incarnations (by their random admin token) found unreachable.  The controller may
        list one a while longer (a dying actor can still answer its ping), and a connection to a
        dying process's listening socket can hang until the client's deadline; a restarted agent
        has a new token, so it is routed to again."""
        self._refresh_lock: asyncio.Lock | None = None
        self._refreshed = -math.inf

    async def refresh(self, max_age: float = 0.0) -> None:
        """Read the routes again, unless they were read less than ``max_age`` s ago or while
        this call waited for another refresh."""
        asked = time.monotonic()
        if self._refresh_lock is None:
            self._refresh_lock = asyncio.Lock()
        async with self._refresh_lock:
            if self._refreshed >= asked - max_age:
                return
            started = time.monotonic()
            # the endpoints first: asking them is how a dead agent is found (and its models
            # re-placed) before the placements are read
            endpoints = await asyncio.to_thread(self.cluster.endpoints)
            placements = await asyncio.to_thread(self.cluster.placements)
            health = getattr(self.cluster, "health", None)
            unplaced = (await asyncio.to_thread(health)).get("unplaced", {}) if health is not None else {}
            self.models = {name: entry["gpu"] for name, entry in placements.items()}
            fresh = {g: e for g, e in endpoints.items() if e and e["token"] not in self._lost}
            for gpu, old in self.endpoints.items():
                if fresh.get(gpu, {}).get("token") != old["token"]:
                    # the controller found this incarnation dead (or replaced): fail its calls now
                    self._drop(old)
            self.endpoints = fresh
            self.unplaced = {name: u.get("reason", "") for name, u in unplaced.items()}
            self._refreshed = started

    async def gpu_of(self, name: str) -> str:
        """The GPU serving ``name`` (NotFound: no such model; Unavailable: its GPU is down)."""
        gpu = self.models.get(name)
        if gpu is None or gpu not in self.endpoints:
            await self.refresh(REFRESH_MIN_AGE)
            gpu = self.models.get(name)
        if gpu is None and name in self.unplaced:
            raise Unavailable(f"model {name!r} has no GPU now: {self.unplaced[name]}", retry_after=RETRY_AFTER)
        if gpu is None:
            raise NotFound(
                f"no model {name!r} in the cluster (registered: {', '.join(sorted(self.models)) or 'none'}); "
                f"register it over bless.admin.v1.AdminService"
            )
        if gpu not in self.endpoints:
            raise Unavailable(
                f"model {name!r} is on {gpu}, whose agent is down; it is being re-placed: retry",
                retry_after=RETRY_AFTER,
            )
        return gpu

    def agent_lost(self, gpu: str) -> None:
        """``gpu``'s agent could not be reached: forget its endpoint and every route (the
        controller moves its models), so the next request reads them again."""
        endpoint = self.endpoints.pop(gpu, None)
        self.models = {}
        self._refreshed = -math.inf
        if endpoint is not None:
            self._drop(endpoint)

    def _drop(self, endpoint: dict[str, str]) -> None:
        """Route no more to this agent incarnation, and close its channel: calls still in flight
        on it are cancelled, which :meth:`forward` answers UNAVAILABLE (a call to a dying process
        may otherwise wait for an answer that never comes, until the client's deadline)."""
        self._lost.add(endpoint["token"])
        channel = self._channels.pop(endpoint["token"], None)
        if channel is not None:
            self._closing.add(channel)
            asyncio.get_running_loop().create_task(channel.close())

    async def gpus(self) -> list[str]:
        if not self.endpoints:
            await self.refresh()
        return sorted(self.endpoints)

    async def endpoint(self, gpu: str) -> dict[str, str]:
        if gpu not in self.endpoints:
            await self.refresh()
        try:
            return self.endpoints[gpu]
        except KeyError:
            raise Unavailable(
                f"GPU {gpu} serves no gRPC endpoint (its agent is down or old)", retry_after=RETRY_AFTER
            ) from None

    async def channel(self, gpu: str) -> grpc.aio.Channel:
        endpoint = await self.endpoint(gpu)
        if endpoint["token"] in self._lost:  # found unreachable while this call read the routes
            raise Unavailable(
                f"the agent of {gpu} is unreachable; its models are being re-placed: retry", retry_after=RETRY_AFTER
            )
        ch = self._channels.get(endpoint["token"])  # by incarnation: a restarted agent may reuse a port
        if ch is None:
            ch = self._channels[endpoint["token"]] = grpc.aio.insecure_channel(
                endpoint["address"],
                options=[
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ],
            )
        return ch

    async def forward(
        self, gpu: str, path: str, raw: bytes, timeout: float | None = None, metadata: tuple = ()
    ) -> bytes:
        """``raw`` to the agent of ``gpu`` as method ``path``; its raw answer (AgentError: its error)."""
        channel = await self.channel(gpu)
        call = channel.unary_unary(path)  # no (de)serialisers: bytes both ways
        try:
            return await call(raw, timeout=timeout, metadata=metadata or None)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if channel not in self._closing or (task is not None and task.cancelling()):
                raise  # the client cancelled (or the front end stops): not an agent failure
            # the channel was closed under the call because its agent was found unreachable: a
            # cancelled call raises CancelledError here, which, let through, would leave the
            # client without any status until its deadline
            raise Unavailable(
                f"the agent of {gpu} is unreachable (found dead during the call); its models are being "
                f"re-placed: retry",
                retry_after=RETRY_AFTER,
            ) from None
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                self.models = {}  # the model may have moved or gone: read the placements again next time
            if e.code() == grpc.StatusCode.UNAVAILABLE and not _pushback(e):
                # the agent is unreachable (it died, before or during the call): not its answer
                self.agent_lost(gpu)
                raise Unavailable(
                    f"the agent of {gpu} is unreachable ({e.details()}); its models are being re-placed: retry",
                    retry_after=RETRY_AFTER,
                ) from None
            raise AgentError(e) from None

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


def _pushback(error: grpc.aio.AioRpcError) -> bool:
    """Whether the agent answered the error with a retry hint (its own UNAVAILABLE)."""
    return any(k == RETRY_PUSHBACK for k, _ in (error.trailing_metadata() or ()))


# ---------------------------------------------------------------------------- handlers
RawHandler = Callable[[bytes, Any], Awaitable[Any]]


def _path(service: str, method: str) -> str:
    return f"/{service}/{method}"


def _serialize(message: Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


async def _abort(name: str, error: Exception, context: Any) -> None:
    if isinstance(error, AgentError):
        await context.abort(error.code, error.details, error.trailing)
    if isinstance(error, ServiceError):
        await context.abort(error.code, str(error), retry_pushback(error))
    log.error("%s failed", name, exc_info=error)
    await context.abort(grpc.StatusCode.INTERNAL, f"{name} failed in the front end: {error!r}")


def _guarded(name: str, fn: RawHandler) -> RawHandler:
    @functools.wraps(fn)
    async def call(raw: bytes, context: Any) -> Any:
        try:
            return await fn(raw, context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await _abort(name, e, context)

    return call


def _decoded(request_type: type, fn: Callable[[Any, Any], Awaitable[Any]]) -> RawHandler:
    async def call(raw: bytes, context: Any) -> Any:
        try:
            request = request_type.FromString(raw)
        except Exception as e:
            raise InvalidArgument(f"malformed request: {e}") from None
        return await fn(request, context)

    return call


def _service_handler(service: str, impls: dict[str, Any]) -> grpc.GenericRpcHandler:
    handlers = {}
    for name, spec in methods(service).items():
        fn = impls[name]
        full = f"{service}/{name}"
        if spec.client_streaming and spec.server_streaming:
            handlers[name] = grpc.stream_stream_rpc_method_handler(fn, response_serializer=_serialize)
        else:
            handlers[name] = grpc.unary_unary_rpc_method_handler(_guarded(full, fn), response_serializer=_serialize)
    return grpc.method_handlers_generic_handler(service, handlers)


class FrontInference:
    """``inference.GRPCInferenceService`` over the cluster's agents."""

    def __init__(self, routes: Routes) -> None:
        self.routes = routes

    def handler(self) -> grpc.GenericRpcHandler:
        return _service_handler(OIP_SERVICE, self.impls())

    def impls(self) -> dict[str, Any]:
        """Each method's handler (raw request bytes and a gRPC context in; an answer, as bytes
        or a message, out): the gRPC service, and through :class:`FrontRest` the REST API."""

        async def refuse(rpc: str, raw: bytes, context: Any) -> Any:
            raise Unimplemented(f"{rpc}: {NOT_APPLICABLE[rpc]}")

        return {
            "ServerLive": self.server_live,
            "ServerReady": self.server_ready,
            "ServerMetadata": self.server_metadata,
            "ModelReady": self.model_ready,
            "ModelMetadata": self.by_model("ModelMetadata"),
            "ModelConfig": self.by_model("ModelConfig"),
            "ModelInfer": self.by_model("ModelInfer"),
            "ModelStatistics": self.model_statistics,
            "ModelStreamInfer": self.model_stream_infer,
            "RepositoryIndex": _decoded(oip.RepositoryIndexRequest, self.repository_index),
            **{rpc: functools.partial(refuse, rpc) for rpc in NOT_APPLICABLE},
        }

    def by_model(self, method: str) -> RawHandler:
        """Forward to the agent of the model named by field 1 (``name`` / ``model_name``)."""
        path = _path(OIP_SERVICE, method)

        async def forward(raw: bytes, context: Any) -> bytes:
            gpu = await self.routes.gpu_of(wire_string(raw, 1))
            return await self.routes.forward(gpu, path, raw, context.time_remaining())

        return forward

    async def server_live(self, raw: bytes, context: Any) -> Any:
        return oip.ServerLiveResponse(live=True)

    async def server_ready(self, raw: bytes, context: Any) -> Any:
        try:
            gpus = await self.routes.gpus()
            answers = await asyncio.gather(
                *(self.routes.forward(g, _path(OIP_SERVICE, "ServerReady"), b"", 5.0) for g in gpus)
            )
        except Exception:
            return oip.ServerReadyResponse(ready=False)
        return oip.ServerReadyResponse(
            ready=bool(gpus) and all(oip.ServerReadyResponse.FromString(a).ready for a in answers)
        )

    async def server_metadata(self, raw: bytes, context: Any) -> Any:
        return oip.ServerMetadataResponse(name="bless", version=bless.__version__, extensions=EXTENSIONS)

    async def model_ready(self, raw: bytes, context: Any) -> Any:
        try:
            gpu = await self.routes.gpu_of(wire_string(raw, 1))
        except NotFound:
            return oip.ModelReadyResponse(ready=False)
        return await self.routes.forward(gpu, _path(OIP_SERVICE, "ModelReady"), raw, context.time_remaining())

    async def _every_agent(self, method: str, raw: bytes, timeout: float | None) -> list[bytes]:
        gpus = await self.routes.gpus()
        return await asyncio.gather(*(self.routes.forward(g, _path(OIP_SERVICE, method), raw, timeout) for g in gpus))

    async def model_statistics(self, raw: bytes, context: Any) -> Any:
        if wire_string(raw, 1):
            return await self.by_model("ModelStatistics")(raw, context)
        merged = oip.ModelStatisticsResponse()
        for answer in await self._every_agent("ModelStatistics", raw, context.time_remaining()):
            merged.MergeFromString(answer)  # repeated model_stats: concatenated
        return merged

    async def repository_index(self, request: Any, context: Any) -> Any:
        merged = oip.RepositoryIndexResponse()
        raw = request.SerializeToString()
        for answer in await self._every_agent("RepositoryIndex", raw, context.time_remaining()):
            merged.MergeFromString(answer)
        merged.models.sort(key=lambda m: m.name)
        return merged

    async def model_stream_infer(self, raws: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        """Each request of the stream is forwarded as a ModelInfer of its own to its model's agent,
        concurrently; answers are written as they come (a failed one: ``error_message``)."""
        path = _path(OIP_SERVICE, "ModelInfer")

        async def answer(raw: bytes) -> bytes:
            try:
                gpu = await self.routes.gpu_of(wire_string(raw, 1))
                response = await self.routes.forward(gpu, path, raw)
                return STREAM_RESPONSE_TAG + encode_varint(len(response)) + response
            except Exception as e:
                if isinstance(e, (AgentError, ServiceError)):
                    message = str(e)
                else:
                    log.exception("ModelStreamInfer failed")
                    message = f"ModelInfer failed in the front end: {e!r}"
                failed = oip.ModelStreamInferResponse(error_message=message)
                try:
                    failed.infer_response.model_name = wire_string(raw, 1)
                    failed.infer_response.id = wire_string(raw, 3)
                except InvalidArgument:
                    pass
                return failed.SerializeToString()

        async for item in answer_concurrently(raws, answer):
            yield item


class _Deadline:
    """The part of a gRPC context the handlers read, for a call that has none (REST)."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout

    def time_remaining(self) -> float | None:
        return self.timeout


class FrontRest:
    """The front end's routing as the REST API's :class:`~bless.serving.server.rest.OipService`,
    so ``bless serve``'s REST implementation (:mod:`bless.serving.server.rest`) serves the
    cluster too.  Each call runs the gRPC handler of its method on the front end's event loop
    (the channels to the agents belong to it) from uvicorn's, with the request as bytes."""

    def __init__(self, inference: FrontInference, loop: asyncio.AbstractEventLoop) -> None:
        self.inference = inference
        self.loop = loop
        self.impls = inference.impls()
        self.methods = methods(OIP_SERVICE)

    async def _on_loop(self, work: Awaitable[Any]) -> Any:
        # a REST client that disconnects cancels this wait, which cancels the work on the loop
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))

    async def _raw(self, method: str, request: Any, timeout: float | None) -> Any:
        """The gRPC handler's answer to ``request``: bytes, or a message it built itself."""
        return await self._on_loop(self.impls[method](request.SerializeToString(), _Deadline(timeout)))

    async def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        answer = await self._raw(method, request, timeout)
        return self.methods[method].response.FromString(answer) if isinstance(answer, bytes) else answer

    async def server_live(self, request: Any, context: Any) -> Any:
        return await self._call("ServerLive", request)

    async def server_ready(self, request: Any, context: Any) -> Any:
        return await self._call("ServerReady", request)

    async def server_metadata(self, request: Any, context: Any) -> Any:
        return await self._call("ServerMetadata", request)

    async def model_metadata(self, request: Any, context: Any) -> Any:
        return await self._call("ModelMetadata", request)

    async def model_ready(self, request: Any, context: Any) -> Any:
        return await self._call("ModelReady", request)

    async def model_config(self, request: Any, context: Any) -> Any:
        return await self._call("ModelConfig", request)

    async def model_statistics(self, request: Any, context: Any) -> Any:
        return await self._call("ModelStatistics", request)

    async def repository_index(self, request: Any, context: Any) -> Any:
        return await self._call("RepositoryIndex", request)

    async def infer(self, request: Any, timeout: float | None) -> bytes:
        return _serialize(await self._raw("ModelInfer", request, timeout))

    async def check_model(self, name: str) -> None:
        await self._on_loop(self.inference.routes.gpu_of(name))

    def not_ready_reason(self) -> str:
        return "no GPU agent of the cluster can be reached (it is starting, or every agent is down)"


class FrontAdmin:
    """``bless.admin.v1.AdminService`` over the cluster: placement through the controller."""

    def __init__(self, routes: Routes, guard: AuthGuard) -> None:
        self.routes = routes
        self.cluster = routes.cluster
        self._guard = guard

    def handler(self) -> grpc.GenericRpcHandler:
        return _service_handler(
            ADMIN_SERVICE,
            {
                "RegisterApp": _decoded(admin.RegisterAppRequest, self.register_app),
                "UnregisterApp": _decoded(admin.UnregisterAppRequest, self.unregister_app),
                "SetQuota": _decoded(admin.SetQuotaRequest, self.set_quota),
                "InjectFault": self.to_app("InjectFault"),
                "ResetStats": self.reset_stats,
                "ListApps": self.list_apps,
                "GetStats": self.get_stats,
            },
        )

    async def _authorize(self, context: Any, method: str) -> None:
        header = dict(context.invocation_metadata() or ()).get("authorization", "")
        await self._guard.authorize(header, context.peer(), method)

    async def _agent_call(self, gpu: str, method: str, raw: bytes, timeout: float | None, auth: bool = False) -> bytes:
        metadata: tuple = ()
        if auth:
            metadata = (("authorization", f"Bearer {(await self.routes.endpoint(gpu))['token']}"),)
        return await self.routes.forward(gpu, _path(ADMIN_SERVICE, method), raw, timeout, metadata)

    async def _app_info(self, gpu: str, name: str) -> Any:
        listed = admin.ListAppsResponse.FromString(await self._agent_call(gpu, "ListApps", b"", 10.0))
        for app in listed.apps:
            if app.name == name:
                app.gpu = gpu
                return app
        return None

    async def register_app(self, request: Any, context: Any) -> Any:
        await self._authorize(context, "RegisterApp")

        def tensors(specs: Any) -> list[tuple[str, str, list[int]]]:
            return [(t.name, t.datatype, list(t.shape)) for t in specs]

        kwargs: dict[str, Any] = {
            "memory_bytes": request.memory_bytes,
            "slo": request.slo,
            "dry_run": request.dry_run,
            "priority": request.priority,
        }
        if request.inputs:
            kwargs["inputs"] = tensors(request.inputs)
        if request.outputs:
            kwargs["outputs"] = tensors(request.outputs)
        placed = await asyncio.to_thread(self.cluster.register, request.name, request.profile, request.quota, **kwargs)
        gpu = placed.get("gpu") or ""
        why = placed.get("why", "")
        accepted = bool(gpu)
        reason = f"placed on {gpu}: {why}" if accepted else why
        response = admin.RegisterAppResponse(
            admission=admin.Admission(accepted=accepted, reason=reason), gpu=gpu, placement=why
        )
        if accepted and not request.dry_run:
            self.routes.models[request.name] = gpu
            info = await self._app_info(gpu, request.name)
            if info is not None:
                response.app.CopyFrom(info)
        return response

    async def unregister_app(self, request: Any, context: Any) -> Any:
        await self._authorize(context, "UnregisterApp")
        aborted = await asyncio.to_thread(self.cluster.unregister, request.name)
        self.routes.models.pop(request.name, None)
        return admin.UnregisterAppResponse(aborted_requests=aborted)

    async def set_quota(self, request: Any, context: Any) -> Any:
        """Through the controller, which checks the quota against the app's GPU and stores it
        (so a re-placement or a restarted controller keeps it) before applying it there."""
        await self._authorize(context, "SetQuota")
        placed = await asyncio.to_thread(self.cluster.set_quota, request.name, request.quota)
        response = admin.SetQuotaResponse()
        gpu = placed.get("gpu")
        if not gpu:  # waiting for a GPU: its stored registration is all there is
            response.app.name = request.name
            response.app.quota = float(placed["spec"]["quota"])
            return response
        self.routes.models[request.name] = gpu
        info = await self._app_info(gpu, request.name)
        if info is not None:
            response.app.CopyFrom(info)
        return response

    def to_app(self, method: str) -> RawHandler:
        """A mutating call about one app (field 1, ``name``): authorised here, forwarded to its agent."""

        async def forward(raw: bytes, context: Any) -> bytes:
            await self._authorize(context, method)
            gpu = await self.routes.gpu_of(wire_string(raw, 1))
            return await self._agent_call(gpu, method, raw, context.time_remaining(), auth=True)

        return forward

    async def reset_stats(self, raw: bytes, context: Any) -> Any:
        await self._authorize(context, "ResetStats")
        gpus = await self.routes.gpus()
        await asyncio.gather(*(self._agent_call(g, "ResetStats", raw, 10.0, auth=True) for g in gpus))
        return admin.ResetStatsResponse()

    async def list_apps(self, raw: bytes, context: Any) -> Any:
        gpus = await self.routes.gpus()
        answers = await asyncio.gather(*(self._agent_call(g, "ListApps", raw, context.time_remaining()) for g in gpus))
        merged = admin.ListAppsResponse()
        infos = []
        for gpu, answer in zip(gpus, answers, strict=True):
            listed = admin.ListAppsResponse.FromString(answer)
            for app in listed.apps:
                app.gpu = gpu
                merged.apps.append(app)
            infos.append(listed.gpu)
        merged.gpu.CopyFrom(_cluster_gpu(infos))
        return merged

    async def get_stats(self, raw: bytes, context: Any) -> Any:
        name = wire_string(raw, 1)
        gpus = [await self.routes.gpu_of(name)] if name else await self.routes.gpus()
        answers = await asyncio.gather(*(self._agent_call(g, "GetStats", raw, context.time_remaining()) for g in gpus))
        if len(answers) == 1:
            return answers[0]
        stats = [admin.GetStatsResponse.FromString(a) for a in answers]
        merged = admin.GetStatsResponse(window_seconds=max(s.window_seconds for s in stats))
        for s in stats:
            merged.apps.extend(s.apps)
        g = merged.gpu
        g.gpu.CopyFrom(_cluster_gpu([s.gpu.gpu for s in stats]))
        utils = [s.gpu.utilisation for s in stats if math.isfinite(s.gpu.utilisation)]
        g.utilisation = sum(utils) / len(utils) if utils else math.nan
        g.squads = sum(s.gpu.squads for s in stats)
        g.kernels = sum(s.gpu.kernels for s in stats)
        g.squad_p99_seconds = max(s.gpu.squad_p99_seconds for s in stats)
        if g.squads:
            g.squad_mean_seconds = sum(s.gpu.squad_mean_seconds * s.gpu.squads for s in stats) / g.squads
            g.restricted_share = sum(s.gpu.restricted_share * s.gpu.squads for s in stats) / g.squads
        g.uptime_seconds = max(s.gpu.uptime_seconds for s in stats)
        return merged


def _cluster_gpu(infos: list[Any]) -> Any:
    """The GpuInfo of a cluster: its GPUs' sums (SMs, memory), the first GPU's settings."""
    out = admin.GpuInfo()
    if not infos:
        return out
    out.CopyFrom(infos[0])
    out.backend = f"bless cluster of {len(infos)} GPUs: {infos[0].backend}"
    out.sm_count = sum(i.sm_count for i in infos)
    out.memory_bytes = sum(i.memory_bytes for i in infos)
    out.memory_used_bytes = sum(i.memory_used_bytes for i in infos)
    out.max_restricted_level = min(i.max_restricted_level for i in infos)
    return out


# ---------------------------------------------------------------------------- server
@dataclasses.dataclass(frozen=True)
class FrontendConfig:
    """Where and how the front end listens: the settings of ``bless serve`` that concern its
    ports and who may reach them, with the same names, defaults and checks (a wrong pair or an
    exposed host is a :class:`~bless.harness.config.ConfigError` naming the setting and the
    flag), because :attr:`server` hands them to the same code (``security.py``)."""

    host: str = "127.0.0.1"
    grpc_port: int = 0
    """OIP v2 inference + admin (0: any free port)."""
    http_port: int = -1
    """The OIP v2 REST API (0: any free port; -1: off)."""
    state_dir: Path | None = None
    """Where a generated admin token is kept (``admin-token``, mode 0600), so it survives a
    restart; None: a random token for this run only (unless a token or a token file is given)."""
    admin_token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    insecure: bool = False
    """Allow a non-loopback host without TLS (a TLS proxy or a trusted network in front)."""

    server: ServerConfig = dataclasses.field(init=False, repr=False, compare=False)
    """The same settings as ``bless serve``'s config (what the security helpers read), made
    once: making it runs the checks, so a bad setting is an error before any port is bound."""

    def __post_init__(self) -> None:
        server = ServerConfig(
            host=self.host,
            grpc_port=self.grpc_port,
            http_port=self.http_port,
            metrics_port=-1,
            admin_token_file=self.admin_token_file,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
            tls_client_ca=self.tls_client_ca,
            insecure=self.insecure,
            max_message_bytes=MAX_MESSAGE_BYTES,
            **({"state_dir": self.state_dir} if self.state_dir is not None else {}),
        )
        object.__setattr__(self, "server", server)


READY_MAX_AGE = 1.0
"""Seconds a health check may answer from routes read that long ago (a probe every second asks
the controller at most once a second)."""
READY_TIMEOUT = 5.0
"""Seconds a health check may wait for the cluster before it answers NOT_SERVING."""


class ClusterFrontend:
    """The front end's gRPC server (and, with ``http_port >= 0``, its REST API) on its own
    asyncio thread: :meth:`start`, :meth:`stop`.  ``token`` overrides the config's admin token."""

    def __init__(self, cluster: Cluster, config: FrontendConfig | None = None, token: str | None = None) -> None:
        self.cluster = cluster
        self.config = config or FrontendConfig()
        self.host = self.config.host
        self.token, self.token_source = self._token(token)
        self.port: int | None = None
        self.http_port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._health: ServingHealth | None = None
        self._rest: RestServer | None = None
        self._routes: Routes | None = None
        self._inference: FrontInference | None = None

    def _token(self, token: str | None) -> tuple[str, str]:
        if token is not None:
            return token, "the caller"
        cfg = self.config
        if cfg.admin_token_file is not None or cfg.state_dir is not None:
            return resolve_admin_token(cfg.server)
        return new_token(), "generated for this run (not written anywhere)"

    @property
    def tls(self) -> bool:
        return self.config.tls_cert is not None

    @property
    def address(self) -> str:
        return host_port(self.host, self.port)

    @property
    def http_address(self) -> str:
        """host:port of the OIP v2 REST API (what ``tritonclient.http`` takes)."""
        return host_port(self.host, self.http_port)

    def start(self) -> ClusterFrontend:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="bless-cluster-frontend", daemon=True)
        self._thread.start()
        try:
            self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
            cfg = self.config
            if cfg.http_port >= 0:
                assert self._inference is not None
                self._rest = RestServer(
                    FrontRest(self._inference, self._loop),
                    cfg.host,
                    cfg.http_port,
                    MAX_MESSAGE_BYTES,
                    rest_tls(cfg.server),
                ).start()
                self.http_port = self._rest.port
        except BaseException:
            self.stop()
            raise
        log.info(
            "cluster front end on %s (%s; REST port %s)", self.address, "TLS" if self.tls else "no TLS", self.http_port
        )
        return self

    async def _start(self) -> int:
        routes = self._routes = Routes(self.cluster)
        self._inference = FrontInference(routes)
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ]
        )
        server.add_generic_rpc_handlers(
            (self._inference.handler(), FrontAdmin(routes, AuthGuard(self.token)).handler())
        )
        self._health = await add_discovery(server, self._ready, (OIP_SERVICE, ADMIN_SERVICE))
        cfg = self.config
        port = add_grpc_port(server, cfg.host, cfg.grpc_port, cfg.server)
        await server.start()
        self._server = server
        return port

    async def _ready(self) -> bool:
        """SERVING while at least one GPU agent can be reached (per model: ModelReady)."""
        assert self._routes is not None
        try:
            await asyncio.wait_for(self._routes.refresh(READY_MAX_AGE), READY_TIMEOUT)
        except Exception as e:
            log.warning("health check: the cluster could not be read: %r", e)
            return False
        return bool(self._routes.endpoints)

    def stop(self, grace: float = STOP_GRACE) -> None:
        if self._rest is not None:
            self._rest.stop()
            self._rest = None
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            return

        async def down() -> None:
            if self._health is not None:  # health checkers see the shutdown before calls are refused
                await self._health.enter_graceful_shutdown()
            if self._server is not None:
                await self._server.stop(grace)
            if self._routes is not None:
                await self._routes.close()

        asyncio.run_coroutine_threadsafe(down(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> ClusterFrontend:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
