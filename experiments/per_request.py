"""Per request, against the ISO run of the same arrivals: who finishes later than ISO, by how much.

The ISO run of an app's arrivals is its app alone on its quota: request ``i``
finishes at ``F_i = max(a_i, F_(i-1)) + T[quota]`` (noise aside): the deadline
that deadline pacing keeps.  For every request of every app this script measures
``end - F`` under a policy and reports the share of requests later than ISO
by more than one kernel (the app's longest kernel at its quota) and the p99
of the lateness, per experiment cell.  Closed loops have one request in
flight, so ``F = arrival + T[quota]``; open loops queue as ISO would.

The ISO policy's own run is reported beside the others: each app alone on a GPU of its own,
at the SMs its quota's context is granted.  Where it is late, ``T[quota]`` (the profile at the
quota's exact SM count) is more than the restriction mechanism grants (whole TPCs under MPS:
10 SMs for a tenth of an A100's 108), not a neighbour's doing.

    python experiments/per_request.py              # Fig. 13 pairs, isolation, Fig. 15 (4 apps); ~2 min
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


def cells() -> list[tuple[str, list[dict]]]:
    """Named app groups: the symmetric pairs of Fig. 13, ResNet50 beside a loaded BERT, Fig. 15's four."""
    out = []
    for app in APPS:
        for load in ("A", "B", "C"):
            out.append((f"{app} pair {load}", [{"app": app, "quota": 0.5, "load": load}] * 2))
    for load in ("poisson:20", "poisson:54", "poisson:100"):
        out.append(
            (
                f"resnet50 B + bert {load}",
                [{"app": "resnet50", "quota": 0.5, "load": "B"}, {"app": "bert", "quota": 0.5, "load": load}],
            )
        )
    quotas = {"resnet50": "10%", "vgg11": "20%", "bert": "30%", "resnet101": "40%"}
    for load in ("A", "B", "C"):
        out.append((f"4 apps {load}", [{"app": a, "quota": q, "load": load} for a, q in quotas.items()]))
    return out


def lateness(name: str, apps: list[dict], policy: str, duration: float) -> dict:
    result = run_config(
        config_from_dict(
            {
                "gpu": "a100",
                "duration": duration,
                "warmup": 0.0,
                "seed": 0,
                "noise": 0.02,
                "policy": policy,
                "apps": apps,
            }
        )
    )
    late = []
    beyond = []
    for app in result.apps:
        profile = load_app(app.app.split("#")[0], "a100")
        kernel = float(profile.t_at_sms(app.quota * profile.level_sms[-1]).max())
        order = np.argsort(app.arrivals, kind="stable")
        finish = np.empty(len(order))
        last = -np.inf
        for j, i in enumerate(order):
            last = max(app.arrivals[i], last) + app.iso_latency
            finish[j] = last
        ends = (app.arrivals + app.latencies)[order]
        d = ends - finish
        late.append(d)
        beyond.append(d > kernel)
    d = np.concatenate(late)
    return {
        "cell": name,
        "policy": policy,
        "requests": len(d),
        "beyond": float(np.mean(np.concatenate(beyond))),
        "p99": float(np.percentile(d, 99)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=2.0, help="seconds of arrivals per run (default 2)")
    args = ap.parse_args(argv)
    jobs = [(name, apps, policy, args.duration) for name, apps in cells() for policy in POLICIES]
    with ProcessPoolExecutor(2) as pool:
        rows = list(pool.map(lateness, *zip(*jobs)))
    by = {(r["cell"], r["policy"]): r for r in rows}
    head = " | ".join(f"{p}: later than ISO by > 1 kernel / p99 (ms)" for p in POLICIES)
    print(f"| cell | requests | {head} |")
    print("|---|---|" + "---|" * len(POLICIES))
    for name, _ in cells():
        parts = [f"{by[name, p]['beyond']:.1%} / {by[name, p]['p99'] * 1e3:+.2f}" for p in POLICIES]
        print(f"| {name} | {by[name, POLICIES[0]]['requests']} | " + " | ".join(parts) + " |")
    for p in POLICIES:
        share = np.mean([by[n, p]["beyond"] for n, _ in cells()])
        print(f"\n{p}: mean share of requests later than ISO by more than one kernel: {share:.1%}", end="")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
