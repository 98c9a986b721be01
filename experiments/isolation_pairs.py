"""Isolation across every pair of the shipped apps: each app beside each other one overloaded.

``isolation.yaml`` sweeps one neighbour's load beside one app (ResNet50 beside BERT).  This
script asks the same question of every ordered pair of the five shipped apps: the victim on a
closed loop B at 1/2, the neighbour at 1/2 under Poisson arrivals at 1x and 5x its quota's
throughput (1/T[50 %]).  Per cell it reports the victim's mean over its ISO target (its
requests arriving after the warmup) and the neighbour's service: its requests done between
the warmup and the end of the arrivals, while both apps run, per second, in multiples of its
quota's throughput (at 1x the ISO run's own queue grows without bound, so a little under 1 is
what ISO gives too; ISO is run for reference).  Counting its requests over the time to drain
them instead includes the drain after the arrivals and the victim's loop stop, with the GPU
to itself, and read 1.06-1.36x for BLESS where this reads 0.84-1.01x.  The issue's promise:
the victim at or below ISO (1 % tolerance) and the neighbour at its quota's throughput or more.

    python experiments/isolation_pairs.py > experiments/results/isolation_pairs.md   # ~2 min on 2 cores
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from bless.harness.config import config_from_dict
from bless.harness.run import run_config
from bless.profiles.catalog import load_app

APPS = ("vgg11", "resnet50", "resnet101", "nasnet", "bert")
POLICIES = ("bless", "gslice", "unbound", "iso")
TIMES = (1, 5)
GPU = "a100"
WARMUP = 0.5
DURATION = 3.0
BASE = {"gpu": GPU, "duration": DURATION, "warmup": 0.0, "seed": 0, "noise": 0.02}
"""Every request is kept (warmup 0): the neighbour's done between ``WARMUP`` and ``DURATION`` count
whenever they arrived; the victim's count from those arriving after ``WARMUP``."""


def share(app: str) -> float:
    """Requests per second the app's quota of 1/2 serves alone: 1 / T[50 %]."""
    return 1.0 / load_app(app, GPU).latency_at_quota(0.5)


def run(victim: str, neighbour: str, times: int, policy: str) -> tuple[float, float]:
    """The victim's mean over its ISO target and the neighbour's service over its quota's throughput."""
    quota_rate = share(neighbour)
    rate = times * quota_rate
    apps = [
        {"app": victim, "quota": 0.5, "load": "B"},
        {"app": neighbour, "quota": 0.5, "load": {"type": "poisson", "rate": rate}},
    ]
    mine, theirs = run_config(config_from_dict({**BASE, "policy": policy, "apps": apps})).apps
    mean = float(mine.latencies[mine.arrivals >= WARMUP].mean())
    ends = theirs.arrivals + theirs.latencies
    served = float(np.sum((ends > WARMUP) & (ends <= DURATION))) / (DURATION - WARMUP)
    return mean / mine.iso_latency, served / quota_rate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args(argv)
    jobs = [(v, n, t, p) for v in APPS for n in APPS for t in TIMES for p in POLICIES]
    with ProcessPoolExecutor(2) as pool:
        results = dict(zip(jobs, pool.map(run, *zip(*jobs))))
    for times in TIMES:
        print(f"\n## Neighbour at {times}x its quota's throughput: victim's mean / ISO; neighbour served / quota\n")
        print("| victim beside neighbour | " + " | ".join(POLICIES) + " |")
        print("|---|" + "---|" * len(POLICIES))
        for v in APPS:
            for n in APPS:
                cells = [results[v, n, times, p] for p in POLICIES]
                print(f"| {v} beside {n} | " + " | ".join(f"{x:.3f} / {s:.2f}" for x, s in cells) + " |")
    print()
    for p in POLICIES:
        victims = np.array([results[j][0] for j in jobs if j[3] == p])
        served = np.array([results[j][1] for j in jobs if j[3] == p and j[2] > 1])
        print(
            f"{p}: victims over ISO by more than 1 %: {int(np.sum(victims > 1.01))} of {len(victims)} "
            f"(worst {victims.max():.3f}); neighbours at 5x served at {served.min():.2f}-{served.max():.2f}x "
            "their quota's throughput."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
