"""The build plan of an app: its kernel images, argument buffers and launches, in launch order.

Written by ``bless apps build APP --gpu GPU`` into the build cache
(``$BLESS_CACHE/builds/<gpu>/<app>/plan.json``, default cache
``~/.cache/bless``); format ``bless-plan`` version 1::

    {"format": "bless-plan", "version": 1, "app": "resnet50", "gpu": "h100", "arch": "sm_90", "batch": 4,
     "images":  [{"id": 0, "file": "resnet50_0.ptx", "kind": "ptx"}],
     "buffers": [{"id": 0, "bytes": 602112, "dtype": "float32", "shape": [4, 3, 224, 224], "role": "input"}],
     "launches": [{"kernel": "fused_conv2d_add_relu_kernel", "image": 0, "grid": [x, y, z], "block": [x, y, z],
                   "shared_mem_dynamic": 0, "shared_mem_static": 4096, "registers": 64,
                   "args": [{"buffer": 0}, {"scalar": 4, "dtype": "int32"}],
                   "flops": 1.2e9, "dram_bytes": 3.4e6}]}

Image files are relative to the plan's directory.  Launch ``k`` of the plan is
kernel ``k`` of the app's profile.

A plan with ``"descriptor_only": true`` lists kernels that could not be compiled
(a training iteration traced op by op, :mod:`bless.build.compiler.train_trace`): each
launch has its kernel name, FLOPs and DRAM bytes, and ``image``, ``grid``,
``block`` and ``registers`` are null (shared memory absent, ``args`` empty);
``images`` may be empty.  The analytic profiler can predict such a plan; the
CUDA backend refuses to launch it (:func:`check_matches`).  This module is the only reader and writer
of plans: the builder (:mod:`bless.build.compiler`), the CUDA backend and the analytic
profiler all go through it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bless.backend.interface import BackendError
from bless.documents import is_integer, is_number, load_document
from bless.profiles.format import Profile

FORMAT = "bless-plan"
VERSION = 1
IMAGE_KINDS = ("ptx", "cubin", "fatbin")
ROLES = ("input", "output", "param", "activation", "workspace")
SCALAR_DTYPES = (
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
BUFFER_DTYPES = (*SCALAR_DTYPES, "bool", "bfloat16")


class PlanError(ValueError):
    """A plan file is malformed; the message names the field."""


@dataclass(frozen=True)
class Image:
    id: int
    path: Path
    kind: str


@dataclass(frozen=True)
class Buffer:
    id: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    role: str


@dataclass(frozen=True)
class Arg:
    """A kernel argument: a buffer's device address, or a scalar of ``dtype``."""

    buffer: int | None = None
    scalar: int | float | None = None
    dtype: str = "uint64"


@dataclass(frozen=True)
class KernelLaunch:
    kernel: str
    image: int | None
    """None only in a descriptor-only plan (so are grid and block)."""
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    shared_mem_dynamic: int
    shared_mem_static: int
    registers: int | None
    args: tuple[Arg, ...]
    flops: float | None
    dram_bytes: float | None


@dataclass(frozen=True)
class Plan:
    app: str
    gpu: str
    arch: str
    batch: int
    images: tuple[Image, ...]
    buffers: tuple[Buffer, ...]
    launches: tuple[KernelLaunch, ...]
    path: Path
    build: dict = field(default_factory=dict, compare=False)
    """How the plan was made (compiler versions, cache key, warnings); free-form, optional."""
    descriptor_only: bool = False
    """The launches are descriptors without kernel images: predictable, not launchable."""

    @property
    def memory_bytes(self) -> int:
        return sum(b.nbytes for b in self.buffers)


def cache_root() -> Path:
    """``$BLESS_CACHE`` or ``~/.cache/bless``."""
    env = os.environ.get("BLESS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "bless"


def plan_path(app: str, gpu: str) -> Path:
    return cache_root() / "builds" / gpu / app / "plan.json"


CACHE_VAR = "$BLESS_CACHE"


def portable_path(path: Path) -> str:
    """``path`` as recorded in a profile: under the build cache it is written ``$BLESS_CACHE/...``."""
    try:
        return f"{CACHE_VAR}/{Path(path).resolve().relative_to(cache_root().resolve()).as_posix()}"
    except ValueError:
        return str(path)


def resolve_path(recorded: str) -> Path:
    """The inverse of :func:`portable_path`, against the current build cache."""
    if recorded.startswith(CACHE_VAR + "/"):
        return cache_root() / recorded[len(CACHE_VAR) + 1 :]
    return Path(recorded).expanduser()


def find_plan(profile: Profile, gpu: str) -> Path:
    """The plan of ``profile``'s app on ``gpu``: the one its provenance names, else the build cache."""
    named = profile.provenance.details.get("plan")
    if isinstance(named, str) and resolve_path(named).is_file():
        return resolve_path(named)
    path = plan_path(profile.app, gpu)
    if path.is_file():
        return path
    raise BackendError(
        f"no build plan for app {profile.app!r} on {gpu}: looked for {path}"
        + (f" and {named}" if isinstance(named, str) else "")
        + f"; build its kernels with `bless apps build {profile.app} --gpu {gpu}` (set BLESS_CACHE to use another cache)"
    )


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file."""
    path = Path(path)
    return load_document(path, lambda raw: plan_from_dict(raw, path), PlanError, "plan")


def plan_from_dict(raw: Any, path: Path) -> Plan:
    if not isinstance(raw, dict):
        raise PlanError("top level must be a JSON object")
    if raw.get("format") != FORMAT:
        raise PlanError(f"format: expected {FORMAT!r}, got {raw.get('format')!r}")
    if raw.get("version") != VERSION:
        raise PlanError(f"version: this bless reads version {VERSION}, got {raw.get('version')!r}")
    descriptor_only = raw.get("descriptor_only", False)
    if not isinstance(descriptor_only, bool):
        raise PlanError(f"descriptor_only: expected true or false, got {descriptor_only!r}")
    images = tuple(_image(v, i, path.parent) for i, v in enumerate(_list(raw, "images", allow_empty=descriptor_only)))
    buffers = tuple(_buffer(v, i) for i, v in enumerate(_list(raw, "buffers")))
    _unique_ids(images, "images")
    _unique_ids(buffers, "buffers")
    image_ids = {im.id for im in images}
    buffer_ids = {b.id for b in buffers}
    launches = tuple(
        _launch(v, i, image_ids, buffer_ids, descriptor_only) for i, v in enumerate(_list(raw, "launches"))
    )
    return Plan(
        app=_str(raw, "app", ""),
        gpu=_str(raw, "gpu", ""),
        arch=_str(raw, "arch", ""),
        batch=_int(raw, "batch", "", minimum=1),
        images=images,
        buffers=buffers,
        launches=launches,
        path=path,
        build=raw.get("build") if isinstance(raw.get("build"), dict) else {},
        descriptor_only=descriptor_only,
    )


def plan_to_dict(plan: Plan) -> dict:
    """The JSON object of ``plan`` (image files relative to ``plan.path``'s directory)."""
    root = plan.path.parent
    return {
        "format": FORMAT,
        "version": VERSION,
        **({"descriptor_only": True} if plan.descriptor_only else {}),
        "app": plan.app,
        "gpu": plan.gpu,
        "arch": plan.arch,
        "batch": plan.batch,
        "build": plan.build,
        "images": [
            {"id": im.id, "file": str(im.path.relative_to(root) if im.path.is_absolute() else im.path), "kind": im.kind}
            for im in plan.images
        ],
        "buffers": [
            {"id": b.id, "bytes": b.nbytes, "dtype": b.dtype, "shape": list(b.shape), "role": b.role}
            for b in plan.buffers
        ],
        "launches": [_launch_to_dict(launch) for launch in plan.launches],
    }


def _launch_to_dict(launch: KernelLaunch) -> dict:
    shared = (
        {}
        if launch.grid is None
        else {
            "shared_mem_dynamic": launch.shared_mem_dynamic,
            "shared_mem_static": launch.shared_mem_static,
        }
    )
    return {
        "kernel": launch.kernel,
        "image": launch.image,
        "grid": None if launch.grid is None else list(launch.grid),
        "block": None if launch.block is None else list(launch.block),
        **shared,
        "registers": launch.registers,
        "args": [
            {"buffer": a.buffer} if a.buffer is not None else {"scalar": a.scalar, "dtype": a.dtype}
            for a in launch.args
        ],
        "flops": launch.flops,
        "dram_bytes": launch.dram_bytes,
    }


def write_plan(plan: Plan) -> Plan:
    """Validate ``plan`` by reading it back, write it to ``plan.path`` atomically, return what was read back."""
    raw = plan_to_dict(plan)
    written = plan_from_dict(json.loads(json.dumps(raw)), plan.path)
    plan.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = plan.path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(raw, indent=1) + "\n")
    tmp.replace(plan.path)
    return written


def _list(raw: dict, key: str, allow_empty: bool = False) -> list:
    v = raw.get(key)
    if not isinstance(v, list) or not (v or allow_empty):
        raise PlanError(f"{key}: expected a {'' if allow_empty else 'non-empty '}list")
    return v


def _unique_ids(items: tuple, key: str) -> None:
    seen: set[int] = set()
    for i, item in enumerate(items):
        if item.id in seen:
            raise PlanError(f"{key}[{i}].id: id {item.id} is used twice")
        seen.add(item.id)


def _obj(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise PlanError(f"{where}: expected an object")
    return v


def _str(d: dict, key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise PlanError(f"{where}{key}: expected a non-empty string, got {v!r}")
    return v


def _int(d: dict, key: str, where: str, minimum: int = 0, optional: bool = False) -> int | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if not is_integer(v) or v < minimum:
        raise PlanError(f"{where}{key}: expected an integer >= {minimum}, got {v!r}")
    return v


def _number(d: dict, key: str, where: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if not is_number(v) or v < 0:
        raise PlanError(f"{where}{key}: expected a number >= 0 or null, got {v!r}")
    return float(v)


def _choice(d: dict, key: str, where: str, choices: tuple[str, ...]) -> str:
    v = d.get(key)
    if v not in choices:
        raise PlanError(f"{where}{key}: expected one of {', '.join(choices)}, got {v!r}")
    return v


def _dims(d: dict, key: str, where: str) -> tuple[int, int, int]:
    v = d.get(key)
    if not isinstance(v, list) or len(v) != 3 or not all(is_integer(x) and x >= 1 for x in v):
        raise PlanError(f"{where}{key}: expected [x, y, z] of positive integers, got {v!r}")
    return (v[0], v[1], v[2])


def _image(v: Any, i: int, root: Path) -> Image:
    where = f"images[{i}]."
    d = _obj(v, f"images[{i}]")
    return Image(
        id=_int(d, "id", where),
        path=root / _str(d, "file", where),
        kind=_choice(d, "kind", where, IMAGE_KINDS),
    )


def _buffer(v: Any, i: int) -> Buffer:
    where = f"buffers[{i}]."
    d = _obj(v, f"buffers[{i}]")
    shape = d.get("shape", [])
    if not isinstance(shape, list) or not all(is_integer(x) and x >= 0 for x in shape):
        raise PlanError(f"{where}shape: expected a list of non-negative integers, got {shape!r}")
    return Buffer(
        id=_int(d, "id", where),
        nbytes=_int(d, "bytes", where),
        dtype=_choice(d, "dtype", where, BUFFER_DTYPES),
        shape=tuple(shape),
        role=_choice(d, "role", where, ROLES),
    )


def _arg(v: Any, where: str, buffer_ids: set[int]) -> Arg:
    d = _obj(v, where.rstrip("."))
    if "buffer" in d:
        b = _int(d, "buffer", where)
        if b not in buffer_ids:
            raise PlanError(f"{where}buffer: no buffer has id {b}")
        return Arg(buffer=b)
    if "scalar" in d:
        dtype = _choice(d, "dtype", where, SCALAR_DTYPES)
        s = d["scalar"]
        if not is_number(s):
            raise PlanError(f"{where}scalar: expected a number, got {s!r}")
        if dtype.startswith(("int", "uint")) and not isinstance(s, int):
            raise PlanError(f"{where}scalar: {dtype} needs an integer, got {s!r}")
        return Arg(scalar=s, dtype=dtype)
    raise PlanError(f"{where.rstrip('.')}: expected {{'buffer': id}} or {{'scalar': value, 'dtype': ...}}")


def _launch(v: Any, i: int, image_ids: set[int], buffer_ids: set[int], descriptor_only: bool = False) -> KernelLaunch:
    where = f"launches[{i}]."
    d = _obj(v, f"launches[{i}]")
    shapeless = descriptor_only and d.get("grid") is None and d.get("block") is None
    image = _int(d, "image", where, optional=descriptor_only)
    if image is not None and image not in image_ids:
        raise PlanError(f"{where}image: no image has id {image}")
    args = d.get("args", [])
    if not isinstance(args, list):
        raise PlanError(f"{where}args: expected a list")
    return KernelLaunch(
        kernel=_str(d, "kernel", where),
        image=image,
        grid=None if shapeless else _dims(d, "grid", where),
        block=None if shapeless else _dims(d, "block", where),
        shared_mem_dynamic=_int(d, "shared_mem_dynamic", where) if "shared_mem_dynamic" in d else 0,
        shared_mem_static=_int(d, "shared_mem_static", where) if "shared_mem_static" in d else 0,
        registers=_int(d, "registers", where, optional=True),
        args=tuple(_arg(a, f"{where}args[{j}].", buffer_ids) for j, a in enumerate(args)),
        flops=_number(d, "flops", where),
        dram_bytes=_number(d, "dram_bytes", where),
    )


def check_matches(plan: Plan, profile: Profile, gpu: str) -> None:
    """The plan must be launchable, for ``gpu``, and list the profile's kernels in the same order."""
    if plan.descriptor_only:
        raise BackendError(
            f"{plan.path}: the plan of {plan.app!r} is descriptor-only (kernel names, FLOPs and bytes of a "
            f"{plan.build.get('kind', 'traced')} run, no kernel images, grids or argument buffers), so it cannot "
            "run on a GPU; it can only be profiled with the analytic model (`bless profile ... --backend sim`)"
        )
    if plan.gpu != gpu:
        raise BackendError(
            f"{plan.path}: the plan was built for {plan.gpu}, not {gpu}; rebuild with "
            f"`bless apps build {profile.app} --gpu {gpu}`"
        )
    if len(plan.launches) != profile.n_kernels:
        raise BackendError(
            f"{plan.path}: the plan has {len(plan.launches)} launches but the profile of {profile.app!r} "
            f"has {profile.n_kernels} kernels; rebuild the app and regenerate its profile from the same build"
        )
    for k, (launch, desc) in enumerate(zip(plan.launches, profile.kernels)):
        if desc.kind != "compute":
            raise BackendError(
                f"kernel {k} of {profile.app!r} is a {desc.kind}; the CUDA backend launches compute kernels only"
            )
        if launch.kernel != desc.name:
            raise BackendError(
                f"{plan.path}: launch {k} is {launch.kernel!r} but kernel {k} of the profile of "
                f"{profile.app!r} is {desc.name!r}; the profile and the plan come from different builds"
            )
