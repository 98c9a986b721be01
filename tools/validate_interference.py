#!/usr/bin/env python3
"""How well the simulated GPU reproduces real co-location slowdowns.

    .venv/bin/python tools/validate_interference.py \\
        --pairs ../shared/data/colocation/a100_mps_pairs/corun_resnet50.csv \\
        --solo  ../shared/data/colocation/a100_mps_pairs/solo.csv \\
        --mem   ../shared/data/colocation/a100_mps_pairs/mem_util.csv

Every row of the pairs file is replayed as it was measured (two MPS contexts at
``sm_pct`` and ``100 - sm_pct``, the co-runner looping; see
:mod:`bless.sim.corun`) with the A100 profiles of both models built from
the A100 kernel data, and the simulated slowdown is compared with the measured
one.  Prints each row, the excluded rows and why, then the mean and worst error
and the share of the measured excess slowdown reproduced: overall, per split,
per co-runner, per co-runner batch and, with ``--mem``, per co-runner DRAM
utilisation.  ``--fit`` searches the bandwidth coefficient that minimises the
mean error (the shipped value came from this on the shared file).  A few
minutes on 2 cores for the shared file.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bless.hw.interference import InterferenceModel
from bless.sim import corun
from bless.sim.corun import Exclusion, PairData, PairRow, RowResult


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=Path, required=True, help="co-run latencies (model,batch,sm_pct,corunner,...)")
    ap.add_argument("--solo", type=Path, required=True, help="solo latencies (model,batch,sm_pct,latency_s)")
    ap.add_argument("--mem", type=Path, help="DRAM/L2 utilisation per model, batch and sm_pct (optional)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--bandwidth", type=float, help="interference coefficient to use instead of the A100's")
    ap.add_argument("--fit", action="store_true", help="search the bandwidth coefficient minimising the mean error")
    ap.add_argument("--quiet", action="store_true", help="summaries only, no per-row lines")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")

    data = corun.load_pairs(args.pairs, args.solo, args.mem)
    usable, missing = _buildable(data.rows)
    data.excluded.extend(missing)
    if not usable:
        print("no row can be replayed:", *sorted({e.reason for e in data.excluded}), sep="\n  ")
        return 1
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        if args.fit:
            bandwidth = _fit(pool, usable, args.jobs)
            print(f"fitted bandwidth coefficient: {bandwidth:.3f} (put it in bless/hw/a100.toml [interference])")
        else:
            bandwidth = args.bandwidth if args.bandwidth is not None else InterferenceModel.for_gpu("a100").bandwidth
        results = _replay(pool, usable, InterferenceModel(bandwidth=bandwidth), args.jobs)
    _report(data, results, bandwidth, args.quiet)
    return 0


def _buildable(rows: list[PairRow]) -> tuple[list[PairRow], list[Exclusion]]:
    """Rows whose two models the A100 kernel data can give a profile for."""
    from bless.profiles.groundtruth.mps import available_models

    known = set(available_models())
    usable, missing = [], []
    for row in rows:
        unknown = [m for m in (row.model, row.corunner) if m not in known]
        if unknown:
            missing.append(
                Exclusion(
                    row,
                    f"no A100 profile for {', '.join(unknown)} (the A100 kernel data has {', '.join(sorted(known))})",
                )
            )
        else:
            usable.append(row)
    return usable, missing


def _replay_chunk(args: tuple[list[PairRow], float]) -> list[RowResult]:
    rows, bandwidth = args
    return corun.replay_rows(rows, InterferenceModel(bandwidth=bandwidth))


def _replay(pool, rows: list[PairRow], model: InterferenceModel, jobs: int) -> list[RowResult]:
    # Rows of one model and batch stay together: they share its profile and solo replay.
    by_point: dict[tuple, list[PairRow]] = defaultdict(list)
    for r in rows:
        by_point[(r.model, r.batch)].append(r)
    chunks: list[list[PairRow]] = [[] for _ in range(max(jobs, 1) * 4)]
    for _i, group in enumerate(sorted(by_point.values(), key=len, reverse=True)):
        min(chunks, key=len).extend(group)
    parts = pool.map(_replay_chunk, [(c, model.bandwidth) for c in chunks if c])
    results = {id(r.row): r for part in parts for r in part}
    order = {(r.model, r.batch, r.sm_pct, r.corunner, r.corunner_batch): i for i, r in enumerate(rows)}
    return sorted(
        results.values(),
        key=lambda r: order[(r.row.model, r.row.batch, r.row.sm_pct, r.row.corunner, r.row.corunner_batch)],
    )


def _fit(pool, rows: list[PairRow], jobs: int, lo: float = 0.0, hi: float = 2.0, tol: float = 0.01) -> float:
    """Golden-section search of the coefficient minimising the mean |error| over ``rows``."""
    cache: dict[float, float] = {}

    def loss(b: float) -> float:
        if b not in cache:
            res = _replay(pool, rows, InterferenceModel(bandwidth=b), jobs)
            cache[b] = corun.summarize("fit", res).mean_abs_error
            print(f"  bandwidth {b:.3f}: mean |error| {100 * cache[b]:.2f} %", flush=True)
        return cache[b]

    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    while b - a > tol:
        if loss(c) < loss(d):
            b = d
        else:
            a = c
        c, d = b - g * (b - a), a + g * (b - a)
    return round((a + b) / 2, 3)


def _report(data: PairData, results: list[RowResult], bandwidth: float, quiet: bool) -> None:
    print(
        f"# Co-location replay: {len(results)} rows replayed, {len(data.excluded)} excluded; "
        f"interference bandwidth coefficient {bandwidth:.3f}"
    )
    if not quiet:
        print()
        print("| model | batch | sm % | co-runner | batch | measured | simulated | error |")
        print("|---|---|---|---|---|---|---|---|")
        for r in results:
            w = r.row
            print(
                f"| {w.model} | {w.batch} | {w.sm_pct} | {w.corunner} | {w.corunner_batch} | "
                f"{w.slowdown:.3f} | {r.replay.slowdown:.3f} | {100 * r.error:+.1f} % |"
            )
    print()
    print("## Excluded rows")
    print()
    reasons: dict[str, list[Exclusion]] = defaultdict(list)
    for e in data.excluded:
        reasons[e.reason].append(e)
    for reason, group in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        points = sorted({(e.row.model, e.row.batch, e.row.sm_pct, e.detail) for e in group})
        where = ", ".join(f"{m} b{b}@{p}%" + (f" {d}" if d else "") for m, b, p, d in points)
        print(f"- {len(group)} rows: {reason} [{where}]")
    groups: list[tuple[str, dict[str, list[RowResult]]]] = [
        ("all rows", {"all": results}),
        ("per split (model's sm %)", _group(results, lambda r: f"{r.row.sm_pct} %")),
        ("per co-runner", _group(results, lambda r: r.row.corunner)),
        ("per co-runner batch", _group(results, lambda r: f"batch {r.row.corunner_batch}")),
        ("per model batch", _group(results, lambda r: f"batch {r.row.batch}")),
    ]
    if data.memory:
        groups.append(
            (
                "per co-runner DRAM utilisation (memory file, at its batch and share)",
                _group(results, lambda r: _dram_bin(data, r.row)),
            )
        )
    for title, grouped in groups:
        print()
        print(f"## {title}")
        print()
        print("| group | rows | measured | simulated | mean abs error | worst error | excess reproduced |")
        print("|---|---|---|---|---|---|---|")
        for name in sorted(grouped, key=_natural):
            s = corun.summarize(name, grouped[name])
            print(
                f"| {name} | {s.rows} | {s.measured:.3f} | {s.simulated:.3f} | {100 * s.mean_abs_error:.2f} % | "
                f"{100 * s.worst_error:+.1f} % | {100 * s.excess_reproduced:.0f} % |"
            )


def _group(results: list[RowResult], key) -> dict[str, list[RowResult]]:
    out: dict[str, list[RowResult]] = defaultdict(list)
    for r in results:
        out[key(r)].append(r)
    return out


def _dram_bin(data: PairData, row: PairRow) -> str:
    util = data.memory.get((row.corunner, row.corunner_batch, row.corunner_pct))
    if util is None:
        return "not in the memory file"
    lo = int(util[0] // 10 * 10)
    return f"DRAM {lo}-{lo + 10} %"


def _natural(name: str):
    digits = "".join(ch for ch in name if ch.isdigit())
    return (name.rstrip("0123456789 %-").split(" ")[0], int(digits) if digits else -1, name)


if __name__ == "__main__":
    raise SystemExit(main())
