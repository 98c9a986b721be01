"""The inference API: the Open Inference Protocol v2 (``inference.GRPCInferenceService``).

Every registered app is a model with one version, ``1``.  ModelInfer checks
the inputs against the app's declared tensors, queues the request with the
BLESS scheduler, and answers when its last kernel has run, with the
declared outputs and three response parameters (seconds, double):
``bless_queue_seconds`` (arrival to first kernel), ``bless_compute_seconds``
(first kernel to last), ``bless_latency_seconds`` (their sum) and
``bless_sync_wait_seconds`` (from the end of the last kernel until the host saw
it: squads synchronise, so a request that ends early in a squad is noticed at
the squad's end).
ModelStatistics is Triton's statistics extension, cumulative since start.
"""

from __future__ import annotations

import time
from typing import Any

import grpc

import bless
from bless.serving.api import OIP_SERVICE, oip
from bless.serving.server.core import ServingCore
from bless.serving.server.dispatch import run_request
from bless.serving.server.errors import NotFound, ServiceError
from bless.serving.server.jobs import MODEL_VERSION, Outcome, ServedApp
from bless.serving.server.rpc import generic_handler
from bless.serving.server.tensors import (
    TensorSpec,
    check_request_sizes,
    decode_inputs,
    output_chunks,
    requested_outputs,
)

EXTENSIONS = ("statistics", "parameters")


def check_version(name: str, version: str) -> None:
    if version not in ("", MODEL_VERSION):
        raise NotFound(f"model {name!r} has no version {version!r}; bless serves version {MODEL_VERSION} only")


RAW_OUTPUT_TAG = bytes([oip.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number << 3 | 2])
"""Wire-format key of ``raw_output_contents`` (length-delimited)."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


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
    response.parameters["bless_queue_seconds"].double_param = outcome.queue
    response.parameters["bless_compute_seconds"].double_param = outcome.compute
    response.parameters["bless_latency_seconds"].double_param = outcome.latency
    response.parameters["bless_sync_wait_seconds"].double_param = outcome.sync_wait
    raw: list[bytes] = []
    for spec, shape, chunks in output_chunks(served.name, inputs, shapes, wanted):
        response.outputs.add(name=spec.name, datatype=spec.datatype, shape=shape)
        raw += (RAW_OUTPUT_TAG, _varint(sum(map(len, chunks))), *chunks)
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
                "ModelStatistics": self.model_statistics,
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

    async def model_infer(self, request: Any, context: Any) -> Any:
        received = time.perf_counter()
        served = self.core.lookup(request.model_name)
        try:
            return await self._infer(served, request, context, received)
        except ServiceError:
            served.stats.rpc_failed(time.perf_counter() - received)
            raise

    async def _infer(self, served: ServedApp, request: Any, context: Any, received: float) -> bytes:
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
            timeout=context.time_remaining(),
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
