"""Tally: latency-critical kernels first, best-effort kernels transformed to yield quickly.

Models Tally (Zhao et al., "Tally: Non-Intrusive Performance Isolation for
Concurrent Deep Learning Workloads", ASPLOS'25).  Latency-critical apps'
requests launch whole, the moment they arrive, into unrestricted contexts.
Best-effort apps run in best-effort contexts
(:meth:`~bless.backend.interface.Backend.create_best_effort_context`): one
best-effort kernel on the GPU at a time, started only while no
latency-critical kernel runs or is ready, and each transformed so that it gives
the GPU back within a bound on the latency-critical kernel's wait:

* **slicing**: its ``B`` blocks launched as ``k`` kernels of ``ceil(B / k)``
  blocks; a waiting kernel waits at most one slice (its waves plus a launch);
* **preemption**: its blocks run as persistent thread blocks that check a flag
  before each block; a waiting kernel waits at most one block wave plus the
  flag check, and the kernel is launched again to finish.

Per kernel, from the profile (solo time on the whole GPU, grid and block
size), the choice is Tally's rule: of the transformations that keep the wait
within ``wait_bound``, the one that costs the best-effort kernel least (a
kernel shorter than the bound runs as is); if none does, the one that yields
soonest.  The costs are data with their provenance (``[tally]`` in
``bless/hw/<gpu>.toml``).

Simplifies: block waves take equal time (a kernel's solo time over its
waves); the wave count comes from threads, registers and shared memory per
block, and a kernel whose profile has no grid is assumed to run
``unknown_waves`` waves; Tally's own profiling of each transformation is the
model's prediction here; best-effort apps share one best-effort slot (one
kernel at a time, across best-effort apps, in launch order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bless.backend.interface import KernelTransform
from bless.core.lifecycle import AppState
from bless.core.policy import Decision, Policy
from bless.documents import is_number
from bless.hw.costs import gpu_constants
from bless.hw.gpus import GpuSpec
from bless.policies.common import launch_queued
from bless.profiles import features
from bless.profiles.format import KernelDesc, Profile


@dataclass(frozen=True)
class TallyCosts:
    """Tally's constants for one GPU (``[tally]`` of its data file), seconds unless said."""

    wait_bound: float
    """Default bound on a latency-critical kernel's wait for a best-effort kernel to yield."""
    slice_launch: float
    """Added to every slice of a sliced kernel (its launch)."""
    flag_check: float
    """Added to every block wave of a preemptible kernel (the flag read)."""
    resume: float
    """Before a preempted kernel runs again (its relaunch)."""
    unknown_waves: float
    """Block waves assumed for a kernel whose profile has no grid (dimensionless)."""

    def __post_init__(self) -> None:
        if not self.wait_bound > 0:
            raise ValueError(f"tally needs wait_bound > 0 s, got {self.wait_bound}")
        if min(self.slice_launch, self.flag_check, self.resume) < 0:
            raise ValueError("tally needs slice_launch, flag_check and resume >= 0 s")
        if self.unknown_waves < 1 or self.unknown_waves != int(self.unknown_waves):
            raise ValueError(f"tally needs unknown_waves a whole number >= 1, got {self.unknown_waves}")

    @classmethod
    def for_gpu(cls, gpu: GpuSpec) -> TallyCosts:
        return gpu_constants(gpu.name).build("tally", cls)


@dataclass(frozen=True)
class KernelShape:
    """What the choice reads of one kernel."""

    solo: float
    """Seconds alone on the whole GPU."""
    blocks: int
    per_wave: int
    """Blocks the GPU holds at once (one wave): the SMs it uses times blocks resident per SM."""

    @property
    def waves(self) -> int:
        return math.ceil(self.blocks / self.per_wave)


def kernel_shape(desc: KernelDesc, solo: float, gpu: GpuSpec, unknown_waves: int) -> KernelShape:
    """``desc``'s shape on ``gpu``; with no grid, ``unknown_waves`` waves of one block per SM."""
    sms = desc.max_sms(gpu.sm_count)
    if desc.blocks is None:
        return KernelShape(solo, unknown_waves * sms, sms)
    return KernelShape(solo, max(desc.blocks, 1), sms * features.resident_blocks(desc, gpu))


def choose_transform(shape: KernelShape, costs: TallyCosts, bound: float) -> KernelTransform:
    """Tally's per-kernel choice: the cheapest transformation whose yield latency is within
    ``bound``, else the one that yields soonest (see the module docstring)."""
    if shape.solo <= bound:
        return KernelTransform("none", 1)
    waves = shape.waves
    wave = shape.solo / waves
    # (yield latency, seconds added to the kernel, transformation)
    options = [
        (
            wave + costs.flag_check,
            waves * costs.flag_check,
            KernelTransform("preempt", waves, costs.flag_check, costs.resume),
        )
    ]
    for per_slice in range(1, waves):  # waves of blocks per slice; one slice is the kernel as is
        k = math.ceil(shape.blocks / (per_slice * shape.per_wave))
        if k < 2:
            continue
        slice_time = math.ceil(math.ceil(shape.blocks / k) / shape.per_wave) * wave + costs.slice_launch
        options.append(
            (slice_time, k * slice_time - shape.solo, KernelTransform("slice", k, slice_time - shape.solo / k))
        )
    within = [o for o in options if o[0] <= bound]
    if within:
        return min(within, key=lambda o: (o[1], o[0]))[2]
    return min(options, key=lambda o: (o[0], o[1]))[2]


def plan_transforms(profile: Profile, gpu: GpuSpec, costs: TallyCosts, bound: float) -> tuple[KernelTransform, ...]:
    """One transformation per kernel of ``profile`` (memory copies hold no SMs: as is)."""
    solo = profile.t[-1]
    return tuple(
        KernelTransform("none", 1)
        if desc.kind == "memcpy"
        else choose_transform(kernel_shape(desc, float(solo[k]), gpu, int(costs.unknown_waves)), costs, bound)
        for k, desc in enumerate(profile.kernels)
    )


class TallyPolicy(Policy):
    """Latency-critical apps at once and unrestricted; best-effort apps transformed, in the gaps."""

    name = "tally"

    def __init__(self, wait_bound: float | None = None) -> None:
        if wait_bound is not None and not (is_number(wait_bound) and wait_bound > 0):
            raise ValueError(
                f"wait_bound must be a positive number of seconds (default: the GPU's), got {wait_bound!r}"
            )
        self.wait_bound = wait_bound
        self.bound = wait_bound or math.nan
        """The wait bound in use: the GPU's default until :meth:`setup` knows the GPU."""
        self._plans: dict[int, tuple[KernelTransform, ...]] = {}
        """Per best-effort app index: its kernels' transformations."""

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        costs = TallyCosts.for_gpu(gpu)
        self.bound = costs.wait_bound if self.wait_bound is None else self.wait_bound
        self._plans = {a.index: plan_transforms(a.profile, gpu, costs, self.bound) for a in apps if a.best_effort}

    def best_effort(self, app: AppState, gpu: GpuSpec) -> tuple[KernelTransform, ...] | None:
        return self._plans.get(app.index)

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        # Latency-critical requests are launched first; best-effort ones queue in their
        # best-effort context, which the GPU runs only in the latency-critical apps' gaps.
        ordered = sorted(apps, key=lambda a: (a.best_effort, a.index))
        return launch_queued(ordered, lambda a: None)

    def describe(self) -> dict:
        chosen = [t.mechanism for plan in self._plans.values() for t in plan]
        return {
            "policy": self.name,
            "wait_bound_us": round(self.bound * 1e6, 3),
            "sliced": chosen.count("slice"),
            "preempted": chosen.count("preempt"),
        }
