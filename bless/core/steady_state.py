"""Apps sharing the GPU in steady state: what each is served in each way of running them.

A fluid model over whole requests.  At any instant the GPU runs some of the apps' requests
side by side, each on its own SMs (alone on every SM included, idle SMs allowed), and time
may be divided among these *ways* freely.  A request's time at ``n`` SMs is the sum of its
kernels' curves (:func:`bless.profiles.features.solo_curves`); side by side each is stretched
by the simulated GPU's interference term
(:meth:`bless.hw.interference.InterferenceModel.stretch`) with each app's *mean* DRAM demand
at its SM count.

Two readers.  ``experiments/overlap_feasibility.py`` asks it whether a group's promises can
be kept at all (linear programs over the ways).  Deadline pacing asks it how to share the GPU
among apps that all ask for more than their quotas for good (:func:`sharing_cycle`): there
each is owed its quota's throughput, and a static split at the quotas is the floor, which
mixing ways (a DRAM-heavy app alone on the whole GPU for part of the time, the others side
by side for the rest) can beat.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from bless.hw.gpus import GpuSpec
from bless.hw.interference import InterferenceModel
from bless.profiles import features
from bless.profiles.format import Profile


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


def ways(
    curves: Sequence[RequestCurve], sm_count: int, model: InterferenceModel, unit: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every way of running some of ``curves`` side by side (each alone included), SMs given in
    multiples of ``unit``, idle ones allowed; each shape (P, len(curves)): the SMs of each (0: it
    does not run), its requests per second and its stretch (1 where it does not run)."""
    sms, rates, stretch = [], [], []
    for k in range(1, len(curves) + 1):
        splits = allocations(k, sm_count // unit) * unit
        for group in itertools.combinations(range(len(curves)), k):
            columns = list(group)
            shape = (len(splits), len(curves))
            block_sms, block_rates, block_stretch = np.zeros(shape, dtype=int), np.zeros(shape), np.ones(shape)
            block_sms[:, columns] = splits
            block_rates[:, columns], block_stretch[:, columns] = group_rates([curves[i] for i in group], splits, model)
            sms.append(block_sms)
            rates.append(block_rates)
            stretch.append(block_stretch)
    return np.concatenate(sms), np.concatenate(rates), np.concatenate(stretch)


def rate_points(curves: Sequence[RequestCurve], sm_count: int, model: InterferenceModel, unit: int = 1) -> np.ndarray:
    """Shape (P, len(curves)): requests per second of each in every way of running some of them
    (:func:`ways`)."""
    return ways(curves, sm_count, model, unit)[1]


_INSTANT = 1e-9
"""Seconds closer than this are one instant to a sharing cycle (float rounding)."""


@dataclass(frozen=True)
class SharingCycle:
    """Ways of sharing the GPU among a group of apps, each for its part of a turn, in turn."""

    shares: tuple[tuple[int, ...], ...]
    """Per way, the SMs of each app of the group (0: its requests wait)."""
    fractions: tuple[float, ...]
    """Per way, its part of a turn (they add up to 1)."""
    period: float
    """Seconds a turn takes."""
    served: float
    """The model's service of the worst-served app over its quota's throughput."""

    def at(self, now: float) -> tuple[tuple[int, ...], float]:
        """The way in force at ``now`` (turns start at multiples of the period) and when it
        ends, always later than ``now``: a way ending within a nanosecond of ``now`` (a step
        woken at its end, the sum rounded) has ended.  A cycle of one way never ends."""
        if len(self.shares) == 1:
            return self.shares[0], math.inf
        start = now - now % self.period
        end = start
        for shares, fraction in zip(self.shares, self.fractions):
            end += fraction * self.period
            if now < end - _INSTANT:
                return shares, end
        return self.shares[0], start + self.period * (1.0 + self.fractions[0])


def sharing_cycle(
    curves: Sequence[RequestCurve],
    quota_sms: Sequence[int],
    sm_count: int,
    model: InterferenceModel,
    unit: int,
    period: float,
    shortest: float,
) -> SharingCycle:
    """The division of a turn of ``period`` seconds among the ways of running ``curves``' apps
    that serves the worst-served app the most of its quota's throughput (``1 / iso``).

    Only ways in which no app is stretched more than in the static split at ``quota_sms`` are
    used: the mean-demand interference estimate is trusted to tell where running apps apart
    lowers a neighbour's slowdown, not where crowding it raises it.  Ways the program gives less
    than ``shortest`` seconds of a turn are left out and the rest scaled up (a request keeps
    kernels queued, so a way that short would run mostly the previous way's)."""
    sms, rates, stretch = ways(curves, sm_count, model, unit)
    split = group_rates(curves, np.array([quota_sms]), model)[1][0]
    trusted = np.all((stretch <= split + 1e-9) | (sms == 0), axis=1)
    sms, service = sms[trusted], rates[trusted] * np.array([c.iso for c in curves])
    # Maximise t: the time-weighted service of every app at least t, the parts of a turn adding up to at most 1.
    n, k = service.shape
    a_ub = np.zeros((k + 1, n + 1))
    a_ub[:k, :n] = -service.T
    a_ub[:k, n] = 1.0
    a_ub[k, :n] = 1.0
    cost = np.zeros(n + 1)
    cost[n] = -1.0
    res = linprog(cost, A_ub=a_ub, b_ub=np.r_[np.zeros(k), 1.0], bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"sharing_cycle: the linear program failed ({res.message})")
    x = res.x[:n]
    kept = [w for w in np.argsort(-x, kind="stable") if x[w] * period >= shortest] or [int(np.argmax(x))]
    total = float(x[kept].sum())
    return SharingCycle(
        tuple(tuple(int(s) for s in sms[w]) for w in kept),
        tuple(float(x[w]) / total for w in kept),
        period,
        float(np.min(x[kept] @ service[kept]) / total),
    )
