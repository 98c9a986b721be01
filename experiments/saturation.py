"""Every app over its share at once: closed loops with several clients and no think time.

The isolation experiments overload one app at a time.  Here every app of a group is a closed
loop of several clients that send their next request as soon as an answer comes back (the
issue's "8 saturating clients": four apps, two clients each), so every app always has requests
queued behind its active one for the whole run.  Each is owed its quota's throughput (``1 /
T[quota]``), which on the simulated GPU's calibrated interference no schedule gives them all
at once: the steady-state estimate of ``overlap_feasibility.py`` (fluid, mean DRAM demands, every
way of sharing the GPU; an estimate, not a bound) gives each app at most the column *best*.  A
static split at the quotas (GSLICE; what ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` gives a user)
is the floor a sharing system must not fall below.  Per group and policy: each app's requests
served per second after the warmup, over its quota's throughput, worst app first.

    python experiments/saturation.py > experiments/results/saturation.md   # ~1 min on 2 cores
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from overlap_feasibility import RequestCurve, rate_points, time_needed  # sibling scripts: the estimate,
from random_groups import every_policy, policy_arguments  # and the command line and runs of the isolation ones

from bless.core.lifecycle import AppState
from bless.harness.config import config_from_dict, parse_quota
from bless.harness.run import run_config
from bless.hw.gpus import get_gpu
from bless.hw.interference import InterferenceModel
from bless.profiles.catalog import load_app

GPU = "a100"
POLICIES = ("bless", "gslice", "unbound", "temporal", "reef", "iso")
GROUPS: tuple[tuple[tuple[str, str, int], ...], ...] = (
    (("resnet50", "1/2", 2), ("bert", "1/2", 2)),
    (("resnet50", "1/4", 2), ("bert", "1/4", 2), ("vgg11", "1/4", 2), ("resnet101", "1/4", 2)),
    (("vgg11", "1/6", 3), ("nasnet", "1/3", 2), ("bert", "1/2", 2)),
)
"""Each app of a group as (model, quota, clients)."""
DURATION = 4.0
WARMUP = 0.5


def served(group: tuple[tuple[str, str, int], ...], policy: str, seed: int = 0) -> list[float]:
    """Each app's requests done per second after the warmup, over its quota's throughput."""
    apps = [
        {"app": model, "quota": quota, "load": {"type": "closed", "interval": 0.0, "clients": clients}}
        for model, quota, clients in group
    ]
    cfg = {"gpu": GPU, "duration": DURATION, "warmup": WARMUP, "seed": seed, "noise": 0.02, "policy": policy}
    result = run_config(config_from_dict({**cfg, "apps": apps}))
    return [a.served_rate * a.iso_latency for a in result.apps]


def best(group: tuple[tuple[str, str, int], ...]) -> float:
    """The steady-state estimate's most that every app of ``group`` can be served at once, over
    its quota's throughput."""
    gpu = get_gpu(GPU)
    profiles = [load_app(model, GPU) for model, _, _ in group]
    isos = [
        AppState(i, m, p, parse_quota(q, "quota")).iso_latency for i, ((m, q, _), p) in enumerate(zip(group, profiles))
    ]
    curves = [RequestCurve.with_target(p, iso, gpu) for p, iso in zip(profiles, isos)]
    unit = 1 if len(group) == 2 else gpu.level_sms()[0]
    points = rate_points(curves, gpu.sm_count, InterferenceModel.for_gpu(GPU), unit)
    return 1 / time_needed(points, [1 / iso for iso in isos])


def main(argv: list[str] | None = None) -> int:
    args = policy_arguments(__doc__, POLICIES).parse_args(argv)
    policies = args.policies.split(",")
    with ProcessPoolExecutor(args.jobs) as pool:
        results = every_policy(pool, served, GROUPS, policies)
        bests = dict(zip(GROUPS, pool.map(best, GROUPS)))
    print("\n## Saturating closed loops: each app's service over its quota's throughput\n")
    print(
        f"Simulated {GPU.upper()}, {DURATION:g} s runs measured from {WARMUP:g} s, seed 0; per policy the worst "
        "app, then each app in the group's order; *best*: the steady-state estimate's most for every app at once.\n"
    )
    print("| group (model quota x clients) | best | " + " | ".join(policies) + " |")
    print("|---|---|" + "---|" * len(policies))
    for g in GROUPS:
        name = ", ".join(f"{m} {q} x{c}" for m, q, c in g)
        cells = [f"**{min(results[g, p]):.2f}** ({' / '.join(f'{x:.2f}' for x in results[g, p])})" for p in policies]
        print(f"| {name} | {bests[g]:.3f} | " + " | ".join(cells) + " |")
    print()
    for p in policies:
        worst = [min(results[g, p]) for g in GROUPS]
        below = (
            sum(min(results[g, p]) < min(results[g, "gslice"]) - 0.01 for g in GROUPS) if "gslice" in policies else 0
        )
        print(
            f"{p}: worst app {min(worst):.2f}-{max(worst):.2f}x its quota's throughput; "
            f"groups whose worst app is more than 0.01 below GSLICE's: {below} of {len(GROUPS)}."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
