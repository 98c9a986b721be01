"""The inference API: Triton's ``inference.GRPCInferenceService`` (the Open Inference Protocol v2 and more).

Every registered app is a model with one version, ``1``.  ModelInfer checks
the inputs against the app's declared tensors, queues the request with the
BLESS scheduler, and answers when its last kernel has run, with the
declared outputs and the request's timings as response parameters, each
twice: ``bless_<name>_seconds`` (double, Triton's extension) and
``bless_<name>_us`` (int64 microseconds, for clients of KServe's
InferParameter, which has no double), for the names of :data:`TIMINGS`.

ModelStreamInfer serves many ModelInfer on one bidirectional stream;
ModelConfig describes the app the Triton way (:mod:`.model_config`);
RepositoryIndex lists the apps; ModelStatistics is Triton's statistics
extension, cumulative since start.  The Triton RPCs that do not apply to
bless answer UNIMPLEMENTED with the reason (:data:`NOT_APPLICABLE`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

import bless
from bless.serving.api import OIP_SERVICE, oip
from bless.serving.server.core import ServingCore
from bless.serving.server.dispatch import run_request
from bless.serving.server.errors import NotFound, ServiceError, Unimplemented
from bless.serving.server.jobs import MODEL_VERSION, Outcome, ServedApp
from bless.serving.server.model_config import model_config
from bless.serving.server.rpc import generic_handler
from bless.serving.server.streams import answer_concurrently
from bless.serving.server.tensors import (
    TensorSpec,
    check_request_sizes,
    decode_inputs,
    output_chunks,
    requested_outputs,
)
from bless.serving.server.wire import encode_varint, length_delimited_tag

log = logging.getLogger("bless.serving.server")

EXTENSIONS = ("statistics", "parameters", "model_configuration")
"""Triton extensions served in full (not model_repository: no load/unload; not the shared-memory ones)."""

TIMINGS = {
    "queue": "arrival at the scheduler to the start of the first kernel",
    "compute": "start of the first kernel to the end of the last",
    "latency": "arrival to the end of the last kernel (queue + compute)",
    "sync_wait": "end of the last kernel until the host saw it (a squad synchronises as a whole)",
}
"""The timing parameters of every response (``bless_<name>_seconds`` and ``bless_<name>_us``)."""

MICROSECONDS = 1e6

_REGISTER = "register apps over bless.admin.v1.AdminService (`bless client register NAME --profile P --quota 50%`)"
_IN_REQUEST = (
    "send tensors in the request (raw_input_contents or contents; perf_analyzer's default --shared-memory none)"
)
NOT_APPLICABLE = {
    "RepositoryModelLoad": f"bless has no model repository to load files from: {_REGISTER}",
    "RepositoryModelUnload": "bless has no model repository: remove an app with bless.admin.v1.AdminService/UnregisterApp "
    "(`bless client unregister NAME`)",
    **dict.fromkeys(
        ("SystemSharedMemoryStatus", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister"),
        f"system shared memory is not supported: bless reads tensors from the request only; {_IN_REQUEST}",
    ),
    **dict.fromkeys(
        ("CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister"),
        "CUDA shared memory does not apply: bless serves a simulated GPU, or a real one its own process holds, "
        f"and maps no client's CUDA IPC handle; {_IN_REQUEST}",
    ),
    "TraceSetting": "bless has no Triton request tracing: every response carries its timings "
    "(parameters bless_queue_us, bless_compute_us, bless_latency_us, bless_sync_wait_us) and /metrics the totals",
    "LogSettings": "bless's logging is set when it starts: `bless serve --log-level`",
}
"""Triton RPCs that do not apply to bless, and why (answered UNIMPLEMENTED)."""

REPOSITORY_STATES = {True: ("READY", ""), False: ("UNAVAILABLE", "the server is shutting down")}
"""Triton's model state in RepositoryIndex (and its reason) by whether the server is ready."""


def check_version(name: str, version: str) -> None:
    if version not in ("", MODEL_VERSION):
        raise NotFound(f"model {name!r} has no version {version!r}; bless serves version {MODEL_VERSION} only")


def _not_applicable(rpc: str):
    async def refuse(request: Any, context: Any) -> Any:
        raise Unimplemented(f"{rpc}: {NOT_APPLICABLE[rpc]}")

    return refuse


def set_timings(response: Any, outcome: Outcome) -> None:
    """The :data:`TIMINGS` of ``outcome`` as response parameters, in seconds and in microseconds."""
    for name in TIMINGS:
        seconds = getattr(outcome, name)
        response.parameters[f"bless_{name}_seconds"].double_param = seconds
        response.parameters[f"bless_{name}_us"].int64_param = round(seconds * MICROSECONDS)


RAW_OUTPUT_TAG = length_delimited_tag(oip.ModelInferResponse, "raw_output_contents")


def encode_response(
    served: ServedApp,
    request_id: str,
    outcome: Outcome,
    inputs: list[bytes],
    shapes: list[tuple[int, ...]],
    wanted: list[TensorSpec],
) -> bytes:
    """A serialised ModelInferResponse.  The output bytes are appended in the wire format
    rather than set on the message, which would copy them twice more (into the message,
    then into its serialisation), holding the GIL against the event loop: they are
    copied once, by the final join."""
    response = oip.ModelInferResponse(model_name=served.name, model_version=MODEL_VERSION, id=request_id)
    set_timings(response, outcome)
    raw: list[bytes] = []
    for spec, shape, chunks in output_chunks(served.name, inputs, shapes, wanted):
        response.outputs.add(name=spec.name, datatype=spec.datatype, shape=shape)
        raw += (RAW_OUTPUT_TAG, encode_varint(sum(map(len, chunks))), *chunks)
    return b"".join([response.SerializeToString(), *raw])


class InferenceService:
    def __init__(self, core: ServingCore, platform: str) -> None:
        self.core = core
        self.platform = platform

    def handler(self) -> grpc.GenericRpcHandler:
        return generic_handler(
            OIP_SERVICE,
            {
                "ServerLive": self.server_live,
                "ServerReady": self.server_ready,
                "ModelReady": self.model_ready,
                "ServerMetadata": self.server_metadata,
                "ModelMetadata": self.model_metadata,
                "ModelInfer": self.model_infer,
                "ModelStreamInfer": self.model_stream_infer,
                "ModelConfig": self.model_config,
                "ModelStatistics": self.model_statistics,
                "RepositoryIndex": self.repository_index,
                **{rpc: _not_applicable(rpc) for rpc in NOT_APPLICABLE},
            },
        )

    async def server_live(self, request: Any, context: Any) -> Any:
        return oip.ServerLiveResponse(live=True)

    async def server_ready(self, request: Any, context: Any) -> Any:
        return oip.ServerReadyResponse(ready=self.core.ready)

    async def model_ready(self, request: Any, context: Any) -> Any:
        try:
            self.core.lookup(request.name)
            check_version(request.name, request.version)
        except NotFound:
            return oip.ModelReadyResponse(ready=False)
        return oip.ModelReadyResponse(ready=self.core.ready)

    async def server_metadata(self, request: Any, context: Any) -> Any:
        return oip.ServerMetadataResponse(name="bless", version=bless.__version__, extensions=EXTENSIONS)

    async def model_metadata(self, request: Any, context: Any) -> Any:
        served = self.core.lookup(request.name)
        check_version(request.name, request.version)
        T = oip.ModelMetadataResponse.TensorMetadata
        return oip.ModelMetadataResponse(
            name=served.name,
            versions=[MODEL_VERSION],
            platform=self.platform,
            inputs=[T(name=t.name, datatype=t.datatype, shape=t.shape) for t in served.spec.inputs],
            outputs=[T(name=t.name, datatype=t.datatype, shape=t.shape) for t in served.spec.outputs],
        )

    async def model_config(self, request: Any, context: Any) -> Any:
        served = self.core.lookup(request.name)
        check_version(request.name, request.version)
        return oip.ModelConfigResponse(config=model_config(served, self.platform, MODEL_VERSION))

    async def repository_index(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            raise NotFound(
                f"no repository {request.repository_name!r}: bless has one, its registered apps; "
                f"leave repository_name empty"
            )
        state, reason = REPOSITORY_STATES[self.core.ready]
        response = oip.RepositoryIndexResponse()
        if state == "READY" or not request.ready:
            for served in self.core.apps():
                response.models.add(name=served.name, version=MODEL_VERSION, state=state, reason=reason)
        return response

    async def model_infer(self, request: Any, context: Any) -> bytes:
        return await self.infer(request, context.time_remaining())

    async def check_model(self, name: str) -> None:
        """NotFound unless ``name`` is served (the REST API answers 404 before reading a body)."""
        self.core.lookup(name)

    def not_ready_reason(self) -> str:
        """Why the server is not ready, for the REST API's health answer."""
        return self.core.failure or "it is starting or shutting down"

    async def infer(self, request: Any, timeout: float | None) -> bytes:
        """ModelInfer for either front end (gRPC, REST): the serialised response.  ``timeout``
        is the client's time left (None: no deadline); the request is dropped once it passes."""
        received = time.perf_counter()
        served = self.core.lookup(request.model_name)
        try:
            return await self._infer(served, request, timeout, received)
        except ServiceError:
            served.stats.rpc_failed(time.perf_counter() - received)
            raise

    async def model_stream_infer(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """Each request on the stream is a ModelInfer of its own, run concurrently with the
        others; answers are written as requests finish (clients match them by ``id``).  As in
        Triton, a failed request answers ``error_message`` and the stream goes on; the stream
        ends once the client has closed its side and every request is answered.  A cancelled
        stream cancels its requests."""

        async def answer(request: Any) -> Any:
            try:
                answered = await self.model_infer(request, context)
                return oip.ModelStreamInferResponse(infer_response=oip.ModelInferResponse.FromString(answered))
            except Exception as e:
                if not isinstance(e, ServiceError):
                    log.exception("ModelStreamInfer failed")
                response = oip.ModelStreamInferResponse(
                    error_message=str(e) if isinstance(e, ServiceError) else f"ModelInfer failed in the server: {e!r}"
                )
                response.infer_response.model_name = request.model_name
                response.infer_response.id = request.id
                return response

        async for item in answer_concurrently(requests, answer):
            yield item

    async def _infer(self, served: ServedApp, request: Any, timeout: float | None, received: float) -> bytes:
        spec = served.spec
        try:
            check_version(served.name, request.model_version)
            inputs, shapes = decode_inputs(request, spec.inputs, served.name)
            wanted = requested_outputs(request, spec.outputs, served.name)
            size = check_request_sizes(
                served.name, spec.inputs, shapes, wanted, served.state.profile.batch, self.core.max_message_bytes
            )
        except ServiceError as e:
            served.stats.refused(e.reason)
            raise
        return await run_request(
            self.core,
            served,
            lambda outcome: encode_response(served, request.id, outcome, inputs, shapes, wanted),
            output_bytes=size,
            timeout=timeout,
            received=received,
            decode=time.perf_counter() - received,
        )

    async def model_statistics(self, request: Any, context: Any) -> Any:
        if request.name:
            apps = [self.core.lookup(request.name)]
            check_version(request.name, request.version)
        else:
            apps = self.core.apps()
        response = oip.ModelStatisticsResponse()
        for served in apps:
            c = served.stats.cumulative()
            ms = response.model_stats.add(
                name=served.name,
                version=MODEL_VERSION,
                last_inference=c.last_inference_ms,
                inference_count=c.success.count,
                execution_count=c.success.count,
            )
            for field in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
                d = getattr(c, field)
                target = getattr(ms.inference_stats, field)
                target.count = d.count
                target.ns = d.ns
        return response
