"""OIP v2 REST bodies to and from the protobuf messages the inference service takes.

The REST front end (:mod:`bless.serving.server.rest`) only translates: a KServe v2 REST
inference request (JSON, with Triton's binary tensor extension) becomes the same
``ModelInferRequest`` a gRPC client sends, so the inference service checks it
(:func:`~bless.serving.server.tensors.decode_inputs`) and the serving core runs it
exactly as it runs a gRPC request; the ``ModelInferResponse`` becomes JSON again.
This module checks only what is REST's own: the JSON structure, JSON ``data``
against its tensor's own shape and datatype (the message names ``inputs[i].data``),
and the framing of the binary part.

**Binary tensor extension** (what ``tritonclient.http`` sends by default): the body is
a JSON header of ``Inference-Header-Content-Length`` bytes followed by the inputs'
raw bytes, in input order, each input giving its size in
``parameters.binary_data_size``.  Those bytes are gRPC's ``raw_input_contents``
byte for byte (BYTES elements with 4-byte little-endian length prefixes), so they
are forwarded and checked as such: a wrong size is reported as
``raw_input_contents[i]``, ``i`` being the input's index.  Outputs come back binary
when the request asks (``parameters.binary_data_output``, or an output's
``parameters.binary_data``), and always for BF16 (JSON has no bfloat16) or BYTES
that are not UTF-8 (JSON strings are text); otherwise as a flat JSON ``data`` list.

Parameters other than the extension's are forwarded into the protobuf ``parameters``
maps, where the service treats them as it treats a gRPC client's.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from bless.documents import is_integer, is_number
from bless.serving.api import oip
from bless.serving.server.errors import InvalidArgument
from bless.serving.server.tensors import DATATYPES, MAX_DIMS, NUMPY_TYPES

HEADER_LENGTH = "Inference-Header-Content-Length"
"""The binary extension's header: bytes of JSON before the binary tensor data."""

UNSUPPORTED_PARAMETERS = {
    "shared_memory_region": "bless has no shared-memory extension; send the tensor in the request body",
    "shared_memory_byte_size": "bless has no shared-memory extension; send the tensor in the request body",
    "shared_memory_offset": "bless has no shared-memory extension; send the tensor in the request body",
    "classification": "bless has no classification extension; ask for the output tensor itself",
}
"""Triton parameters whose extension bless does not implement: refused rather than ignored."""

INT64_RANGE = (-(2**63), 2**63)
UINT64_END = 2**64


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


ELEMENT_CHECKS = {
    **dict.fromkeys(
        ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"), (is_integer, "integers")
    ),
    **dict.fromkeys(("FP16", "FP32", "FP64"), (is_number, "numbers")),
    "BOOL": (lambda v: isinstance(v, bool), "true or false"),
    "BYTES": (lambda v: isinstance(v, str), "strings"),
}
"""What a JSON ``data`` element of each datatype must be (BF16 travels binary only)."""


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: expected a JSON object, got {_json_type(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgument(f"{where}: expected a JSON list, got {_json_type(value)}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}: expected a string, got {_json_type(value)}")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{where}: expected true or false, got {_json_type(value)}")
    return value


def _parameters(raw: Any, where: str, consumed: tuple[str, ...], target: Any) -> dict[str, Any]:
    """Copy a JSON ``parameters`` object into the protobuf map ``target``, except the
    ``consumed`` keys (the binary extension's), which are returned."""
    params = _object(raw, where) if raw is not None else {}
    mine = {}
    for key, value in params.items():
        at = f"{where}.{key}"
        if key in UNSUPPORTED_PARAMETERS:
            raise InvalidArgument(f"{at}: {UNSUPPORTED_PARAMETERS[key]}")
        if key in consumed:
            mine[key] = value
        elif isinstance(value, bool):
            target[key].bool_param = value
        elif is_integer(value) and INT64_RANGE[0] <= value < INT64_RANGE[1]:
            target[key].int64_param = value
        elif is_integer(value) and 0 <= value < UINT64_END:
            target[key].uint64_param = value
        elif isinstance(value, float):
            target[key].double_param = value
        elif isinstance(value, str):
            target[key].string_param = value
        else:
            raise InvalidArgument(f"{at}: a parameter is a boolean, a 64-bit integer, a number or a string")
    return mine


def _shape(raw: Any, where: str) -> list[int]:
    shape = _list(raw, where)
    if not all(is_integer(d) and d >= 0 for d in shape):
        raise InvalidArgument(f"{where}: expected a list of dimension sizes (integers >= 0), got {shape}")
    return shape


def _flatten(data: list[Any], where: str) -> list[Any]:
    """Nested lists in row-major order, flat (at most :data:`MAX_DIMS` deep, as a shape)."""
    flat: list[Any] = []
    stack: list[tuple[Iterator[Any], int]] = [(iter(data), 1)]
    while stack:
        items, depth = stack[-1]
        for item in items:
            if isinstance(item, list):
                if depth == MAX_DIMS:
                    raise InvalidArgument(f"{where}: lists nested deeper than {MAX_DIMS} dimensions")
                stack.append((iter(item), depth + 1))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _json_tensor(datatype: str, shape: list[int], data: Any, where: str) -> bytes:
    """A JSON ``data`` list as raw tensor bytes, checked against its own datatype and shape."""
    if datatype not in DATATYPES:
        raise InvalidArgument(
            f"{where}.datatype: {datatype!r} is not an OIP datatype; use one of {', '.join(DATATYPES)}"
        )
    if datatype not in ELEMENT_CHECKS:
        raise InvalidArgument(
            f"{where}.data: {datatype} tensors travel as binary data only; "
            f"send the bytes after the JSON header with parameters.binary_data_size"
        )
    values = _flatten(_list(data, f"{where}.data"), f"{where}.data")
    need = math.prod(shape)
    if len(values) != need:
        raise InvalidArgument(f"{where}.data: shape {shape} holds {need} elements, got {len(values)}")
    check, kind = ELEMENT_CHECKS[datatype]
    for k, v in enumerate(values):
        if not check(v):
            raise InvalidArgument(f"{where}.data: {datatype} elements are {kind}, element {k} is {v!r}")
    if datatype == "BYTES":
        encoded = [v.encode() for v in values]
        return b"".join(struct.pack("<I", len(e)) + e for e in encoded)
    try:
        return np.asarray(values, dtype=NUMPY_TYPES[datatype]).tobytes()
    except OverflowError as e:
        raise InvalidArgument(f"{where}.data: a value does not fit {datatype} ({e})") from None


def split_body(body: bytes, header_length: str | None) -> tuple[dict[str, Any], bytes]:
    """The JSON header of a request body and the binary data after it."""
    cut = len(body)
    if header_length is not None:
        try:
            cut = int(header_length)
        except ValueError:
            cut = -1
        if not 0 <= cut <= len(body):
            raise InvalidArgument(
                f"{HEADER_LENGTH} header: expected the byte length of the JSON part of the body "
                f"(0 to {len(body)}), got {header_length!r}"
            )
    try:
        header = json.loads(body[:cut])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        trailing = isinstance(e, UnicodeDecodeError) or e.msg == "Extra data"
        hint = (
            f" (binary tensor data after the JSON needs the {HEADER_LENGTH} header)"
            if trailing and header_length is None
            else ""
        )
        raise InvalidArgument(f"request body: not valid JSON{hint}: {e}") from None
    return _object(header, "request body"), body[cut:]


@dataclass(frozen=True)
class InferCall:
    """A REST inference request as the service takes it, and how its outputs go back."""

    request: Any
    """The ``ModelInferRequest``."""
    binary_outputs: bool = False
    """The request's default for outputs: raw bytes after the JSON header, or JSON ``data``."""
    binary_by_name: dict[str, bool] = field(default_factory=dict)
    """Per-output choices (``outputs[i].parameters.binary_data``)."""

    def binary(self, name: str) -> bool:
        return self.binary_by_name.get(name, self.binary_outputs)


def infer_call(model: str, version: str, header: dict[str, Any], binary: bytes) -> InferCall:
    """Translate a REST inference request (its JSON header and binary part) for the service."""
    request = oip.ModelInferRequest(model_name=model, model_version=version)
    if "id" in header:
        request.id = _string(header["id"], "id")
    mine = _parameters(header.get("parameters"), "parameters", ("binary_data_output",), request.parameters)
    binary_outputs = _flag(mine.get("binary_data_output", False), "parameters.binary_data_output")
    offset = 0
    for i, raw in enumerate(_list(header.get("inputs"), "inputs")):
        where = f"inputs[{i}]"
        spec = _object(raw, where)
        tensor = request.inputs.add()
        tensor.name = _string(spec.get("name"), f"{where}.name")
        tensor.datatype = _string(spec.get("datatype"), f"{where}.datatype")
        shape = _shape(spec.get("shape"), f"{where}.shape")
        tensor.shape.extend(shape)
        extension = _parameters(spec.get("parameters"), f"{where}.parameters", ("binary_data_size",), tensor.parameters)
        if "binary_data_size" in extension:
            size = extension["binary_data_size"]
            at = f"{where}.parameters.binary_data_size"
            if "data" in spec:
                raise InvalidArgument(f"{at}: an input carries either JSON data or binary data, not both")
            if not is_integer(size) or size < 0:
                raise InvalidArgument(f"{at}: expected a byte count (integer >= 0), got {size!r}")
            if offset + size > len(binary):
                raise InvalidArgument(
                    f"{at}: {size} bytes from offset {offset} run past the {len(binary)} bytes of binary data "
                    f"after the JSON header ({HEADER_LENGTH})"
                )
            request.raw_input_contents.append(binary[offset : offset + size])
            offset += size
        elif "data" in spec:
            request.raw_input_contents.append(_json_tensor(tensor.datatype, shape, spec["data"], where))
        else:
            raise InvalidArgument(
                f"{where}: input {tensor.name!r} carries no data (data, or parameters.binary_data_size)"
            )
    if offset != len(binary):
        raise InvalidArgument(
            f"request body: {len(binary) - offset} bytes of binary data after the JSON header "
            f"belong to no input; each binary input gives its size in parameters.binary_data_size"
        )
    by_name = {}
    for i, raw in enumerate(_list(header.get("outputs", []), "outputs")):
        where = f"outputs[{i}]"
        spec = _object(raw, where)
        out = request.outputs.add()
        out.name = _string(spec.get("name"), f"{where}.name")
        mine = _parameters(spec.get("parameters"), f"{where}.parameters", ("binary_data",), out.parameters)
        if "binary_data" in mine:
            by_name[out.name] = _flag(mine["binary_data"], f"{where}.parameters.binary_data")
    return InferCall(request, binary_outputs, by_name)


def _bytes_elements(raw: bytes) -> list[bytes]:
    """The elements of a serialised BYTES tensor (4-byte little-endian length prefixes)."""
    elements, pos = [], 0
    while pos < len(raw):
        (n,) = struct.unpack_from("<I", raw, pos)
        elements.append(raw[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return elements


def _json_data(datatype: str, raw: bytes) -> list[Any] | None:
    """An output's values as a flat JSON list, or None where JSON cannot carry them."""
    if datatype == "BYTES":
        try:
            return [e.decode() for e in _bytes_elements(raw)]
        except UnicodeDecodeError:
            return None
    if datatype not in ELEMENT_CHECKS:
        return None
    return np.frombuffer(raw, dtype=NUMPY_TYPES[datatype]).tolist()


def parameter_value(p: Any) -> Any:
    """The value an ``InferParameter`` holds (None if unset)."""
    choice = p.WhichOneof("parameter_choice")
    return getattr(p, choice) if choice else None


def infer_body(response: Any, call: InferCall) -> tuple[bytes, int | None]:
    """A ``ModelInferResponse`` as a REST body, and its JSON header's length when binary
    outputs follow it (the ``Inference-Header-Content-Length`` of the response)."""
    header: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        header["id"] = response.id
    header["parameters"] = {k: parameter_value(v) for k, v in sorted(response.parameters.items())}
    outputs, chunks = [], []
    for out, raw in zip(response.outputs, response.raw_output_contents):
        entry: dict[str, Any] = {"name": out.name, "datatype": out.datatype, "shape": list(out.shape)}
        data = None if call.binary(out.name) else _json_data(out.datatype, raw)
        if data is None:
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = data
        outputs.append(entry)
    header["outputs"] = outputs
    text = json.dumps(header, separators=(",", ":")).encode()
    if not chunks:
        return text, None
    return b"".join([text, *chunks]), len(text)


def message_json(message: Message) -> dict[str, Any]:
    """A protobuf message (without map fields) as Triton writes it in JSON: every field, 64-bit
    integers as numbers (protobuf's own JSON mapping writes them as strings)."""

    def value(v: Any) -> Any:
        if isinstance(v, Message):
            return message_json(v)
        if isinstance(v, (str, bytes, int, float)):
            return v
        return [value(item) for item in v]  # a repeated field

    return {f.name: value(getattr(message, f.name)) for f in message.DESCRIPTOR.fields}


_INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def config_json(message: Message) -> dict[str, Any]:
    """A message with enums and maps (Triton's ModelConfig) as Triton's HTTP API writes it:
    protobuf's JSON mapping with the proto's field names and defaults, but 64-bit integers
    as numbers (``dims: [-1, 3]``, not ``["-1", "3"]``)."""
    d = json_format.MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    _int64_as_numbers(message.DESCRIPTOR, d)
    return d


def _int64_as_numbers(descriptor: Any, d: dict[str, Any]) -> None:
    for f in descriptor.fields:
        if f.name not in d:
            continue
        v = d[f.name]
        repeated = f.is_repeated
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value = f.message_type.fields_by_name["value"]
            for key, item in v.items():
                if value.message_type is not None:
                    _int64_as_numbers(value.message_type, item)
                elif value.type in _INT64:
                    v[key] = int(item)
        elif f.message_type is not None:
            for item in v if repeated else [v]:
                _int64_as_numbers(f.message_type, item)
        elif f.type in _INT64:
            d[f.name] = [int(x) for x in v] if repeated else int(v)
