"""A synchronous Python client for one bless server: inference (OIP v2) and admin calls.

Errors are gRPC's own :class:`grpc.RpcError` (``.code()``, ``.details()``):
the server's messages name the field or rule at fault.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from bless.serving.api import ADMIN_SERVICE, OIP_SERVICE, admin, methods, oip
from bless.serving.server.tensors import NUMPY_TYPES

TensorTuple = tuple[str, str, Sequence[int]]
DEFAULT_INPUTS: tuple[TensorTuple, ...] = (("INPUT", "FP32", (-1, 16)),)
DEFAULT_OUTPUTS: tuple[TensorTuple, ...] = (("OUTPUT", "FP32", (-1, 4)),)
MAX_MESSAGE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class InferResult:
    outputs: dict[str, np.ndarray]
    queue_seconds: float
    compute_seconds: float
    latency_seconds: float
    """Server side: arrival at the scheduler to the end of the last kernel."""


def sample_inputs(metadata: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs matching a ModelMetadataResponse (-1 dimensions become 1)."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for t in metadata.inputs:
        shape = tuple(1 if d == -1 else d for d in t.shape)
        if t.datatype == "BYTES":
            inputs[t.name] = np.array([b"x%d" % i for i in range(int(np.prod(shape)))], dtype=object).reshape(shape)
        elif t.datatype == "BOOL":
            inputs[t.name] = rng.random(shape) < 0.5
        elif t.datatype.startswith("FP"):
            inputs[t.name] = rng.random(shape).astype(NUMPY_TYPES[t.datatype])
        else:
            inputs[t.name] = rng.integers(0, 100, shape).astype(NUMPY_TYPES[t.datatype])
    return inputs


def infer_request(app: str, metadata: Any, inputs: dict[str, np.ndarray], request_id: str = "") -> Any:
    """A ModelInferRequest carrying ``inputs`` as raw contents, in the model's input order."""
    req = oip.ModelInferRequest(model_name=app, id=request_id)
    for t in metadata.inputs:
        value = np.asarray(inputs[t.name])
        tensor = req.inputs.add()
        tensor.name = t.name
        tensor.datatype = t.datatype
        tensor.shape.extend(value.shape)
        if t.datatype == "BYTES":
            req.raw_input_contents.append(b"".join(struct.pack("<I", len(v)) + v for v in value.ravel()))
        else:
            req.raw_input_contents.append(np.ascontiguousarray(value, dtype=NUMPY_TYPES[t.datatype]).tobytes())
    return req


def decode_response(response: Any) -> InferResult:
    outputs = {}
    for out, data in zip(response.outputs, response.raw_output_contents):
        if out.datatype == "BYTES":
            values, pos = [], 0
            while pos < len(data):
                (n,) = struct.unpack_from("<I", data, pos)
                values.append(data[pos + 4 : pos + 4 + n])
                pos += 4 + n
            arr = np.array(values, dtype=object)
        else:
            arr = np.frombuffer(data, dtype=NUMPY_TYPES[out.datatype])
        outputs[out.name] = arr.reshape(tuple(out.shape))
    p = response.parameters
    return InferResult(
        outputs,
        p["bless_queue_seconds"].double_param,
        p["bless_compute_seconds"].double_param,
        p["bless_latency_seconds"].double_param,
    )


def _tensor_specs(tensors: Sequence[TensorTuple]) -> list[Any]:
    return [admin.TensorSpec(name=n, datatype=d, shape=list(s)) for n, d, s in tensors]


class BlessClient:
    """Calls one server; ``token`` is needed for mutating admin calls, ``credentials``
    (``grpc.ssl_channel_credentials(...)``) for a server with TLS."""

    def __init__(
        self,
        address: str = "127.0.0.1:8001",
        token: str | None = None,
        timeout: float | None = 60.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.credentials = credentials
        """The channel's TLS credentials (None: plain text), for other connections to the same server (a replay)."""
        self._auth = (("authorization", f"Bearer {token}"),) if token else ()
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        if credentials is None:
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            self._channel = grpc.secure_channel(address, credentials, options=options)
        self._calls = {
            name: self._channel.unary_unary(
                m.path, request_serializer=m.request.SerializeToString, response_deserializer=m.response.FromString
            )
            for service in (OIP_SERVICE, ADMIN_SERVICE)
            for name, m in methods(service).items()
            if not (m.client_streaming or m.server_streaming)  # ModelStreamInfer: use tritonclient's stream
        }
        self._metadata: dict[str, Any] = {}

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> BlessClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        return self._calls[method](request, timeout=timeout or self.timeout, metadata=self._auth or None)

    # ------------------------------------------------------------ inference
    def live(self) -> bool:
        return self._call("ServerLive", oip.ServerLiveRequest()).live

    def ready(self) -> bool:
        return self._call("ServerReady", oip.ServerReadyRequest()).ready

    def metadata(self, app: str) -> Any:
        """The app's ModelMetadataResponse (cached)."""
        if app not in self._metadata:
            self._metadata[app] = self._call("ModelMetadata", oip.ModelMetadataRequest(name=app))
        return self._metadata[app]

    def infer(self, app: str, inputs: dict[str, np.ndarray] | None = None, timeout: float | None = None) -> InferResult:
        """Run one request; ``inputs`` default to seeded values of the declared shapes."""
        meta = self.metadata(app)
        request = infer_request(app, meta, inputs if inputs is not None else sample_inputs(meta))
        return decode_response(self.model_infer(request, timeout))

    def model_infer(self, request: Any, timeout: float | None = None) -> Any:
        """Send a ready-made ``oip.ModelInferRequest``; returns the ModelInferResponse."""
        return self._call("ModelInfer", request, timeout)

    def model_statistics(self, app: str = "") -> Any:
        return self._call("ModelStatistics", oip.ModelStatisticsRequest(name=app))

    # ------------------------------------------------------------ admin
    def register(
        self,
        name: str,
        profile: str,
        quota: float | str,
        *,
        memory_bytes: int = 0,
        slo: str = "",
        inputs: Sequence[TensorTuple] = DEFAULT_INPUTS,
        outputs: Sequence[TensorTuple] = DEFAULT_OUTPUTS,
        dry_run: bool = False,
        priority: str = "",
    ) -> Any:
        """Register an app; returns the RegisterAppResponse (admission answer and AppInfo).
        ``priority``: "latency-critical" (empty: the default) or "best-effort"."""
        request = admin.RegisterAppRequest(
            name=name,
            profile=profile,
            quota=str(quota),
            memory_bytes=memory_bytes,
            slo=slo,
            inputs=_tensor_specs(inputs),
            outputs=_tensor_specs(outputs),
            dry_run=dry_run,
            priority=priority,
        )
        self._metadata.pop(name, None)
        return self._call("RegisterApp", request)

    def unregister(self, name: str) -> int:
        """Remove an app; returns how many queued requests were aborted."""
        self._metadata.pop(name, None)
        return self._call("UnregisterApp", admin.UnregisterAppRequest(name=name)).aborted_requests

    def set_quota(self, name: str, quota: float | str) -> Any:
        return self._call("SetQuota", admin.SetQuotaRequest(name=name, quota=str(quota))).app

    def apps(self) -> Any:
        """ListAppsResponse: every app and the GPU."""
        return self._call("ListApps", admin.ListAppsRequest())

    def stats(self, name: str = "") -> Any:
        """GetStatsResponse for one app or all."""
        return self._call("GetStats", admin.GetStatsRequest(name=name))

    def reset_stats(self) -> None:
        self._call("ResetStats", admin.ResetStatsRequest())

    def inject_fault(self, name: str, kernel: int = 0, count: int = 1) -> None:
        self._call("InjectFault", admin.InjectFaultRequest(name=name, kernel=kernel, count=count))
