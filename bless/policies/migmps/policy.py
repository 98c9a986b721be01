"""The ``migmps`` policy: MIG slices with MPS inside, planned by :mod:`bless.policies.migmps.planner`.

At the start of a run (``isolated_groups``) it profiles the batch on the
simulated GPU (:func:`~bless.policies.migmps.model.profile_batch`), fits the
least-squares model, plans, and hands the runner one group per chunk: the
chunk's apps on a device with the slice's memory and DRAM bandwidth
(:func:`bless.policies.mig.mig_slice_gpu`, as the ``mig`` policy models a
slice), shared by a :class:`ChunkPolicy`.

**MPS inside a chunk: unrestricted within the slice.**  The two apps' contexts
are one MPS partition capped at the slice's SMs (``g x 14``), which they share
as two MPS clients with no active-thread percentage share a MIG instance; each
app may use every SM of the slice the other leaves idle.  (Per-app caps would
need a split the paper does not give; the profiling runs that fit the model use
the same sharing, so model and run agree.)  Memory is split by the slices: the
planner only places sets that fit their slice (the profiling run's deploy
fails otherwise), and says so when an app fits none.

Quotas play no part in the plan; they still set each app's ISO target, the
latency the results compare against.
"""

from __future__ import annotations

from typing import Any

from bless.core.lifecycle import AppState
from bless.core.policy import Decision, IsolatedGroup, Policy
from bless.hw.gpus import GpuSpec
from bless.policies.common import launch_queued
from bless.policies.mig import mig_slice_gpu
from bless.policies.migmps.model import CHUNK_PARTITION, FittedModel, Profiled, profile_batch
from bless.policies.migmps.planner import MigMpsPlan, PlanInputs, plan

ALPHA = 0.1
"""Default fairness floor: every app keeps at least 10 % of its throughput alone on the full GPU.
Assumption: the issue asks for a floor but we could not confirm the paper's value; with seven
apps on seven 1g slices each gets about 1/7 x its 1g speed, so 0.1 binds only for the worst sets."""
HEAVY_DRAM = 0.3
"""Default heaviness threshold: an app whose kernels use 30 % or more of the peak DRAM bandwidth
alone (duration-weighted) gets a chunk of its own.  Assumption: on the simulated GPU interference
is DRAM contention, and the catalog's inference apps lie at 0.12-0.26 and VGG11 and the training
apps at 0.31-0.35, so 0.3 separates the bandwidth-bound ones."""
PROFILE_SECONDS = 0.05
"""Virtual seconds each profiling co-run lasts at least (and until every app finished 4 requests).
Assumption: steady-state throughputs on the deterministic simulator move by under 1 % beyond it."""


class ChunkPolicy(Policy):
    """The apps of one MIG chunk sharing its SMs through one MPS partition; requests launch whole."""

    name = "migmps-chunk"

    def __init__(self, sms: int) -> None:
        self.sms = sms

    def context_limits(self, app: AppState, gpu: GpuSpec) -> list[int | None]:
        return [self.sms]

    def shared_partition(self, app: AppState) -> str | None:
        return CHUNK_PARTITION

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        return launch_queued(apps, lambda app: self.sms)


class MigMpsPolicy(Policy):
    """MIG slices with MPS inside: a planner picks the slices and at most two apps per slice."""

    name = "migmps"
    isolated = True

    def __init__(
        self,
        alpha: float = ALPHA,
        heavy_dram: float = HEAVY_DRAM,
        profile_seconds: float = PROFILE_SECONDS,
        mechanism: str = "mps",
    ) -> None:
        if not 0 <= alpha < 1:
            raise ValueError(f"migmps alpha must be in [0, 1) (a share of an app's performance alone), got {alpha}")
        if not 0 < heavy_dram <= 1:
            raise ValueError(
                f"migmps heavy_dram must be a share of the peak DRAM bandwidth in (0, 1], got {heavy_dram}"
            )
        if not profile_seconds > 0:
            raise ValueError(f"migmps profile_seconds must be > 0, got {profile_seconds}")
        if mechanism != "mps":
            raise ValueError(
                f"migmps co-locates apps with MPS inside each slice; mechanism must be 'mps', got {mechanism!r}"
            )
        self.alpha = alpha
        self.heavy_dram = heavy_dram
        self.profile_seconds = profile_seconds
        self.plan: MigMpsPlan | None = None
        self.model: FittedModel | None = None
        self._names: tuple[str, ...] = ()

    def inputs(self, apps: list[AppState], gpu: GpuSpec) -> tuple[PlanInputs, FittedModel]:
        """Profile ``apps`` on ``gpu``'s slices, fit the model and tabulate what the planner chooses from."""
        profiled = profile_batch([a.profile for a in apps], gpu, self.profile_seconds)
        model = FittedModel.fit(profiled, gpu)
        return plan_inputs(profiled, model, [a.profile.app for a in apps], gpu, self.heavy_dram), model

    def isolated_groups(self, apps: list[AppState], gpu: GpuSpec) -> list[IsolatedGroup]:
        if not gpu.mig_profiles:
            raise ValueError(f"migmps needs MIG; no MIG profiles are modelled for {gpu.name}")
        inputs, self.model = self.inputs(apps, gpu)
        self._names = tuple(a.name for a in apps)
        self.plan = plan(inputs, gpu, self.alpha)
        return [
            IsolatedGroup(
                tuple(apps[i].index for i in c.apps),
                mig_slice_gpu(gpu, c.profile),
                ChunkPolicy(c.profile.compute_slices * gpu.mig_slice_sms),
            )
            for c in self.plan.chunks
        ]

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        raise RuntimeError("migmps runs each MIG slice on a device of its own; its ChunkPolicy steps (isolated_groups)")

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"policy": self.name, "alpha": self.alpha, "heavy_dram": self.heavy_dram}
        if self.plan is not None and self.model is not None:
            out["slices"] = self.plan.describe(self._names)
            out["predicted_weighted_speedup"] = round(self.plan.weighted_speedup, 4)
            out["predicted_fairness"] = round(self.plan.fairness, 4)
            out["model_rmse"] = round(self.model.rmse, 4)
        return out


def plan_inputs(
    profiled: Profiled, model: FittedModel, batch: list[str], gpu: GpuSpec, heavy_dram: float
) -> PlanInputs:
    """The planner's tables for the batch (app names, repeats allowed) from the profiled runs and the model.

    A set is allowed in a chunk profile when its profiling run fitted in the slice's memory and,
    for a pair, its measured ANTT there is below 1 and neither app is heavy; its rp is the model's.
    """
    index = {t.name: k for k, t in enumerate(profiled.traits)}
    traits = [profiled.traits[index[name]] for name in batch]
    heavy = tuple(t.dram >= heavy_dram for t in traits)
    sets: dict[tuple[tuple[int, ...], str], tuple[float, ...]] = {}
    why = [
        f"{t.name} is heavy (DRAM {t.dram:.2f} >= {heavy_dram}): a chunk of its own" for t, h in zip(traits, heavy) if h
    ]
    for chunk in gpu.mig_profiles:
        for i, t in enumerate(traits):
            if profiled.runs[(index[t.name],), chunk.name].rp is None:
                why.append(f"{t.name} does not fit {chunk.name} memory")
                continue
            sets[(i,), chunk.name] = (model.predict(t, None, chunk, gpu),)
            for j in range(i + 1, len(traits)):
                u = traits[j]
                if heavy[i] or heavy[j]:
                    continue
                key = tuple(sorted((index[t.name], index[u.name])))
                run = profiled.runs[key, chunk.name]
                if run.rp is None:
                    why.append(f"{t.name}+{u.name} do not fit {chunk.name} memory")
                elif run.antt >= 1:
                    why.append(f"{t.name}+{u.name} in {chunk.name}: ANTT {run.antt:.2f} >= 1")
                else:
                    sets[(i, j), chunk.name] = (model.predict(t, u, chunk, gpu), model.predict(u, t, chunk, gpu))
    pressure = {(i, c.name): t.pressure(c) for i, t in enumerate(traits) for c in gpu.mig_profiles}
    return PlanInputs(tuple(batch), heavy, sets, pressure, model.other_chunks, tuple(why))
