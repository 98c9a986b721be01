"""What the MIG + MPS planner knows about an app set in a chunk: profiled co-runs and a fitted model.

**Profiling.**  Every app of the batch alone, and every pair, runs in closed loops
(:func:`bless.backend.closed_loop.run_closed_loops`) inside a chunk of each MIG
profile: a device with the slice's memory and DRAM bandwidth
(:func:`bless.policies.mig.mig_slice_gpu`) and one MPS partition of the slice's
SMs that the apps share, unrestricted within it -- as two MPS clients inside one
MIG instance.  Each app also runs alone on the whole GPU, the reference of its
*relative performance* ``rp`` (throughput in the chunk over throughput alone on
the full GPU).  The runs are on the simulated GPU (a backend made by name, so the
policies layer stays backend-free); a set that does not fit the slice's memory is
recorded as such.

**ANTT** of a pair in a chunk: the time to finish one request of each together
over the time to run them back to back in the chunk, from steady-state
throughputs: ``max(1/X_a', 1/X_b') / (1/X_a + 1/X_b)`` (``X'`` co-run, ``X`` alone
in the chunk).  Below 1, co-locating beats taking turns.

**The least-squares model** predicts an app's ``rp`` in a chunk from the profile
features (:mod:`bless.profiles.features`, the numbers the simulator runs kernels
from) of the app and its partner, and a term for the other chunks:

=================  ==========================================================
``speed``          solo speed in the chunk's SMs over the full GPU's (the app's
                   ``rp`` alone with all the bandwidth it needs)
``partner``        ``speed`` x 1 if paired (the fixed cost of sharing)
``partner_sms``    ``speed`` x the partner's share of the chunk's SMs
``partner_dram``   ``speed`` x the partner's DRAM intensity
``both_dram``      ``speed`` x own x partner's DRAM intensity (contention)
``bandwidth``      ``speed`` x own DRAM intensity x speed / the slice's
                   bandwidth share (demand on the slice's channels)
``other_chunks``   DRAM pressure of the apps in the other chunks
``1``              intercept
=================  ==========================================================

It is fitted (ordinary least squares) on the profiled samples of the batch.
The simulator runs every chunk on a device of its own, so the ``other_chunks``
column is 0 in every sample and its coefficient is 0: the simulated MIG slices do
not interfere (real ones share power and, below the L2, nothing else; samples
from a real GPU measured in whole layouts would fit it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations_with_replacement

import numpy as np

from bless.backend.closed_loop import run_closed_loops
from bless.backend.interface import create_backend
from bless.hw.gpus import GpuSpec, MigProfile
from bless.policies.mig import mig_slice_gpu
from bless.profiles import features
from bless.profiles.format import Profile

COLUMNS = ("speed", "partner", "partner_sms", "partner_dram", "both_dram", "bandwidth", "other_chunks", "intercept")
CHUNK_PARTITION = "chunk"
"""Name of the MPS partition the apps of one chunk share (one cap: the slice's SMs)."""


@dataclass(frozen=True)
class AppTraits:
    """An app's profile features the model reads (per chunk profile where they depend on its SMs)."""

    name: str
    dram: float
    """DRAM intensity: bytes moved alone on the full GPU over its peak bandwidth x time, in [0, 1]."""
    speed: dict[str, float]
    """Per MIG profile name: solo speed at its SMs over the full GPU's."""
    sm_share: dict[str, float]
    """Per MIG profile name: duration-weighted share of the chunk's SMs its kernels occupy."""

    @classmethod
    def of(cls, profile: Profile, gpu: GpuSpec) -> AppTraits:
        curves = features.solo_curves(profile, gpu)
        full = curves[-1]
        spread = features.max_sms(profile, gpu)  # SMs each kernel's blocks spread over
        compute = spread > 0
        speed, share = {}, {}
        for p in gpu.mig_profiles:
            sms = p.compute_slices * gpu.mig_slice_sms
            speed[p.name] = float(full.sum() / curves[sms].sum())
            share[p.name] = float((np.minimum(spread, sms) / sms * full)[compute].sum() / full[compute].sum())
        dram = float(features.dram_seconds(profile, full).sum() / full.sum())
        return cls(profile.app, dram, speed, share)

    def pressure(self, chunk: MigProfile) -> float:
        """DRAM traffic this app puts on the GPU from a chunk, as a share of the full GPU's bandwidth."""
        return self.dram * self.speed[chunk.name]


def row(app: AppTraits, partner: AppTraits | None, chunk: MigProfile, gpu: GpuSpec, other: float) -> np.ndarray:
    """The model's inputs (:data:`COLUMNS`) for ``app`` in ``chunk`` beside ``partner``."""
    s = app.speed[chunk.name]
    bw = chunk.memory_slices / gpu.mig_memory_slices
    paired = partner is not None
    p_sms = partner.sm_share[chunk.name] if partner else 0.0
    p_dram = partner.dram if partner else 0.0
    return np.array([s, s * paired, s * p_sms, s * p_dram, s * app.dram * p_dram, s * app.dram * s / bw, other, 1.0])


@dataclass(frozen=True)
class SetRun:
    """One profiled app set in one chunk profile: each app's relative performance (None: not in memory)."""

    apps: tuple[int, ...]
    chunk: str
    rp: tuple[float, ...] | None
    alone: tuple[float, ...] | None
    """Each app's rp alone in the same chunk (for ANTT); None for single-app sets."""

    @property
    def antt(self) -> float:
        """Co-run time over back-to-back time in the chunk (1 or more for a single app: nothing to gain)."""
        if self.rp is None or self.alone is None:
            return float("inf")
        return max(1 / r for r in self.rp) / sum(1 / a for a in self.alone)


@dataclass(frozen=True)
class Profiled:
    """The batch's profiling runs: its distinct apps' traits and every set's run in every chunk."""

    traits: tuple[AppTraits, ...]
    runs: dict[tuple[tuple[int, ...], str], SetRun]


def profile_batch(profiles: Sequence[Profile], gpu: GpuSpec, seconds: float) -> Profiled:
    """Profile the distinct apps of ``profiles`` (by name) alone and in pairs in every chunk profile of ``gpu``."""
    distinct = list({p.app: p for p in profiles}.values())
    full = []
    for p in distinct:
        x = _throughputs(gpu, [p], seconds, None)
        if x is None:
            raise ValueError(f"app {p.app!r} does not fit in {gpu.full_name} memory even alone")
        full.append(x[0])
    runs: dict[tuple[tuple[int, ...], str], SetRun] = {}
    for chunk in gpu.mig_profiles:
        sms = chunk.compute_slices * gpu.mig_slice_sms
        slice_gpu = mig_slice_gpu(gpu, chunk)
        solo: dict[int, float] = {}
        for i, p in enumerate(distinct):
            x = _throughputs(slice_gpu, [p], seconds, sms)
            rp: tuple[float, ...] | None = None if x is None else (x[0] / full[i],)
            runs[(i,), chunk.name] = SetRun((i,), chunk.name, rp, None)
            if rp is not None:
                solo[i] = rp[0]
        for a, b in combinations_with_replacement(range(len(distinct)), 2):
            x = _throughputs(slice_gpu, [distinct[a], distinct[b]], seconds, sms) if {a, b} <= set(solo) else None
            rp = None if x is None else (x[0] / full[a], x[1] / full[b])
            runs[(a, b), chunk.name] = SetRun((a, b), chunk.name, rp, None if rp is None else (solo[a], solo[b]))
    return Profiled(tuple(AppTraits.of(p, gpu) for p in distinct), runs)


def _throughputs(gpu: GpuSpec, profiles: list[Profile], seconds: float, sms: int | None) -> tuple[float, ...] | None:
    backend = create_backend("sim", gpu=gpu, clock="virtual")
    run = run_closed_loops(backend, profiles, seconds, sm_limit=sms, shared=CHUNK_PARTITION if sms else None)
    return None if run is None else run.throughputs


@dataclass(frozen=True)
class FittedModel:
    """Least-squares coefficients over :data:`COLUMNS` and how well they fit the samples."""

    coef: np.ndarray
    samples: int
    rmse: float
    """Root-mean-square error of rp on the samples it was fitted on."""

    @classmethod
    def fit(cls, profiled: Profiled, gpu: GpuSpec) -> FittedModel:
        chunks = {p.name: p for p in gpu.mig_profiles}
        x, y = [], []
        for (apps, chunk), run in profiled.runs.items():
            if run.rp is None:
                continue
            for k, i in enumerate(apps):
                partner = profiled.traits[apps[1 - k]] if len(apps) == 2 else None
                x.append(row(profiled.traits[i], partner, chunks[chunk], gpu, 0.0))
                y.append(run.rp[k])
        if len(y) < len(COLUMNS):
            raise ValueError(f"migmps: {len(y)} profiled samples cannot fit {len(COLUMNS)} coefficients")
        xs, ys = np.array(x), np.array(y)
        coef = np.linalg.lstsq(xs, ys, rcond=None)[0]
        rmse = float(np.sqrt(np.mean((xs @ coef - ys) ** 2)))
        return cls(coef, len(y), rmse)

    def predict(self, app: AppTraits, partner: AppTraits | None, chunk: MigProfile, gpu: GpuSpec) -> float:
        """rp of ``app`` in ``chunk`` beside ``partner``, with no load in the other chunks."""
        return float(row(app, partner, chunk, gpu, 0.0) @ self.coef)

    @property
    def other_chunks(self) -> float:
        """The coefficient of the other chunks' DRAM pressure."""
        return float(self.coef[COLUMNS.index("other_chunks")])
