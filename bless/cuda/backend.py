"""The CUDA backend: the :class:`~bless.backend.interface.Backend` interface on a real NVIDIA GPU.

* ``deploy`` finds the app's build plan (:mod:`bless.build.plan`), loads its
  kernel images once per process, allocates its buffers in one VMM arena
  every context can use, fills them (params and inputs seeded random,
  activations zero) and packs every launch's parameters once.
* ``create_context`` takes a context of the process-wide pool
  (:mod:`bless.cuda.contexts`): green contexts or MPS, chosen automatically
  (green when the driver has them) or by ``mechanism``; ``granted_sms`` is
  what the hardware granted.  It records the device memory each new restricted
  context took (``context_memory``, cuMemGetInfo before and after);
  :meth:`~CudaBackend.context_bytes` answers with the largest of those once one
  exists, and with the GPU's data file (``bless/hw/<gpu>.toml``) before, or
  for a mechanism this backend does not use.
* ``launch`` issues ``cuLaunchKernel`` on the stream; ``after`` in another
  stream becomes ``cuStreamWaitEvent`` on that launch's end event, ``timed``
  adds a start event, ``notify`` makes :meth:`wait` report the launch when its
  end event completes (see :mod:`bless.cuda.timeline`).
* ``synchronize`` waits for every stream and resolves every launch;
  ``wait(deadline)`` polls the ``notify`` launches' end events until one has
  finished, the deadline passes or :meth:`wake` is called.

The clock is the host's monotonic clock in seconds since the backend started.
Per-request inputs are the seeded ones written at deployment: the Backend
interface has no way to pass request data yet.  Busy SM time is not measured
(``utilisation`` and :meth:`~CudaBackend.sm_seconds` answer nan), and faults
cannot be injected (the interface's default error): a kernel's outcome is the
GPU's, and its faults are not yet mapped to the request they fail.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bless.backend.interface import AppHandle, Backend, BackendError
from bless.backend.trace_events import Placement
from bless.build.plan import Plan, check_matches, find_plan, load_plan
from bless.cuda import mps
from bless.cuda.contexts import ContextPool, ExecContext, choose_mechanism, make_pool
from bless.cuda.device import Device
from bless.cuda.driver import CudaError, Driver, import_bindings, load_driver
from bless.cuda.kernels import LaunchEntry, LibraryCache, fill_buffers, prepare_launches
from bless.cuda.memory import Arena, layout
from bless.cuda.timeline import (
    ContextClock,
    CudaLaunch,
    CudaStream,
    Timeline,
    needs_wait,
    placement,
)
from bless.hw.gpus import GPUS, GpuSpec, get_gpu
from bless.profiles.format import Profile

DEFAULT_POLL_INTERVAL = 20e-6
"""Seconds between event queries while :meth:`CudaBackend.wait` waits (Linux sleeps ~50 us at least)."""


@dataclass(eq=False)
class DeployedApp:
    """What the backend holds for one deployed app (``AppHandle.private``)."""

    slot: int
    plan: Plan
    arena: Arena
    entries: list[LaunchEntry]
    streams: list[CudaStream] = field(default_factory=list)
    warmed: set[int] = field(default_factory=set)
    """ids of the contexts its kernels are loaded in."""


@dataclass(frozen=True, eq=False)
class AppContext:
    """An app's view of a pooled context (what ``create_context`` returns)."""

    app: AppHandle
    context: ExecContext


class CudaBackend(Backend):
    """One NVIDIA GPU through the CUDA driver API (cuda-python)."""

    name = "cuda"

    def __init__(
        self,
        gpu: str | GpuSpec | None = None,
        *,
        mechanism: str = "auto",
        device: int = 0,
        seed: int = 0,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        driver_module: Any = None,
    ) -> None:
        self._t0 = time.perf_counter()
        module = driver_module if driver_module is not None else import_bindings()
        version = _driver_version(module)
        self.mechanism = choose_mechanism(mechanism, version, hasattr(module, "cuGreenCtxCreate"))
        if self.mechanism == "mps":
            mps.point_client_at_daemon()
        self.driver: Driver = load_driver(module)
        self.device = Device(self.driver, device)
        self.gpu = _match_gpu(gpu, self.device)
        self.seed = seed
        self.poll_interval = poll_interval
        self.pool: ContextPool = make_pool(self.mechanism, self.device, self.gpu.granularity.get("green", 1))
        self.libraries = LibraryCache(self.device)
        self.timeline = Timeline(self.driver)
        self.context_memory: dict[str, int] = {}
        """Device memory each restricted context took when it was created (cuMemGetInfo)."""
        self._clocks: dict[int, ContextClock] = {}
        self._streams: list[CudaStream] = []
        self._apps: dict[int, AppHandle] = {}
        self._arena_bytes = 0
        self._seq = 0
        self._wake = threading.Event()
        self._clock(self.pool.primary)
        cu = self.driver.cu
        self._launch_kernel = cu.cuLaunchKernel
        self._record = cu.cuEventRecord
        self._wait_event = cu.cuStreamWaitEvent

    # ------------------------------------------------------------ apps
    def deploy(self, profile: Profile, *, home_sms: float | None = None) -> AppHandle:
        plan = load_plan(find_plan(profile, self.gpu.name))
        check_matches(plan, profile, self.gpu.name)
        offsets, total = layout([b.nbytes for b in plan.buffers])
        arena = Arena.allocate(self.device, total, f"app {profile.app!r}")
        try:
            fill_buffers(arena, plan.buffers, offsets, self.seed)
            addresses = {b.id: arena.base + off for b, off in zip(plan.buffers, offsets)}
            entries = prepare_launches(plan, self.libraries, addresses)
        except BaseException:
            arena.free()
            raise
        slot = min(set(range(len(self._apps) + 1)) - {a.private.slot for a in self._apps.values()})
        handle = AppHandle(profile.app, profile, DeployedApp(slot, plan, arena, entries))
        self.pool.place(id(handle), profile.app, home_sms, slot)
        self._apps[id(handle)] = handle
        self._arena_bytes += arena.size
        return handle

    def undeploy(self, app: AppHandle) -> None:
        """Wait for the app's kernels, then free its streams and memory (pooled contexts stay)."""
        state: DeployedApp = app.private
        for s in state.streams:
            self.driver.call("cuStreamSynchronize", s.handle)
        self.timeline.resolve_all(state.streams)
        for s in state.streams:
            self.driver.call("cuStreamDestroy", s.handle)
            self._streams.remove(s)
        state.streams.clear()
        state.arena.free()
        self._arena_bytes -= state.arena.size
        self._apps.pop(id(app), None)
        self.pool.release(id(app))

    @property
    def memory_used(self) -> int:
        """Bytes this backend allocated: the apps' arenas plus what each restricted context
        took when it was created (measured, cuMemGetInfo before and after).  Memory of other
        processes on the GPU is not counted."""
        return self._arena_bytes + sum(self.context_memory.values())

    def sm_seconds(self) -> float:
        """Not measured: nan.

        The driver API reports when a kernel started and ended (events), not how many
        SMs its blocks held meanwhile: a kernel may hold fewer SMs than its context
        was granted, or share them with other contexts' kernels, so granted SMs times
        duration would count idle and contended SMs as busy.  Per-SM busy time needs
        the hardware counters (CUPTI), which this backend does not read."""
        return math.nan

    def create_context(self, app: AppHandle, sm_limit: int | None, *, shared: str | None = None) -> AppContext:
        state: DeployedApp = app.private
        known = {id(c) for c in self.pool.contexts}
        before = self.device.memory_info()[0]
        ctx = self.pool.context(sm_limit, state.slot, shared, owner=id(app))
        if ctx.restricted and id(ctx) not in known:
            self.context_memory[ctx.label] = max(0, before - self.device.memory_info()[0])
        self._clock(ctx)
        if id(ctx) not in state.warmed:
            self.libraries.warm(ctx.handle, [e.kernel for e in state.entries])
            state.warmed.add(id(ctx))
        return AppContext(app, ctx)

    def context_bytes(self, mechanism: str) -> int:
        """Measured: the most a restricted context of this backend took (admission plans for the
        costliest); the data file's figure until one is measured."""
        if mechanism == self.mechanism and self.context_memory:
            return max(self.context_memory.values())
        return super().context_bytes(mechanism)

    def granted_sms(self, context: AppContext) -> int:
        return context.context.sm_count

    def placement(self, run: CudaLaunch) -> Placement:
        return placement(run)

    def create_stream(self, context: AppContext, *, low_priority: bool = False) -> CudaStream:
        ctx = context.context
        label = f"{context.app.name}/{ctx.label}" + (" low priority" if low_priority else "")
        stream = CudaStream(self.pool.create_stream(ctx, low_priority), self._clock(ctx), label, ctx)
        context.app.private.streams.append(stream)
        self._streams.append(stream)
        return stream

    def _clock(self, ctx: ExecContext) -> ContextClock:
        clock = self._clocks.get(id(ctx))
        if clock is None:
            clock = ContextClock(
                self.driver, lambda: self.device.current(ctx.handle), self.pool.create_stream(ctx), self.now
            )
            self._clocks[id(ctx)] = clock
        return clock

    # ------------------------------------------------------------ work
    def launch(
        self,
        stream: CudaStream,
        app: AppHandle,
        kernel: int,
        *,
        after: CudaLaunch | None = None,
        tag: Any = None,
        notify: bool = False,
        timed: bool = False,
    ) -> CudaLaunch:
        entry = app.private.entries[kernel]
        clock = stream.clock
        issue = self.now()
        clock.renew_if_old(issue)
        h = stream.handle
        if needs_wait(stream, after):
            _check("cuStreamWaitEvent", self._wait_event(h, after.end_event, 0), self.driver)
        start_event = None
        if timed:
            start_event = clock.take()
            _check("cuEventRecord", self._record(start_event, h), self.driver)
        grid, block = entry.grid, entry.block
        err = self._launch_kernel(
            entry.kernel,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            entry.shared_mem,
            h,
            entry.params.address,
            0,
        )[0]
        if int(err):
            if start_event is not None:
                clock.give(start_event)
            raise CudaError(f"cuLaunchKernel({entry.name})", int(err), self.driver.describe(int(err)))
        end_event = clock.take()
        _check("cuEventRecord", self._record(end_event, h), self.driver)
        anchor = clock.anchor
        anchor.pending += 1
        self._seq += 1
        run = CudaLaunch(tag, stream, kernel, issue, after, anchor, start_event, end_event, notify, self._seq)
        stream.pending.append(run)
        if notify:
            stream.notify.append(run)
        return run

    def synchronize(self) -> None:
        self.device.make_current()
        busy = [s for s in self._streams if s.pending]
        for s in busy:
            self.driver.call("cuStreamSynchronize", s.handle)
        self.timeline.resolve_all(busy)

    def wait(self, deadline: float = math.inf) -> list[CudaLaunch]:
        self.device.make_current()
        self._wake.clear()
        streams = self._streams
        while True:
            self.timeline.poll(streams)
            if self.timeline.completed:
                break
            now = self.now()
            if now >= deadline or self._wake.is_set():
                break
            if deadline == math.inf and not any(s.notify for s in streams):
                break  # nothing could ever finish
            self._wake.wait(min(self.poll_interval, deadline - now))
        return self.timeline.take_completed()

    def wake(self) -> None:
        self._wake.set()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    # ------------------------------------------------------------ teardown
    def close(self) -> None:
        """Wait for the GPU, then release apps, streams, events, contexts and the device."""
        self.synchronize()
        for app in list(self._apps.values()):
            self.undeploy(app)
        for clock in self._clocks.values():
            for event in clock.events():
                self.driver.call("cuEventDestroy", event)
            self.driver.call("cuStreamDestroy", clock.stream)
        self._clocks.clear()
        self.pool.close()
        self.device.close()

    def describe(self) -> str:
        return f"CUDA on {self.device.info.describe()} ({self.mechanism} contexts)"


def _check(call: str, out: Any, driver: Driver) -> None:
    code = int(out[0])
    if code:
        raise CudaError(call, code, driver.describe(code))


def _driver_version(module: Any) -> int:
    """The driver's CUDA version, or the 'no driver' BackendError (needs no cuInit)."""
    try:
        return Driver(module).version()
    except BackendError as e:
        raise BackendError(f"no NVIDIA driver / no GPU found ({e})") from None
    except Exception as e:
        raise BackendError(
            f"no NVIDIA driver / no GPU found (the CUDA driver library could not be loaded: {e})"
        ) from None


def _match_gpu(gpu: str | GpuSpec | None, device: Device) -> GpuSpec:
    """The GPU model bless plans for: the one asked for, which must match the device, or detected."""
    info = device.info
    if gpu is None:
        for spec in GPUS.values():
            if spec.sm_count == info.sm_count and spec.compute_capability == info.compute_capability:
                return spec
        raise BackendError(
            f"bless has no GPU model for {info.name} ({info.arch}, {info.sm_count} SMs); "
            f"known models: {', '.join(g.full_name for g in GPUS.values())}"
        )
    spec = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
    if spec.sm_count != info.sm_count or spec.compute_capability != info.compute_capability:
        raise BackendError(
            f"the GPU here is {info.name} ({info.arch}, {info.sm_count} SMs) but {spec.name} "
            f"({spec.arch}, {spec.sm_count} SMs) was asked for; use the matching --gpu"
        )
    return spec


def cuda_environment() -> dict[str, str]:
    """The environment variables that change how this backend talks to the driver."""
    keys = ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_MODULE_LOADING")
    return {k: os.environ[k] for k in keys if k in os.environ}
