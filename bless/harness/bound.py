"""A lower bound on each app's mean latency that no scheduler can beat.

Given the apps' profiles, the GPU and the loads of a run, :func:`bound_for_config`
returns, per app, a latency that the app's mean over the measured requests
cannot undercut whatever the policy does, and a bound on the mean over apps
(the runs' ``mean_latency_ms``).  Host costs, launch gaps, context switches
and interference are left out: they only add time.

What a request needs (:func:`request_demand`)
    A request's kernels run one after the other (the kernel manager chains
    them).  While kernel ``k`` runs it progresses at most at the speed
    ``1 / solo_k[a]`` for some SM count ``a`` and holds at least
    ``min(max_sms_k, a)`` SMs (``solo`` is the profile curve made
    non-increasing; on the simulated GPU ``a`` is the SMs available under an
    MPS cap, or ``N`` once the kernel holds all the SMs it can use;
    interference only slows it).  So a request lasts at least
    ``floor = sum_k min_a solo_k[a]`` and occupies at least
    ``work = sum_k min_a min(max_sms_k, a) * solo_k[a]`` SM-seconds.  The GPU
    holds at most ``N`` SMs at any time, so in units of the whole GPU a request
    is a job of size ``p = work / N`` seconds on one machine of speed 1 that
    may share itself among jobs (a fluid machine): projecting any real schedule
    onto that machine gives a feasible fluid schedule in which each job runs
    between its arrival and its real completion.

Open loops (Poisson, traces: the arrival times are known)
    Only requests arriving in ``[warmup, duration)`` are measured; the others
    can be left out (a scheduler may postpone them), which only lowers the
    bound.  *One app*: its flow times sum to the integral over time of the
    number of its requests alive.  At time ``t`` a request that arrived less
    than ``floor`` ago is alive for sure; among those that arrived earlier (a
    prefix of the arrivals) at least as many are unfinished as under SRPT on
    that prefix, and SRPT minimises the number unfinished at every instant.
    With equal sizes SRPT is FCFS, and FCFS on a prefix is FCFS on all
    arrivals restricted to it.  Integrating, the mean latency is at least
    ``mean_j max(floor, C_j - r_j)`` with ``C_j`` the FCFS completions of the
    app's requests alone on the fluid machine (:func:`fcfs_floor_bound`);
    this is the per-app bound, which a policy that favours the app could come
    close to.  *All apps together* (the mean over apps weighs app ``i``'s
    requests by ``1/n_i``): for any schedule ``C_j >= M_j + p_j/2`` with
    ``M_j`` the mean busy time of job ``j``, and the weighted sum of mean
    busy times is smallest in the preemptive schedule that serves the highest
    ``w_j/p_j`` first (Goemans, SODA'97: the mean-busy-time LP is solved by
    that schedule; it holds for fractional processing too), which gives
    :func:`mean_busy_time_bound`.  The bound on the sum of the open apps'
    means is the larger of that and the sum of their per-app bounds.

Closed loops (workloads A/B/C: a client waits ``Z`` after each answer)
    Arrivals follow completions, so the bound is on throughput: ``c_i``
    clients with mean latency ``L_i`` complete ``c_i / (L_i + Z_i)`` requests
    per second, and the GPU's capacity gives ``sum_i c_i p_i / (L_i + Z_i) <= 1``
    with ``L_i >= floor_i``.  Per app (the others left out) that is
    ``max(floor_i, c_i p_i - Z_i)``, the floor for one client (``p_i <= floor_i``);
    the bound on the sum of the means is the minimum of ``sum_i L_i`` under
    the joint constraint, a convex problem solved exactly by
    :func:`closed_latencies`.  Open apps' work is left out of the
    constraint (a scheduler may postpone it), which keeps it valid.

Assumptions (where one fails, a measured mean can undercut the bound by about the amount said):

* Kernel times are the profile's: with ``noise > 0`` a kernel may run up to
  the noise faster than its curve, so a measured mean can dip below the bound
  by about the noise.
* The closed-loop constraint is a long-run (operational-law) statement: over
  a finite window the number of cycles of each client can differ by one at
  either end, so when the capacity constraint binds the measured mean may
  undercut the bound by about ``(L + Z) / (duration - warmup)`` of it.  For an
  exponential think time ``Z`` is its mean.  Where the constraint does not
  bind the closed-loop bound is the per-request floor, which holds exactly.
* ISO and MIG run each app on a GPU of its own; the joint parts hold for them
  while the apps' SMs together are at most the GPU's (quotas add up to at
  most 100 %, but rounding to the nearest TPC can exceed it by up to half a
  TPC per app).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bless.harness.loads import ClosedLoop, Load
from bless.hw.gpus import GpuSpec
from bless.profiles import features
from bless.profiles.format import Profile

if TYPE_CHECKING:
    from bless.harness.config import RunConfig
    from bless.harness.results import RunResult


class BoundError(ValueError):
    """Input the bound cannot be computed from; the message names the field."""


@dataclass(frozen=True)
class Demand:
    """The least one request of an app needs of the GPU."""

    floor: float
    """Seconds: every kernel at its fastest, back to back (the request alone on the whole GPU)."""
    work: float
    """SM-seconds: every kernel at its most SM-frugal allocation."""


@dataclass(frozen=True)
class LoadShape:
    """What the bound reads of an app's load."""

    arrivals: np.ndarray | None
    """Open loops: arrival times (seconds, sorted) of the measured requests; None for a closed loop."""
    think: float = 0.0
    """Closed loops: mean wait between an answer and the client's next request (seconds)."""
    clients: int = 1
    """Closed loops: clients, each with one request outstanding at most."""


@dataclass(frozen=True)
class AppBound:
    """The bound for one app of a run (times in seconds)."""

    app: str
    quota: float
    load: str
    iso_latency: float
    """T[quota]: the latency the quota promises."""
    floor: float
    """The fastest a request can be: the app alone on the whole GPU, no host costs."""
    work: float
    """Least SM-seconds a request occupies."""
    requests: int | None
    """Measured requests of an open loop (None: closed loop)."""
    bound: float
    """No policy's mean latency for this app is below this (nan: no measured request)."""


@dataclass(frozen=True)
class BoundResult:
    """Per-app bounds and the bound on the mean over apps of one run configuration."""

    gpu: str
    sm_count: int
    apps: tuple[AppBound, ...]
    mean: float
    """Bound on the mean over apps of the per-app mean latencies (at least the mean of ``apps[*].bound``)."""

    def ratios(self, result: RunResult) -> tuple[tuple[float, ...], float]:
        """Measured over bound: per app (same order as the config) and for the mean over apps."""
        if len(result.apps) != len(self.apps):
            raise BoundError(f"apps: the result has {len(result.apps)} apps, the bound {len(self.apps)}")
        per_app = tuple(a.mean / b.bound for a, b in zip(result.apps, self.apps))
        return per_app, float(np.mean([a.mean for a in result.apps])) / self.mean


# ------------------------------------------------------------------ demand
def request_demand(solo: np.ndarray, held: np.ndarray) -> Demand:
    """Floor and work of a request from its kernels' curves.

    ``solo[a - 1, k]``: kernel ``k``'s duration with ``a`` SMs available, ``a = 1..N``;
    ``held[a - 1, k]``: the SMs it occupies meanwhile (0 for a copy, which runs
    on the copy engine).  Shapes ``(N, K)``.
    """
    solo = np.asarray(solo, dtype=float)
    held = np.asarray(held, dtype=float)
    if solo.ndim != 2 or solo.shape[1] == 0:
        raise BoundError(f"solo: expected shape (SMs, kernels) with at least one kernel, got {solo.shape}")
    if held.shape != solo.shape:
        raise BoundError(f"held: expected the shape of solo {solo.shape}, got {held.shape}")
    if not np.all(np.isfinite(solo) & (solo > 0)):
        raise BoundError("solo: kernel durations must be positive and finite")
    if np.any(held < 0):
        raise BoundError("held: SM counts must be >= 0")
    return Demand(floor=float(solo.min(axis=0).sum()), work=float((held * solo).min(axis=0).sum()))


def profile_demand(profile: Profile, gpu: GpuSpec) -> Demand:
    """:func:`request_demand` of ``profile`` on ``gpu``, read as the simulated GPU reads it (:mod:`bless.profiles.features`)."""
    solo = features.solo_curves(profile, gpu)[1:]
    cap = features.max_sms(profile, gpu)
    held = np.minimum(cap[None, :], np.arange(1, gpu.sm_count + 1)[:, None])
    return request_demand(solo, held)


# ------------------------------------------------------------------ open loops
def _arrivals(arrivals: np.ndarray, where: str) -> np.ndarray:
    r = np.asarray(arrivals, dtype=float)
    if r.ndim != 1 or not np.all(np.isfinite(r)) or np.any(np.diff(r) < 0):
        raise BoundError(f"{where}: expected sorted, finite arrival times")
    return r


def fcfs_floor_bound(arrivals: np.ndarray, floor: float, size: float) -> float:
    """Bound on one app's mean latency: ``mean_j max(floor, C_j - r_j)``, FCFS ``C`` of jobs of ``size``.

    ``size`` is a request's work in seconds of the whole GPU (``work / N``).
    nan without arrivals.
    """
    r = _arrivals(arrivals, "arrivals")
    if not floor >= 0 or not size >= 0:
        raise BoundError(f"floor, size: expected non-negative seconds, got {floor}, {size}")
    if len(r) == 0:
        return math.nan
    j = np.arange(len(r))
    # FCFS on one machine: C_j = max_{i <= j} (r_i + (j - i + 1) * size).
    done = np.maximum.accumulate(r - j * size) + (j + 1) * size
    return float(np.mean(np.maximum(floor, done - r)))


def mean_busy_time_bound(arrivals: Sequence[np.ndarray], sizes: Sequence[float]) -> float:
    """Bound on the sum over apps of each app's mean flow time, from mean busy times.

    App ``i`` sends jobs of ``sizes[i]`` (seconds of the whole GPU) at
    ``arrivals[i]``, weighted ``1 / n_i``.  The preemptive schedule that serves
    the lowest ``n_i * size_i`` first (within an app: the earliest job) gives
    the smallest weighted sum of mean busy times ``M_j``; the bound is
    ``sum_j w_j (M_j + size_j / 2 - r_j)``.  Apps without arrivals or with no
    work add nothing.
    """
    if len(arrivals) != len(sizes):
        raise BoundError(f"sizes: expected one per app ({len(arrivals)}), got {len(sizes)}")
    apps = [
        (i, _arrivals(r, f"arrivals[{i}]"), float(p))
        for i, (r, p) in enumerate(zip(arrivals, sizes))
        if len(r) and p > 0
    ]
    if not apps:
        return 0.0
    apps.sort(key=lambda a: (len(a[1]) * a[2], a[0]))  # priority order
    events = sorted((float(t), rank) for rank, (_, r, _) in enumerate(apps) for t in r)
    queues: list[deque[list[float]]] = [deque() for _ in apps]  # [arrival, remaining, integral of t]
    total = 0.0
    now = 0.0
    e = 0
    while e < len(events) or any(queues):
        nxt = events[e][0] if e < len(events) else math.inf
        while now < nxt:
            rank = next((k for k, q in enumerate(queues) if q), None)  # highest priority with work
            if rank is None:
                break
            job = queues[rank][0]
            finish = job[1] <= nxt - now
            run = job[1] if finish else nxt - now
            job[2] += run * (now + run / 2)
            job[1] -= run
            now += run
            if finish:
                queues[rank].popleft()
                _, r, p = apps[rank]
                total += (job[2] / p + p / 2 - job[0]) / len(r)
        if nxt < math.inf:
            now = max(now, nxt)
        while e < len(events) and events[e][0] <= now:
            queues[events[e][1]].append([events[e][0], apps[events[e][1]][2], 0.0])
            e += 1
    return total


# ------------------------------------------------------------------ closed loops
def closed_latencies(floors: np.ndarray, sizes: np.ndarray, thinks: np.ndarray, clients: np.ndarray) -> np.ndarray:
    """The mean latencies ``L`` that minimise ``sum L`` subject to the GPU's capacity.

    Constraint: ``sum_i clients_i * sizes_i / (L_i + thinks_i) <= 1`` and
    ``L_i >= floors_i`` (sizes in seconds of the whole GPU).  Stationarity gives
    ``L_i = max(floor_i, sqrt(mu * d_i) - Z_i)`` with ``d_i = clients_i * sizes_i``;
    apps join the active set in the order of ``(floor_i + Z_i)^2 / d_i``, and for
    the active set that meets the constraint with equality ``sqrt(mu)`` is closed-form.
    """
    f, p, z, c = (np.asarray(x, dtype=float) for x in (floors, sizes, thinks, clients))
    if not f.shape == p.shape == z.shape == c.shape or f.ndim != 1 or len(f) == 0:
        raise BoundError("floors, sizes, thinks, clients: expected equal-length non-empty vectors")
    if np.any(f <= 0) or np.any(p < 0) or np.any(z < 0) or np.any(c < 1):
        raise BoundError("floors > 0, sizes >= 0, thinks >= 0 and clients >= 1 are required")
    d = c * p
    at_floor = d / (f + z)
    if at_floor.sum() <= 1.0:
        return f.copy()
    with np.errstate(divide="ignore"):
        threshold = np.where(d > 0, (f + z) ** 2 / d, math.inf)
    order = np.argsort(threshold, kind="stable")
    for k in range(1, len(f) + 1):
        room = 1.0 - at_floor[order[k:]].sum()  # capacity left by the apps still at their floors
        if room > 0 and (k == len(f) or (np.sqrt(d[order[:k]]).sum() / room) ** 2 <= threshold[order[k]]):
            break
    active = order[:k]
    root = np.sqrt(d[active]).sum() / room  # sqrt(mu)
    out = f.copy()
    out[active] = np.maximum(f[active], root * np.sqrt(d[active]) - z[active])
    return out


# ------------------------------------------------------------------ combining
def latency_bounds(demands: Sequence[Demand], loads: Sequence[LoadShape], sm_count: int) -> tuple[np.ndarray, float]:
    """Per-app bounds and the bound on the mean over apps (see the module docstring)."""
    if not demands:
        raise BoundError("apps: need at least one app")
    if len(loads) != len(demands):
        raise BoundError(f"loads: expected one per app ({len(demands)}), got {len(loads)}")
    if sm_count < 1:
        raise BoundError(f"sm_count: expected a positive number of SMs, got {sm_count}")
    sizes = np.array([d.work / sm_count for d in demands])
    floors = np.array([d.floor for d in demands])
    per_app = np.empty(len(demands))
    closed = [i for i, s in enumerate(loads) if s.arrivals is None]
    opened = [i for i, s in enumerate(loads) if s.arrivals is not None]
    for i in closed:
        s = loads[i]
        per_app[i] = closed_latencies(floors[[i]], sizes[[i]], [s.think], [s.clients])[0]
    for i in opened:
        per_app[i] = fcfs_floor_bound(loads[i].arrivals, floors[i], sizes[i])
    total = 0.0
    if closed:
        s = [loads[i] for i in closed]
        total += closed_latencies(floors[closed], sizes[closed], [x.think for x in s], [x.clients for x in s]).sum()
    if opened:
        joint = mean_busy_time_bound([loads[i].arrivals for i in opened], sizes[opened])
        total += np.maximum(per_app[opened].sum(), joint)  # nan if an app has no measured request
    return per_app, float(total / len(demands))


def load_shape(load: Load, solo_latency: float, duration: float, warmup: float, where: str) -> LoadShape:
    """What the bound reads of ``load``, bound (:meth:`~bless.harness.loads.Load.bind`) for an app of ``solo_latency``.

    A closed loop's think time and clients, or the arrivals that a run of
    ``duration`` seconds measures (those from ``warmup`` on).
    """
    if load.closed:
        if not isinstance(load, ClosedLoop):
            raise BoundError(f"{where}: no bound for a closed load of type {type(load).__name__}")
        think = load.interval * solo_latency if load.relative else load.interval
        return LoadShape(None, think=think, clients=load.clients)
    times = list(load.initial())
    for t in load.open_arrivals():  # increasing; a run stops pulling at the first past its end
        if t >= duration:
            break
        times.append(t)
    r = np.sort(np.array(times, dtype=float))
    return LoadShape(r[(r >= warmup) & (r < duration)])


def bound_for_config(cfg: RunConfig) -> BoundResult:
    """The bound for what :func:`bless.harness.run.run_config` would run for ``cfg``.

    Loads are bound with the RNGs the run gives them (seed ``cfg.seed``; ISO and
    MIG runs each app alone with seed ``cfg.seed + i``), so open-loop arrivals
    are exactly the run's.
    """
    from bless.harness.loads import parse_load
    from bless.harness.run import app_states, make_policy
    from bless.hw.gpus import get_gpu
    from bless.profiles.catalog import load_app

    gpu = get_gpu(cfg.gpu)
    profiles = [load_app(a.app, gpu.name) for a in cfg.apps]
    states = app_states(cfg, profiles)
    loads = [parse_load(a.load, f"apps[{i}].load") for i, a in enumerate(cfg.apps)]
    if make_policy(cfg, cfg.mechanism or "mps").isolated:
        seeds = [np.random.default_rng(cfg.seed + i).integers(2**63) for i in range(len(loads))]
    else:
        root = np.random.default_rng(cfg.seed)
        seeds = [root.integers(2**63) for _ in loads]
    shapes = []
    for i, (load, profile, seed) in enumerate(zip(loads, profiles, seeds)):
        solo = float(profile.T[-1])  # what the runtime binds loads with
        load.bind(solo, np.random.default_rng(seed))
        shapes.append(load_shape(load, solo, cfg.duration, cfg.warmup, f"apps[{i}].load"))
    demands = [profile_demand(p, gpu) for p in profiles]
    per_app, mean = latency_bounds(demands, shapes, gpu.sm_count)
    apps = tuple(
        AppBound(
            app=st.name,
            quota=st.quota,
            load=load.describe(),
            iso_latency=st.iso_latency,
            floor=d.floor,
            work=d.work,
            requests=None if s.arrivals is None else len(s.arrivals),
            bound=float(b),
        )
        for st, load, d, s, b in zip(states, loads, demands, shapes, per_app)
    )
    return BoundResult(gpu=gpu.name, sm_count=gpu.sm_count, apps=apps, mean=mean)
