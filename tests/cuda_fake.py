"""A small fake of the CUDA driver for testing the CUDA backend on a machine without a GPU.

It stands in for ``cuda.bindings.driver``: enums and structs are the real
ones (so field names and types are checked), handles are the real handle
types, and every function returns a tuple starting with a result code, like
the bindings.  Behind it is a toy device in *real* time (host
``perf_counter``): streams run their operations in order, a kernel starts
when its stream is free, its waits are satisfied and ~5 us after it was
issued, and lasts ``kernel_time(name, sms)``; events take the time their
stream reaches them.  It enforces the rules the backend relies on (events
recorded and timed within their own context, kernels reading only mapped and
accessible VMM memory, affinity contexts only under MPS) and records every
call so tests can replay the argument types against the real bindings.
"""

from __future__ import annotations

import ctypes
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cuda.bindings import driver as real

OK = real.CUresult.CUDA_SUCCESS
LAUNCH_LATENCY = 5e-6
VA_BASE = 0x7F00_0000_0000
GRANULARITY = 2 << 20
E = real.CUresult


@dataclass
class Ctx:
    id: int
    sms: int
    sm_ids: frozenset[int]
    kind: str


@dataclass
class Stream:
    id: int
    ctx: Ctx
    ready: float = 0.0
    priority: int = 0


@dataclass
class Event:
    id: int
    ctx: Ctx
    time: float | None = None


@dataclass
class Mapping:
    base: int
    size: int
    memory: bytearray
    accessible: bool = False


@dataclass
class KernelRun:
    name: str
    ctx: Ctx
    start: float
    end: float
    grid: tuple[int, int, int]
    shared_mem: int
    args: list[int]


@dataclass
class FakeDevice:
    sm_count: int = 132
    cc: tuple[int, int] = (9, 0)
    name: str = "NVIDIA H100 80GB HBM3"
    memory: int = 80 << 30
    driver_version: int = 12080
    mps_running: bool = False
    context_cost: int = 64 << 20
    green_min: int = 8
    green_groupable: int = 120
    """SMs a split puts in whole groups (a GH100 with 132 SMs: 15 groups of 8, 12 left over)."""
    merges_groups: bool = True
    """False: like a 12.4 driver, one SM resource per descriptor."""
    merges_remainder: bool = True
    """False: a split's remainder cannot join a descriptor with other resources."""
    kernel_time: Callable[[str, int], float] = lambda name, sms: 100e-6 * 132 / sms
    runs: list[KernelRun] = field(default_factory=list)


def _record_smid(fake: FakeDriver, ctx: Ctx, grid, block, args) -> None:
    """tools/gpu_check.py's record_smid: block i writes the id of an SM of its context."""
    ids = sorted(ctx.sm_ids)
    values = np.array([ids[i % len(ids)] for i in range(grid[0])], dtype=np.uint32)
    m = fake._accessible(args[0], values.nbytes)
    m.memory[args[0] - m.base : args[0] - m.base + values.nbytes] = values.tobytes()


def _add_one(fake: FakeDriver, ctx: Ctx, grid, block, args) -> None:
    """tools/gpu_check.py's add_one: buf[i] += 1 for i < n."""
    n = min(args[1], grid[0] * block[0])
    m = fake._accessible(args[0], 4 * n)
    off = args[0] - m.base
    values = np.frombuffer(bytes(m.memory[off : off + 4 * n]), dtype=np.uint32) + 1
    m.memory[off : off + 4 * n] = values.astype(np.uint32).tobytes()


KERNEL_EFFECTS = {"record_smid": _record_smid, "add_one": _add_one}


class FakeDriver:
    """The fake ``cuda.bindings.driver`` module (see module docstring)."""

    def __init__(self, device: FakeDevice | None = None, *, present: bool = True) -> None:
        self.dev = device or FakeDevice()
        self.present = present
        self.calls: list[tuple[str, tuple]] = []
        self._ids = iter(range(1, 1 << 30))
        self.contexts: dict[int, Ctx] = {}
        self.primary = self._ctx(self.dev.sm_count, frozenset(range(self.dev.sm_count)), "primary")
        self.stack: list[Ctx] = []
        self.streams: dict[int, Stream] = {}
        self.events: dict[int, Event] = {}
        self.mappings: list[Mapping] = []
        self.handles: dict[int, int] = {}  # allocation handle -> size
        self.reserved: dict[int, int] = {}
        self.libraries: dict[int, dict[str, list[int]]] = {}  # library -> kernel name -> param sizes
        self.kernels: dict[int, tuple[str, list[int]]] = {}
        self.shared_allowed: dict[int, int] = {}
        self.greens: dict[int, Ctx] = {}
        self.descs: dict[int, frozenset[int]] = {}
        self.resources: dict[int, frozenset[int]] = {}  # id(CUdevResource) -> SM ids
        self.remainders: set[int] = set()  # ids of split remainders
        self.used = 0
        self.loaded_per_ctx: dict[int, set[int]] = defaultdict(set)

    # ------------------------------------------------------------ plumbing
    def __getattr__(self, name: str) -> Any:
        if name.startswith("cu") and not name.startswith("cuda"):
            raise AttributeError(name)  # a driver function this fake does not implement
        return getattr(real, name)  # enums, structs, handle types

    def _call(self, name: str, args: tuple) -> None:
        self.calls.append((name, args))
        if not self.present:
            raise RuntimeError("libcuda.so.1: cannot open shared object file (fake: no driver)")

    def _ctx(self, sms: int, sm_ids: frozenset[int], kind: str) -> Ctx:
        c = Ctx(next(self._ids), sms, sm_ids, kind)
        self.contexts[c.id] = c
        return c

    def _current(self) -> Ctx:
        return self.stack[-1] if self.stack else self.primary

    def now(self) -> float:
        return time.perf_counter()

    def _accessible(self, addr: int, n: int) -> Mapping | None:
        for m in self.mappings:
            if m.accessible and m.base <= addr and addr + n <= m.base + m.size:
                return m
        return None

    # ------------------------------------------------------------ driver and device
    def cuDriverGetVersion(self):
        self._call("cuDriverGetVersion", ())
        return OK, self.dev.driver_version

    def cuInit(self, flags):
        self._call("cuInit", (flags,))
        return (OK,)

    def cuDeviceGetCount(self):
        self._call("cuDeviceGetCount", ())
        return OK, 1

    def cuDeviceGet(self, ordinal):
        self._call("cuDeviceGet", (ordinal,))
        return OK, real.CUdevice(ordinal)

    def cuDeviceGetName(self, length, dev):
        self._call("cuDeviceGetName", (length, dev))
        return OK, self.dev.name.encode().ljust(length, b"\0")

    def cuDeviceGetAttribute(self, attr, dev):
        self._call("cuDeviceGetAttribute", (attr, dev))
        a = real.CUdevice_attribute
        values = {
            a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: self.dev.sm_count,
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.dev.cc[0],
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.dev.cc[1],
        }
        return OK, values[attr]

    def cuDeviceTotalMem(self, dev):
        self._call("cuDeviceTotalMem", (dev,))
        return OK, self.dev.memory

    def cuGetErrorString(self, code):
        return OK, f"fake description of {int(code)}".encode()

    def cuDevicePrimaryCtxRetain(self, dev):
        self._call("cuDevicePrimaryCtxRetain", (dev,))
        return OK, real.CUcontext(self.primary.id)

    def cuDevicePrimaryCtxRelease(self, dev):
        self._call("cuDevicePrimaryCtxRelease", (dev,))
        return (OK,)

    def cuCtxSetCurrent(self, ctx):
        self._call("cuCtxSetCurrent", (ctx,))
        self.stack = [self.contexts[int(ctx)]]
        return (OK,)

    def cuCtxPushCurrent(self, ctx):
        self._call("cuCtxPushCurrent", (ctx,))
        self.stack.append(self.contexts[int(ctx)])
        return (OK,)

    def cuCtxPopCurrent(self):
        self._call("cuCtxPopCurrent", ())
        c = self.stack.pop()
        return OK, real.CUcontext(c.id)

    def cuMemGetInfo(self):
        self._call("cuMemGetInfo", ())
        return OK, self.dev.memory - self.used, self.dev.memory

    # ------------------------------------------------------------ MPS contexts
    def cuCtxCreate(self, params, flags, dev):
        self._call("cuCtxCreate", (params, flags, dev))
        if not self.dev.mps_running:
            return E.CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, None
        asked = int(params.execAffinityParams[0].param.smCount.val)
        granted = min(self.dev.sm_count, -(-asked // 2) * 2)  # rounds up to whole TPCs
        c = self._ctx(granted, frozenset(range(granted)), "mps")
        self.used += self.dev.context_cost
        self.stack.append(c)
        return OK, real.CUcontext(c.id)

    def cuCtxGetExecAffinity(self, kind):
        self._call("cuCtxGetExecAffinity", (kind,))
        p = real.CUexecAffinityParam()
        p.param.smCount.val = self._current().sms
        return OK, p

    def cuCtxDestroy(self, ctx):
        self._call("cuCtxDestroy", (ctx,))
        del self.contexts[int(ctx)]
        self.used -= self.dev.context_cost
        return (OK,)

    # ------------------------------------------------------------ green contexts
    def cuDeviceGetDevResource(self, dev, kind):
        self._call("cuDeviceGetDevResource", (dev, kind))
        r = real.CUdevResource()
        r.type = kind
        r.sm.smCount = self.dev.sm_count
        self.resources[id(r)] = frozenset(range(self.dev.sm_count))
        return OK, r

    def cuDevSmResourceSplitByCount(self, n, whole, flags, min_count):
        self._call("cuDevSmResourceSplitByCount", (n, whole, flags, min_count))
        sms = sorted(self.resources[id(whole)])
        min_count = -(-min_count // self.dev.green_min) * self.dev.green_min  # the driver aligns the count
        groups = []
        for g in range(min(n, min(len(sms), self.dev.green_groupable) // min_count)):
            r = real.CUdevResource()
            r.type = real.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
            r.sm.smCount = min_count
            self.resources[id(r)] = frozenset(sms[g * min_count : (g + 1) * min_count])
            groups.append(r)
        rest = real.CUdevResource()
        rest.type = real.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
        rest.sm.smCount = len(sms) - len(groups) * min_count
        self.resources[id(rest)] = frozenset(sms[len(groups) * min_count :])
        self.remainders.add(id(rest))
        padded = groups + [real.CUdevResource() for _ in range(n - len(groups))]
        return OK, padded, len(groups), rest

    def cuDevResourceGenerateDesc(self, resources, n):
        self._call("cuDevResourceGenerateDesc", (resources, n))
        if n > 1 and not self.dev.merges_groups:
            return E.CUDA_ERROR_INVALID_VALUE, None
        if n > 1 and not self.dev.merges_remainder and any(id(r) in self.remainders for r in resources[:n]):
            return E.CUDA_ERROR_INVALID_VALUE, None
        sm_ids = frozenset().union(*(self.resources[id(r)] for r in resources[:n]))
        d = next(self._ids)
        self.descs[d] = sm_ids
        return OK, real.CUdevResourceDesc(d)

    def cuGreenCtxCreate(self, desc, dev, flags):
        self._call("cuGreenCtxCreate", (desc, dev, flags))
        sm_ids = self.descs[int(desc)]
        c = self._ctx(len(sm_ids), sm_ids, "green")
        self.greens[c.id] = c
        self.used += 4 << 20
        return OK, real.CUgreenCtx(c.id)

    def cuCtxFromGreenCtx(self, green):
        self._call("cuCtxFromGreenCtx", (green,))
        return OK, real.CUcontext(int(green))

    def cuGreenCtxGetDevResource(self, green, kind):
        self._call("cuGreenCtxGetDevResource", (green, kind))
        r = real.CUdevResource()
        r.sm.smCount = self.greens[int(green)].sms
        return OK, r

    def cuGreenCtxStreamCreate(self, green, flags, priority):
        self._call("cuGreenCtxStreamCreate", (green, flags, priority))
        assert int(flags) == int(real.CUstream_flags.CU_STREAM_NON_BLOCKING), "green streams must be non-blocking"
        return OK, self._stream(self.greens[int(green)], priority)

    def cuGreenCtxDestroy(self, green):
        self._call("cuGreenCtxDestroy", (green,))
        del self.greens[int(green)]
        self.used -= 4 << 20
        return (OK,)

    # ------------------------------------------------------------ streams and events
    def _stream(self, ctx: Ctx, priority: int = 0):
        s = Stream(next(self._ids), ctx, priority=priority)
        self.streams[s.id] = s
        return real.CUstream(s.id)

    def cuCtxGetStreamPriorityRange(self):
        self._call("cuCtxGetStreamPriorityRange", ())
        return OK, 0, -5  # (lowest, highest), as an H100's driver gives them

    def cuStreamCreateWithPriority(self, flags, priority):
        self._call("cuStreamCreateWithPriority", (flags, priority))
        assert -5 <= priority <= 0, f"priority {priority} outside the device's range"
        return OK, self._stream(self._current(), priority)

    def cuStreamDestroy(self, stream):
        self._call("cuStreamDestroy", (stream,))
        del self.streams[int(stream)]
        return (OK,)

    def cuStreamSynchronize(self, stream):
        self._call("cuStreamSynchronize", (stream,))
        self._sleep_until(self.streams[int(stream)].ready)
        return (OK,)

    def cuStreamWaitEvent(self, stream, event, flags):
        self._call("cuStreamWaitEvent", (stream, event, flags))
        s, e = self.streams[int(stream)], self.events[int(event)]
        if e.time is None:
            return (E.CUDA_ERROR_INVALID_HANDLE,)
        s.ready = max(s.ready, e.time)
        return (OK,)

    def cuEventCreate(self, flags):
        self._call("cuEventCreate", (flags,))
        e = Event(next(self._ids), self._current())
        self.events[e.id] = e
        return OK, real.CUevent(e.id)

    def cuEventDestroy(self, event):
        self._call("cuEventDestroy", (event,))
        del self.events[int(event)]
        return (OK,)

    def cuEventRecord(self, event, stream):
        self._call("cuEventRecord", (event, stream))
        e, s = self.events[int(event)], self.streams[int(stream)]
        if e.ctx is not s.ctx:
            return (E.CUDA_ERROR_INVALID_HANDLE,)  # events are recorded in their own context
        e.time = max(self.now(), s.ready)
        return (OK,)

    def cuEventQuery(self, event):
        self._call("cuEventQuery", (event,))
        e = self.events[int(event)]
        return (OK,) if e.time is not None and e.time <= self.now() else (E.CUDA_ERROR_NOT_READY,)

    def cuEventSynchronize(self, event):
        self._call("cuEventSynchronize", (event,))
        self._sleep_until(self.events[int(event)].time)
        return (OK,)

    def cuEventElapsedTime(self, start, end):
        self._call("cuEventElapsedTime", (start, end))
        a, b = self.events[int(start)], self.events[int(end)]
        if a.ctx is not b.ctx:
            return E.CUDA_ERROR_INVALID_HANDLE, 0.0  # bless must time within one context
        if a.time is None or b.time is None or max(a.time, b.time) > self.now():
            return E.CUDA_ERROR_NOT_READY, 0.0
        return OK, float(np.float32((b.time - a.time) * 1e3))

    def _sleep_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            time.sleep(delay)

    # ------------------------------------------------------------ memory (VMM)
    def cuMemGetAllocationGranularity(self, prop, option):
        self._call("cuMemGetAllocationGranularity", (prop, option))
        return OK, GRANULARITY

    def cuMemCreate(self, size, prop, flags):
        self._call("cuMemCreate", (size, prop, flags))
        assert prop.type == real.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        assert prop.location.type == real.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        assert size % GRANULARITY == 0
        if self.used + size > self.dev.memory:
            return E.CUDA_ERROR_OUT_OF_MEMORY, None
        h = next(self._ids)
        self.handles[h] = size
        self.used += size
        return OK, real.CUmemGenericAllocationHandle(h)

    def cuMemAddressReserve(self, size, alignment, addr, flags):
        self._call("cuMemAddressReserve", (size, alignment, addr, flags))
        # Past every range still reserved: a new range never meets one held (counting sizes from
        # the base put a range reserved after a free on top of one still held).
        base = max((b + n + GRANULARITY for b, n in self.reserved.items()), default=VA_BASE)
        self.reserved[base] = size
        return OK, real.CUdeviceptr(base)

    def cuMemMap(self, ptr, size, offset, handle, flags):
        self._call("cuMemMap", (ptr, size, offset, handle, flags))
        assert self.handles[int(handle)] == size and self.reserved[int(ptr)] == size
        self.mappings.append(Mapping(int(ptr), size, bytearray(size)))
        return (OK,)

    def cuMemSetAccess(self, ptr, size, descs, count):
        self._call("cuMemSetAccess", (ptr, size, descs, count))
        d = descs[0]
        assert d.location.type == real.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        assert d.flags == real.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        for m in self.mappings:
            if m.base == int(ptr) and m.size == size:
                m.accessible = True
        return (OK,)

    def cuMemUnmap(self, ptr, size):
        self._call("cuMemUnmap", (ptr, size))
        self.mappings = [m for m in self.mappings if m.base != int(ptr)]
        return (OK,)

    def cuMemAddressFree(self, ptr, size):
        self._call("cuMemAddressFree", (ptr, size))
        del self.reserved[int(ptr)]
        return (OK,)

    def cuMemRelease(self, handle):
        self._call("cuMemRelease", (handle,))
        self.used -= self.handles.pop(int(handle))
        return (OK,)

    def cuMemcpyHtoD(self, dst, src, n):
        self._call("cuMemcpyHtoD", (dst, src, n))
        m = self._accessible(int(dst), n)
        if m is None:
            return (E.CUDA_ERROR_INVALID_VALUE,)
        off = int(dst) - m.base
        m.memory[off : off + n] = ctypes.string_at(src, n)
        return (OK,)

    def cuMemcpyDtoH(self, dst, src, n):
        self._call("cuMemcpyDtoH", (dst, src, n))
        m = self._accessible(int(src), n)
        if m is None:
            return (E.CUDA_ERROR_INVALID_VALUE,)
        off = int(src) - m.base
        ctypes.memmove(dst, bytes(m.memory[off : off + n]), n)
        return (OK,)

    def cuMemsetD8(self, dst, value, n):
        self._call("cuMemsetD8", (dst, value, n))
        m = self._accessible(int(dst), n)
        if m is None:
            return (E.CUDA_ERROR_INVALID_VALUE,)
        off = int(dst) - m.base
        m.memory[off : off + n] = bytes([value]) * n
        return (OK,)

    def read(self, addr: int, n: int) -> bytes:
        m = self._accessible(addr, n)
        assert m is not None, f"address {addr:#x} is not mapped"
        return bytes(m.memory[addr - m.base : addr - m.base + n])

    # ------------------------------------------------------------ kernels
    def cuLibraryLoadData(self, code, *options):
        self._call("cuLibraryLoadData", (code, *options))
        text = bytes(code).rstrip(b"\0").decode()
        if ".entry" not in text:
            return E.CUDA_ERROR_INVALID_PTX, None
        kernels = {}
        for m in re.finditer(r"\.entry\s+(\w+)\s*\(([^)]*)\)", text):
            kinds = re.findall(r"\.param\s+\.([a-z]+)(\d+)", m.group(2))
            kernels[m.group(1)] = [int(bits) // 8 for _, bits in kinds]
        lib = next(self._ids)
        self.libraries[lib] = kernels
        return OK, real.CUlibrary(lib)

    def cuLibraryGetKernel(self, lib, name):
        self._call("cuLibraryGetKernel", (lib, name))
        kernels = self.libraries[int(lib)]
        if name.decode() not in kernels:
            return E.CUDA_ERROR_NOT_FOUND, None
        k = next(self._ids)
        self.kernels[k] = (name.decode(), kernels[name.decode()])
        return OK, real.CUkernel(k)

    def cuKernelGetFunction(self, kernel):
        self._call("cuKernelGetFunction", (kernel,))
        self.loaded_per_ctx[self._current().id].add(int(kernel))
        return OK, real.CUfunction(int(kernel))

    def cuKernelSetAttribute(self, attr, value, kernel, dev):
        self._call("cuKernelSetAttribute", (attr, value, kernel, dev))
        self.shared_allowed[int(kernel)] = value
        return (OK,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self._call("cuLaunchKernel", (f, gx, gy, gz, bx, by, bz, shared, stream, params, extra))
        name, sizes = self.kernels[int(f)]
        if shared > self.shared_allowed.get(int(f), 48 * 1024):
            return (E.CUDA_ERROR_INVALID_VALUE,)
        s = self.streams[int(stream)]
        pointers = np.frombuffer(ctypes.string_at(params, 8 * len(sizes)), dtype=np.uint64) if sizes else []
        args = [int.from_bytes(ctypes.string_at(int(p), n), "little") for p, n in zip(pointers, sizes)]
        effect = KERNEL_EFFECTS.get(name)
        if effect is not None:
            effect(self, s.ctx, (gx, gy, gz), (bx, by, bz), args)
        start = max(self.now() + LAUNCH_LATENCY, s.ready)
        end = start + self.dev.kernel_time(name, s.ctx.sms)
        s.ready = end
        self.dev.runs.append(KernelRun(name, s.ctx, start, end, (gx, gy, gz), shared, args))
        return (OK,)


# ---------------------------------------------------------------- apps for the fake
def write_app(root, profile, *, buffers_per_kernel: int = 2, dtype: str = "float32"):
    """A build plan (PTX + plan.json) for ``profile``'s kernels under ``root``; returns the profile naming it.

    Buffers: one param and one activation per kernel (``buffers_per_kernel``
    = 2), every kernel taking (param, activation, int32 scalar).
    """
    import dataclasses
    import json
    from pathlib import Path

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(k.name for k in profile.kernels))
    ptx = "".join(
        f".visible .entry {n}(\n .param .u64 {n}_p0,\n .param .u64 {n}_p1,\n .param .u32 {n}_p2\n)\n{{ ret; }}\n"
        for n in names
    )
    (root / f"{profile.app}.ptx").write_text(".version 7.8\n.target sm_90\n.address_size 64\n" + ptx)
    buffers, launches = [], []
    for k, desc in enumerate(profile.kernels):
        p, a = 2 * k, 2 * k + 1
        buffers.append({"id": p, "bytes": 4096, "dtype": dtype, "shape": [1024], "role": "param"})
        buffers.append({"id": a, "bytes": 4096, "dtype": dtype, "shape": [1024], "role": "activation"})
        launches.append(
            {
                "kernel": desc.name,
                "image": 0,
                "grid": list(desc.grid),
                "block": list(desc.block),
                "shared_mem_dynamic": desc.shared_mem or 0,
                "shared_mem_static": 0,
                "registers": desc.registers,
                "args": [{"buffer": p}, {"buffer": a}, {"scalar": k, "dtype": "int32"}],
                "flops": None,
                "dram_bytes": None,
            }
        )
    plan = {
        "format": "bless-plan",
        "version": 1,
        "app": profile.app,
        "gpu": profile.gpu,
        "arch": "sm_90",
        "batch": profile.batch,
        "images": [{"id": 0, "file": f"{profile.app}.ptx", "kind": "ptx"}],
        "buffers": buffers,
        "launches": launches,
    }
    path = root / "plan.json"
    path.write_text(json.dumps(plan))
    prov = dataclasses.replace(profile.provenance, details={**profile.provenance.details, "plan": str(path)})
    return dataclasses.replace(profile, provenance=prov, t=profile.t.copy(), T=profile.T.copy())


def timing_from(device: FakeDevice, *profiles) -> None:
    """Make the fake's kernels last what the profiles say at each SM count."""
    table = {k.name: (p, i) for p in profiles for i, k in enumerate(p.kernels)}

    def kernel_time(name: str, sms: int) -> float:
        p, i = table[name]
        return float(p.t_at_sms(sms)[i])

    device.kernel_time = kernel_time
