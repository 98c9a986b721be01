"""The configuration determiner: how to run a squad.

Three kinds of configuration (:attr:`SquadConfig.kind`):

* ``"nsp"`` -- no restriction: every request's squad kernels in its
  unrestricted context, all requests at once;
* ``"split"`` -- a split of the ``N = 18`` partitions among the K requests
  (at least one each; ``C(N-1, K-1)`` splits), run as Semi-SP: the first ``c``
  (split ratio) of each request's squad kernels in its context restricted to
  ``gpu.sms_for_level(partitions, mechanism)`` SMs, the rest unrestricted, so a
  request that finishes its share early leaves no bubble (``c = 1``: the strict
  split);
* ``"seq"`` -- one request after the other (the paper's SEQ, Fig. 17): each
  request's squad kernels alone on the whole GPU, requests in squad order, a
  synchronisation between two requests.

Every estimate is read off the profile's curves at the SMs the contexts really
have: a restricted level is priced at ``gpu.sms_for_level(n, mechanism)`` SMs
(with green contexts on Hopper those differ from the profile's MPS levels, 13 of
17: level 7 is 48 SMs, not 52), interpolated by :func:`bless.profiles.curves.dense_curve`
exactly as the simulator reads them.  The tables are built once per profile.

What prices what, and why:

* **Split search: interference-free sums.**  Request j on ``n_j`` partitions
  takes the sum of its squad kernels' times at that level's SMs; a strict split
  takes the slowest request.  Because each request's time is non-increasing in
  its partitions, handing partitions one at a time to the current bottleneck
  reaches the optimum of the whole ``C(N-1, K-1)`` space in ``O(N*K)`` (the
  tests check it against full enumeration).  This only chooses the split; the
  split is then priced by the walk.
* **NSP, Semi-SP and strict splits: the kernel walk** (:func:`_walk`).  Each
  request runs its kernels in order; the walk moves from one kernel end (or
  request start) to the next.  Between two events the running kernels hold SMs
  in the order they started, as the hardware block scheduler dispatches the
  earlier kernel's blocks first: each takes ``min(busy_sms, available)``
  (:func:`bless.profiles.features.busy_sms`: the capacity it uses on the SMs
  it spreads over, the rest open to co-resident blocks), where
  a restricted kernel has at most its context's SMs, and a kernel that finds
  none waits.  A kernel runs at its profile time at the SMs available to it
  (restricted: its context's SMs, as the profiles were measured under MPS
  limits, or full speed in an SM set with room for all the SMs it spreads
  over; unrestricted holding its ``busy_sms``: its full-GPU time).
  Request j's unrestricted remainder starts a context switch after its *own*
  restricted prefix ends, never earlier; the SMs the other requests' prefixes
  still hold are not available to it, and a remainder kernel that started
  first holds its SMs while another request's next prefix kernel waits.
  Workload equivalence (overlapping kernels stretched by the sum of their SM
  shares) approximates the same thing but cannot express the last point, and
  Semi-SP is exactly where that matters: which request holds the SMs decides
  when each remainder can start.  The walk's error per configuration is in
  ``experiments/README.md`` (Estimators and overhead).
* **Interference**, in the walk: co-running kernels stretch by the calibrated
  DRAM interference the simulator applies (:meth:`bless.hw.interference.InterferenceModel.stretch`,
  written out in the compiled walk),
  ``(1 + min(u, 1) * max(U - 1, 0)) * (1 + c * (U - u))`` with ``u`` a kernel's DRAM demand at its current
  speed (the profile's ``dram_util`` times its full-GPU time, over its time
  now), ``U`` the sum over the running kernels and ``c`` from
  ``bless/hw/<gpu>.toml``.  It costs a few operations per event, and it
  changes the choice: configurations differ in which kernels overlap, and an
  interference-free walk prices every overlap as free.
* **Memory copies** run on the copy engine beside the kernels (concurrent
  copies share it), so one request's input copy overlaps the others' kernels.
* **SEQ** needs no walk: a request alone takes the sum of its kernels'
  full-GPU times, and two requests are ``barrier`` apart (the synchronisation
  and launch between them).

The walk is the simulator's model of the GPU, so on the noise-free simulator
the estimates are exact; the simulator checks the implementation, not how
well the model fits a real GPU (``tools/validate_interference.py`` and
``tools/validate_scaling.py`` check the model's parts against measurements).

Context switches are priced where they happen: a Semi-SP remainder starts
``switch_cost`` after its own prefix, and a request whose first kernel goes to
another context than its previous kernel starts ``switch_cost - barrier`` late
(the barrier before the squad hides the rest).  With an adaptive ratio
(``split_ratio=None``) the determiner prices each of :data:`RATIO_CHOICES` at
the best split and keeps the fastest: our extension, not the paper's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numba
import numpy as np

from bless.backend.interface import HostCosts
from bless.core.lifecycle import AppState
from bless.core.scheduler import Squad
from bless.hw.gpus import N_LEVELS, GpuSpec
from bless.hw.interference import InterferenceModel
from bless.profiles import curves, features
from bless.profiles.format import Profile

MODES = ("auto", "nsp", "sp", "seq")
"""auto: pick the fastest estimate; nsp / sp / seq: always that kind (ablations)."""
KINDS = ("nsp", "split", "seq")
"""The configuration kinds (:attr:`SquadConfig.kind`)."""
RATIO_CHOICES = (0.25, 0.5, 0.75, 1.0)
"""Split ratios an adaptive determiner (``split_ratio=None``) chooses among."""


def restricted_count(ratio: float, count: int) -> int:
    """How many of a request's ``count`` squad kernels Semi-SP runs restricted at split ratio ``ratio``."""
    return int(ratio * count + 0.5)


@dataclass(frozen=True, init=False)
class SquadConfig:
    """How one squad runs: ``kind`` ``"nsp"``, ``"split"`` (Semi-SP on ``partitions``) or ``"seq"``.

    ``SquadConfig(kind, partitions, estimate, nsp_estimate, sp_estimate, split_ratio, seq_estimate)``;
    ``kind`` may also be given as a bool (``True``: ``"split"``, ``False``: ``"nsp"``) or as the
    keyword ``restricted=``, the older form.
    """

    kind: str
    """``"nsp"``: every request unrestricted, at once; ``"split"``: Semi-SP on ``partitions``;
    ``"seq"``: one request after the other, each unrestricted, in squad order -- launched as one
    synchronised decision per request (in one decision the requests' streams would run at once)."""
    partitions: tuple[int, ...]
    """Partitions (1..18) of each squad entry for a split; empty otherwise."""
    estimate: float
    """Estimated squad duration of the chosen configuration (context switches included)."""
    nsp_estimate: float
    sp_estimate: float
    split_ratio: float = 1.0
    """Share of each entry's squad kernels that run restricted (for a split)."""
    seq_estimate: float = math.nan

    def __init__(
        self,
        kind: str | bool | None = None,
        partitions: tuple[int, ...] = (),
        estimate: float = math.nan,
        nsp_estimate: float = math.nan,
        sp_estimate: float = math.nan,
        split_ratio: float = 1.0,
        seq_estimate: float = math.nan,
        *,
        restricted: bool | None = None,
    ) -> None:
        if restricted is not None:
            if kind is not None:
                raise TypeError("give either kind or restricted, not both")
            kind = bool(restricted)
        if isinstance(kind, (bool, np.bool_)):
            kind = "split" if kind else "nsp"
        if kind not in KINDS:
            raise ValueError(f"squad configuration kind must be one of {', '.join(KINDS)}, got {kind!r}")
        for name, value in (
            ("kind", kind),
            ("partitions", tuple(partitions)),
            ("estimate", estimate),
            ("nsp_estimate", nsp_estimate),
            ("sp_estimate", sp_estimate),
            ("split_ratio", split_ratio),
            ("seq_estimate", seq_estimate),
        ):
            object.__setattr__(self, name, value)

    @property
    def restricted(self) -> bool:
        """Some kernels run in restricted contexts (``kind == "split"``)."""
        return self.kind == "split"

    def restricted_count(self, count: int) -> int:
        """How many of an entry's ``count`` squad kernels run in its restricted context."""
        return restricted_count(self.split_ratio, count) if self.kind == "split" else 0


class AppTables:
    """One app's kernel times at every SM count and at each level's SMs, built once per profile."""

    def __init__(self, profile: Profile, gpu: GpuSpec, mechanism: str = "mps") -> None:
        if profile.gpu != gpu.name or profile.level_sms[-1] != gpu.sm_count:
            raise ValueError(
                f"profile {profile.app!r} is for {profile.gpu} ({profile.level_sms[-1]} SMs), not the "
                f"{gpu.name} ({gpu.sm_count} SMs): use a profile made for {gpu.name}"
            )
        self.is_copy = profile.memcpy_mask()
        # Duration with n SMs available, n = 0..sm_count (index 0: inf), as the simulator reads
        # it (bless.profiles.features.solo_curves) but for one rounding: a copy here takes the
        # least time over its curve, there its time at the full GPU, which can differ in the
        # last bit.  Kept so the committed results regenerate bit for bit.
        dense = curves.dense_curve(np.array(profile.level_sms), profile.t, gpu.sm_count)
        dense[1:] = np.minimum.accumulate(dense[1:], axis=0)
        dense[1:, self.is_copy] = dense[-1, self.is_copy]
        self.dense = np.ascontiguousarray(dense.T)
        """Shape (kernels, sm_count + 1): each kernel's duration at every SM count."""
        self.full = np.ascontiguousarray(dense[-1])
        """Each kernel's duration alone on the whole GPU."""
        self.most = features.max_sms(profile, gpu)
        """Most SMs each kernel spreads over (0: a copy, on the copy engine)."""
        self.busy = features.busy_sms(profile, gpu)
        """SMs' worth of capacity each kernel uses at full speed (0: a copy)."""
        self.dram = features.dram_seconds(profile, self.full)
        """Seconds of peak DRAM bandwidth each kernel moves."""
        self._prefixes: dict[tuple[int, ...], np.ndarray] = {}
        self.prefix = self.level_prefix(gpu.level_sms(mechanism))
        """Per level: sums of the first k kernels' durations at that level's SMs under the mechanism."""
        self.profile = profile
        """Kept so that ``id(profile)`` names these tables only while they live."""
        self.base = 0
        """Offset of kernel 0 in the determiner's concatenated tables."""

    def level_sums(self, start: int, count: int, level_sms: tuple[int, ...] | None = None) -> np.ndarray:
        """Duration of kernels [start, start+count) alone at each of the 18 levels (at their real SMs:
        the mechanism's table, or ``level_sms``, what an app's own contexts were granted)."""
        prefix = self.prefix if level_sms is None else self.level_prefix(level_sms)
        return prefix[:, start + count] - prefix[:, start]

    def level_prefix(self, level_sms: tuple[int, ...]) -> np.ndarray:
        """:attr:`prefix` at the SM counts ``level_sms`` (built on first use, then kept)."""
        prefix = self._prefixes.get(level_sms)
        if prefix is None:
            prefix = np.zeros((len(level_sms), self.dense.shape[0] + 1))
            prefix[:, 1:] = np.cumsum(self.dense.T[list(level_sms)], axis=1)
            self._prefixes[level_sms] = prefix
        return prefix


class Determiner:
    """Chooses a :class:`SquadConfig` for each squad.

    ``mode``: ``"auto"`` keeps the fastest of NSP, the best split and SEQ;
    ``"nsp"``, ``"sp"``, ``"seq"`` always run that kind (a lone request always
    runs unrestricted).  ``barrier`` and ``interference`` default to the GPU's
    data file (``HostCosts.for_gpu``: sync + launch; the interference constant).
    """

    def __init__(
        self,
        gpu: GpuSpec,
        mode: str = "auto",
        max_partitions: int = N_LEVELS - 1,
        switch_cost: float = 0.0,
        split_ratio: float | None = 0.5,
        mechanism: str = "mps",
        *,
        barrier: float | None = None,
        interference: float | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"determiner mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not 1 <= max_partitions <= N_LEVELS:
            raise ValueError(f"max_partitions must be in 1..{N_LEVELS}, got {max_partitions}")
        gpu.round_sms(1, mechanism)  # refuses an unknown mechanism
        self.gpu = gpu
        self.mode = mode
        self.max_partitions = max_partitions
        """Most partitions one request may get in a split (the restricted contexts that exist)."""
        self.switch_cost = switch_cost
        """Idle time a request pays when its next kernel goes to another context."""
        self.split_ratio = split_ratio
        """Semi-SP ratio; None: the fastest of :data:`RATIO_CHOICES` per squad."""
        self.mechanism = mechanism
        if barrier is None:
            host = HostCosts.for_gpu(gpu)
            barrier = host.sync + host.launch
        self.barrier = barrier
        """Host time from the last kernel of a synchronised launch to the first of the next (a
        synchronisation and a launch): the gap between two requests of a SEQ squad, and the part
        of a switch on entry that the barrier before the squad hides."""
        if interference is None:
            interference = InterferenceModel.for_gpu(gpu.name).bandwidth
        self.interference = interference
        """Stretch per unit of DRAM bandwidth the other running kernels demand (see module docstring)."""
        self._table = gpu.level_sms(mechanism)
        self._level_sms = np.array(self._table, dtype=np.int64)
        self._granted: dict[int, tuple[dict[int, int], tuple[int, ...]]] = {}
        self._table_rows: dict[int, np.ndarray] = {}
        self._sets = mechanism == "green"
        self._tables: dict[int, AppTables] = {}
        self._dense = np.zeros((0, gpu.sm_count + 1))
        self._most = np.zeros(0, dtype=np.int64)
        self._busy = np.zeros(0, dtype=np.int64)
        self._dram = np.zeros(0)
        self._ratios = np.array(RATIO_CHOICES if split_ratio is None else (split_ratio,), dtype=np.float64)

    def tables(self, profile: Profile) -> AppTables:
        """The app's tables (built on first use, then kept)."""
        key = id(profile)
        tab = self._tables.get(key)
        if tab is None:
            tab = AppTables(profile, self.gpu, self.mechanism)
            tab.base = self._dense.shape[0]
            self._tables[key] = tab
            # Column by column: the walk reads a run's consecutive kernels at one SM count.
            self._dense = np.asfortranarray(np.concatenate((self._dense, tab.dense)))
            self._most = np.concatenate((self._most, tab.most))
            self._busy = np.concatenate((self._busy, tab.busy))
            self._dram = np.concatenate((self._dram, tab.dram))
        return tab

    def app_level_sms(self, app: AppState) -> tuple[int, ...]:
        """SMs of the app's context at each level as they were granted (``app.granted_sms``,
        recorded when its contexts were made: a GH100's green remainder gives one app of a
        split 4 more than the table), else the mechanism's table."""
        granted = app.granted_sms
        if not granted:
            return self._table
        cached = self._granted.get(id(app))
        if cached is None or cached[0] is not granted:
            levels = tuple(granted.get(n, n) for n in self._table[:-1]) + self._table[-1:]
            cached = self._granted[id(app)] = (granted, self._table if levels == self._table else levels)
        return cached[1]

    def _entry_levels(self, squad: Squad) -> np.ndarray:
        """Shape (K, 18): each entry's app's SMs per level (one kept array per K where every
        app has the table's: a squad's pricing is on the host's critical path)."""
        rows = [self.app_level_sms(e.request.app) for e in squad.entries]
        if all(r is self._table for r in rows):
            k = len(rows)
            same = self._table_rows.get(k)
            if same is None:
                same = self._table_rows[k] = np.tile(self._level_sms, (k, 1))
            return same
        return np.array(rows, dtype=np.int64)

    # ------------------------------------------------------------ estimators
    def _ranges(self, squad: Squad) -> tuple[np.ndarray, np.ndarray]:
        k = len(squad.entries)
        g0 = np.empty(k, dtype=np.int64)
        cnt = np.empty(k, dtype=np.int64)
        for j, e in enumerate(squad.entries):
            g0[j] = self.tables(e.request.app.profile).base + e.start
            cnt[j] = e.count
        return g0, cnt

    def level_sums(self, squad: Squad) -> np.ndarray:
        """Shape (K, 18): each entry's squad kernels alone at each level's SMs."""
        return np.array(
            [
                self.tables(e.request.app.profile).level_sums(e.start, e.count, self.app_level_sms(e.request.app))
                for e in squad.entries
            ]
        )

    def estimate_split_free(self, squad: Squad, partitions: tuple[int, ...]) -> float:
        """Interference-free estimate of a strict split: the slowest request alone on its partitions."""
        sums = self.level_sums(squad)
        return float(max(sums[j, n - 1] for j, n in enumerate(partitions)))

    def best_split(self, squad: Squad) -> tuple[tuple[int, ...], float]:
        """The split of the 18 partitions with the lowest interference-free estimate, and that estimate."""
        sums = self.level_sums(squad)
        parts = _greedy_split(sums, N_LEVELS, self.max_partitions)
        return tuple(int(p) for p in parts), float(max(sums[j, p - 1] for j, p in enumerate(parts)))

    def estimate_split(self, squad: Squad, partitions: tuple[int, ...]) -> float:
        """A strict split as it runs (the kernel walk, interference included)."""
        return self.estimate_semi_sp(squad, partitions, 1.0)

    def estimate_nsp(self, squad: Squad) -> float:
        """No restriction as it runs (the kernel walk)."""
        g0, cnt = self._ranges(squad)
        k = len(cnt)
        return self._walk(g0, cnt, np.zeros(k, dtype=np.int64), np.ones(k, dtype=np.int64), np.zeros(k))

    def estimate_semi_sp(self, squad: Squad, partitions: tuple[int, ...], ratio: float) -> float:
        """Semi-SP as it runs: each request's restricted prefix, then, a context switch after
        *its own* prefix ends, its unrestricted remainder (the kernel walk)."""
        g0, cnt = self._ranges(squad)
        rcnt = np.array([restricted_count(ratio, int(c)) for c in cnt], dtype=np.int64)
        caps = np.array(
            [self.app_level_sms(e.request.app)[n - 1] for e, n in zip(squad.entries, partitions)], dtype=np.int64
        )
        return self._walk(g0, cnt, rcnt, caps, np.zeros(len(cnt)))

    def seq_times(self, squad: Squad) -> list[float]:
        """Each entry's squad kernels alone on the whole GPU: the parts of a SEQ squad."""
        return [float(self.tables(e.request.app.profile).level_sums(e.start, e.count)[-1]) for e in squad.entries]

    def estimate_seq(self, squad: Squad) -> float:
        """One request after the other, each alone on the whole GPU, ``barrier`` apart."""
        return sum(self.seq_times(squad)) + self.barrier * max(len(squad.entries) - 1, 0)

    def _walk(self, g0, cnt, rcnt, caps, ready) -> float:
        """The kernel walk over this determiner's tables: when the last run ends."""
        k = len(cnt)
        args = (self._dense, self._most, self._busy, self._dram, g0, cnt, rcnt, caps, ready)
        return float(_walk(*args, self.switch_cost, self.interference, self._sets, cnt, np.inf, np.zeros(k)))

    def window_durations(
        self, runs: list[tuple[Profile, int, int, int | None]], horizon: float = math.inf
    ) -> list[float]:
        """How long each run's window takes, all started together (the kernel walk,
        interference included).

        A run ``(profile, start, count, sm_limit)`` is a request's window of kernels ``[start,
        start + count)`` in a context of ``sm_limit`` SMs (None: unrestricted).  Each run goes
        on past its window, in the same context, until the last window ends: a window is
        priced beside the others' kernels over its whole length, as it will run (their
        requests go on), not beside their windows alone, which end at other times and would
        leave it alone for a while (restricted windows priced so ran 6-15 % longer than
        priced, against 2-9 % once priced beside what follows)."""
        # One array for the five columns, filled column by column, split inside compiled
        # code (this is on deadline pacing's per-step path, where each NumPy call costs half
        # a microsecond; the integers are exact in float64).
        k = len(runs)
        packed: list[float] = [0] * (5 * k)
        tables = self._tables
        for j, (profile, start, count, limit) in enumerate(runs):
            packed[j] = (tables.get(id(profile)) or self.tables(profile)).base + start
            extent = profile.n_kernels - start
            packed[k + j] = extent
            if limit is None:
                packed[3 * k + j] = 1
            else:
                packed[2 * k + j] = extent
                packed[3 * k + j] = limit
            packed[4 * k + j] = count
        ends = _walk_runs(
            self._dense,
            self._most,
            self._busy,
            self._dram,
            np.array(packed, dtype=np.float64),
            self.switch_cost,
            self.interference,
            self._sets,
            horizon,
        )
        return ends.tolist()

    # ------------------------------------------------------------ decision
    def decide(self, squad: Squad, prev_limits: list[int | None] | None = None) -> SquadConfig:
        """Price NSP, the best split (Semi-SP at the ratio, or each ratio) and SEQ; keep the fastest (per ``mode``).

        ``prev_limits`` is the SM limit of each entry's previous kernel (None:
        unrestricted); a request whose first kernel goes to another context
        starts ``switch_cost - barrier`` late.  Without ``prev_limits`` the
        requests have no previous kernel (no switch on entry).  The estimate is
        the time from the squad's first possible kernel start to its last
        kernel's end.
        """
        k = len(squad.entries)
        if k == 0:
            return SquadConfig("nsp", (), 0.0, 0.0, math.inf, 1.0, 0.0)
        g0, cnt = self._ranges(squad)
        prev = np.full(k, -1, dtype=np.int64)  # -1: unrestricted; -2: no previous kernel
        if prev_limits is None:
            prev[:] = -2
        else:
            for j, p in enumerate(prev_limits):
                if p is not None:
                    prev[j] = squad.entries[j].request.app.granted_sms.get(p, p)
        split = self.mode in ("auto", "sp") and k > 1
        seq = self.mode in ("auto", "seq") and k > 1
        out = _decide(
            self._dense,
            self._most,
            self._busy,
            self._dram,
            g0,
            cnt,
            prev,
            self._entry_levels(squad),
            self.max_partitions,
            self._ratios,
            self.switch_cost,
            max(self.switch_cost - self.barrier, 0.0),
            self.barrier,
            self.interference,
            self._sets,
            self.mode in ("auto", "nsp") or k == 1,
            split,
            seq,
        )
        nsp_est, seq_est, sp_est, ratio = float(out[0]), float(out[1]), float(out[2]), float(out[3])
        if split and sp_est < nsp_est and sp_est < seq_est:
            parts = tuple(int(p) for p in out[4:])
            return SquadConfig("split", parts, sp_est, nsp_est, sp_est, ratio, seq_est)
        if seq and seq_est < nsp_est:
            return SquadConfig("seq", (), seq_est, nsp_est, sp_est, 1.0, seq_est)
        return SquadConfig("nsp", (), nsp_est, nsp_est, sp_est, 1.0, seq_est)


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
def _walk(dense, most, busy, dram, g0, cnt, rcnt, caps, ready, gap, c_bw, sets, mark, horizon, ends):
    """The kernel walk (module docstring); returns when the last marked kernel ends and sets
    ``ends[j]`` to when request j's kernel ``mark[j] - 1`` ends.

    Request j runs kernels ``g0[j] .. g0[j] + cnt[j] - 1`` of the concatenated
    tables, the first ``rcnt[j]`` restricted to ``caps[j]`` SMs, the rest
    unrestricted ``gap`` after the last restricted one ends; it starts at
    ``ready[j]``.  The walk ends once every request has ended its kernel ``mark[j] - 1``
    (``1 <= mark[j] <= cnt[j]``); until then a request past its mark runs on, as its later
    kernels would beside the others'.  A walk that reaches ``horizon`` stops there, and each
    request short of its mark ends it at the pace it kept so far (its kernels' times in its
    context, stretched by how much longer it has taken than those times).  ``sets``:
    restricted contexts are SM sets (green contexts), where a kernel holding all the SMs it
    can use runs at full speed.
    """
    k = g0.shape[0]
    sms = dense.shape[1] - 1
    ptr = np.zeros(k, dtype=np.int64)
    rem = np.ones(k)
    rdy = ready.copy()
    seq = np.full(k, -1, dtype=np.int64)
    order = np.empty(k, dtype=np.int64)
    t = np.empty(k)
    u = np.empty(k)
    held = np.zeros(k, dtype=np.int64)
    rate = np.zeros(k)
    left = 0
    for j in range(k):
        if mark[j] > 0:
            left += 1
    now = 0.0
    counter = 0
    n = 0  # order[:n]: the requests with a kernel started, in start order
    while left > 0 and now < horizon:
        # Kernels that may start now take the next places in the start order
        # (ties: the one its host issued first -- fewer squad kernels before it --,
        # then by request).
        while True:
            pick = -1
            for j in range(k):
                startable = ptr[j] < cnt[j] and seq[j] < 0 and rdy[j] <= now + 1e-12
                if startable and (pick < 0 or ptr[j] < ptr[pick]):
                    pick = j
            if pick < 0:
                break
            seq[pick] = counter
            counter += 1
            order[n] = pick
            n += 1
        free = sms
        copies = 0
        demand = 0.0
        for i in range(n):
            j = order[i]
            g = g0[j] + ptr[j]
            b = busy[g]
            if b == 0:
                copies += 1
                held[j] = 0
                continue
            if ptr[j] < rcnt[j]:
                avail = free if free < caps[j] else caps[j]
                s = b if b < avail else avail
                if sets and avail >= most[g]:
                    t[j] = dense[g, sms]
                else:
                    t[j] = dense[g, avail]
            else:
                avail = free
                s = b if b < avail else avail
                t[j] = dense[g, sms] if s == b else dense[g, avail]
            held[j] = s
            free -= s
            if s > 0:
                u[j] = dram[g] / t[j]
                demand += u[j]
            else:
                u[j] = 0.0
        over = demand - 1.0 if demand > 1.0 else 0.0
        step = np.inf
        for i in range(n):
            j = order[i]
            g = g0[j] + ptr[j]
            if most[g] == 0:
                rate[j] = 1.0 / (dense[g, sms] * copies)
            elif held[j] == 0:
                rate[j] = 0.0
                continue
            else:
                w = u[j] if u[j] < 1.0 else 1.0
                rate[j] = 1.0 / (t[j] * (1.0 + w * over) * (1.0 + c_bw * (demand - u[j])))
            d = rem[j] / rate[j]
            if d < step:
                step = d
        for j in range(k):
            if ptr[j] < cnt[j] and seq[j] < 0 and rdy[j] - now < step:
                step = rdy[j] - now
        now += step
        for i in range(n):
            j = order[i]
            if rate[j] == 0.0:
                continue
            rem[j] -= rate[j] * step
            if rem[j] <= 1e-9:
                ptr[j] += 1
                rem[j] = 1.0
                seq[j] = -1
                if ptr[j] == mark[j]:
                    left -= 1
                    ends[j] = now
                if ptr[j] == rcnt[j]:
                    rdy[j] = now + gap  # into its unrestricted context
                else:
                    rdy[j] = now
        m = 0  # the ended leave the start order; the rest keep theirs
        for i in range(n):
            j = order[i]
            if seq[j] >= 0:
                order[m] = j
                m += 1
        n = m
    if left > 0:
        last = now
        for j in range(k):
            if ptr[j] < mark[j]:
                done = 0.0
                todo = 0.0
                for i in range(mark[j]):
                    g = g0[j] + i
                    x = dense[g, caps[j]] if i < rcnt[j] and not (sets and most[g] <= caps[j]) else dense[g, sms]
                    if i < ptr[j]:
                        done += x
                    elif i == ptr[j]:
                        done += (1.0 - rem[j]) * x
                        todo += rem[j] * x
                    else:
                        todo += x
                spent = now - ready[j]
                ends[j] = now + (todo * spent / done if done > 0.0 and spent > 0.0 else todo)
                if ends[j] > last:
                    last = ends[j]
        return last
    return now


@numba.njit(cache=True)
def _walk_runs(dense, most, busy, dram, packed, gap, c_bw, sets, horizon):
    """:func:`_walk` from now over runs packed as ``[g0..., cnt..., rcnt..., caps..., mark...]``;
    returns when each run's marked kernel ends."""
    k = packed.shape[0] // 5
    cols = packed.astype(np.int64)
    ends = np.zeros(k)
    _walk(
        dense,
        most,
        busy,
        dram,
        cols[:k],
        cols[k : 2 * k],
        cols[2 * k : 3 * k],
        cols[3 * k : 4 * k],
        np.zeros(k),
        gap,
        c_bw,
        sets,
        cols[4 * k :],
        horizon,
        ends,
    )
    return ends


@numba.njit(cache=True)
def _decide(
    dense,
    most,
    busy,
    dram,
    g0,
    cnt,
    prev,
    level_sms,
    cap,
    ratios,
    gap,
    enter,
    barrier,
    c_bw,
    sets,
    want_nsp,
    want_sp,
    want_seq,
):
    """Price NSP, the best split at each ratio and SEQ in one call.

    Returns ``[nsp, seq, split, ratio, partitions...]`` (inf: not priced).
    ``prev[j]``: SMs of the request's previous context, -1 unrestricted, -2 none;
    a request that changes context starts ``enter`` late, a Semi-SP remainder
    ``gap`` after its prefix.  ``level_sms[j]``: entry ``j``'s SMs at each level.
    """
    k = g0.shape[0]
    sms = dense.shape[1] - 1
    out = np.full(4 + k, np.inf)
    zero = np.zeros(k, dtype=np.int64)
    ready = np.zeros(k)
    ends = np.zeros(k)
    if want_nsp:
        for j in range(k):
            ready[j] = enter if prev[j] >= 0 else 0.0
        out[0] = _walk(
            dense,
            most,
            busy,
            dram,
            g0,
            cnt,
            zero,
            np.ones(k, dtype=np.int64),
            ready,
            gap,
            c_bw,
            sets,
            cnt,
            np.inf,
            ends,
        )
    if want_seq:
        total = barrier * (k - 1)
        for j in range(k):
            for g in range(g0[j], g0[j] + cnt[j]):
                total += dense[g, sms]
        out[1] = total + (enter if prev[0] >= 0 else 0.0)
    if want_sp:
        levels = level_sms.shape[1]
        sums = np.zeros((k, levels))
        for j in range(k):
            for g in range(g0[j], g0[j] + cnt[j]):
                for lv in range(levels):
                    sums[j, lv] += dense[g, level_sms[j, lv]]
        parts = _greedy_split(sums, levels, cap)
        caps = np.empty(k, dtype=np.int64)
        for j in range(k):
            caps[j] = level_sms[j, parts[j] - 1]
            out[4 + j] = parts[j]
        rcnt = np.empty(k, dtype=np.int64)
        for c in ratios:
            for j in range(k):
                rcnt[j] = int(c * cnt[j] + 0.5)
                first = caps[j] if rcnt[j] > 0 else -1
                ready[j] = enter if prev[j] != -2 and prev[j] != first else 0.0
            est = _walk(dense, most, busy, dram, g0, cnt, rcnt, caps, ready, gap, c_bw, sets, cnt, np.inf, ends)
            if est < out[2]:
                out[2] = est
                out[3] = c
    return out
