"""Why two identical closed-loop apps fall into lockstep under the paper's pacing rule
(``pacing: paper``), and how far apart they settle under deadline pacing (the default).

The paper's scheduler gives each kernel to the request with the smallest ratio of
isolated-schedule progress to elapsed time, so while two requests overlap
they progress at the same ratio.  Take two identical apps at 50/50, A
arriving ``g`` before B.  A ends first, at latency ``L``, with ratio
``T/L`` (``T`` = T[50 %]); B, at the same ratio, still has ``T * g / L`` of
isolated work left, which it runs alone on the whole GPU ``T / T100`` times
faster than at its quota.  So B's latency is ``L - g + g * T100 / L`` and, with
fixed think times, the next stagger is

    g' = end_B - end_A = g * T100 / L  <  g.

The stagger shrinks by ``T100 / L`` every cycle: the pair converges to
lockstep, where both requests run the same kernels at the same time and the
best any configuration can do for a kernel is ``min(t[9], 2 * t[18])``,
which a static 9/9 split (ISO) already gets.  This script measures the
stagger cycle by cycle in the symmetric pairs of Fig. 13 and prints it next
to the predicted factor, and the same pairs under deadline pacing, where the
request that arrived first runs unrestricted and the other only as its
deadline requires, so the stagger does not shrink.

    python experiments/lockstep.py              # B and C, five apps, both rules, ~40 s
"""

from __future__ import annotations

import argparse
import itertools
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from bless.harness.config import config_from_dict
from bless.harness.run import run_config

APPS = ("vgg11", "resnet50", "resnet101", "nasnet", "bert")
SHOWN_CYCLES = 6


def staggers(app: str, load: str, duration: float, seed: int, pacing: str) -> dict:
    """Run the symmetric pair under BLESS with ``pacing``; per cycle, B's arrival minus A's."""
    cfg = config_from_dict(
        {
            "gpu": "a100",
            "duration": duration,
            "warmup": 0.0,
            "seed": seed,
            "noise": 0.02,
            "policy": {"name": "bless", "pacing": pacing},
            "apps": [{"app": app, "quota": 0.5, "load": load}, {"app": app, "quota": 0.5, "load": load}],
        }
    )
    result = run_config(cfg)
    first, second = result.apps
    n = min(len(first.arrivals), len(second.arrivals))
    gaps = np.abs(second.arrivals[:n] - first.arrivals[:n])
    latency = float(np.mean([first.latencies[0], second.latencies[0]]))
    return {
        "app": app,
        "load": load,
        "pacing": pacing,
        "gaps": gaps,
        "first_latency": latency,
        "solo": first.solo_latency,
        "iso": first.iso_latency,
        "mean": float(np.mean([first.mean, second.mean])),
    }


def measured_factor(gaps: np.ndarray, floor: float) -> float:
    """Median ratio of successive staggers while the stagger is above ``floor`` (noise)."""
    ratios = [b / a for a, b in itertools.pairwise(gaps) if a > floor]
    return float(np.median(ratios)) if ratios else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loads", default="B,C", help="comma-separated workloads (default B,C)")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds of arrivals per run (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    jobs = [
        (app, load, args.duration, args.seed, pacing)
        for pacing in ("paper", "deadline")
        for app in APPS
        for load in args.loads.split(",")
    ]
    with ProcessPoolExecutor(2) as pool:
        rows = list(pool.map(staggers, *zip(*jobs)))
    cycles = " | ".join(f"g{i}" for i in range(SHOWN_CYCLES))
    print(f"| pacing | pair | load | {cycles} | last 10 | measured factor | predicted T100/L | mean ms | ISO ms |")
    print("|---|---|---|" + "---|" * SHOWN_CYCLES + "---|---|---|---|---|")
    for r in rows:
        g = r["gaps"]
        shown = " | ".join(f"{x * 1e3:.2f}" for x in g[:SHOWN_CYCLES])
        factor = measured_factor(g, floor=0.02 * r["iso"])
        print(
            f"| {r['pacing']} | {r['app']} | {r['load']} | {shown} | {np.mean(g[-10:]) * 1e3:.2f} | {factor:.2f} | "
            f"{r['solo'] / r['first_latency']:.2f} | {r['mean'] * 1e3:.2f} | {r['iso'] * 1e3:.2f} |"
        )
    print("\nStaggers g_i in ms (|B's i-th arrival - A's|); factor: median g_(i+1)/g_i while g_i > 2 % of ISO.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
