"""Build hook: compile ``protos/`` into the descriptor set bless loads at run time.

Runs on every wheel and editable build (``pip install .``, ``pip install -e .``,
``make test``) with ``grpc_tools.protoc`` from ``[build-system].requires``.
The output, ``bless/serving/api/descriptors.binpb``, is a FileDescriptorSet of every
proto under ``protos/``; it is git-ignored and added to the wheel as an
artifact.  Why a descriptor set and not ``*_pb2.py`` modules: generated
modules register their files in protobuf's *default* descriptor pool, where
our copy of package ``inference`` would collide with tritonclient's (or any
other OIP client's) in the same process; :mod:`bless.serving.api` loads the set into
a private pool instead.  A descriptor set also carries no protobuf/grpcio
version pins, unlike generated code.

``python hatch_build.py`` regenerates it by hand after editing a proto.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run by hand without hatchling installed
    BuildHookInterface = object  # type: ignore[misc,assignment]

PROTO_DIR = "protos"
OUTPUT = "bless/serving/api/descriptors.binpb"


def compile_protos(root: Path) -> Path:
    """Run protoc over every ``protos/**/*.proto``; return the descriptor set path."""
    from importlib.resources import files

    from grpc_tools import protoc

    src = root / PROTO_DIR
    protos = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {src}")
    out = root / OUTPUT
    out.parent.mkdir(parents=True, exist_ok=True)
    well_known = files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"--proto_path={src}",
        f"--proto_path={well_known}",
        f"--descriptor_set_out={out}",
        "--include_imports",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(protos)} (see the messages above)")
    return out


class ProtoBuildHook(BuildHookInterface):
    """Hatchling hook: generate the descriptor set, ship it in the wheel."""

    PLUGIN_NAME = "protos"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return  # the sdist ships protos/ and this hook; wheels are built from it
        compile_protos(Path(self.root))
        build_data["artifacts"].append(OUTPUT)


if __name__ == "__main__":
    print(compile_protos(Path(__file__).resolve().parent))
    sys.exit(0)
