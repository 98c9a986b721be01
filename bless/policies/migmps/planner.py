"""The MIG + MPS planner: chunks the A100 accepts, at most two apps in each, by predicted performance.

Pure functions over plain tables, so any layout it returns can be checked
against the placement rules (:mod:`bless.hw.mig`) without running anything.
Following Adufu, Ha and Kim's method:

1. **Candidate sets.**  Each app alone, and each pair whose ANTT in that chunk
   profile is below 1 (co-running beats taking turns) and that fits the slice's
   memory.  A *heavy* app (the policy's threshold) never shares a chunk.
2. **Layouts.**  Every multiset of MIG profiles the GPU accepts together
   (:func:`bless.hw.mig.layouts`) with as many chunks as app sets.
3. **Assignment.**  Every way to cover the apps with sets of one or two and put
   one set in each chunk; each app's relative performance ``rp`` is the fitted
   model's prediction for its set in its chunk plus the other-chunks term.
4. **Objective.**  Maximise the weighted speedup ``sum rp`` subject to the
   fairness floor ``min rp >= alpha`` (per app, which implies it per set).

The search is exhaustive (a few thousand candidates for 7 apps), so the plan is
the optimum of the model, not of a heuristic; ties keep the first found
(fewest chunks, then ``gpu.mig_profiles`` order), so plans are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bless.hw.gpus import GpuSpec, MigProfile
from bless.hw.mig import compute_slices, fits, layouts

MAX_PER_CHUNK = 2
"""Apps MPS co-locates in one chunk (the paper's rule: pairs)."""


class PlanInfeasible(ValueError):
    """No plan meets the constraints; the message says which and what to change."""


@dataclass(frozen=True)
class PlanInputs:
    """What the planner chooses from (made by the policy from profiling runs and the fitted model)."""

    apps: tuple[str, ...]
    heavy: tuple[bool, ...]
    """Per app: it gets a chunk of its own."""
    sets: Mapping[tuple[tuple[int, ...], str], tuple[float, ...]]
    """(apps in ascending order, MIG profile name) -> predicted rp of each, for every allowed set; absent: not allowed."""
    pressure: Mapping[tuple[int, str], float]
    """(app, MIG profile name) -> its DRAM pressure on the GPU from such a chunk (the other-chunks term's input)."""
    other_chunks: float = 0.0
    """rp change of an app per unit of DRAM pressure in the other chunks (the model's coefficient)."""
    why: tuple[str, ...] = ()
    """Why sets are absent (ANTT, memory, heavy apps)."""


@dataclass(frozen=True)
class Chunk:
    """One MIG instance of the plan and the apps MPS co-locates in it."""

    profile: MigProfile
    start: int
    """Memory slice it starts at."""
    apps: tuple[int, ...]
    predicted: tuple[float, ...]
    """Predicted rp of each app (throughput over alone on the full GPU)."""


@dataclass(frozen=True)
class MigMpsPlan:
    chunks: tuple[Chunk, ...]
    alpha: float
    why: tuple[str, ...]

    @property
    def weighted_speedup(self) -> float:
        return sum(sum(c.predicted) for c in self.chunks)

    @property
    def fairness(self) -> float:
        """The smallest predicted rp of any app."""
        return min(r for c in self.chunks for r in c.predicted)

    def describe(self, names: tuple[str, ...]) -> str:
        """``3g.20gb@4[resnet50+bert]+...``: each chunk's profile, start slot and apps."""
        return "+".join(f"{c.profile.name}@{c.start}[{'+'.join(names[i] for i in c.apps)}]" for c in self.chunks)


def plan(inputs: PlanInputs, gpu: GpuSpec, alpha: float) -> MigMpsPlan:
    """The plan of highest predicted weighted speedup whose every app's rp is at least ``alpha``."""
    n = len(inputs.apps)
    if not 0 <= alpha < 1:
        raise ValueError(f"migmps alpha must be in [0, 1) (a share of an app's performance alone), got {alpha}")
    most = compute_slices(gpu)
    if n == 0:
        raise PlanInfeasible("migmps: no apps to place")
    if n > MAX_PER_CHUNK * most:
        raise PlanInfeasible(
            f"migmps: {n} apps cannot share one {gpu.name}: at most {most} MIG instances of {MAX_PER_CHUNK} apps"
        )
    for i, name in enumerate(inputs.apps):
        if not any(((i,), p.name) in inputs.sets for p in gpu.mig_profiles):
            raise PlanInfeasible(
                f"migmps: app {i} ({name!r}) fits no MIG slice of {gpu.name} alone (memory); "
                f"the largest slice holds {gpu.mig_profiles[-1].name}; remove the app or use a larger GPU"
            )
    best: tuple[float, list[tuple[MigProfile, tuple[int, ...]]]] | None = None
    best_min = -1.0
    for count in range((n + MAX_PER_CHUNK - 1) // MAX_PER_CHUNK, min(n, most) + 1):
        for layout in layouts(gpu, count):
            for assignment in _assignments(inputs, list(layout), n):
                rps = _predict(inputs, assignment)
                low = min(r for chunk in rps for r in chunk)
                best_min = max(best_min, low)
                score = sum(sum(chunk) for chunk in rps)
                if low >= alpha and (best is None or score > best[0] + 1e-12):
                    best = (score, assignment)
    if best is None:
        if best_min < 0:
            raise PlanInfeasible(
                f"migmps: no layout of {gpu.name} holds these {n} apps at {MAX_PER_CHUNK} per slice "
                f"with the allowed sets ({'; '.join(inputs.why) or 'all allowed'})"
            )
        raise PlanInfeasible(
            f"migmps: no plan gives every app a relative performance of at least alpha = {alpha:.3f}; "
            f"the fairest plan's worst app gets {best_min:.3f}: set alpha to at most that, or run fewer apps"
        )
    assignment = best[1]
    starts = fits([p for p, _ in assignment], gpu)
    assert starts is not None  # layouts() only yields accepted layouts
    rps = _predict(inputs, assignment)
    chunks = tuple(
        Chunk(p, s, apps, rp) for (p, apps), s, rp in sorted(zip(assignment, starts, rps), key=lambda c: c[1])
    )
    return MigMpsPlan(chunks, alpha, inputs.why)


def _predict(inputs: PlanInputs, assignment: list[tuple[MigProfile, tuple[int, ...]]]) -> list[tuple[float, ...]]:
    """Each chunk's apps' rp: the set's prediction plus the other chunks' DRAM pressure term."""
    pressure = [sum(inputs.pressure[i, p.name] for i in apps) for p, apps in assignment]
    total = sum(pressure)
    return [
        tuple(r + inputs.other_chunks * (total - own) for r in inputs.sets[apps, p.name])
        for (p, apps), own in zip(assignment, pressure)
    ]


def _assignments(inputs: PlanInputs, layout: list[MigProfile], n: int):
    """Every cover of apps ``0..n-1`` by allowed sets, one per chunk of ``layout``.

    Chunks of one profile are interchangeable, so sets go into them in increasing
    order of their first app (each cover is yielded once)."""
    chosen: list[tuple[MigProfile, tuple[int, ...]]] = []
    free = [True] * n

    def fill(k: int, left: int):
        if k == len(layout):
            if left == 0:
                yield list(chosen)
            return
        chunks_left = len(layout) - k
        if left < chunks_left or left > MAX_PER_CHUNK * chunks_left:
            return
        p = layout[k]
        floor = chosen[-1][1][0] if k and layout[k - 1] == p else -1
        for a in range(floor + 1, n):
            if not free[a]:
                continue
            options = [(a,)] + [(a, b) for b in range(a + 1, n) if free[b] and not (inputs.heavy[a] or inputs.heavy[b])]
            for s in options:
                if (s, p.name) not in inputs.sets:
                    continue
                for i in s:
                    free[i] = False
                chosen.append((p, s))
                yield from fill(k + 1, left - len(s))
                chosen.pop()
                for i in s:
                    free[i] = True

    yield from fill(0, n)
