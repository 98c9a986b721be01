"""Real co-location measurements replayed on the simulated GPU.

The data (``../shared/data/colocation/a100_mps_pairs``, see its README): a model
runs as one MPS client at ``sm_pct`` % active threads while a second client
loops a co-runner at ``100 - sm_pct`` %; the pairs file gives the model's mean
latency, the solo file the model alone at each ``sm_pct``, the memory file DRAM
and L2 utilisation.  Each row is replayed as it was measured:

* both apps get their ground-truth A100 profile at their batch
  (:func:`bless.profiles.groundtruth.apps.build_inference`: every model of the A100
  kernel data);
* two MPS contexts capped at ``mps_sms(sm_pct)`` and ``mps_sms(100 - sm_pct)``
  SMs (whole TPCs, so the caps may add up to more than the GPU);
* each app is a loop of synchronous inferences, as the harness ran them: the
  host issues an inference's kernels one every :data:`HARNESS_LAUNCH_S`
  (PyTorch eager's launch cost, which bounds small batches) and starts the next
  inference when the last one ended; the co-runner loops for as long as the
  model is measured.

The measured and simulated slowdowns (co-run latency over solo latency at the
same ``sm_pct``) are compared; scaling errors of the profiles cancel in the
ratio, so the comparison isolates the interference model.

**Host-bound rows.**  Where the measuring harness, not the GPU, bounds the model
(small batches: PyTorch eager launches ~20 us a kernel), any co-runner adds a
fixed 1.3-1.6x through the host, which no GPU model should reproduce.  A row is
*host-bound* when the co-runners of the smallest batch in the file (batch 1: a
few per cent of GPU work) already slow the model at that batch and ``sm_pct``
by more than :data:`HOST_BOUND_SLOWDOWN` (their median); those rows are excluded
and listed with the reason.
"""

from __future__ import annotations

import csv
import functools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bless.hw.gpus import A100
from bless.hw.interference import InterferenceModel
from bless.profiles.format import Profile
from bless.profiles.groundtruth.mps import mps_sms
from bless.sim.engine import Engine, KernelRun
from bless.sim.kernels import SimApp

HOST_BOUND_SLOWDOWN = 1.06
"""Median slowdown from the lightest co-runners above which a row is host-bound.  In the shared
file the median over the five batch-1 co-runners is 1.021-1.048 at the GPU-bound points
(ResNet50 batch 16-64, batch 4-8 at 20 %), 1.086 at batch 8 and 40 %, where the solo latency
already flattens with more SMs, and 1.16-1.48 at the host-bound ones (batch 1-2, batch 4 at
40-80 %, batch 8 at 50-80 %); a batch-1 co-runner's GPU work accounts for 1-3 % on the
simulated GPU, so a point past 1.06 is dominated by the host."""

HARNESS_LAUNCH_S = 20e-6
"""Host time per kernel launch of the measuring harness (PyTorch eager).  Source: the solo
file's host-bound points, whose latency does not change with the SMs: ResNet50 batch 1-2
4.76 ms over its 230 kernels (20.7 us), MobileNet batch 1 4.58 ms over 178 (25.7 us),
Inception batch 1 8.34 ms over 500 (16.7 us), ResNet152 batch 1 13.0 ms over 570 (22.8 us);
their median, rounded."""

WARMUP_ITERATIONS = 1
MEASURED_ITERATIONS = 3


@dataclass(frozen=True)
class PairRow:
    """One measured co-location: ``model`` at ``sm_pct`` beside ``corunner`` at the rest."""

    model: str
    batch: int
    sm_pct: int
    corunner: str
    corunner_batch: int
    latency_s: float
    solo_latency_s: float | None
    """The model alone at ``sm_pct`` (the solo file); None if the file lacks it."""

    @property
    def slowdown(self) -> float:
        return self.latency_s / self.solo_latency_s if self.solo_latency_s else math.nan

    @property
    def corunner_pct(self) -> int:
        return 100 - self.sm_pct


@dataclass(frozen=True)
class Exclusion:
    """A row left out of the comparison: why (a category) and the evidence at its point."""

    row: PairRow
    reason: str
    detail: str = ""


@dataclass
class PairData:
    """A pairs file joined with its solo file, split into usable and excluded rows."""

    rows: list[PairRow]
    excluded: list[Exclusion] = field(default_factory=list)
    memory: dict[tuple[str, int, int], tuple[float, float]] = field(default_factory=dict)
    """(model, batch, sm_pct) -> (DRAM %, L2 %) from the memory file, if given."""


def _read_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(required)}")
        return list(reader)


def load_pairs(pairs: Path, solo: Path, mem: Path | None = None) -> PairData:
    """Read a pairs file and its solo (and memory) file; mark host-bound and unmatched rows."""
    solo_lat = {
        (r["model"], int(r["batch"]), int(r["sm_pct"])): float(r["latency_s"])
        for r in _read_csv(solo, ("model", "batch", "sm_pct", "latency_s"))
    }
    rows = [
        PairRow(
            model=r["model"],
            batch=int(r["batch"]),
            sm_pct=int(r["sm_pct"]),
            corunner=r["corunner"],
            corunner_batch=int(r["corunner_batch"]),
            latency_s=float(r["latency_s"]),
            solo_latency_s=solo_lat.get((r["model"], int(r["batch"]), int(r["sm_pct"]))),
        )
        for r in _read_csv(pairs, ("model", "batch", "sm_pct", "corunner", "corunner_batch", "latency_s"))
    ]
    memory = {}
    if mem is not None:
        for r in _read_csv(mem, ("model", "batch", "sm_pct", "dram_util_pct", "l2_util_pct")):
            memory[(r["model"], int(r["batch"]), int(r["sm_pct"]))] = (
                float(r["dram_util_pct"]),
                float(r["l2_util_pct"]),
            )
    data = PairData([], [], memory)
    light = _lightest_corunner_slowdowns(rows)
    for row in rows:
        if row.solo_latency_s is None:
            data.excluded.append(Exclusion(row, "no solo latency at its batch and sm_pct in the solo file"))
            continue
        s = light.get((row.model, row.batch, row.sm_pct))
        if s is not None and s > HOST_BOUND_SLOWDOWN:
            data.excluded.append(
                Exclusion(
                    row,
                    f"host-bound: the lightest co-runners already slow it more than {HOST_BOUND_SLOWDOWN}x",
                    f"{s:.2f}x",
                )
            )
            continue
        data.rows.append(row)
    return data


def _lightest_corunner_slowdowns(rows: list[PairRow]) -> dict[tuple[str, int, int], float]:
    """Per (model, batch, sm_pct): median slowdown caused by the co-runners of the file's smallest batch."""
    smallest = min((r.corunner_batch for r in rows), default=1)
    acc: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for r in rows:
        if r.corunner_batch == smallest and r.solo_latency_s:
            acc[(r.model, r.batch, r.sm_pct)].append(r.slowdown)
    return {k: statistics.median(v) for k, v in acc.items()}


# ------------------------------------------------------------------ replay
@dataclass(frozen=True)
class Replay:
    """The model's simulated latency alone and beside its co-runner, at one split."""

    solo_s: float
    corun_s: float

    @property
    def slowdown(self) -> float:
        return self.corun_s / self.solo_s


def _loop(engine: Engine, app: SimApp, stream, runs: list[list[KernelRun]], on_end) -> None:
    """Issue one inference: its kernels one launch cost apart, from now."""
    t0 = engine.now
    n = len(app.kernels)
    batch = []
    for i, k in enumerate(app.kernels):
        batch.append(engine.launch(stream, k, t0 + (i + 1) * HARNESS_LAUNCH_S, on_done=on_end if i == n - 1 else None))
    runs.append(batch)


def simulate_latency(
    model: Profile,
    sm_pct: int,
    corunner: Profile | None = None,
    *,
    interference: InterferenceModel | None = None,
    iterations: int = MEASURED_ITERATIONS,
) -> tuple[float, list[list[KernelRun]], list[list[KernelRun]]]:
    """Mean latency of ``model`` at ``sm_pct`` % (alone, or beside ``corunner`` looping at the rest).

    Returns the mean over ``iterations`` inferences after :data:`WARMUP_ITERATIONS`, and the
    kernel runs of both apps (per inference) for analysis.
    """
    engine = Engine(
        A100.sm_count,
        interference=interference or InterferenceModel.for_gpu(A100.name),
        context_switch=0.0,
        event_latency=0.0,
    )
    victim = SimApp.from_profile(model, A100)
    v_stream = engine.create_stream(engine.create_context(mps_sms(sm_pct), "model"))
    v_runs: list[list[KernelRun]] = []
    c_runs: list[list[KernelRun]] = []
    total = WARMUP_ITERATIONS + iterations
    state = {"done": 0}

    def victim_end(run: KernelRun) -> None:
        state["done"] += 1
        if state["done"] < total:
            _loop(engine, victim, v_stream, v_runs, victim_end)
        else:
            engine.halt()

    if corunner is not None:
        other = SimApp.from_profile(corunner, A100)
        c_stream = engine.create_stream(engine.create_context(mps_sms(100 - sm_pct), "corunner"))

        def corunner_end(run: KernelRun) -> None:
            if state["done"] < total:
                _loop(engine, other, c_stream, c_runs, corunner_end)

        # The co-runner is already looping when the model starts (the harness starts it first).
        _loop(engine, other, c_stream, c_runs, corunner_end)
    _loop(engine, victim, v_stream, v_runs, victim_end)
    engine.run()
    ends = [_ended(batch[-1]) for batch in v_runs]
    latency = statistics.fmean(ends[i] - ends[i - 1] for i in range(WARMUP_ITERATIONS, min(total, len(ends))))
    return latency, v_runs, c_runs


# ------------------------------------------------------------------ validation
@dataclass(frozen=True)
class RowResult:
    """A measured row beside its replay."""

    row: PairRow
    replay: Replay

    @property
    def error(self) -> float:
        """Relative error of the simulated slowdown (equally: of the co-run latency given the solo one)."""
        return self.replay.slowdown / self.row.slowdown - 1.0


@dataclass(frozen=True)
class GroupSummary:
    """Errors over a group of rows (a split, a co-runner, or all)."""

    name: str
    rows: int
    measured: float
    """Mean measured slowdown."""
    simulated: float
    mean_abs_error: float
    worst_error: float
    excess_reproduced: float
    """Simulated excess slowdown (sum of slowdown - 1) over the measured one."""


def summarize(name: str, results: list[RowResult]) -> GroupSummary:
    measured = [r.row.slowdown for r in results]
    simulated = [r.replay.slowdown for r in results]
    excess = sum(m - 1.0 for m in measured)
    return GroupSummary(
        name=name,
        rows=len(results),
        measured=statistics.fmean(measured),
        simulated=statistics.fmean(simulated),
        mean_abs_error=statistics.fmean(abs(r.error) for r in results),
        worst_error=max((r.error for r in results), key=abs),
        excess_reproduced=sum(s - 1.0 for s in simulated) / excess if excess > 0 else math.nan,
    )


def profile_for(model: str, batch: int) -> Profile:
    """The A100 ground-truth inference profile of any model of the A100 kernel data, cached."""
    return _profile(model, batch)


@functools.cache
def _profile(model: str, batch: int) -> Profile:
    from bless.profiles.groundtruth import apps

    return apps.build_inference(model, batch, _twins())[0]


@functools.lru_cache(maxsize=1)
def _twins():
    from bless.profiles.groundtruth import apps

    return apps.default_twins()


def replay_rows(rows: list[PairRow], interference: InterferenceModel | None = None) -> list[RowResult]:
    """Replay each row (profiles built on first use; the model's solo replay is shared by its rows)."""
    solo: dict[tuple[str, int, int], float] = {}
    out = []
    for row in rows:
        model = profile_for(row.model, row.batch)
        key = (row.model, row.batch, row.sm_pct)
        if key not in solo:
            solo[key] = simulate_latency(model, row.sm_pct, None, interference=interference)[0]
        corun, _, _ = simulate_latency(
            model, row.sm_pct, profile_for(row.corunner, row.corunner_batch), interference=interference
        )
        out.append(RowResult(row, Replay(solo[key], corun)))
    return out


def _ended(run: KernelRun) -> float:
    """When ``run`` ended (the engine has run it to completion)."""
    if run.end is None:
        raise RuntimeError(f"kernel {run.kernel.name!r} never ended: the co-run replay stopped early")
    return run.end
