"""Protobuf wire format, read and written by hand where decoding or building a whole
message would copy tensors: a model name read off a request without decoding its
tensors (the cluster front end routes on it), outputs appended to a serialised
response without copying them into the message (ModelInfer, ModelStreamInfer).
"""

from __future__ import annotations

from typing import Any

from bless.serving.server.errors import InvalidArgument


def length_delimited_tag(message_type: Any, field: str) -> bytes:
    """The wire-format key of the length-delimited field ``field`` of ``message_type``."""
    return bytes([message_type.DESCRIPTOR.fields_by_name[field].number << 3 | 2])


def read_varint(raw: bytes, i: int) -> tuple[int, int]:
    """The varint at ``raw[i:]`` and the index after it."""
    shift = value = 0
    while True:
        b = raw[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def encode_varint(n: int) -> bytes:
    """``n`` (>= 0) as a protobuf varint."""
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def wire_string(raw: bytes, field: int) -> str:
    """The string field ``field`` of a serialised message, read without decoding the rest
    (length-delimited fields, tensors among them, are skipped, not copied); "" if absent."""
    found = ""
    i, n = 0, len(raw)
    try:
        while i < n:
            key, i = read_varint(raw, i)
            wire = key & 7
            if wire == 0:
                _, i = read_varint(raw, i)
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            elif wire == 2:
                size, i = read_varint(raw, i)
                if key >> 3 == field:
                    found = raw[i : i + size].decode()
                i += size
            else:
                raise ValueError(f"wire type {wire}")
        if i > n:
            raise IndexError("truncated")
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"malformed request: {e}") from None
    return found
