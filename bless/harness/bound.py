"""A lower bound on each app's mean latency that no scheduler can beat.

Given the apps' profiles, the GPU and the loads of a run, :func:`bound_for_config`
returns, per app, a latency that the app's mean over the measured requests
cannot undercut whatever the policy does, and a bound on the mean over apps
(the runs' ``mean_latency_ms``).  Host costs, launch gaps, context switches
and interference are left out: they only add time.

What a request needs (:func:`request_frontier`)
    A request's kernels run one after the other (the kernel manager chains
    them).  While kernel ``k`` runs it progresses at most at the speed
    ``1 / solo_k[a]`` for some SM count ``a`` and holds at least
    ``held_k[a] = min(busy_k, a)`` SMs (``busy_k``: :func:`bless.profiles.features.busy_sms`;
    ``solo`` is the profile curve made
    non-increasing; on the simulated GPU ``a`` is the SMs available under an
    MPS cap, or ``N`` once the kernel holds all the SMs it can use;
    interference only slows it; a copy holds none).  If the kernel spends
    ``t_a`` seconds at ``a`` SMs it needs ``sum_a t_a / solo_k[a] >= 1`` to
    finish, so with ``m_a = t_a / solo_k[a]`` it lasts at least
    ``sum_a m_a d_a`` and occupies at least ``sum_a m_a w_a`` SM-seconds,
    ``(d_a, w_a) = (solo_k[a], held_k[a] * solo_k[a])``; scaling the ``m_a``
    down to sum to 1 lowers both, so the pair is at least a point of the
    convex hull of the ``(d_a, w_a)``: in ``D_k`` seconds the kernel occupies
    at least ``g_k(D_k)``, the hull's lower envelope (convex, non-increasing,
    flat from its least work on).  The request, lasting ``D >= sum_k D_k``,
    occupies at least ``g(D) = min {sum_k g_k(D_k) : sum_k D_k <= D}``, the
    Minkowski sum of the envelopes (their segments in increasing slope):
    convex and non-increasing from ``floor = sum_k min_a solo_k[a]`` (the
    fastest a request can be) down to ``work = sum_k min_a w_a`` (the most
    SM-frugal, however slow).  Running fast costs SM-seconds: for BERT ``g``
    is 1.7 x ``work`` at its floor, 1.3 x at 1.2 x its floor.  The GPU holds
    at most ``N`` SMs at any time, so in units of the whole GPU a request is
    a job of size at least ``p = work / N`` seconds on one machine of speed 1
    that may share itself among jobs (a fluid machine): projecting any real
    schedule onto that machine gives a feasible fluid schedule in which each
    job runs between its arrival and its real completion.

One request of an app at a time
    An app's requests share its buffers (on a GPU, one memory arena per app),
    so the kernel manager never runs two of them at once: a request's first
    kernel waits for the last kernel of its app's previous request
    (:class:`bless.core.manager.KernelManager`), whatever the policy, and an
    app's queue is served in arrival order.  So request ``j`` ends no sooner
    than ``max(r_j, C_{j-1}) + floor``: each app is a single server whose
    service takes at least ``floor``.

Open loops (Poisson, traces: the arrival times are known)
    Only requests arriving in ``[warmup, duration)`` are measured; the others
    are left out, which only lowers the bound (a server's completions only
    move earlier with fewer jobs ahead).  *One app*: with the recursion above
    from its measured arrivals, its mean latency is at least ``mean_j (C_j -
    r_j)`` (:func:`one_at_a_time_bound`): its queue as if each request ran alone
    on the whole GPU, which a policy that favours the app could come close to.
    *All apps together* (the mean over apps weighs app ``i``'s requests by
    ``1/n_i``), on the fluid machine above: for any schedule ``C_j >= M_j + p_j/2``
    with ``M_j`` the mean busy time of job ``j``, and the weighted sum of mean
    busy times is smallest in the preemptive schedule that serves the highest
    ``w_j/p_j`` first (Goemans, SODA'97: the mean-busy-time LP is solved by
    that schedule; it holds for fractional processing too), which gives
    :func:`mean_busy_time_bound`.  The bound on the sum of the open apps'
    means is the larger of that and the sum of their per-app bounds.

Closed loops (workloads A/B/C: a client waits ``Z`` after each answer)
    Arrivals follow completions, so the bound is on throughput: ``c_i``
    clients with mean latency ``L_i`` complete ``c_i / (L_i + Z_i)`` requests
    per second.  A request of latency ``L_j`` lasts at most ``L_j`` on the GPU,
    so it occupies at least ``g_i(L_j)`` (``g_i`` is non-increasing), and by
    Jensen (``g_i`` is convex) the app's requests occupy on average at least
    ``g_i(L_i)``.  The GPU's capacity gives ``sum_i h_i(L_i) <= 1`` with
    ``h_i(L) = c_i g_i(L) / (N (L + Z_i))`` and ``L_i >= floor_i``, and,
    the app's requests one at a time, at most ``1 / floor_i`` requests a
    second: ``L_i >= c_i floor_i - Z_i`` (``g_i`` is cut there).  Each
    ``h_i`` is a product of two non-negative, non-increasing convex functions,
    hence convex (on a piece of ``g_i`` the second derivative is
    ``g'' u + 2 g' u' + g u'' >= 0`` with ``u = 1 / (L + Z_i)``, and at a kink
    ``u > 0`` times the jump of ``g'_i``, which is positive), so the least
    ``sum_i L_i`` under the constraint is a convex problem.  For every
    multiplier ``mu >= 0`` the Lagrangian dual ``sum_i min_{L >= floor_i}
    (L + mu h_i(L)) - mu`` is a lower bound on it (weak duality, whatever the
    convexity), each inner minimum is in closed form on the piece of ``g_i``
    where ``L + mu h_i`` turns up, and bisection on ``mu`` finds the dual's
    maximum, which equals the least sum (:func:`closed_loop_bound`).  Per app
    (the others left out) the same with one app gives the app's bound; the
    bound on the sum of the means is the joint one.  With ``g_i`` replaced by
    its least value ``work_i`` this is the throughput bound ``max(floor_i,
    c_i p_i - Z_i)`` per app; ``g_i >= work_i`` only raises it.  Open apps'
    work is left out of the constraint (a scheduler may postpone it), which
    keeps it valid.  The open-loop bounds still use ``floor`` and ``work``
    alone: a request that waits may run frugally, so ``g`` only matters for
    requests served at once, and the argument that would use it (at time
    ``t`` each finished request has used at least ``g`` of its age, which
    caps how many of the recent arrivals can be done: a max-on-time-jobs
    problem per instant) is not implemented.

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

from bless.harness.fcfs import fcfs_completions
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


# ------------------------------------------------------------------ frontier
@dataclass(frozen=True)
class Frontier:
    """The least SM-seconds ``g(D)`` one request of an app occupies if its kernels run for ``D`` seconds in all.

    Piecewise linear, convex and non-increasing between its breakpoints,
    constant (``work``) after the last; undefined (inf) below ``floor``.
    """

    durations: np.ndarray
    """Breakpoints ``D`` (seconds), increasing, from ``floor`` to the least ``D`` at which ``g`` reaches ``work``."""
    works: np.ndarray
    """``g`` at ``durations`` (SM-seconds), non-increasing: the work at full speed down to ``work``."""

    @property
    def floor(self) -> float:
        """Seconds: every kernel at its fastest, back to back (the request alone on the whole GPU)."""
        return float(self.durations[0])

    @property
    def work(self) -> float:
        """SM-seconds: every kernel at its most SM-frugal allocation, however long that takes."""
        return float(self.works[-1])

    def __call__(self, duration: np.ndarray | float) -> np.ndarray:
        """``g`` at ``duration`` (seconds; inf below ``floor``)."""
        d = np.asarray(duration, dtype=float)
        return np.where(d < self.durations[0], math.inf, np.interp(d, self.durations, self.works))

    def from_duration(self, least: float) -> Frontier:
        """This frontier for requests that last at least ``least`` seconds (itself if ``least``
        is at most its floor)."""
        if least <= self.durations[0]:
            return self
        later = self.durations > least
        return Frontier(
            durations=np.r_[least, self.durations[later]], works=np.r_[float(self(least)), self.works[later]]
        )


def request_frontier(solo: np.ndarray, held: np.ndarray) -> Frontier:
    """The frontier of a request from its kernels' curves.

    ``solo[a - 1, k]``: kernel ``k``'s duration with ``a`` SMs available, ``a = 1..N``;
    ``held[a - 1, k]``: the SMs it occupies meanwhile (0 for a copy, which runs
    on the copy engine).  Shapes ``(N, K)``.  Each kernel's points
    ``(solo, held * solo)`` are reduced to their lower convex envelope,
    walked from the fastest point (the least work among the fastest) by the
    steepest descent to the next point, all kernels at once; the request's
    frontier is the sum of those envelopes, their segments taken in
    increasing slope.
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
    d = solo.T  # (K, N)
    w = (held * solo).T
    fastest = d.min(axis=1)
    cur_d = fastest.copy()
    cur_w = np.where(d == fastest[:, None], w, math.inf).min(axis=1)
    start = float(cur_d.sum()), float(cur_w.sum())
    steps_d: list[np.ndarray] = []
    steps_w: list[np.ndarray] = []
    live = np.arange(len(d))  # kernels whose envelope still descends
    while len(live):
        dd = d[live] - cur_d[live, None]
        dw = w[live] - cur_w[live, None]
        down = (dd > 0) & (dw < 0)
        slope = np.where(down, dw / np.where(down, dd, 1.0), math.inf)
        nxt = slope.argmin(axis=1)
        rows = np.arange(len(live))
        moves = np.isfinite(slope[rows, nxt])
        live, nxt, rows = live[moves], nxt[moves], rows[moves]
        steps_d.append(dd[rows, nxt])
        steps_w.append(dw[rows, nxt])
        cur_d[live] = d[live, nxt]
        cur_w[live] = w[live, nxt]
    step_d = np.concatenate(steps_d)
    step_w = np.concatenate(steps_w)
    order = np.argsort(step_w / step_d, kind="stable")
    durations = start[0] + np.concatenate([[0.0], np.cumsum(step_d[order])])
    works = start[1] + np.concatenate([[0.0], np.cumsum(step_w[order])])
    # A step too short to move the sum in floating point: keep the lower of the works at one duration.
    kept = np.append(np.diff(durations) > 0, True)
    return Frontier(durations=durations[kept], works=np.maximum(works[kept], 0.0))


def profile_frontier(profile: Profile, gpu: GpuSpec) -> Frontier:
    """:func:`request_frontier` of ``profile`` on ``gpu``, read as the simulated GPU reads it (:mod:`bless.profiles.features`)."""
    solo = features.solo_curves(profile, gpu)[1:]
    cap = features.busy_sms(profile, gpu)
    held = np.minimum(cap[None, :], np.arange(1, gpu.sm_count + 1)[:, None])
    return request_frontier(solo, held)


# ------------------------------------------------------------------ open loops
def _arrivals(arrivals: np.ndarray, where: str) -> np.ndarray:
    r = np.asarray(arrivals, dtype=float)
    if r.ndim != 1 or not np.all(np.isfinite(r)) or np.any(np.diff(r) < 0):
        raise BoundError(f"{where}: expected sorted, finite arrival times")
    return r


def one_at_a_time_bound(arrivals: np.ndarray, floor: float) -> float:
    """Bound on one app's mean latency: its requests served one at a time in arrival order, each
    taking at least ``floor`` seconds: ``mean_j (C_j - r_j)``, ``C_j = max(r_j, C_{j-1}) + floor``.

    nan without arrivals.
    """
    r = _arrivals(arrivals, "arrivals")
    if not floor >= 0:
        raise BoundError(f"floor: expected non-negative seconds, got {floor}")
    if len(r) == 0:
        return math.nan
    return float(np.mean(fcfs_completions(r, floor) - r))


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
@dataclass(frozen=True)
class _ClosedApp:
    """One closed-loop app's share of the GPU's capacity, ``h(L) = clients * g(L) / (N * (L + think))``.

    On piece ``j`` of ``g`` (slope ``s_j <= 0``), ``h(L) = clients * s_j / N + a_j / (L + think)``
    with ``a_j = clients * (g(L) - s_j * (L + think)) / N >= 0``, the same all along
    the piece, so ``L + mu * h(L)`` is least at ``sqrt(mu * a_j) - think`` clipped to
    the piece on which its slope changes sign.
    """

    frontier: Frontier
    think: float
    clients: int
    sm_count: int
    starts: np.ndarray
    """Where each piece of ``g`` starts: the frontier's breakpoints (the last piece, flat, has no end)."""
    ends: np.ndarray
    """Where each piece ends (inf for the last)."""
    a: np.ndarray
    """``a_j`` per piece."""
    steepness: np.ndarray
    """``-h'`` at each piece's start, non-increasing (``h`` is convex)."""

    @classmethod
    def of(cls, frontier: Frontier, think: float, clients: int, sm_count: int) -> _ClosedApp:
        d, w = frontier.durations, frontier.works
        slope = np.append(np.diff(w) / np.diff(d), 0.0)
        a = np.maximum(clients * (w - slope * (d + think)) / sm_count, 0.0)
        steep = np.minimum.accumulate(a / (d + think) ** 2)
        return cls(frontier, think, clients, sm_count, d, np.append(d[1:], math.inf), a, steep)

    def share(self, latency: float) -> float:
        """``h(latency)``: the fraction of the GPU the app's clients occupy at that mean latency."""
        return float(self.clients * self.frontier(latency) / (self.sm_count * (latency + self.think)))

    def best(self, mu: float) -> float:
        """The latency ``L >= floor`` that minimises ``L + mu * h(L)``."""
        j = int(np.searchsorted(-self.steepness, -1.0 / mu, side="left")) if mu > 0 else 0
        if j == 0:
            return float(self.starts[0])
        return float(np.clip(math.sqrt(mu * self.a[j - 1]) - self.think, self.starts[j - 1], self.ends[j - 1]))


def closed_loop_bound(
    frontiers: Sequence[Frontier], thinks: Sequence[float], clients: Sequence[int], sm_count: int
) -> tuple[np.ndarray, float]:
    """The least ``sum L`` subject to the GPU's capacity, and mean latencies ``L`` that come within rounding of it.

    Constraint: ``sum_i h_i(L_i) <= 1`` with ``h_i(L) = clients_i * g_i(L) / (sm_count * (L + thinks_i))``
    (``g_i``: ``frontiers[i]``) and ``L_i >= floor_i``.  Each ``h_i`` is convex, so
    for every multiplier ``mu >= 0`` the Lagrangian ``sum_i min_L (L + mu h_i(L)) - mu``
    is a lower bound on the least sum (weak duality) and at the best ``mu``
    equals it; ``mu`` is found by bisection on the capacity the minimisers use.
    Returns the minimisers at the feasible end of the bisection and the larger of
    the two ends' dual values, which is the bound.
    """
    if not len(frontiers) == len(thinks) == len(clients) or len(frontiers) == 0:
        raise BoundError("frontiers, thinks, clients: expected equal-length non-empty sequences")
    if any(z < 0 for z in thinks) or any(c < 1 for c in clients) or sm_count < 1:
        raise BoundError("thinks >= 0, clients >= 1 and sm_count >= 1 are required")
    apps = [_ClosedApp.of(f, float(z), int(c), sm_count) for f, z, c in zip(frontiers, thinks, clients)]

    def latencies(mu: float) -> np.ndarray:
        return np.array([x.best(mu) for x in apps])

    def used(mu: float) -> float:
        return sum(x.share(lat) for x, lat in zip(apps, latencies(mu)))

    def dual(mu: float) -> float:
        return sum(lat + mu * x.share(lat) for x, lat in zip(apps, latencies(mu))) - mu

    if used(0.0) <= 1.0:
        return latencies(0.0), float(sum(f.floor for f in frontiers))
    lo, hi = 0.0, 1.0
    while used(hi) > 1.0:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-13 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if used(mid) > 1.0 else (lo, mid)
    return latencies(hi), max(dual(lo), dual(hi))


# ------------------------------------------------------------------ combining
def latency_bounds(
    frontiers: Sequence[Frontier], loads: Sequence[LoadShape], sm_count: int
) -> tuple[np.ndarray, float]:
    """Per-app bounds and the bound on the mean over apps (see the module docstring)."""
    if not frontiers:
        raise BoundError("apps: need at least one app")
    if len(loads) != len(frontiers):
        raise BoundError(f"loads: expected one per app ({len(frontiers)}), got {len(loads)}")
    if sm_count < 1:
        raise BoundError(f"sm_count: expected a positive number of SMs, got {sm_count}")
    sizes = [f.work / sm_count for f in frontiers]
    per_app = np.empty(len(frontiers))
    closed = [i for i, s in enumerate(loads) if s.arrivals is None]
    opened = {i: s.arrivals for i, s in enumerate(loads) if s.arrivals is not None}
    # An app serves one request at a time, each at least its floor: c clients thinking Z get at
    # most 1 / floor requests a second, so their mean latency is at least c * floor - Z.
    served = {i: frontiers[i].from_duration(loads[i].clients * frontiers[i].floor - loads[i].think) for i in closed}
    for i in closed:
        per_app[i] = closed_loop_bound([served[i]], [loads[i].think], [loads[i].clients], sm_count)[1]
    for i, arrivals in opened.items():
        per_app[i] = one_at_a_time_bound(arrivals, frontiers[i].floor)
    total = 0.0
    if closed:
        total += closed_loop_bound(
            [served[i] for i in closed],
            [loads[i].think for i in closed],
            [loads[i].clients for i in closed],
            sm_count,
        )[1]
    if opened:
        joint = mean_busy_time_bound(list(opened.values()), [sizes[i] for i in opened])
        total += np.maximum(per_app[list(opened)].sum(), joint)  # nan if an app has no measured request
    return per_app, float(total / len(frontiers))


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

    Loads are bound with the RNGs the run gives them (seed ``cfg.seed``; an isolated
    policy's groups each with their own, :func:`bless.harness.run.group_seed`: ISO and
    MIG run each app alone with seed ``cfg.seed + i``), so open-loop arrivals are
    exactly the run's.
    """
    from bless.harness.loads import parse_load
    from bless.harness.replay import load_rngs
    from bless.harness.run import app_states, group_seed, make_policy
    from bless.hw.gpus import get_gpu
    from bless.profiles.catalog import load_app

    gpu = get_gpu(cfg.gpu)
    profiles = [load_app(a.app, gpu.name) for a in cfg.apps]
    states = app_states(cfg, profiles)
    loads = [parse_load(a.load, f"apps[{i}].load") for i, a in enumerate(cfg.apps)]
    policy = make_policy(cfg, cfg.mechanism or "mps")
    rngs = load_rngs(cfg.seed, len(loads))
    if policy.isolated:  # each group replays on its own, seeded as bless.harness.run does
        try:
            groups = policy.isolated_groups(states, gpu)
        except ValueError as e:  # e.g. MIG cannot host these quotas: no run, no arrivals to bound
            raise BoundError(f"policy: {e}") from None
        for group in groups:
            for i, rng in zip(group.apps, load_rngs(group_seed(cfg, group), len(group.apps))):
                rngs[i] = rng
    shapes = []
    for i, (load, profile, rng) in enumerate(zip(loads, profiles, rngs)):
        solo = float(profile.T[-1])  # what the runtime binds loads with
        load.bind(solo, rng)
        shapes.append(load_shape(load, solo, cfg.duration, cfg.warmup, f"apps[{i}].load"))
    frontiers = [profile_frontier(p, gpu) for p in profiles]
    per_app, mean = latency_bounds(frontiers, shapes, gpu.sm_count)
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
        for st, load, d, s, b in zip(states, loads, frontiers, shapes, per_app)
    )
    return BoundResult(gpu=gpu.name, sm_count=gpu.sm_count, apps=apps, mean=mean)
