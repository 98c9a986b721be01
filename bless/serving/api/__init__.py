"""The wire API of the server: message classes and methods of its two gRPC services.

* :data:`oip` -- package ``inference``: the Open Inference Protocol v2 and the
  rest of Triton's ``GRPCInferenceService`` (``protos/inference/oip_v2.proto``,
  ``protos/inference/model_config.proto``);
* :data:`admin` -- package ``bless.admin.v1`` (``protos/bless/admin/v1/admin.proto``).

The protos are compiled at build time (``hatch_build.py``) into one descriptor
set that is loaded here into a *private* :class:`DescriptorPool`, not
protobuf's default pool.  Generated ``*_pb2`` modules of package
``inference`` -- tritonclient ships one -- live in the default pool; two copies
there collide ("duplicate symbol"), which breaks any process that runs an OIP
client and server together.  A private pool cannot collide, and the services
are served and called through gRPC's generic handlers with these classes'
(de)serialisers, so no generated service code is needed either.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import Message

DESCRIPTOR_SET = Path(__file__).with_name("descriptors.binpb")

OIP_SERVICE = "inference.GRPCInferenceService"
ADMIN_SERVICE = "bless.admin.v1.AdminService"


class ApiNotBuilt(RuntimeError):
    """The descriptor set generated from ``protos/`` is missing."""


def _descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    try:
        data = DESCRIPTOR_SET.read_bytes()
    except FileNotFoundError:
        raise ApiNotBuilt(
            f"{DESCRIPTOR_SET} is missing: the gRPC API is generated from protos/ at install time; "
            f"run `pip install -e .` (or `python hatch_build.py`) in the repository"
        ) from None
    return descriptor_pb2.FileDescriptorSet.FromString(data)


@functools.cache
def pool() -> descriptor_pool.DescriptorPool:
    """The private pool holding every bless proto."""
    private = descriptor_pool.DescriptorPool()
    for f in _descriptor_set().file:
        private.Add(f)
    return private


class Package:
    """Message classes of one proto package by short name: ``oip.ModelInferRequest``."""

    def __init__(self, package: str) -> None:
        self._package = package

    @functools.cache  # noqa: B019 (two module-level packages live as long as the process)
    def __getattr__(self, name: str) -> type[Message]:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            desc = pool().FindMessageTypeByName(f"{self._package}.{name}")
        except KeyError:
            raise AttributeError(f"package {self._package} has no message {name!r}") from None
        return message_factory.GetMessageClass(desc)


oip = Package("inference")
admin = Package("bless.admin.v1")


def pool_with(*files: FileDescriptor) -> descriptor_pool.DescriptorPool:
    """A new pool of every bless proto plus ``files`` (with their imports).

    Server reflection answers from one pool, but a server also hosts services
    whose protos live in the default pool (``grpc.health.v1``, reflection
    itself); this pool describes all of them without touching :func:`pool`.
    """
    combined = descriptor_pool.DescriptorPool()
    seen: set[str] = set()

    def add(proto: descriptor_pb2.FileDescriptorProto) -> None:
        if proto.name not in seen:
            seen.add(proto.name)
            combined.Add(proto)

    def add_file(f: FileDescriptor) -> None:
        for dependency in f.dependencies:
            add_file(dependency)
        add(descriptor_pb2.FileDescriptorProto.FromString(f.serialized_pb))

    for proto in _descriptor_set().file:
        add(proto)
    for f in files:
        add_file(f)
    return combined


@dataclass(frozen=True)
class Method:
    """One RPC: its path, (de)serialisable message classes and whether each side streams."""

    name: str
    path: str
    request: type[Message]
    response: type[Message]
    client_streaming: bool
    server_streaming: bool


def methods(service: str) -> dict[str, Method]:
    """Every method of ``service`` (full name, e.g. :data:`OIP_SERVICE`) by name."""
    desc = pool().FindServiceByName(service)
    return {
        m.name: Method(
            m.name,
            f"/{service}/{m.name}",
            message_factory.GetMessageClass(m.input_type),
            message_factory.GetMessageClass(m.output_type),
            m.client_streaming,
            m.server_streaming,
        )
        for m in desc.methods
    }
