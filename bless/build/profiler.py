"""The offline profiler: time every kernel of an app at the 18 SM levels.

For each level it creates one context restricted to that level's SMs, runs
the app's request alone (``warmup`` untimed runs, then ``repeats`` timed
runs), takes the median duration of every kernel and of the whole request,
and writes a new profile.  It only uses the :class:`~bless.backend.interface.Backend`
interface, so the same code profiles on the simulator and on a GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from bless.backend.interface import Backend
from bless.hw.gpus import N_LEVELS
from bless.profiles.format import Profile, Provenance

KNEE_TOLERANCE = 0.03
"""A kernel 'stops gaining' at the first level within 3 % of its full-GPU time."""


@dataclass(frozen=True)
class ProfilerReport:
    """What profiling cost: the paper reports 0.4-1.6 s per app on a real A100."""

    app: str
    backend: str
    levels: int
    repeats: int
    kernel_runs: int
    wall_seconds: float
    device_seconds: float
    """Device time the runs took on the backend's own clock."""


def estimate_max_sm_share(level_sms: np.ndarray, t: np.ndarray, blocks: int | None, sm_count: int) -> float:
    """d%: the most SMs a kernel keeps busy, as a fraction of the GPU.

    Bounded by its block count (a block runs on one SM) and by the knee of its
    measured curve (the first level within :data:`KNEE_TOLERANCE` of the
    full-GPU time: more SMs than that buy little).  This is occupancy only: the
    measured curve is kept as it is above d% (under an MPS limit a kernel with
    fewer blocks than SMs can still be slower than on the whole GPU), so do not
    assume ``t`` is flat from d% on.
    """
    full = t[-1]
    knee = int(level_sms[int(np.argmax(t <= full * (1 + KNEE_TOLERANCE)))])
    share = knee / sm_count
    if blocks is not None:
        share = min(share, blocks / sm_count)
    return float(min(1.0, max(share, 1.0 / sm_count)))


def rescale_dram_util(dram_util: float, described_full: float, measured_full: float) -> float:
    """A kernel's ``dram_util`` for its measured full-GPU time.

    ``dram_util`` is the share of peak DRAM bandwidth the kernel uses alone on the whole GPU,
    so with its full-GPU time it gives the bytes it moves (``dram_util x t``), which timing it
    does not change.  The descriptors come with the time they were described at (a prediction,
    say); keeping their ``dram_util`` beside a measured time 2-3x longer made the simulator
    count the traffic of the measured apps 1.6-10.7x over (tools/gpu_check_results/2026-11-27-h200).
    """
    if dram_util <= 0 or described_full <= 0 or measured_full <= 0:
        return dram_util
    return float(min(1.0, dram_util * described_full / measured_full))


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Keep Python's garbage collector out of a burst of launches (as ``timeit`` does).

    A collection between two launches can outlast the kernel in flight; the stream
    then idles, and the next kernel's start event fires before the kernel reaches
    the GPU, adding the pause to its measured time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def profile_app(
    backend: Backend,
    app: Profile,
    *,
    repeats: int = 3,
    warmup: int = 1,
    mechanism: str = "mps",
) -> tuple[Profile, ProfilerReport]:
    """Profile ``app`` (its kernel list and descriptors) on ``backend``."""
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be >= 1 and warmup >= 0")
    gpu = backend.gpu
    wall0 = time.perf_counter()
    dev0 = backend.now()
    handle = backend.deploy(app)
    k = app.n_kernels
    t = np.empty((N_LEVELS, k))
    T = np.empty(N_LEVELS)
    granted = []
    try:
        for li in range(N_LEVELS):
            ctx = backend.create_context(handle, gpu.sms_for_level(li + 1, mechanism))
            granted.append(backend.granted_sms(ctx))
            stream = backend.create_stream(ctx)
            samples = np.empty((repeats, k))
            totals = np.empty(repeats)
            for rep in range(warmup + repeats):
                backend.synchronize()
                with no_gc():
                    start = backend.now()
                    runs = [backend.launch(stream, handle, i, timed=True) for i in range(k)]
                backend.synchronize()
                if rep >= warmup:
                    samples[rep - warmup] = [r.end - r.start for r in runs]
                    totals[rep - warmup] = runs[-1].end - start
            t[li] = np.median(samples, axis=0)
            T[li] = np.median(totals)
    finally:
        backend.undeploy(handle)
    T = np.maximum(T, t.sum(axis=1))
    level_sms = np.array(granted)
    kernels = tuple(
        dataclasses.replace(
            desc,
            max_sm_share=estimate_max_sm_share(level_sms, t[:, i], desc.blocks, gpu.sm_count)
            if desc.kind == "compute"
            else desc.max_sm_share,
            dram_util=rescale_dram_util(desc.dram_util, float(app.t[-1, i]), float(t[-1, i])),
        )
        for i, desc in enumerate(app.kernels)
    )
    report = ProfilerReport(
        app=app.app,
        backend=backend.describe(),
        levels=N_LEVELS,
        repeats=repeats,
        kernel_runs=N_LEVELS * (warmup + repeats) * k,
        wall_seconds=time.perf_counter() - wall0,
        device_seconds=backend.now() - dev0,
    )
    method = "simulated" if backend.name == "sim" else "measured"
    profile = Profile(
        app=app.app,
        gpu=gpu.name,
        kind=app.kind,
        batch=app.batch,
        level_sms=tuple(int(x) for x in level_sms),
        kernels=kernels,
        t=t,
        T=T,
        memory_bytes=app.memory_bytes,
        provenance=Provenance(
            method=method,
            gpu=gpu.name,
            source=f"bless offline profiler on {backend.describe()}",
            model=f"kernels and descriptors of {app.app} ({app.provenance.method}: {app.provenance.source})",
            tool="bless.build.profiler.profile_app",
            details={
                "repeats": repeats,
                "warmup": warmup,
                "mechanism": mechanism,
                "wall_seconds": round(report.wall_seconds, 4),
                "device_seconds": round(report.device_seconds, 6),
            },
        ),
    )
    return profile, report
