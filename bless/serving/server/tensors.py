"""An app's declared tensors: checking inference inputs, making outputs.

An app declares its inputs and outputs (name, OIP datatype, shape with -1 for
any size).  A request must send every declared input once, with that datatype,
a matching shape and exactly the bytes the shape needs, either as
``raw_input_contents`` (one entry per input, in order) or as typed
``contents``.  Errors name the field (``inputs[1].shape``).

On the simulated GPU outputs are a deterministic function of the inputs: a
BLAKE2 digest of the app name and every input's bytes seeds the values, so the
same request always gets the same answer; values repeat every
:data:`OUTPUT_BLOCK` elements.  A -1 in an output shape takes the
size of the same dimension of the first input (1 if it has none).

Sizes are bounded: a -1 in the first dimension of the first input is the
batch, at most the batch the app was profiled at, and every response must fit
in one gRPC message, so an app whose outputs at that batch would not is refused
when it registers (:func:`check_output_sizes`) and a request whose outputs would
not is refused before it queues (:func:`check_request_sizes`).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bless.serving.server.errors import InvalidArgument

NUMPY_TYPES: dict[str, str] = {
    "BOOL": "?",
    "UINT8": "<u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "INT8": "<i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
    "BF16": "<u2",
}
"""Fixed-size OIP datatypes and the little-endian numpy type of their raw bytes
(BF16 is carried as its 16 raw bits)."""

DATATYPES = (*NUMPY_TYPES, "BYTES")

CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
"""The typed ``InferTensorContents`` field of each datatype (FP16/BF16 are raw only)."""

MAX_DIMS = 8

RESPONSE_OVERHEAD_BYTES = 64 * 2**10
"""Room left in a message for everything but the output bytes: names, shapes,
parameters and framing take tens of bytes per output, so 64 KiB holds far more
outputs than an app declares."""
OUTPUT_BLOCK = 2**16
"""Simulated outputs repeat a block of this many random values: drawing a value costs
~10 ns, repeating bytes ~0.1 ns, and drawing every value of a tens-of-MB output held
the GIL, against every other request, for tens of ms."""
BYTES_TAG = 12
"""Hex characters of the digest each simulated BYTES element starts with."""


@dataclass(frozen=True)
class TensorSpec:
    """A declared tensor; ``-1`` in ``shape`` is a dimension of any size."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.datatype}{list(self.shape)}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorSpec:
        return cls(d["name"], d["datatype"], tuple(int(x) for x in d["shape"]))


def parse_specs(raw: Sequence[tuple[str, str, Sequence[int]]], field: str) -> tuple[TensorSpec, ...]:
    """Validate declared tensors given as (name, datatype, shape) triples."""
    if not raw:
        raise InvalidArgument(f"{field}: declare at least one tensor (name, datatype, shape)")
    specs = []
    seen = set()
    for i, (name, datatype, shape) in enumerate(raw):
        where = f"{field}[{i}]"
        if not name:
            raise InvalidArgument(f"{where}.name: a tensor needs a name")
        if name in seen:
            raise InvalidArgument(f"{where}.name: tensor {name!r} is declared twice")
        seen.add(name)
        if datatype not in DATATYPES:
            raise InvalidArgument(
                f"{where}.datatype: {datatype!r} is not an OIP datatype; use one of {', '.join(DATATYPES)}"
            )
        dims = tuple(int(d) for d in shape)
        if not dims or len(dims) > MAX_DIMS or any(d == 0 or d < -1 for d in dims):
            raise InvalidArgument(
                f"{where}.shape: expected 1 to {MAX_DIMS} dimensions, each positive or -1 (any size), got {list(dims)}"
            )
        specs.append(TensorSpec(name, datatype, dims))
    return tuple(specs)


def _size(shape: Sequence[int]) -> int:
    return math.prod(shape)


def _bytes_elements(data: bytes) -> int | None:
    """Number of elements in a serialised BYTES tensor (4-byte length prefixes); None if malformed."""
    count, pos = 0, 0
    while pos < len(data):
        if pos + 4 > len(data):
            return None
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4 + n
        count += 1
    return count if pos == len(data) else None


def _raw_from_contents(spec: TensorSpec, contents: Any, n: int, where: str) -> bytes:
    field = CONTENTS_FIELD.get(spec.datatype)
    if field is None:
        raise InvalidArgument(f"{where}.contents: {spec.datatype} data must be sent as raw_input_contents")
    values = list(getattr(contents, field))
    if len(values) != n:
        raise InvalidArgument(
            f"{where}.contents.{field}: input {spec.name!r} of this shape needs {n} values, got {len(values)}"
        )
    if spec.datatype == "BYTES":
        return b"".join(struct.pack("<I", len(v)) + v for v in values)
    return np.asarray(values, dtype=NUMPY_TYPES[spec.datatype]).tobytes()


def decode_inputs(request: Any, specs: Sequence[TensorSpec], app: str) -> tuple[list[bytes], list[tuple[int, ...]]]:
    """Check a ModelInferRequest's inputs against ``specs``.

    Returns every declared input's bytes and shape, in declaration order.
    """
    by_name = {s.name: s for s in specs}
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidArgument(
            f"raw_input_contents: {len(raw)} entries for {len(request.inputs)} inputs; send one per input"
        )
    found: dict[str, tuple[bytes, tuple[int, ...]]] = {}
    for i, tensor in enumerate(request.inputs):
        where = f"inputs[{i}]"
        spec = by_name.get(tensor.name)
        if spec is None:
            raise InvalidArgument(
                f"{where}.name: app {app!r} has no input {tensor.name!r}; its inputs are {', '.join(by_name)}"
            )
        if tensor.name in found:
            raise InvalidArgument(f"{where}.name: input {tensor.name!r} is sent twice")
        if tensor.datatype != spec.datatype:
            raise InvalidArgument(f"{where}.datatype: input {spec.name!r} is {spec.datatype}, got {tensor.datatype!r}")
        shape = tuple(tensor.shape)
        if len(shape) != len(spec.shape) or any(d < 0 or (w != -1 and d != w) for d, w in zip(shape, spec.shape)):
            raise InvalidArgument(
                f"{where}.shape: input {spec.name!r} takes shape {list(spec.shape)} (-1: any size), got {list(shape)}"
            )
        n = _size(shape)
        has_contents = tensor.HasField("contents")
        if raw:
            if has_contents:
                raise InvalidArgument(
                    f"{where}.contents: send data either as raw_input_contents or as contents, not both"
                )
            data = raw[i]
            if spec.datatype == "BYTES":
                if _bytes_elements(data) != n:
                    raise InvalidArgument(
                        f"raw_input_contents[{i}]: input {spec.name!r} needs {n} length-prefixed BYTES elements"
                    )
            else:
                need = n * np.dtype(NUMPY_TYPES[spec.datatype]).itemsize
                if len(data) != need:
                    raise InvalidArgument(
                        f"raw_input_contents[{i}]: input {spec.name!r} ({spec.datatype}, shape {list(shape)}) "
                        f"needs {need} bytes, got {len(data)}"
                    )
        elif has_contents:
            data = _raw_from_contents(spec, tensor.contents, n, where)
        else:
            raise InvalidArgument(f"{where}: input {spec.name!r} carries no data (raw_input_contents or contents)")
        found[tensor.name] = (bytes(data), shape)
    missing = [s for s in specs if s.name not in found]
    if missing:
        m = missing[0]
        raise InvalidArgument(f"inputs: missing input {m.name!r} ({m.describe()}) of app {app!r}")
    return [found[s.name][0] for s in specs], [found[s.name][1] for s in specs]


def requested_outputs(request: Any, specs: Sequence[TensorSpec], app: str) -> list[TensorSpec]:
    """The outputs a request asks for (all when it names none)."""
    if not request.outputs:
        return list(specs)
    by_name = {s.name: s for s in specs}
    wanted = []
    for i, out in enumerate(request.outputs):
        spec = by_name.get(out.name)
        if spec is None:
            raise InvalidArgument(
                f"outputs[{i}].name: app {app!r} has no output {out.name!r}; its outputs are {', '.join(by_name)}"
            )
        wanted.append(spec)
    return wanted


def output_shape(spec: TensorSpec, first_input_shape: Sequence[int]) -> tuple[int, ...]:
    """Resolve -1 dimensions from the first input's same dimension (1 when it has none)."""
    return tuple(
        d if d != -1 else (first_input_shape[i] if i < len(first_input_shape) else 1) for i, d in enumerate(spec.shape)
    )


def _element_bytes(datatype: str) -> int:
    return np.dtype(NUMPY_TYPES[datatype]).itemsize


def output_nbytes(datatype: str, n: int) -> int:
    """Bytes of an output of ``n`` elements as :func:`make_outputs` writes it (BYTES: each
    element a 4-byte length, the tag, ':' and its index)."""
    if datatype == "BYTES":
        return n * (4 + BYTES_TAG + 1 + len(str(max(n - 1, 0))))
    return n * _element_bytes(datatype)


def _declared_size(spec: TensorSpec, first_input: Sequence[int], batch: int) -> int:
    """Elements of an output at ``batch`` when the first input's sizes are as declared
    (a -1 batch dimension is ``batch``, any other -1 counts as 1: the request check sees it)."""
    dims = list(first_input)
    if dims and dims[0] == -1:
        dims[0] = batch
    return _size(max(d, 1) for d in output_shape(spec, dims))


def check_output_sizes(
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], batch: int, max_message_bytes: int
) -> None:
    """Registration: every output at the app's profiled ``batch`` must fit in one response
    of at most ``max_message_bytes`` (the server's gRPC message limit)."""
    first = inputs[0].shape if inputs else ()
    sizes = [output_nbytes(s.datatype, _declared_size(s, first, batch)) for s in outputs]
    room = max_message_bytes - RESPONSE_OVERHEAD_BYTES
    if sum(sizes) > room:
        i = max(range(len(sizes)), key=sizes.__getitem__)
        raise InvalidArgument(
            f"outputs[{i}].shape: at the profiled batch of {batch}, the outputs take {sum(sizes):,} bytes "
            f"({outputs[i].name!r} {outputs[i].describe()}: {sizes[i]:,}), more than the {room:,} a response may "
            f"carry (max_message_bytes {max_message_bytes:,} less {RESPONSE_OVERHEAD_BYTES:,}); declare smaller "
            f"outputs, profile the app at a smaller batch or raise the server's max_message_bytes"
        )


def check_request_sizes(
    app: str,
    inputs: Sequence[TensorSpec],
    input_shapes: Sequence[Sequence[int]],
    wanted: Sequence[TensorSpec],
    batch: int,
    max_message_bytes: int,
) -> int:
    """A request's batch (the first dimension of the first input, when declared -1) is at
    most the profiled ``batch``, and its outputs fit in one response; returns their bytes."""
    if inputs and inputs[0].shape[0] == -1 and input_shapes[0][0] > batch:
        raise InvalidArgument(
            f"inputs: input {inputs[0].name!r} has a batch of {input_shapes[0][0]} (its first dimension), more "
            f"than the batch of {batch} app {app!r} was profiled at; send at most {batch} per request"
        )
    first = input_shapes[0] if input_shapes else ()
    total = sum(output_nbytes(s.datatype, _size(output_shape(s, first))) for s in wanted)
    room = max_message_bytes - RESPONSE_OVERHEAD_BYTES
    if total > room:
        raise InvalidArgument(
            f"outputs: this request's outputs would take {total:,} bytes, more than the {room:,} a response may "
            f"carry (max_message_bytes {max_message_bytes:,}); send smaller inputs or ask for fewer outputs"
        )
    return total


def _random_values(rng: np.random.Generator, datatype: str, n: int) -> bytes:
    dtype = NUMPY_TYPES[datatype]
    if datatype == "BOOL":
        return (rng.random(n, dtype=np.float32) < 0.5).tobytes()
    if datatype in ("FP32", "FP64"):
        return rng.random(n, dtype=dtype).tobytes()
    if datatype == "FP16":
        return rng.random(n, dtype=np.float32).astype(dtype).tobytes()
    return rng.integers(0, 100, n).astype(dtype).tobytes()  # integers and BF16 bits


def make_outputs(
    app: str, inputs: Sequence[bytes], input_shapes: Sequence[Sequence[int]], wanted: Sequence[TensorSpec]
) -> list[tuple[TensorSpec, tuple[int, ...], bytes]]:
    """Deterministic outputs: (spec, shape, raw bytes) for each wanted output."""
    return [(spec, shape, b"".join(chunks)) for spec, shape, chunks in output_chunks(app, inputs, input_shapes, wanted)]


def output_chunks(
    app: str, inputs: Sequence[bytes], input_shapes: Sequence[Sequence[int]], wanted: Sequence[TensorSpec]
) -> list[tuple[TensorSpec, tuple[int, ...], list[bytes]]]:
    """:func:`make_outputs` with each output's bytes as the pieces that, joined, are its
    contents (a repeated block is the same object many times): a response built from them
    copies the bytes once."""
    h = hashlib.blake2b(app.encode(), digest_size=16)
    for data in inputs:
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    digest = h.digest()
    first = input_shapes[0] if input_shapes else ()
    result = []
    for spec in wanted:
        seed = int.from_bytes(hashlib.blake2b(digest + spec.name.encode(), digest_size=8).digest(), "little")
        rng = np.random.default_rng(seed)
        shape = output_shape(spec, first)
        n = _size(shape)
        if spec.datatype == "BYTES":
            tag = digest[: BYTES_TAG // 2].hex().encode()
            chunks = [b"".join(struct.pack("<I", len(v)) + v for v in (tag + b":%d" % i for i in range(n)))]
        else:
            block = _random_values(rng, spec.datatype, min(n, OUTPUT_BLOCK))
            whole, rest = divmod(n, OUTPUT_BLOCK)
            chunks = [block] * whole + [block[: rest * _element_bytes(spec.datatype)]] if whole else [block]
        result.append((spec, shape, chunks))
    return result
