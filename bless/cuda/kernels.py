"""An app's kernels on the device: images loaded once, buffers initialised, launch parameters packed.

Images are loaded with ``cuLibraryLoadData``: a library is context
independent (the driver loads it into each context on first use, JIT
compiling PTX for the GPU), so one load per process serves every context.
:meth:`LibraryCache.warm` loads an app's kernels into a new context up
front (``cuKernelGetFunction``) so that the first timed launch there does not
pay for it.

Launch parameters follow the driver's ``kernelParams`` convention: an array
of pointers, one per argument, each pointing at that argument's value.
:func:`pack_args` builds it once per launch entry with numpy (pointer
arguments are 64-bit device addresses, scalars have the plan's dtype), and
the entry keeps the arrays alive for as long as the app is deployed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bless.backend.interface import BackendError
from bless.build.plan import Arg, Buffer, Image, KernelLaunch, Plan
from bless.cuda.device import Device
from bless.cuda.memory import Arena

DEFAULT_MAX_DYNAMIC_SHARED = 48 * 1024
"""Dynamic shared memory a kernel may use without opting in (CUDA programming guide)."""

NUMPY_DTYPES = {
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "bool": np.bool_,
    "bfloat16": np.uint16,  # bfloat16: stored as its 16 raw bits
}
PARAM_SCALE = 0.05
"""Random params and inputs are uniform in +-PARAM_SCALE: finite through any depth of layers."""


@dataclass(frozen=True, eq=False)
class PackedArgs:
    """``kernelParams`` for one launch: ``pointers[i]`` is the address of ``values[i]``."""

    values: tuple[np.ndarray, ...]
    pointers: np.ndarray

    @property
    def address(self) -> int:
        """What to pass as ``kernelParams`` (0 for a kernel without arguments)."""
        return int(self.pointers.ctypes.data) if len(self.values) else 0


def pack_args(args: Sequence[Arg], buffer_addresses: dict[int, int]) -> PackedArgs:
    """Argument values with the right C types, and the pointer array the driver reads."""
    values = []
    for a in args:
        if a.buffer is not None:
            values.append(np.array([buffer_addresses[a.buffer]], dtype=np.uint64))
        else:
            values.append(np.array([a.scalar], dtype=NUMPY_DTYPES[a.dtype]))
    pointers = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    return PackedArgs(tuple(values), pointers)


def initial_contents(buffer: Buffer, rng: np.random.Generator) -> np.ndarray | None:
    """Host data for a buffer, or None when it starts as zeros.

    Floating params and inputs get small seeded random values; integer ones
    are zeros because they are usually indices (token ids, gather offsets)
    that must stay in range; activations, outputs and workspaces are zeros.
    """
    if buffer.role not in ("param", "input") or buffer.dtype not in ("float16", "float32", "float64", "bfloat16"):
        return None
    if buffer.dtype == "bfloat16":
        values = rng.uniform(-PARAM_SCALE, PARAM_SCALE, buffer.nbytes // 2).astype(np.float32)
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    dtype = np.dtype(NUMPY_DTYPES[buffer.dtype])
    return rng.uniform(-PARAM_SCALE, PARAM_SCALE, buffer.nbytes // dtype.itemsize).astype(dtype)


def fill_buffers(arena: Arena, buffers: Sequence[Buffer], offsets: Sequence[int], seed: int) -> None:
    """Write every buffer's initial contents into the arena."""
    rng = np.random.default_rng(seed)
    for buf, off in zip(buffers, offsets):
        data = initial_contents(buf, rng)
        if data is None:
            arena.zero(off, buf.nbytes)
            continue
        arena.zero(off + data.nbytes, buf.nbytes - data.nbytes)  # a tail shorter than one element
        arena.write(off, data.ctypes.data, data.nbytes)


@dataclass(eq=False)
class LaunchEntry:
    """Everything ``cuLaunchKernel`` needs for one kernel of an app, ready to go."""

    name: str
    kernel: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    params: PackedArgs


class LibraryCache:
    """Loaded images and kernel handles, once per process (per :class:`Device`)."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._libraries: dict[str, Any] = {}
        self._kernels: dict[tuple[str, str], Any] = {}
        self._shared_set: dict[Any, int] = {}

    def library(self, image: Image) -> tuple[str, Any]:
        """(content key, CUlibrary) of an image file, loading it on first use."""
        try:
            data = image.path.read_bytes()
        except OSError as e:
            raise BackendError(f"cannot read kernel image {image.path}: {e}; rebuild the app") from None
        key = hashlib.sha256(data).hexdigest()
        lib = self._libraries.get(key)
        if lib is None:
            if image.kind == "ptx" and not data.endswith(b"\0"):
                data += b"\0"  # the driver reads PTX as a NUL-terminated string
            try:
                lib = self.device.driver.call("cuLibraryLoadData", data, [], [], 0, [], [], 0)
            except BackendError as e:
                raise BackendError(f"loading {image.path}: {e}") from None
            self._libraries[key] = lib
        return key, lib

    def kernel(self, image: Image, name: str) -> Any:
        key, lib = self.library(image)
        handle = self._kernels.get((key, name))
        if handle is None:
            try:
                handle = self.device.driver.call("cuLibraryGetKernel", lib, name.encode())
            except BackendError as e:
                raise BackendError(f"kernel {name!r} in {image.path}: {e}") from None
            self._kernels[(key, name)] = handle
        return handle

    def allow_shared(self, kernel: Any, nbytes: int) -> None:
        """Opt a kernel in to more than 48 KiB of dynamic shared memory."""
        if nbytes <= max(DEFAULT_MAX_DYNAMIC_SHARED, self._shared_set.get(kernel, 0)):
            return
        cu = self.device.driver.cu
        self.device.driver.call(
            "cuKernelSetAttribute",
            cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            nbytes,
            kernel,
            self.device.handle,
        )
        self._shared_set[kernel] = nbytes

    def warm(self, context: Any, kernels: Sequence[Any]) -> None:
        """Load ``kernels`` into ``context`` now rather than at their first launch there."""
        with self.device.current(context):
            for k in dict.fromkeys(kernels):
                self.device.driver.call("cuKernelGetFunction", k)


def prepare_launches(plan: Plan, libraries: LibraryCache, buffer_addresses: dict[int, int]) -> list[LaunchEntry]:
    """One ready :class:`LaunchEntry` per launch of the plan."""
    images = {im.id: im for im in plan.images}
    entries = []
    for launch in plan.launches:
        kernel = libraries.kernel(images[launch.image], launch.kernel)
        libraries.allow_shared(kernel, launch.shared_mem_dynamic)
        entries.append(_entry(launch, kernel, buffer_addresses))
    return entries


def _entry(launch: KernelLaunch, kernel: Any, buffer_addresses: dict[int, int]) -> LaunchEntry:
    return LaunchEntry(
        name=launch.kernel,
        kernel=kernel,
        grid=launch.grid,
        block=launch.block,
        shared_mem=launch.shared_mem_dynamic,
        params=pack_args(launch.args, buffer_addresses),
    )
