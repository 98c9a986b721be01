"""Generate a KACE data set on the simulated GPU: every app alone, every pair together.

Each app runs in its own unrestricted context (full sharing, MPS at 100 %),
its requests back to back in a closed loop: a request's kernels are launched
on one stream, the last one with ``notify``, and the next request is launched
when it completes.  A run lasts at least ``seconds`` of virtual time and until
every app has completed :data:`MIN_REQUESTS` requests.  An app's throughput is
``(n - 1) / (t_n - t_1)`` over its completion times: whole request periods
only, so the start, where both apps begin together, does not bias it.

Pairs are unordered and include an app with a second instance of itself; a
pair whose memory does not fit on the GPU (deploy fails) is absent from P.
Runs are independent, so they are spread over worker processes.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import combinations_with_replacement
from pathlib import Path

import numpy as np

from bless.backend.closed_loop import ClosedLoopRun, run_closed_loops
from bless.colocation.kace import APP_FEATURES, SoloRun, app_features
from bless.colocation.kace_data import (
    FeatureTable,
    PairMeasurement,
    write_features,
    write_pairs,
)
from bless.hw.gpus import get_gpu
from bless.profiles.format import Profile


@dataclass(frozen=True, eq=False)
class Generated:
    features: FeatureTable
    pairs: tuple[PairMeasurement, ...]
    absent: tuple[tuple[str, str], ...]
    """Pairs that did not fit in GPU memory."""
    dropped_columns: dict[str, str]
    """Feature columns left out, with the reason."""
    wall_seconds: float
    kernels: int
    """Kernels simulated in all runs together."""


def closed_loop(profiles: Sequence[Profile], gpu: str, seconds: float) -> ClosedLoopRun | None:
    """Run the apps together in closed loops, each in its own unrestricted context, on a fresh
    simulated ``gpu``; None when they do not fit in memory (:func:`bless.backend.closed_loop.run_closed_loops`)."""
    from bless.sim.backend import SimBackend

    return run_closed_loops(SimBackend(gpu), profiles, seconds)


# ------------------------------------------------------------------ the whole data set
_PROFILES: list[Profile] = []


def _init_worker(profiles: list[Profile]) -> None:
    _PROFILES[:] = profiles


def _run(task: tuple[tuple[int, ...], str, float]) -> ClosedLoopRun | None:
    idx, gpu, seconds = task
    return closed_loop([_PROFILES[i] for i in idx], gpu, seconds)


def generate(profiles: Sequence[Profile], gpu: str, seconds: float, jobs: int = 1) -> Generated:
    """Solo-run and co-run every app and pair; derive F and P."""
    names = [p.app for p in profiles]
    if len(set(names)) != len(names):
        raise ValueError(f"app names must be distinct, got {', '.join(names)}")
    if seconds <= 0:
        raise ValueError(f"--seconds must be positive, got {seconds}")
    spec = get_gpu(gpu)
    t0 = time.perf_counter()
    tasks = [((i,), gpu, seconds) for i in range(len(profiles))]
    tasks += [(pair, gpu, seconds) for pair in combinations_with_replacement(range(len(profiles)), 2)]
    if jobs > 1:
        # spawn: forking a process whose other threads hold locks can deadlock the workers (see bless.harness.sweep).
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=spawn, initializer=_init_worker, initargs=(list(profiles),)) as pool:
            results = list(pool.map(_run, tasks))
    else:
        _init_worker(list(profiles))
        results = [_run(t) for t in tasks]
    solo_runs = results[: len(profiles)]
    for profile, run in zip(profiles, solo_runs):
        if run is None:
            raise ValueError(f"app {profile.app!r} alone does not fit in {spec.full_name} memory")
    rows = [
        app_features(p, SoloRun(run.throughputs[0], run.memory_bytes[0]), spec) for p, run in zip(profiles, solo_runs)
    ]
    table, dropped = _feature_table(names, rows)
    pairs, absent = [], []
    for (idx, _, _), run in zip(tasks[len(profiles) :], results[len(profiles) :]):
        a, b = names[idx[0]], names[idx[1]]
        if run is None:
            absent.append((a, b))
        else:
            pairs.append(PairMeasurement(a, b, run.throughputs[0], run.throughputs[1]))
    return Generated(
        features=table,
        pairs=tuple(pairs),
        absent=tuple(absent),
        dropped_columns=dropped,
        wall_seconds=time.perf_counter() - t0,
        kernels=sum(r.kernels for r in results if r is not None),
    )


def synthetic_apps(n: int, gpu: str) -> list[Profile]:
    """``n`` seeded synthetic apps that differ in kernel count, length, memory intensity and size."""
    from bless.profiles.synthetic import synthetic_profile

    return [
        synthetic_profile(
            f"syn{i}",
            gpu=gpu,
            n_kernels=20 + 15 * (i % 4),
            mean_us=(30.0, 80.0, 200.0)[(i // 3) % 3],
            dram_util=((0.02, 0.15), (0.1, 0.4), (0.3, 0.8))[i % 3],
            seed=i,
            memory_bytes=(1 + 3 * (i % 5)) << 30,
        )
        for i in range(n)
    ]


def _feature_table(names: list[str], rows: list[dict[str, float]]) -> tuple[FeatureTable, dict[str, str]]:
    """Columns every app has; the others are dropped with the apps that lack them."""
    columns, dropped = [], {}
    for col in APP_FEATURES:
        lacking = [n for n, row in zip(names, rows) if col not in row]
        if lacking:
            dropped[col] = f"unknown for {', '.join(lacking)} (no launch configuration in the profile)"
        else:
            columns.append(col)
    values = np.array([[row[c] for c in columns] for row in rows])
    return FeatureTable(tuple(names), tuple(columns), values, "features.csv"), dropped


def write(generated: Generated, out: str | Path, provenance: dict) -> tuple[Path, Path]:
    """Write ``features.csv``, ``pairs.csv`` and ``generate.json`` (how they were made)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    f = write_features(out / "features.csv", generated.features)
    p = write_pairs(out / "pairs.csv", generated.pairs)
    info = {
        **provenance,
        "pairs": len(generated.pairs),
        "absent_pairs": [list(a) for a in generated.absent],
        "dropped_columns": generated.dropped_columns,
        "wall_seconds": round(generated.wall_seconds, 3),
        "kernels_simulated": generated.kernels,
    }
    (out / "generate.json").write_text(json.dumps(info, indent=1) + "\n")
    return f, p
