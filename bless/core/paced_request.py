"""What deadline pacing knows of each app and each active request, and what it decides.

An app's :class:`PaceTable` is its kernel times in each of its contexts; a
:class:`PacedRequest` is one active request as pacing tracks it from step to step
(its deadline, its context, when its launched kernels are expected to end); a
:class:`PacedLaunch` is one step's decision, which the policy turns into launches.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from bless.backend.interface import Launched
from bless.core.lifecycle import Request
from bless.core.policy import RequestLaunch


@dataclass(frozen=True)
class PaceTable:
    """One app's kernel times in each context it owns, as prefix sums.

    Row ``i`` of ``prefix`` is the time from kernel 0 to the end of each kernel
    alone with ``row_sms[i]`` SMs, what the context of ``limits[i]`` was granted;
    the last row is the whole GPU (unrestricted).  The rows are the determiner's
    (``AppTables.level_prefix``) at those SM counts.
    Deadline pacing reads them one number at a time, on the host's critical
    path, so it reads the same rows as Python lists (``lines``): a scalar read
    or a bisection there costs a tenth of NumPy's.
    """

    limits: tuple[int, ...]
    """SM limits of the app's restricted contexts, ascending: what they were asked for, and
    the key a launch names its context by."""
    sm_count: int
    """The whole GPU's (the last row's)."""
    prefix: np.ndarray
    """Shape (len(limits) + 1, K + 1)."""
    granted: tuple[int, ...] | None = None
    """SMs each restricted context was granted, where they differ from ``limits`` (a GH100's
    green split gives one app of a pair its 4-SM remainder); the rows are priced and counted
    at these.  None: as asked."""
    lines: tuple[list[float], ...] = field(init=False, repr=False, compare=False)
    """``prefix`` row by row, as lists."""
    n_kernels: int = field(init=False, repr=False, compare=False)
    full: int = field(init=False, repr=False, compare=False)
    """The unrestricted context's row."""
    row_sms: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """SMs of each row's context as granted (``granted`` or ``limits``, then the whole GPU's)."""
    digest: int = field(init=False, repr=False, compare=False)
    """A hash of the rows and their SMs: two apps' tables with the same one time the same
    kernels in the same contexts (twins: replicas of one model)."""
    kernel_mean: float = field(init=False, repr=False, compare=False)
    """Mean time of its kernels alone on the whole GPU: how long one holds the SMs it took."""

    def __post_init__(self) -> None:
        sms = self.limits if self.granted is None else self.granted
        if len(sms) != len(self.limits) or any(a > b for a, b in zip(sms, sms[1:])):
            raise ValueError(f"granted SMs {sms} must be one ascending count per limit {self.limits}")
        object.__setattr__(self, "lines", tuple(row.tolist() for row in self.prefix))
        object.__setattr__(self, "n_kernels", self.prefix.shape[1] - 1)
        object.__setattr__(self, "full", len(self.limits))
        object.__setattr__(self, "row_sms", (*sms, self.sm_count))
        object.__setattr__(self, "digest", hash((self.row_sms, self.prefix.tobytes())))
        object.__setattr__(self, "kernel_mean", self.lines[-1][-1] / max(self.n_kernels, 1))

    def row_of(self, sm_limit: int | None) -> int:
        """The row of the context restricted to ``sm_limit`` SMs (None or the whole GPU: the
        unrestricted row); -1 if the app has no such context."""
        if sm_limit is None or sm_limit == self.sm_count:
            return self.full
        return self.limits.index(sm_limit) if sm_limit in self.limits else -1

    def work(self, row: int, start: int, count: int) -> float:
        """Time kernels ``[start, start + count)`` take alone in the context of ``row``."""
        line = self.lines[row]
        return line[start + count] - line[start]

    def rest(self, row: int, start: int) -> float:
        """Time kernels ``start..`` take alone in the context of ``row``."""
        line = self.lines[row]
        return line[-1] - line[start]

    def first_row_at_most(self, sms: float) -> int:
        """The largest context (row) with at most ``sms`` SMs (the whole GPU counts); -1 if none."""
        if sms >= self.sm_count:
            return len(self.limits)
        return bisect.bisect_right(self.row_sms, sms + 1e-9, hi=self.full) - 1

    def first_row_within(
        self, start: int, left: float, stretch: float, lowest: int = 0, highest: int | None = None
    ) -> int:
        """The smallest context (row, from ``lowest``, below ``highest``) in which kernels
        ``start..``, slowed by ``stretch``, take at most ``left`` seconds; ``highest`` (default:
        the unrestricted row) if none does."""
        top = self.full if highest is None else highest
        for row in range(lowest, top):
            line = self.lines[row]
            if (line[-1] - line[start]) * stretch <= left:
                return row
        return top

    def first_row_at_least(self, sms: float) -> int:
        """The smallest context (row) with at least ``sms`` SMs; the unrestricted row if none."""
        return bisect.bisect_left(self.row_sms, sms - 1e-9, hi=self.full)


@dataclass(slots=True)
class PacedRequest:
    """What deadline pacing knows of one active request: made at its first step and kept (the
    policy updates ``row`` and ``busy_until`` as it launches), so its fixed readings (deadline
    rank, quota row) are computed once, not at every step on the host's critical path."""

    request: Request
    deadline: float
    table: PaceTable
    quota_sms: float
    """SMs its quota promises (``quota * sm_count``)."""
    stretch: float
    """Expected slowdown from the neighbours' interference (>= 1)."""
    imposes: float = 1.0
    """Slowdown its kernels cause a neighbour when it runs on the whole GPU (its app's mean
    DRAM demand there through the interference model; >= 1): what running it in the
    bubbles costs the others."""
    drains: float = 0.0
    """Seconds each kernel of a neighbour waits, on average, for SMs its blocks fill when it
    runs in the bubbles (its app's time-weighted mean of
    :func:`bless.profiles.features.drain_seconds`)."""
    row: int = -1
    """Row of the context its latest kernel ran in (-1: none yet): kept while it still serves."""
    busy_until: float = -math.inf
    """When its kernels launched so far are expected to end."""
    windows: deque[list] = field(default_factory=deque)
    """Its launched windows not yet seen finished: ``[last kernel's launch, expected end]``."""
    given: float = 0.0
    """Seconds of its app's lead added to its deadline (:func:`~bless.core.deadline_pacing.lead_after`):
    its ISO deadline (or SLO's) is ``deadline - given``."""
    best_effort: bool = field(init=False)
    """Its app is best-effort (no deadline: it runs only in what the others leave)."""
    quota_row: int = field(init=False)
    """Row of the smallest context that holds its quota's SMs."""
    rank: tuple[float, float, int] = field(init=False)
    """Its place in deadline order (deadline, then arrival, then id)."""

    def __post_init__(self) -> None:
        self.best_effort = self.request.app.best_effort
        self.quota_row = self.table.first_row_at_least(self.quota_sms)
        self.rank = (self.deadline, self.request.arrival, self.request.rid)

    def decided(self, now: float, row: int, duration: float) -> None:
        """A window of its kernels, expected to take ``duration``, was decided in the context
        of ``row``: it runs after those queued."""
        self.busy_until = max(self.busy_until, now) + duration
        self.row = row

    def deadline_row(self, now: float, margin: float = 0.0, lowest: int = 0) -> int:
        """The smallest context (row, from ``lowest``) in which its remaining kernels, started
        when those queued end, meet its deadline with ``margin`` to spare (the unrestricted row
        if none does)."""
        left = self.deadline - max(now, self.busy_until) - margin
        return self.table.first_row_within(self.request.scheduled, left, self.stretch, lowest)

    def launched(self, last: Launched) -> None:
        """The window decided last was launched, ``last`` its last kernel's launch object."""
        self.windows.append([last, self.busy_until])

    def observe(self, now: float) -> None:
        """Correct ``busy_until`` by what the device did: a window seen finished moves the
        expected ends of the later ones by its error, and the oldest window, if expected done
        but not finished, has at least until now.

        Deadline pacing's expectations are the kernel walk's, and the neighbours it priced
        may change (a capped top, a restricted newcomer) after a window was launched; without
        this the error piles up window after window and a request looks further ahead than
        it is (ResNet50 beside NASNet: its last kernels expected done at 104 ms, done at 113).
        """
        windows = self.windows
        while windows and windows[0][0].end is not None:
            last, expected = windows.popleft()
            self._shift(last.end - expected)
        if windows and windows[0][1] < now:
            self._shift(now - windows[0][1])

    def _shift(self, error: float) -> None:
        self.busy_until += error
        for w in self.windows:
            w[1] += error


@dataclass(slots=True)
class PacedLaunch:
    """What deadline pacing launches now: kernels per request in their contexts.  (Not
    frozen: it is made at every step on the host's critical path, read once, and a frozen
    dataclass pays for each field it sets.)"""

    launches: tuple[RequestLaunch, ...]
    """Restricted requests first: launched first, they find their SMs free."""
    launch_of_kernel: tuple[int, ...]
    """The launch each kernel belongs to, kernels in the order they would start alone."""
    rows: tuple[int, ...]
    """Each launch's context: its row in the request's :class:`PaceTable`."""
    durations: tuple[float, ...]
    """Expected duration of each launch's kernels in its context (interference included)."""
    wake_at: float
    """When to decide again: a running request needs more kernels, or a waiting one may have to start."""
