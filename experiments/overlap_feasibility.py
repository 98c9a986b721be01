"""Two requests that arrive together: can both finish by their ISO latency on a shared GPU?

In Fig. 13's closed loops (and the held-out pairs of ``heldout.py``) the two
apps' requests overlap for most of their lives, and where BLESS misses an ISO
target it is in the requests whose neighbour runs the whole time.  This asks,
for one request of each app arriving together on an idle GPU, what the best
schedule could do: the least ``lam`` such that both finish by ``lam x`` their
ISO latency (``T[quota]``).

The model is a fluid one over whole requests.  At any instant the GPU runs app
A alone on every SM, app B alone, or both side by side with ``n`` and ``N - n``
SMs (every ``n``); time may be divided among these freely (the convex hull of
their rates), so a linear program decides feasibility and bisection finds
``lam``.  A request's time at ``n`` SMs is the sum of its kernels' curves
(``bless.profiles.features.solo_curves``); side by side each is stretched by
the simulated GPU's interference term (``bless/sim/engine.py``) with each
app's *mean* DRAM demand at its SM count.

**Not a bound.**  Real kernels differ: a schedule could co-run compute-bound
kernels and run memory-bound ones alone, which the mean demands cannot see,
and the closed loops' requests do not all overlap.  It says where interference,
at its mean, leaves no room for two overlapping requests to keep both
promises, which the profiles' no-interference bound (``bless bound``) cannot.
With the interference term set to 0 it finds ``lam <= 1`` for every pair (the
quota split itself meets both), which the test checks.  Beside it, the
simulated GPU runs the same situation (ten such pairs of requests, far apart,
no noise) under BLESS and the baselines: the worst app's mean over its ISO
latency.

    python experiments/overlap_feasibility.py > experiments/results/overlap_feasibility.md   # ~1 min

Needs the shared measurements for the held-out models (as ``heldout.py``).
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from scipy.optimize import linprog

from bless.harness.config import config_from_dict
from bless.harness.loads import Arrivals
from bless.harness.run import run_config
from bless.hw.gpus import GpuSpec, get_gpu
from bless.hw.interference import InterferenceModel
from bless.profiles import features
from bless.profiles.catalog import find_profile
from bless.profiles.format import Profile, load_profile

SHIPPED = ("vgg11", "resnet50", "resnet101", "nasnet", "bert")
POLICIES = ("bless", "gslice", "unbound", "temporal", "reef")
PAIRS_SIMULATED = 10


@dataclass(frozen=True)
class RequestCurve:
    """What the fluid model reads of one app: its request's time and mean DRAM demand per SM count."""

    seconds: np.ndarray
    """Shape (N + 1,): the request alone with n SMs (index 0: inf)."""
    dram_seconds: float
    """Its kernels' DRAM traffic, as seconds of the peak bandwidth."""
    iso: float
    """T[quota]: the latency its quota promises."""

    @classmethod
    def of(cls, profile: Profile, quota: float, gpu: GpuSpec) -> RequestCurve:
        solo = features.solo_curves(profile, gpu)
        seconds = solo.sum(axis=1)
        moved = float(features.dram_seconds(profile, solo[-1]).sum())
        return cls(seconds, moved, profile.latency_at_quota(quota))


def stretches(a: RequestCurve, b: RequestCurve, na: int, nb: int, bandwidth: float) -> tuple[float, float]:
    """Each request's slowdown side by side at ``na`` / ``nb`` SMs: the engine's term with mean demands."""
    ua = a.dram_seconds / a.seconds[na]
    ub = b.dram_seconds / b.seconds[nb]
    over = max(ua + ub - 1.0, 0.0)
    return (1 + min(ua, 1.0) * over) * (1 + bandwidth * ub), (1 + min(ub, 1.0) * over) * (1 + bandwidth * ua)


def rate_points(a: RequestCurve, b: RequestCurve, sm_count: int, bandwidth: float) -> np.ndarray:
    """Shape (P, 2): requests per second of A and B in each way of running them (alone, or side by side)."""
    points = [(1 / a.seconds[sm_count], 0.0), (0.0, 1 / b.seconds[sm_count])]
    for na in range(1, sm_count):
        sa, sb = stretches(a, b, na, sm_count - na, bandwidth)
        points.append((1 / (a.seconds[na] * sa), 1 / (b.seconds[sm_count - na] * sb)))
    return np.array(points)


def both_meet(points: np.ndarray, deadlines: tuple[float, float]) -> bool:
    """Whether some division of time among ``points`` finishes request 0 by ``deadlines[0]`` and 1 by ``deadlines[1]``.

    Variables: seconds at each point before the earlier deadline and between the two."""
    first = 0 if deadlines[0] <= deadlines[1] else 1
    early, late = sorted(deadlines)
    n = len(points)
    zeros = np.zeros(n)
    a_ub = [
        np.r_[np.ones(n), zeros],  # the time before the earlier deadline
        np.r_[zeros, np.ones(n)],  # and between the two
        np.r_[-points[:, first], zeros],  # the earlier one done before its deadline
        np.r_[-points[:, 1 - first], -points[:, 1 - first]],  # the later one done by its own
    ]
    b_ub = [early, late - early, -1.0, -1.0]
    res = linprog(np.zeros(2 * n), A_ub=np.array(a_ub), b_ub=b_ub, bounds=[(0, None)] * (2 * n), method="highs")
    return res.status == 0


def least_ratio(a: RequestCurve, b: RequestCurve, sm_count: int, bandwidth: float, tol: float = 1e-4) -> float:
    """The least ``lam`` at which both requests can finish by ``lam x`` their ISO latency."""
    points = rate_points(a, b, sm_count, bandwidth)
    lo, hi = 0.0, 4.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if both_meet(points, (mid * a.iso, mid * b.iso)):
            hi = mid
        else:
            lo = mid
    return hi


def one_after_other(a: RequestCurve, b: RequestCurve, sm_count: int) -> float:
    """``lam`` of the better order of running them one after the other, each on the whole GPU."""
    ta, tb = a.seconds[sm_count], b.seconds[sm_count]
    return min(max(ta / a.iso, (ta + tb) / b.iso), max(tb / b.iso, (ta + tb) / a.iso))


def quota_split(a: RequestCurve, b: RequestCurve, na: int, nb: int, bandwidth: float) -> float:
    """``lam`` of the static split at the quotas (GSLICE's way): each at its quota, stretched, the whole time."""
    sa, sb = stretches(a, b, na, nb, bandwidth)
    return max(a.seconds[na] * sa / a.iso, b.seconds[nb] * sb / b.iso)


def simulated(apps: list[tuple[str, str]], policy: str, gap: float) -> float:
    """The worst app's mean over its ISO latency when each app sends one request at the same
    instants, ``gap`` seconds apart (long enough for each pair to be done before the next)."""
    times = tuple(gap * (i + 0.5) for i in range(PAIRS_SIMULATED))
    config = {
        "gpu": "a100",
        "duration": gap * PAIRS_SIMULATED,
        "warmup": 0.0,
        "seed": 0,
        "noise": 0.0,
        "policy": policy,
        "apps": [{"app": path, "quota": quota, "load": Arrivals(times)} for path, quota in apps],
    }
    result = run_config(config_from_dict(config))
    return max(a.mean / a.iso_latency for a in result.apps)


def main() -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    import heldout  # the held-out models and pairs, built the same way

    gpu = get_gpu("a100")
    bandwidth = InterferenceModel.for_gpu(gpu.name).bandwidth
    n = gpu.sm_count
    with tempfile.TemporaryDirectory() as tmp:
        paths = {app: str(find_profile(app, gpu.name)) for app in SHIPPED}
        paths |= heldout.build_profiles(Path(tmp))
        pairs = [(f"{m} pair (shipped)", m, "1/2", m, "1/2") for m in SHIPPED]
        pairs += [(f"{m} pair (held out)", m, "1/2", m, "1/2") for m in heldout.MODELS]
        pairs += [(f"{a} {qa} + {b} {qb} (held out)", a, qa, b, qb) for a, qa, b, qb in heldout.MIXED]
        print("## Two requests arriving together: least lam with both done by lam x ISO\n")
        print(f"Simulated A100 ({n} SMs), interference 1 + {bandwidth} x the other's mean DRAM demand; fluid over")
        print("whole requests (`experiments/overlap_feasibility.py`; an estimate with mean demands, not a bound).\n")
        print("| pair | ISO (ms) | best schedule | best, no interference | one after the other | quota split |", end="")
        print(" simulated: " + " | ".join(POLICIES) + " |")
        print("|---" * (6 + len(POLICIES)) + "|")
        for name, ma, qa, mb, qb in pairs:
            fa, fb = float(Fraction(qa)), float(Fraction(qb))
            a = RequestCurve.of(load_profile(paths[ma]), fa, gpu)
            b = RequestCurve.of(load_profile(paths[mb]), fb, gpu)
            na, nb = gpu.round_sms(fa * n), gpu.round_sms(fb * n)
            cells = (
                least_ratio(a, b, n, bandwidth),
                least_ratio(a, b, n, 0.0),
                one_after_other(a, b, n),
                quota_split(a, b, na, nb, bandwidth),
            )
            gap = 10 * max(a.iso, b.iso)
            sims = tuple(simulated([(paths[ma], qa), (paths[mb], qb)], policy, gap) for policy in POLICIES)
            iso = f"{a.iso * 1e3:.2f} / {b.iso * 1e3:.2f}"
            print(f"| {name} | {iso} | " + " | ".join(f"{x:.3f}" for x in cells + sims) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
