"""Isolation at uneven quotas: a large closed loop beside a small app far over its share.

``isolation_pairs.py`` splits the GPU in halves.  Here the victim has most of it: each shipped
app on a closed loop at 15/18 or 16/18 of the GPU (its think 1/3 or 2/3 of its solo latency,
fixed), beside each shipped app at the rest of the GPU under Poisson arrivals at 5x its quota's
throughput.  In the loop's think time the small app has the GPU to itself and runs far ahead of
its own ISO queue; the question is whether what it keeps queued then holds the loop's next
request back.  Per cell: the loop's mean over its ISO target and the small app's service
(``random_groups.py``'s measures: requests done after the warmup per second, over its quota's
throughput, beside its due: what the ISO run of its arrivals would have done by the end).  The
promise: the loop at or below ISO (1 % tolerance), the small app served its due (0.01
tolerance).

    python experiments/isolation_uneven.py > experiments/results/isolation_uneven.md   # ~2 min on 2 cores
"""

from __future__ import annotations

import itertools
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from bless.harness.results import OVER_ISO

sys.path.insert(0, str(Path(__file__).parent))
# The sibling script's runs and measures, and its command line for a run of every policy:
from random_groups import SHIPPED, Member, every_policy, policy_arguments, run

POLICIES = ("bless", "gslice", "unbound", "iso")
QUOTAS = (15, 16)
"""The loop's quota in eighteenths of the GPU; the small app has the rest."""
INTERVALS = (1 / 3, 2 / 3)
"""The loop's think time, in multiples of its latency alone on the GPU."""
TIMES = 5
"""The small app's load, in multiples of its quota's throughput."""


def cells() -> list[tuple[str, int, float, str]]:
    """Every (loop's app, its quota in eighteenths, its think, small app) of the experiment."""
    return [(v, q, i, n) for v, n in itertools.product(SHIPPED, SHIPPED) for q in QUOTAS for i in INTERVALS]


def measure(cell: tuple[str, int, float, str], policy: str) -> tuple[float, float, float]:
    """The loop's mean over its ISO target and the small app's service and due, over its quota's throughput."""
    loop, quota, interval, small = cell
    group = [Member(small, 18 - quota, times=TIMES), Member(loop, quota, interval, "fixed")]
    worst, services = run(group, policy, 0)
    return (worst, *services[0])


def main(argv: list[str] | None = None) -> int:
    args = policy_arguments(__doc__, POLICIES).parse_args(argv)
    policies = args.policies.split(",")
    every = cells()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = every_policy(pool, measure, every, policies)
    print(
        f"\n## Loop's mean / ISO target; the small app at {TIMES}x its share: service / due (its quota's throughput)\n"
    )
    print("| loop (quota, think) beside small app | " + " | ".join(policies) + " |")
    print("|---|" + "---|" * len(policies))
    for c in every:
        loop, quota, interval, small = c
        row = " | ".join("{:.3f} / {:.2f} / {:.2f}".format(*results[c, p]) for p in policies)
        print(f"| {loop} {quota}/18, {interval:.2f} beside {small} {18 - quota}/18 | {row} |")
    print()
    for p in policies:
        loops = np.array([results[c, p][0] for c in every])
        served = np.array([results[c, p][1] for c in every])
        due = np.array([results[c, p][2] for c in every])
        print(
            f"{p}: loops over ISO by more than 1 %: {int(np.sum(loops > OVER_ISO))} of {len(loops)} "
            f"(worst {loops.max():.3f}); small apps served at {served.min():.2f}-{served.max():.2f}x their "
            f"quota's throughput, {int(np.sum(served < due - 0.01))} more than 0.01 below their due "
            f"({due.min():.2f}-{due.max():.2f}x)."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
