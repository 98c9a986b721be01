"""Requests that arrive together: can every one finish by its ISO latency on a shared GPU?

In Fig. 13's closed loops (and the held-out pairs of ``heldout.py``) the two
apps' requests overlap for most of their lives, and where BLESS misses an ISO
target it is in the requests whose neighbour runs the whole time; in Fig. 15's
four-app mix at load A all four overlap most of the time.  This asks, for one
request of each app arriving together on an idle GPU, what the best schedule
could do: the least ``lam`` such that every one finishes by ``lam x`` its ISO
latency (``T[quota]``).

The model is a fluid one over whole requests.  At any instant the GPU runs
some of the requests side by side, each on its own SMs (alone on every SM
included, idle SMs allowed): pairs at every split of the SMs, larger groups at
the GPU's partition levels (the linear program's size).  Time may be divided
among these ways freely (the convex hull of their rates), so a linear program
decides feasibility and bisection finds ``lam``.  A request's time at ``n``
SMs is the sum of its kernels' curves (``bless.profiles.features.solo_curves``);
side by side each is stretched by the simulated GPU's interference term
(:meth:`bless.hw.interference.InterferenceModel.stretch`) with each app's
*mean* DRAM demand at its SM count.

**Not a bound.**  Real kernels differ: a schedule could co-run compute-bound
kernels and run memory-bound ones alone, which the mean demands cannot see,
and the closed loops' requests do not all overlap.  It says where interference,
at its mean, leaves no room for overlapping requests to keep every promise,
which the profiles' no-interference bound (``bless bound``) cannot, and where
room is left that a policy fails to use.  With the interference term set to 0
it finds ``lam <= 1`` for every pair (the quota split itself meets both),
which the test checks.  Beside it, the simulated GPU runs the same situation
(ten such groups of requests, far apart, no noise) under BLESS and the
baselines: the worst app's mean over its ISO latency.

    python experiments/overlap_feasibility.py > experiments/results/overlap_feasibility.md   # ~30 s

Needs the shared measurements for the held-out models (as ``heldout.py``).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import linprog

from bless.harness.config import config_from_dict, parse_quota
from bless.harness.loads import WORKLOAD_INTERVALS, Arrivals
from bless.harness.run import run_config
from bless.hw.gpus import GpuSpec, get_gpu
from bless.hw.interference import InterferenceModel
from bless.profiles import features
from bless.profiles.catalog import find_profile
from bless.profiles.format import Profile, load_profile

SHIPPED = ("vgg11", "resnet50", "resnet101", "nasnet", "bert")
POLICIES = ("bless", "gslice", "unbound", "temporal", "reef")
PAIRS_SIMULATED = 10
GROUPS = (
    ("Fig. 15's four apps", (("resnet50", "10%"), ("vgg11", "20%"), ("bert", "30%"), ("resnet101", "40%"))),
    ("four held-out apps", (("mobilenet", "10%"), ("vgg19", "20%"), ("inception", "30%"), ("resnet152", "40%"))),
)
"""Groups of four apps at Fig. 15's quotas: the shipped mix and one of the held-out models."""


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
        """One request of ``profile``'s app with ``quota`` of the GPU's SMs."""
        return cls.with_target(profile, profile.latency_at_quota(quota), gpu)

    @classmethod
    def with_target(cls, profile: Profile, iso: float, gpu: GpuSpec) -> RequestCurve:
        """One request of ``profile``'s app whose ISO latency is ``iso`` (as a stored sweep reported it)."""
        solo = features.solo_curves(profile, gpu)
        return cls(solo.sum(axis=1), float(features.dram_seconds(profile, solo[-1]).sum()), iso)


def stretches(curves: Sequence[RequestCurve], sms: Sequence[int], model: InterferenceModel) -> list[float]:
    """Each request's slowdown side by side at ``sms[i]`` SMs: the simulated GPU's term with mean demands."""
    return [float(s) for s in group_rates(curves, np.array([sms]), model)[1][0]]


def group_rates(
    curves: Sequence[RequestCurve], splits: np.ndarray, model: InterferenceModel
) -> tuple[np.ndarray, np.ndarray]:
    """Requests per second of each of ``curves`` run side by side at the SM counts of each row
    of ``splits`` (shape (P, len(curves))), and their stretches: the simulated GPU's
    interference term with each request's mean DRAM demand at its SM count."""
    seconds = np.stack([c.seconds[splits[:, j]] for j, c in enumerate(curves)], axis=1)
    demands = np.array([c.dram_seconds for c in curves]) / seconds
    stretch = model.stretch(demands, demands.sum(axis=1, keepdims=True))
    return 1 / (seconds * stretch), stretch


def allocations(k: int, units: int) -> np.ndarray:
    """Shape (P, k): every way to give each of ``k`` requests at least one of ``units`` SM units, some left idle."""
    cuts = np.array(list(itertools.combinations(range(1, units + 1), k)), dtype=int).reshape(-1, k)
    return np.diff(cuts, axis=1, prepend=0)


def rate_points(curves: Sequence[RequestCurve], sm_count: int, model: InterferenceModel, unit: int = 1) -> np.ndarray:
    """Shape (P, len(curves)): requests per second of each in every way of running some of them
    side by side (each alone included), SMs given in multiples of ``unit``, idle ones allowed."""
    blocks = []
    for k in range(1, len(curves) + 1):
        splits = allocations(k, sm_count // unit) * unit
        for group in itertools.combinations(range(len(curves)), k):
            block = np.zeros((len(splits), len(curves)))
            block[:, group] = group_rates([curves[i] for i in group], splits, model)[0]
            blocks.append(block)
    return np.concatenate(blocks)


def all_meet(points: np.ndarray, deadlines: Sequence[float]) -> bool:
    """Whether some division of time among ``points`` finishes request ``i`` by ``deadlines[i]`` for every ``i``.

    Variables: seconds at each point in each interval between consecutive deadlines."""
    n, k = points.shape
    order = np.argsort(deadlines, kind="stable")
    ends = np.asarray(deadlines, dtype=float)[order]
    lengths = np.diff(ends, prepend=0.0)
    a_ub = np.zeros((2 * k, n * k))
    for m in range(k):
        a_ub[m, m * n : (m + 1) * n] = 1.0  # the time of interval m
    for m, i in enumerate(order):  # request i is done by the end of interval m
        a_ub[k + i, : (m + 1) * n] = -np.tile(points[:, i], m + 1)
    b_ub = np.r_[lengths, -np.ones(k)]
    res = linprog(np.zeros(n * k), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    return res.status == 0


def least_ratio(
    curves: Sequence[RequestCurve], sm_count: int, model: InterferenceModel, unit: int = 1, tol: float = 1e-4
) -> float:
    """The least ``lam`` at which every request can finish by ``lam x`` its ISO latency."""
    points = rate_points(curves, sm_count, model, unit)
    return least_lam(lambda lam: all_meet(points, [lam * c.iso for c in curves]), tol)


def least_lam(fits: Callable[[float], bool], tol: float = 1e-4) -> float:
    """The least ``lam`` in [0, 4] at which ``fits`` holds, within ``tol`` (bisection: ``fits``
    holds from some ``lam`` on)."""
    lo, hi = 0.0, 4.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def time_needed(points: np.ndarray, need: Sequence[float]) -> float:
    """The least share of the GPU's time in which some division of it among ``points`` (rows:
    requests per second of each app in one way of sharing the GPU) serves app ``i`` at
    ``need[i]`` requests per second; above 1, no division can.

    Column generation: groups of eight have over a million ways, and a linear program over the
    few with the best price under the current duals is exact once no other way prices better."""
    need_arr = np.asarray(need, dtype=float)
    cols = np.unique(np.argmax(points, axis=0))  # each app at its fastest
    while True:
        sub = points[cols]
        res = linprog(np.ones(len(cols)), A_ub=-sub.T, b_ub=-need_arr, bounds=(0, None), method="highs")
        if res.status != 0:  # some app can run nowhere among these ways
            return math.inf
        prices = -res.ineqlin.marginals  # seconds of GPU time per request of each app
        reduced = 1.0 - points @ prices
        better = np.flatnonzero(reduced < -1e-9)
        if not len(better):
            return float(res.fun)
        cols = np.union1d(cols, better[np.argsort(reduced[better])[:64]])


def closed_loop_ratio(
    points: np.ndarray,
    curves: Sequence[RequestCurve],
    thinks: Sequence[float | None],
    served: Sequence[float] = (),
) -> float:
    """The least ``lam`` at which closed loops thinking ``thinks[i]`` seconds between requests could
    all have mean latency ``lam x`` their ISO latency or less.

    A single client with mean latency ``L`` and mean think ``Z`` sends ``1 / (L + Z)`` requests per
    second, so every app at or below ``lam x`` ISO needs that throughput of the GPU; this asks for the
    least ``lam`` whose throughputs fit in its time (it ignores that a client thinking cannot be
    served, so the true least is higher).  An app whose think is ``None`` is an open loop that must
    be served ``served[i]`` times its quota's throughput (``1 / iso``) whatever ``lam``: both halves
    of the isolation promise at once (4 means: even with every closed loop at 4x ISO it does not fit)."""

    def need(lam: float) -> list[float]:
        return [
            served[i] / c.iso if z is None else 1 / (lam * c.iso + z) for i, (c, z) in enumerate(zip(curves, thinks))
        ]

    return least_lam(lambda lam: time_needed(points, need(lam)) <= 1)


def neighbour_service(points: np.ndarray, victim: RequestCurve, neighbour: RequestCurve, think: float) -> float:
    """The most a neighbour that always has work could be served, in multiples of its quota's
    throughput ``1 / neighbour.iso``, beside one closed-loop client of ``victim`` thinking
    ``think`` seconds whose every request is done within its ISO latency.

    ``points`` (columns: victim, neighbour; a :func:`rate_points` of the two) are the ways of
    sharing the GPU.  In one cycle of the victim's client the victim's request takes ``L <=
    victim.iso`` seconds, divided among the points so that it is done (``t_p`` seconds at point
    ``p``: ``sum t_p = L``, ``sum t_p v_p >= 1``), and while the client thinks the neighbour
    has the GPU to itself (its fastest way alone, ``a``).  The neighbour's service is ``(sum t_p
    n_p + think a) / (L + think)``, a linear-fractional program, solved as a linear one by
    Charnes and Cooper's change of variables (``y = t s``, ``s = 1 / (L + think)``).  The same
    ``L`` for every request loses nothing: the neighbour's requests in ``L`` are a concave
    function of it.  An estimate with mean demands, as :func:`least_ratio` (not a bound)."""
    v, n = points[:, 0], points[:, 1]
    alone = float(n[v == 0].max())
    m = len(points)
    # Variables: y_p (m of them), then s.
    cost = -np.r_[n, think * alone]
    a_eq = np.r_[np.ones(m), think][None, :]
    a_ub = np.vstack([np.r_[-v, 1.0], np.r_[np.ones(m), -victim.iso]])
    res = linprog(cost, A_ub=a_ub, b_ub=[0.0, 0.0], A_eq=a_eq, b_eq=[1.0], bounds=(0, None), method="highs")
    if res.status != 0:
        raise ValueError(f"no schedule does the victim's request within {victim.iso:.6f} s")
    return float(-res.fun * neighbour.iso)


def one_after_other(curves: Sequence[RequestCurve], sm_count: int) -> float:
    """``lam`` of the best order of running them one after the other, each on the whole GPU."""
    best = math.inf
    for order in itertools.permutations(curves):
        done = np.cumsum([c.seconds[sm_count] for c in order])
        best = min(best, max(t / c.iso for t, c in zip(done, order)))
    return best


def quota_split(curves: Sequence[RequestCurve], sms: Sequence[int], model: InterferenceModel) -> float:
    """``lam`` of the static split at the quotas (GSLICE's way): each at its quota, stretched, the whole time."""
    return max(c.seconds[n] * s / c.iso for c, n, s in zip(curves, sms, stretches(curves, sms, model)))


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
    return result.worst_over_iso


def row(
    name: str, apps: Sequence[tuple[str, str]], paths: dict[str, str], gpu: GpuSpec, model: InterferenceModel
) -> str:
    """One table row: the estimates and the simulated policies for requests of ``apps`` arriving together."""
    n = gpu.sm_count
    # Pairs at every split of the SMs; larger groups at the GPU's partition levels (the LP's size).
    unit = 1 if len(apps) == 2 else gpu.level_sms()[0]
    quotas = [parse_quota(q, f"{app}'s quota") for app, q in apps]
    curves = [RequestCurve.of(load_profile(paths[app]), q, gpu) for (app, _), q in zip(apps, quotas)]
    cells = (
        least_ratio(curves, n, model, unit),
        least_ratio(curves, n, InterferenceModel(), unit),
        one_after_other(curves, n),
        quota_split(curves, [gpu.round_sms(q * n) for q in quotas], model),
    )
    gap = 10 * max(c.iso for c in curves)
    sims = tuple(simulated([(paths[app], q) for app, q in apps], policy, gap) for policy in POLICIES)
    iso = " / ".join(f"{c.iso * 1e3:.2f}" for c in curves)
    return f"| {name} | {iso} | " + " | ".join(f"{x:.3f}" for x in cells + sims) + " |"


CLOSED_LOOP_SWEEPS = ("fig13", "fig13_exp", "fig15_4apps", "fig15_8apps")
"""The closed-loop experiments whose stored runs (``results/<name>/runs.csv``) the steady-state table reads."""
RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class ClosedLoopCell:
    """One cell of a stored closed-loop sweep: its apps, their think times and each policy's worst app."""

    sweep: str
    load: str
    apps: tuple[str, ...]
    iso: tuple[float, ...]
    """Each app's ISO target (s), as the sweep reported it."""
    think: float
    """Mean think time in multiples of each app's solo latency (workloads A/B/C: 1/3, 2/3, 1)."""
    worst: dict[str, float]
    """Per policy, the largest of its apps' mean latency over their ISO target."""


def stored_cells(sweep: str) -> list[ClosedLoopCell]:
    """The cells of ``results/<sweep>/runs.csv``, one per load and group of apps."""
    cells: dict[tuple[str, tuple[str, ...]], ClosedLoopCell] = {}
    with open(RESULTS / sweep / "runs.csv", newline="") as f:
        for run in csv.DictReader(f):
            count = sum(1 for key in run if key.endswith(".mean_ms") and run[key])
            if not count:  # a policy that could not run these quotas (MIG with 8 apps)
                continue
            apps = tuple(run[f"app{i}.app"].split("#")[0] for i in range(count))
            load = run["apps.*.load"]
            think = json.loads(load)["interval"] if load.startswith("{") else WORKLOAD_INTERVALS[load]
            iso = tuple(float(run[f"app{i}.iso_ms"]) / 1e3 for i in range(count))
            cell = cells.setdefault((load, apps), ClosedLoopCell(sweep, load, apps, iso, think, {}))
            cell.worst[run["policy"].split("(")[0]] = max(
                float(run[f"app{i}.mean_ms"]) / 1e3 / t for i, t in enumerate(iso)
            )
    return list(cells.values())


def closed_loop_row(cell: ClosedLoopCell, paths: dict[str, str], gpu: GpuSpec, model: InterferenceModel) -> str:
    """One row of the steady-state table: the least ``lam`` with and without interference beside
    the stored policies' worst apps."""
    profiles = [load_profile(paths[app]) for app in cell.apps]
    thinks = [cell.think * float(p.T[-1]) for p in profiles]
    unit = 1 if len(cell.apps) == 2 else gpu.level_sms()[0]
    curves = [RequestCurve.with_target(p, iso, gpu) for p, iso in zip(profiles, cell.iso)]
    lams = [
        closed_loop_ratio(rate_points(curves, gpu.sm_count, m, unit), curves, thinks)
        for m in (model, InterferenceModel())
    ]
    load = cell.load if not cell.load.startswith("{") else f"{cell.think:.2g}x, exponential"
    models = " + ".join(dict.fromkeys(cell.apps))
    apps = f"{cell.apps[0]} pair" if len(set(cell.apps)) == 1 else f"{len(cell.apps)} apps: {models}"
    sims = [cell.worst.get(policy, math.nan) for policy in ("bless", "iso", *POLICIES[1:])]
    return f"| {cell.sweep} | {apps} | {load} | " + " | ".join(f"{x:.3f}" for x in lams + sims) + " |"


def main() -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    import heldout  # the held-out models and pairs, built the same way

    gpu = get_gpu("a100")
    model = InterferenceModel.for_gpu(gpu.name)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {app: str(find_profile(app, gpu.name)) for app in SHIPPED}
        paths |= heldout.build_profiles(Path(tmp))
        rows = [(f"{m} pair (shipped)", [(m, "1/2"), (m, "1/2")]) for m in SHIPPED]
        rows += [(f"{m} pair (held out)", [(m, "1/2"), (m, "1/2")]) for m in heldout.MODELS]
        rows += [(f"{a} {qa} + {b} {qb} (held out)", [(a, qa), (b, qb)]) for a, qa, b, qb in heldout.MIXED]
        rows += [(name, list(group)) for name, group in GROUPS]
        print("## Requests arriving together: least lam with every one done by lam x ISO\n")
        print(
            f"Simulated A100 ({gpu.sm_count} SMs), interference (1 + saturation) x (1 + {model.bandwidth} x the others'"
        )
        print("mean DRAM demand); fluid over whole requests, pairs at every split of the SMs, groups at the")
        print("GPU's levels (`experiments/overlap_feasibility.py`; an estimate with mean demands, not a bound).\n")
        print("| apps | ISO (ms) | best schedule | best, no interference | one after the other | quota split |", end="")
        print(" simulated: " + " | ".join(POLICIES) + " |")
        print("|---" * (6 + len(POLICIES)) + "|")
        for name, apps in rows:
            print(row(name, apps, paths, gpu, model), flush=True)
    print("\n## Closed loops in steady state: least lam with every app's mean at or below lam x ISO\n")
    print("The experiments' closed loops (their stored `results/<name>/runs.csv`): the throughput every")
    print("app needs for its mean to be at or below lam x ISO against the GPU's time, shared among the")
    print("same ways of running as above with the same mean demands (an estimate, not a bound; it also")
    print("lets a thinking client be served, so the true least is higher).  Beside it, each stored")
    print("policy's worst app: its mean over its ISO target.  Above 1, no schedule keeps every app at ISO.\n")
    print("| sweep | apps | load | best schedule | best, no interference | simulated: bless | iso | ", end="")
    print(" | ".join(POLICIES[1:]) + " |")
    print("|---" * (7 + len(POLICIES) - 1) + "|")
    for sweep in CLOSED_LOOP_SWEEPS:
        for cell in stored_cells(sweep):
            print(closed_loop_row(cell, paths, gpu, model), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
