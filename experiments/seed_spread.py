"""How much a comparison of policies on one experiment moves with the seed alone.

Each experiment is stored at one seed (its YAML's ``seed``).  The seed draws the arrivals
(Poisson times, a trace's arrivals inside its buckets, exponential think times) and the kernel
noise, so a difference between two policies smaller than its spread over seeds says nothing
about which is faster.  This script re-runs every cell of an experiment under each policy at
each seed and reports a metric of the runs' summaries (``--metric``: by default the mean
latency over apps, ``latency_deviation_ms`` for Fig. 14's measure, ``worst_over_iso`` for
the largest of the apps' mean over their ISO target) averaged over the experiment's cells, as
``paper.py`` averages it, or their largest (``--cells max``), per seed and on average, and the first
policy's difference to each other one, per seed and on the mean, with its range over the
seeds and its standard deviation.  Policies are named (each with its default parameters).

    python experiments/seed_spread.py workload_d --policies bless,unbound --seeds 0-5 \\
        > experiments/results/workload_d_seeds.md      # ~12 min on 2 cores
    python experiments/seed_spread.py fig14 --metric latency_deviation_ms \\
        --policies bless,temporal,gslice,unbound,reef --seeds 0-5
    python experiments/seed_spread.py fig13_exp --metric worst_over_iso --cells max \\
        --policies bless,iso,gslice,unbound --seeds 0-5   # the worst app's mean over its ISO target

Needs the shared measurements for trace-driven experiments (``../shared/data`` or
``$BLESS_SHARED_DATA``).
"""

from __future__ import annotations

import argparse
import copy
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bless.harness.config import config_from_dict
from bless.harness.results import OVER_ISO
from bless.harness.run import run_config
from bless.harness.sweep import load_sweep

HERE = Path(__file__).parent


def parse_seeds(text: str) -> list[int]:
    """``0-5`` or ``0,3,7`` (or a mix: ``0-2,9``) as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            seeds += range(int(first), int(last or first) + 1)
        except ValueError:
            raise SystemExit(f"--seeds: {part!r} is neither a seed nor a range like 0-5") from None
    if not seeds:
        raise SystemExit("--seeds: give at least one seed, e.g. 0-5")
    return seeds


def cells(experiment: str) -> list[dict[str, Any]]:
    """The experiment's distinct run configurations with the policy left out."""
    return load_sweep(HERE / f"{experiment}.yaml").configs_without("policy")


WORST = "worst_over_iso"
"""The one metric that is not a key of the summary: :attr:`~bless.harness.results.RunResult.worst_over_iso`."""


def measure(cell: dict[str, Any], policy: str, seed: int, metric: str) -> float:
    """One run's ``metric``: a key of :meth:`~bless.harness.results.RunResult.summary`, or :data:`WORST`."""
    raw = copy.deepcopy(cell)
    raw.update(policy=policy, seed=seed)
    result = run_config(config_from_dict(raw))
    if metric == WORST:
        return result.worst_over_iso
    summary = result.summary()
    value = summary.get(metric)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        known = ", ".join(k for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        raise SystemExit(f"--metric: {metric!r} is not a number of a run's summary; use one of: {known}, {WORST}")
    return float(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", help="an experiment's name: experiments/<name>.yaml")
    ap.add_argument("--policies", default="bless,unbound", help="comma-separated; the first is compared to the others")
    ap.add_argument("--seeds", default="0-5", help="seeds, e.g. 0-5 or 0,3,7 (default 0-5)")
    ap.add_argument(
        "--metric", default="mean_latency_ms", help="a run summary's number to compare (default mean_latency_ms)"
    )
    ap.add_argument(
        "--cells",
        choices=("mean", "max"),
        default="mean",
        help="how a seed's cells combine: their mean (default) or the largest (for worst_over_iso: the worst app of any cell)",
    )
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time")
    args = ap.parse_args(argv)
    if not (HERE / f"{args.experiment}.yaml").is_file():
        raise SystemExit(f"experiment: no experiments/{args.experiment}.yaml")
    policies = [p for p in args.policies.split(",") if p]
    if len(policies) < 2:
        raise SystemExit("--policies: give at least two policies to compare, e.g. bless,unbound")
    seeds = parse_seeds(args.seeds)
    runs = cells(args.experiment)
    jobs = [(c, p, s, args.metric) for s in seeds for p in policies for c in runs]
    values = [measure(*jobs[0])]  # here, so that a metric no run has stops with its message
    if len(jobs) > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            values += pool.map(measure, *zip(*jobs[1:]))
    per_cell = np.array(values).reshape(len(seeds), len(policies), len(runs))
    per_seed = per_cell.max(axis=2) if args.cells == "max" else per_cell.mean(axis=2)
    first = policies[0]

    def versus(row: np.ndarray) -> str:
        return " | ".join(f"{row[0] / row[j] - 1:+.2%}" if row[j] else "-" for j in range(1, len(policies)))

    combined = "the largest of" if args.cells == "max" else "the mean over"
    print(f"## {args.experiment}: {args.metric}, {combined} its {len(runs)} cells, per seed\n")
    print("| seed | " + " | ".join(policies) + " | " + " | ".join(f"{first} vs {p}" for p in policies[1:]) + " |")
    print("|---|" + "---|" * (2 * len(policies) - 1))
    for s, row in zip(seeds, per_seed):
        print(f"| {s} | " + " | ".join(f"{v:.3f}" for v in row) + f" | {versus(row)} |")
    avg = per_seed.mean(axis=0)
    print("| **mean** | " + " | ".join(f"{v:.3f}" for v in avg) + f" | {versus(avg)} |")
    print()
    if args.metric == WORST:
        for j, p in enumerate(policies):
            print(f"{p}: above {OVER_ISO:g} at {int(np.sum(per_seed[:, j] > OVER_ISO))} of {len(seeds)} seeds")
    for j, p in enumerate(policies[1:], start=1):
        if not per_seed[:, j].all():
            print(f"{first} vs {p}: no ratio ({p}'s {args.metric} is 0 at some seed)")
            continue
        rel = per_seed[:, 0] / per_seed[:, j] - 1
        print(
            f"{first} vs {p}: below it at {int(np.sum(rel < 0))} of {len(seeds)} seeds; "
            f"per seed {rel.min():+.2%} to {rel.max():+.2%}, standard deviation {rel.std(ddof=1) if len(rel) > 1 else 0:.2%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
