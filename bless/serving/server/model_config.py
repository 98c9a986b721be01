"""An app's registration as a Triton model configuration (the ModelConfig RPC).

Tools such as perf_analyzer read a model's configuration before sending it
anything: its batching (``max_batch_size``), its tensors (``input``/``output``
with Triton's ``TYPE_*`` datatypes) and whether it is an ensemble or a
sequence model (bless apps are neither).

Triton's batching convention: with ``max_batch_size > 0`` every input and
output has an implicit leading batch dimension, which the config's ``dims``
leave out and clients add (perf_analyzer sends ``[batch, *dims]``).  An app is
batchable in that sense only if every declared tensor starts with a ``-1``
dimension; then ``max_batch_size`` is its profile's batch (the batch the
profile's kernels were measured at), else 0 and ``dims`` are the full shapes.
bless does not reject a larger batch: a request costs its profile's kernels
whatever its batch.
"""

from __future__ import annotations

from typing import Any

from bless.serving.api import oip
from bless.serving.server.jobs import ServedApp
from bless.serving.server.tensors import TensorSpec

BACKEND = "bless"
"""Triton's ``backend`` field: what runs the model (``platform`` says on which backend)."""

TRITON_TYPES = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BYTES": "TYPE_STRING",
    "BF16": "TYPE_BF16",
}
"""OIP datatype -> Triton's ``DataType`` enum name."""


def max_batch_size(served: ServedApp) -> int:
    """The profile's batch if every tensor has a leading ``-1`` (batch) dimension, else 0."""
    tensors = (*served.spec.inputs, *served.spec.outputs)
    return served.state.profile.batch if all(t.shape[0] == -1 for t in tensors) else 0


def _dims(spec: TensorSpec, batched: bool) -> list[int]:
    return list(spec.shape[1:] if batched else spec.shape)


def model_config(served: ServedApp, platform: str, version: str) -> Any:
    """The ``inference.ModelConfig`` of ``served``, hosted on the ``platform`` backend."""
    batch = max_batch_size(served)
    config = oip.ModelConfig(
        name=served.name,
        platform=platform,
        backend=BACKEND,
        max_batch_size=batch,
        input=[
            oip.ModelInput(name=t.name, data_type=TRITON_TYPES[t.datatype], dims=_dims(t, batch > 0))
            for t in served.spec.inputs
        ],
        output=[
            oip.ModelOutput(name=t.name, data_type=TRITON_TYPES[t.datatype], dims=_dims(t, batch > 0))
            for t in served.spec.outputs
        ],
        # One instance whose placement the model decides: BLESS schedules it on the SMs of its quota.
        instance_group=[oip.ModelInstanceGroup(name=served.name, kind="KIND_MODEL", count=1)],
    )
    config.version_policy.specific.versions.append(int(version))
    spec = served.spec
    parameters = {
        "bless_profile": spec.profile,
        "bless_quota": f"{spec.quota:g}",
        "bless_memory_bytes": str(served.state.profile.memory_bytes),
        "bless_slo": spec.slo,  # as registered: "25ms", "2x"; left out when none
    }
    for key, value in parameters.items():
        if value:
            config.parameters[key].string_value = value
    return config
