"""Build hook: compile ``protos/`` into the descriptor set bless loads at run time, and
(standard wheels only) the scheduler's per-step modules into C extensions with mypyc.

Protos: every wheel and editable build (``pip install .``, ``pip install -e .``,
``make test``), with ``grpc_tools.protoc`` from ``[build-system].requires``.
The output, ``bless/serving/api/descriptors.binpb``, is a FileDescriptorSet of every
proto under ``protos/``; it is git-ignored and added to the wheel as an
artifact.  Why a descriptor set and not ``*_pb2.py`` modules: generated
modules register their files in protobuf's *default* descriptor pool, where
our copy of package ``inference`` would collide with tritonclient's (or any
other OIP client's) in the same process; :mod:`bless.serving.api` loads the set into
a private pool instead.  A descriptor set also carries no protobuf/grpcio
version pins, unlike generated code.

``python hatch_build.py`` regenerates it by hand after editing a proto.

Native modules (``bless.native.NATIVE_MODULES``): deadline pacing runs on the host's critical
path before every launch (the paper's runtime is C++), and in
CPython its step costs 2.6-2.9 us per scheduled kernel with 8 apps; compiled by mypyc
from the same typed source, with the request and app classes, it costs 1.4 (``bless bench
overhead``, ``experiments/README.md`` items 27 and 28); the simulated GPU's engine, compiled too, replays 2.2x as many kernels a second.
A standard wheel (``pip install .``, what a server runs) carries them;
an editable install (``make test``, development) does not, so an edited module
takes effect without a rebuild.  ``BLESS_NATIVE``: ``auto`` (default) compiles
and, where that fails (no C compiler), ships the pure-Python modules with a
warning; ``1`` fails the build instead; ``0`` skips it.  ``make test-native``
runs the tests against the compiled modules.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run by hand without hatchling installed
    BuildHookInterface = object  # type: ignore[misc,assignment]

PROTO_DIR = "protos"
OUTPUT = "bless/serving/api/descriptors.binpb"

NATIVE_LIST = "bless/native.py"
"""Where the modules to compile are listed (``NATIVE_MODULES``), read by path: the build
environment has none of bless's dependencies."""

# The setup script mypyc's build runs (setuptools builds the C it writes); argv: the
# build-lib folder, the build-temp folder, the modules.  Missing imports (numpy, numba:
# not build requirements) type as Any, which compiles to Python's own semantics.
_MYPYC_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
lib, tmp, *modules = sys.argv[1:]
setup(
    name="bless-native",
    packages=[],
    py_modules=[],
    ext_modules=mypycify(["--ignore-missing-imports", "--follow-imports=silent", *modules], opt_level="3"),
    script_args=["build_ext", "--build-lib", lib, "--build-temp", tmp],
)
"""


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


def native_sources(root: Path) -> list[str]:
    """The source files of ``bless.native.NATIVE_MODULES``, relative to ``root``."""
    spec = importlib.util.spec_from_file_location("_bless_native_list", root / NATIVE_LIST)
    assert spec is not None and spec.loader is not None
    listing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(listing)
    return [m.replace(".", "/") + ".py" for m in listing.NATIVE_MODULES]


def compile_native(root: Path, build_dir: Path) -> dict[str, str]:
    """mypyc-compile the native modules under ``build_dir``; return each built extension's
    path mapped to its path in the wheel (the modules' own, and mypyc's shared runtime)."""
    sources = native_sources(root)
    lib = build_dir / "lib"
    run = subprocess.run(
        [sys.executable, "-c", _MYPYC_SETUP, str(lib), str(build_dir / "tmp"), *(str(root / m) for m in sources)],
        cwd=build_dir,  # mypyc writes its C under the working folder; setuptools reads no pyproject there
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise RuntimeError(f"mypyc could not compile {', '.join(sources)}:\n{run.stdout}{run.stderr}")
    built = {
        str(p): p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.name.endswith(tuple(EXTENSION_SUFFIXES))
    }
    missing = {m for m in sources if not any(w.startswith(m[: -len(".py")] + ".") for w in built.values())}
    if missing:
        raise RuntimeError(f"mypyc built no extension for {', '.join(sorted(missing))}")
    return built


def native_mode() -> str:
    """``BLESS_NATIVE``, checked: ``auto``, ``1`` or ``0``."""
    mode = os.environ.get("BLESS_NATIVE", "auto")
    if mode not in ("auto", "1", "0"):
        raise ValueError(f"BLESS_NATIVE={mode!r}: expected auto, 1 (compile or fail) or 0 (pure Python)")
    return mode


class BlessBuildHook(BuildHookInterface):
    """Hatchling hook: generate the descriptor set; compile the native modules into a
    standard wheel (which then is platform-specific)."""

    PLUGIN_NAME = "bless"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return  # the sdist ships protos/, the sources and this hook; wheels are built from it
        compile_protos(Path(self.root))
        build_data["artifacts"].append(OUTPUT)
        mode = native_mode()
        if version == "editable" or mode == "0":
            return
        self._native_dir = tempfile.mkdtemp(prefix="bless-native-")
        try:
            built = compile_native(Path(self.root), Path(self._native_dir))
        except Exception as exc:
            if mode == "1":
                raise
            self.app.display_warning(
                f"shipping the pure-Python scheduler step (BLESS_NATIVE=1 makes this an error): {exc}"
            )
            return
        build_data["force_include"].update(built)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        native_dir = getattr(self, "_native_dir", None)
        if native_dir:
            shutil.rmtree(native_dir, ignore_errors=True)


if __name__ == "__main__":
    print(compile_protos(Path(__file__).resolve().parent))
    sys.exit(0)
