"""The configuration determiner: how to run a squad.

The space is *no restriction* (NSP: every request in its unrestricted
context) plus every strict split of the ``N = 18`` partitions among the K
requests of the squad with at least one each -- ``C(N-1, K-1)`` splits.  Two
estimators, pure functions over the profile arrays, price them:

* **interference-free** (strict split): request j on ``n_j`` partitions takes
  the sum of its squad kernels' ``t[n_j][k]``; the squad takes the slowest
  request.  With per-level prefix sums this is O(1) per request and level.
  The best split minimises the maximum; because each request's time is
  non-increasing in its partitions, handing partitions one at a time to the
  current bottleneck reaches the optimum of the whole ``C(N-1, K-1)`` space
  in ``O(N*K)`` (the tests check it against full enumeration).
* **workload equivalence** (no restriction): walk the squad breadth-first
  across requests, each request's current kernel overlapping the others'.
  Overlapping kernels with SM shares ``d_i`` (the most SMs each keeps busy)
  whose sum ``D`` fits the GPU run side by side at full speed.  When ``D > 1``
  they are equivalent to one workload of ``sum(d_i * t_i)`` SM-seconds on the
  whole GPU: each runs as if it had the combined share, i.e. stretched by
  ``D``.  (Unrestricted kernels take SMs in launch order, so a kernel that can
  fill the GPU holds it whatever its scaling: this, not a proportional split
  read off each kernel's curve, is what the hardware does -- the proportional
  reading was 2.3x less accurate against the simulator, see the README.)  The
  walk advances to the first kernel that finishes, the next kernel of that
  request joins, and so on; a request running alone adds its own time.

Memory copies use the copy engine, so both estimators add their durations
serially.  A strict split runs as Semi-SP: the first ``c`` (split ratio) of
each request's squad kernels in its restricted context, the rest unrestricted,
so a request that finishes its share early leaves no bubble.  The split is
priced as it will run: the slowest restricted prefix, then the
workload-equivalence walk of the unrestricted remainders.  (Pricing the pure
split instead, as the paper's determiner does, picks Semi-SP for squads whose
unrestricted halves then serialise on the whole GPU: 31 % over ISO for a BERT
pair in the simulator, see experiments/README.md.)  With an adaptive ratio
(``split_ratio=None``) the determiner prices each of :data:`RATIO_CHOICES` and
keeps the fastest: our extension, not the paper's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numba
import numpy as np

from bless.gpu import N_LEVELS, GpuSpec
from bless.profile import Profile
from bless.scheduler import Squad

MODES = ("auto", "nsp", "sp")
"""auto: pick the faster estimate; nsp / sp: always that kind (ablations)."""
RATIO_CHOICES = (0.25, 0.5, 0.75, 1.0)
"""Split ratios an adaptive determiner (``split_ratio=None``) chooses among."""


def restricted_count(ratio: float, count: int) -> int:
    """How many of a request's ``count`` squad kernels Semi-SP runs restricted at split ratio ``ratio``."""
    return int(ratio * count + 0.5)


@dataclass(frozen=True)
class SquadConfig:
    """How one squad runs: unrestricted, or restricted to ``partitions`` per entry."""

    restricted: bool
    partitions: tuple[int, ...]
    """Partitions (1..18) of each squad entry when restricted; empty for NSP."""
    estimate: float
    nsp_estimate: float
    sp_estimate: float
    split_ratio: float = 1.0
    """Share of each entry's squad kernels that run restricted (when ``restricted``)."""

    def restricted_count(self, count: int) -> int:
        """How many of an entry's ``count`` squad kernels run in its restricted context."""
        return restricted_count(self.split_ratio, count)


class AppTables:
    """Per-app arrays that make an estimate cheap, built once at deployment."""

    def __init__(self, profile: Profile, gpu: GpuSpec) -> None:
        # More SMs never slow a kernel down: take the running minimum over levels.
        t = np.minimum.accumulate(profile.t, axis=0)
        self.prefix = np.zeros((N_LEVELS, profile.n_kernels + 1))
        self.prefix[:, 1:] = np.cumsum(t, axis=1)
        self.is_copy = profile.memcpy_mask()
        copies = np.where(self.is_copy, t[-1], 0.0)
        self.copy_prefix = np.concatenate(([0.0], np.cumsum(copies)))
        self.share = np.array([k.max_sm_share for k in profile.kernels])
        self.full = np.ascontiguousarray(t[-1])
        """Each kernel's duration alone on the whole GPU."""

    def level_sums(self, start: int, count: int) -> np.ndarray:
        """Duration of kernels [start, start+count) alone at each of the 18 levels."""
        return self.prefix[:, start + count] - self.prefix[:, start]


class Determiner:
    """Chooses a :class:`SquadConfig` for each squad."""

    def __init__(
        self,
        gpu: GpuSpec,
        mode: str = "auto",
        max_partitions: int = N_LEVELS - 1,
        switch_cost: float = 0.0,
        split_ratio: float | None = 0.5,
        mechanism: str = "mps",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"determiner mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not 1 <= max_partitions <= N_LEVELS:
            raise ValueError(f"max_partitions must be in 1..{N_LEVELS}, got {max_partitions}")
        self.gpu = gpu
        self.mode = mode
        self.max_partitions = max_partitions
        """Most partitions one request may get in a split (the restricted contexts that exist)."""
        self.switch_cost = switch_cost
        """Idle time a request pays when its next kernel goes to another context."""
        self.split_ratio = split_ratio
        """Semi-SP ratio; None: the fastest of :data:`RATIO_CHOICES` per squad."""
        self.mechanism = mechanism
        self._tables: dict[int, AppTables] = {}

    def tables(self, profile: Profile) -> AppTables:
        key = id(profile)
        tab = self._tables.get(key)
        if tab is None:
            tab = self._tables[key] = AppTables(profile, self.gpu)
        return tab

    def forget(self, profile: Profile) -> None:
        self._tables.pop(id(profile), None)

    # ------------------------------------------------------------ estimators
    def level_sums(self, squad: Squad) -> np.ndarray:
        """Shape (K, 18): each entry's squad kernels alone at each level."""
        return np.array([self.tables(e.request.app.profile).level_sums(e.start, e.count) for e in squad.entries])

    def estimate_split(self, squad: Squad, partitions: tuple[int, ...]) -> float:
        """Interference-free estimate of running ``squad`` on a strict split."""
        sums = self.level_sums(squad)
        return float(max(sums[j, n - 1] for j, n in enumerate(partitions)))

    def best_split(self, squad: Squad) -> tuple[tuple[int, ...], float]:
        """The split of the 18 partitions with the lowest interference-free estimate."""
        sums = self.level_sums(squad)
        parts = _greedy_split(sums, N_LEVELS, self.max_partitions)
        return tuple(int(p) for p in parts), float(max(sums[j, p - 1] for j, p in enumerate(parts)))

    def estimate_nsp(self, squad: Squad) -> float:
        """Workload-equivalence estimate of running ``squad`` unrestricted."""
        return self._walk([(e.request.app.profile, e.start, e.count) for e in squad.entries])

    def estimate_semi_sp(self, squad: Squad, partitions: tuple[int, ...], ratio: float) -> float:
        """Semi-SP as it runs: restricted prefixes side by side, then the unrestricted rest.

        The remainders are walked from the moment the first request leaves its
        partition (the others' partitions then free up too, one by one); the
        squad lasts at least as long as its slowest prefix.
        """
        prefixes = []
        rest = []
        for e, n in zip(squad.entries, partitions):
            tab = self.tables(e.request.app.profile)
            r = restricted_count(ratio, e.count)
            prefixes.append(float(tab.level_sums(e.start, r)[n - 1]))
            rest.append((e.request.app.profile, e.start + r, e.count - r))
        return max(max(prefixes), min(prefixes) + self._walk(rest))

    def _walk(self, ranges: list[tuple[Profile, int, int]]) -> float:
        """Workload-equivalence walk over kernel ranges ``(profile, start, count)``, copies added serially."""
        fulls = []
        shares = []
        offsets = [0]
        copies = 0.0
        for profile, lo, count in ranges:
            tab = self.tables(profile)
            hi = lo + count
            copies += tab.copy_prefix[hi] - tab.copy_prefix[lo]
            idx = np.arange(lo, hi)[~tab.is_copy[lo:hi]]
            fulls.append(tab.full[idx])
            shares.append(tab.share[idx])
            offsets.append(offsets[-1] + len(idx))
        if offsets[-1] == 0:
            return copies
        return copies + _nsp_walk(np.concatenate(fulls), np.concatenate(shares), np.array(offsets, dtype=np.int64))

    # ------------------------------------------------------------ decision
    def decide(self, squad: Squad, prev_limits: list[int | None] | None = None) -> SquadConfig:
        """Price NSP and the best strict split; keep the faster (per ``mode``).

        ``prev_limits`` (the SM limit of each entry's previous kernel, None =
        unrestricted) lets the comparison include the context switches each
        configuration costs on top of its kernels: the estimators price the
        kernels, a switch leaves the requests idle for ``switch_cost``.
        """
        if len(squad.entries) <= 1:
            est = self.estimate_nsp(squad) if squad.entries else 0.0
            return SquadConfig(False, (), est, est, est)
        prev = prev_limits or [None] * len(squad.entries)
        nsp = sp = math.inf
        parts: tuple[int, ...] = ()
        if self.mode != "sp":
            nsp = self.estimate_nsp(squad) + self.switch_cost * any(p is not None for p in prev)
        ratio = 1.0
        if self.mode != "nsp":
            parts, split = self.best_split(squad)
            limits = [self.gpu.sms_for_level(n, self.mechanism) for n in parts]
            enter = any(p != lim for p, lim in zip(prev, limits))
            for c in RATIO_CHOICES if self.split_ratio is None else (self.split_ratio,):
                est = split if c >= 1.0 else self.estimate_semi_sp(squad, parts, c)
                leave = any(0 < restricted_count(c, e.count) < e.count for e in squad.entries)
                est += self.switch_cost * (enter + leave)
                if est < sp:
                    sp, ratio = est, c
        if sp < nsp:
            return SquadConfig(True, parts, sp, nsp, sp, ratio)
        return SquadConfig(False, (), nsp, nsp, sp)


@lru_cache(maxsize=16)
def all_splits(k: int, n: int = N_LEVELS) -> np.ndarray:
    """Every split of ``n`` partitions among ``k`` requests, at least one each.

    Shape ``(C(n-1, k-1), k)``: the stars-and-bars enumeration.
    """
    if not 1 <= k <= n:
        raise ValueError(f"cannot split {n} partitions among {k} requests with at least one each")
    rows = []
    for cuts in combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        rows.append([bounds[i + 1] - bounds[i] for i in range(k)])
    return np.array(rows, dtype=np.int64)


@numba.njit(cache=True)
def _greedy_split(sums: np.ndarray, n: int, cap: int) -> np.ndarray:
    """Give partitions one by one to the current bottleneck (see module docstring).

    A request never gets more than ``cap`` partitions; partitions nobody can
    take stay unassigned (Semi-SP hands them out through the unrestricted part).
    """
    k = sums.shape[0]
    parts = np.ones(k, dtype=np.int64)
    for _ in range(n - k):
        worst = -1
        for j in range(k):
            if parts[j] < cap and (worst < 0 or sums[j, parts[j] - 1] > sums[worst, parts[worst] - 1]):
                worst = j
        if worst < 0:
            break
        parts[worst] += 1
    return parts


@numba.njit(cache=True)
def _nsp_walk(full: np.ndarray, share: np.ndarray, offsets: np.ndarray) -> float:
    """The workload-equivalence walk; request j owns kernels ``offsets[j]:offsets[j+1]``."""
    k = offsets.shape[0] - 1
    ptr = offsets[:-1].copy()
    rem = np.ones(k)
    dur = np.empty(k)
    total = 0.0
    while True:
        demand = 0.0
        live = 0
        for j in range(k):
            if ptr[j] < offsets[j + 1]:
                demand += share[ptr[j]]
                live += 1
        if live == 0:
            return total
        stretch = demand if demand > 1.0 else 1.0
        step = np.inf
        for j in range(k):
            if ptr[j] < offsets[j + 1]:
                dur[j] = full[ptr[j]] * stretch
                if rem[j] * dur[j] < step:
                    step = rem[j] * dur[j]
        total += step
        for j in range(k):
            if ptr[j] < offsets[j + 1]:
                rem[j] -= step / dur[j]
                if rem[j] <= 1e-9:
                    ptr[j] += 1
                    rem[j] = 1.0
