"""The server's measurements: one store behind GetStats, ModelStatistics and ``/metrics``.

Each number has one owner here and changes by one call per event (a request
arrived, was admitted, started, ended or was answered; squads ran; the GPU
was sampled), so the views cannot disagree.  They read it differently:

* GetStats reads the **window** (since start or the last ResetStats): request
  counts by outcome and the latest latencies, for percentiles, and the squads;
* ModelStatistics reads Triton-style **cumulative** totals (count and
  nanoseconds of successes, failures, queueing, input/compute/output), never
  reset, like Triton's;
* ``/metrics`` (:mod:`bless.serving.server.metrics`) reads the cumulative
  counters, histograms and gauges when Prometheus scrapes.

Written by the serving loop and the RPC handlers, read by the RPC handlers and
the metrics thread: every method takes its object's lock.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

WINDOW_SAMPLES = 200_000
"""Latencies kept per app for percentiles (the most recent ones)."""

OUTCOMES = ("succeeded", "failed", "rejected", "cancelled", "aborted")

REASONS: dict[str, tuple[str, ...]] = {
    "succeeded": ("ok",),
    "failed": ("kernel_fault",),
    "rejected": ("invalid_argument", "resource_exhausted", "unavailable"),
    "cancelled": ("cancelled", "deadline_exceeded"),
    "aborted": ("aborted", "unavailable"),
}
"""The reasons each outcome has in normal operation (:attr:`ServiceError.reason
<bless.serving.server.errors.ServiceError.reason>`: the status code the client got, in lower
case).  Their counters exist from registration on, at zero, so ``rate()`` sees the first
one; any other pair is counted from its first occurrence."""

UTILISATION_WINDOW = 1.0
"""Seconds over which the exported GPU utilisation is a rate: long enough to span many
squads, short enough that an idle GPU reads 0 within a scrape interval."""

LATENCY_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the request latency, queue and compute histograms."""
SQUAD_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1)
"""Upper bounds (seconds) of the squad duration histogram."""


@dataclass(frozen=True)
class Summary:
    """Count, mean, percentiles and maximum of a window's values (nan when it has none)."""

    count: int = 0
    mean: float = math.nan
    p50: float = math.nan
    p90: float = math.nan
    p99: float = math.nan
    max: float = math.nan

    @classmethod
    def of(cls, values: np.ndarray) -> Summary:
        if not len(values):
            return cls()
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return cls(len(values), float(values.mean()), float(p50), float(p90), float(p99), float(values.max()))


@dataclass(frozen=True)
class Buckets:
    """A histogram as read at one moment: how many values were at most each bound
    (cumulative; the last bound is +inf, so the last count is every value) and their sum."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return self.counts[-1]


class Histogram:
    """Values counted into fixed buckets, as a Prometheus histogram counts them (a bucket
    holds the values at most its bound); never reset.  Not locked: its owner's lock guards it."""

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = (*bounds, math.inf)
        self._counts = [0] * len(self.bounds)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self._sum += value

    def read(self) -> Buckets:
        return Buckets(self.bounds, tuple(itertools.accumulate(self._counts)), self._sum)


@dataclass
class Duration:
    """Triton's StatisticDuration: a count and a total in nanoseconds."""

    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += max(int(seconds * 1e9), 0)

    @classmethod
    def of(cls, buckets: Buckets) -> Duration:
        """The count and total of a histogram's values."""
        return cls(buckets.count, max(int(buckets.sum * 1e9), 0))


@dataclass
class Cumulative:
    """Triton's InferStatistics of one app since it was registered (ModelStatistics)."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    last_inference_ms: int = 0


@dataclass(frozen=True)
class AppWindow:
    """One app since the window started, and its requests now (GetStats)."""

    quota: float
    queued: int
    running: int
    received: int
    counts: dict[str, int]
    latency: Summary
    queue: Summary
    compute: Summary
    target_violation_rate: float
    behind_quota: int
    """Requests behind the app's quota now (:meth:`AppStats.behind_quota`)."""


@dataclass(frozen=True)
class AppSeries:
    """One app's cumulative series since it was registered (``/metrics``)."""

    name: str
    created: float
    """Unix time of the registration (Prometheus' ``_created``: a new registration restarts the counters)."""
    quota: float
    pending: int
    running: int
    requests: dict[tuple[str, str], int]
    """Requests by (outcome, reason)."""
    duration: Buckets
    """End to end in the server, answered requests."""
    overhead: Buckets
    """End to end minus the GPU compute time, answered requests."""
    latency: Buckets
    queue: Buckets
    compute: Buckets
    behind_quota: int
    """Requests behind the app's quota now (:meth:`AppStats.behind_quota`)."""


class AppStats:
    """Everything measured for one registration of an app.

    A request is counted once, under one outcome and reason: by whoever ends it.
    The serving loop ends the ones it fails, aborts or cancels; one that ran to
    the end on the GPU is counted when its RPC answers (:meth:`answered`), or
    as cancelled if its client left first, so a response built after the
    client's deadline is never a success.

    ``pending`` (queued or running) is also what the serving core's ``max_queue``
    check reads: the core admits under its own lock, so the check and the count
    stay one step.

    It also keeps the app's ISO queue: when each admitted request would end if the app ran
    alone at its quota (one request at a time, each taking its ISO latency), for
    :meth:`behind_quota`.  ``clock``: seconds, monotonic (a test's own).
    """

    def __init__(self, name: str, quota: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.created = time.time()
        self._clock = clock
        self._lock = threading.Lock()
        self._iso_ends: deque[float] = deque()
        """ISO-queue ends of admitted requests not yet passed."""
        self._iso_last = -math.inf
        self._iso_done = 0
        """Admitted requests the ISO queue has ended by the last reading."""
        self._ended = 0
        """Admitted requests that have ended, whatever the outcome."""
        self._quota = quota
        self._pending = 0
        self._running = 0
        self._requests = {(status, reason): 0 for status, reasons in REASONS.items() for reason in reasons}
        self._duration = Histogram(LATENCY_BUCKETS)
        self._overhead = Histogram(LATENCY_BUCKETS)
        self._latency = Histogram(LATENCY_BUCKETS)
        self._queue = Histogram(LATENCY_BUCKETS)
        self._compute = Histogram(LATENCY_BUCKETS)
        self._success = Duration()
        self._fail = Duration()
        self._compute_input = Duration()
        self._compute_infer = Duration()
        self._compute_output = Duration()
        self._last_inference_ms = 0
        self._clear_window()

    def _clear_window(self) -> None:
        self._received = 0
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=WINDOW_SAMPLES)

    def _count(self, status: str, reason: str) -> None:
        self._counts[status] += 1
        key = (status, reason)
        self._requests[key] = self._requests.get(key, 0) + 1

    @property
    def pending(self) -> int:
        """Requests queued or running."""
        return self._pending

    @property
    def running(self) -> int:
        """Requests with kernels launched."""
        return self._running

    # ------------------------------------------------------------ events
    def refused(self, reason: str) -> None:
        """A request was refused before it queued (bad input, full queue, shutting down)."""
        with self._lock:
            self._received += 1
            self._count("rejected", reason)

    def admitted(self, iso_latency: float) -> None:
        """A request queued; alone at its quota it would take ``iso_latency`` seconds."""
        with self._lock:
            self._received += 1
            self._pending += 1
            self._iso_last = max(self._clock(), self._iso_last) + iso_latency
            self._iso_ends.append(self._iso_last)

    def started(self) -> None:
        """A request's first kernel was launched."""
        with self._lock:
            self._running += 1

    def ran(self, *, started: bool, latency: float, queue: float, compute: float) -> None:
        """An admitted request's kernels all ran (its RPC counts how it ends, :meth:`answered`)."""
        with self._lock:
            self._pending -= 1
            self._running -= started
            self._ended += 1
            self._samples.append((latency, queue, compute))
            self._latency.observe(latency)
            self._queue.observe(queue)
            self._compute.observe(compute)

    def ended(self, status: str, reason: str, *, started: bool) -> None:
        """An admitted request ended on the scheduler side without running to the end
        (``status`` one of :data:`OUTCOMES`; ``started``: it had been counted as running)."""
        with self._lock:
            self._pending -= 1
            self._running -= started
            self._ended += 1
            self._count(status, reason)

    def counted(self, status: str, reason: str) -> None:
        """A request that ran to the end was not answered: its client left, or building the
        answer failed."""
        with self._lock:
            self._count(status, reason)

    def answered(self, total: float, compute: float, decode: float = 0.0, encode: float = 0.0) -> None:
        """A request succeeded: its RPC answered after ``total`` seconds in the server, of
        which ``compute`` on the GPU, ``decode`` checking inputs, ``encode`` building outputs."""
        with self._lock:
            self._count("succeeded", "ok")
            self._duration.observe(total)
            self._overhead.observe(max(total - compute, 0.0))
            self._success.add(total)
            self._compute_input.add(decode)
            self._compute_infer.add(compute)
            self._compute_output.add(encode)
            self._last_inference_ms = int(time.time() * 1e3)

    def rpc_failed(self, total: float) -> None:
        """An inference RPC answered with an error after ``total`` seconds (Triton's ``fail``)."""
        with self._lock:
            self._fail.add(total)

    def set_quota(self, quota: float) -> None:
        with self._lock:
            self._quota = quota

    def reset(self) -> None:
        """Start a new window (ResetStats); cumulative figures stay."""
        with self._lock:
            self._clear_window()

    # ------------------------------------------------------------ views
    def _behind_quota(self) -> int:
        """:meth:`behind_quota`, under the lock."""
        now = self._clock()
        ends = self._iso_ends
        while ends and ends[0] <= now:
            ends.popleft()
            self._iso_done += 1
        return max(self._iso_done - self._ended, 0)

    def behind_quota(self) -> int:
        """Requests the app's ISO run of the same arrivals would have ended by now that have
        not: 0 while the app keeps the throughput its quota alone gives it, growing while it is
        served less.  A request that ended early (cancelled, failed) counts as ended when it did.
        The ISO latency is the one each request was admitted with."""
        with self._lock:
            return self._behind_quota()

    def window(self, target: float) -> AppWindow:
        """The window, with latencies over ``target`` counted as violations."""
        with self._lock:
            samples = np.array(self._samples, dtype=float).reshape(-1, 3)
            counts = dict(self._counts)
            received, pending, running, quota = self._received, self._pending, self._running, self._quota
            behind = self._behind_quota()
        lat = samples[:, 0]
        violation = float(np.mean(lat > target)) if len(lat) else math.nan
        return AppWindow(
            quota,
            max(pending - running, 0),
            running,
            received,
            counts,
            Summary.of(lat),
            Summary.of(samples[:, 1]),
            Summary.of(samples[:, 2]),
            violation,
            behind,
        )

    def cumulative(self) -> Cumulative:
        """Triton's totals since registration; queueing is the histogram's total.  The three
        compute figures count the answered requests, updated together: Triton's clients take
        the difference of two readings and refuse compute counts that differ (perf_analyzer:
        "Server side statistics compute counts must be the same"), which a request that ran
        but was not yet answered between the two readings made them."""
        with self._lock:
            return Cumulative(
                Duration(self._success.count, self._success.ns),
                Duration(self._fail.count, self._fail.ns),
                Duration.of(self._queue.read()),
                Duration(self._compute_input.count, self._compute_input.ns),
                Duration(self._compute_infer.count, self._compute_infer.ns),
                Duration(self._compute_output.count, self._compute_output.ns),
                self._last_inference_ms,
            )

    def series(self) -> AppSeries:
        with self._lock:
            return AppSeries(
                self.name,
                self.created,
                self._quota,
                self._pending,
                self._running,
                dict(self._requests),
                self._duration.read(),
                self._overhead.read(),
                self._latency.read(),
                self._queue.read(),
                self._compute.read(),
                self._behind_quota(),
            )


@dataclass(frozen=True)
class SquadWindow:
    """Squads since the window started (GetStats)."""

    count: int
    durations: Summary
    """Of the latest :data:`WINDOW_SAMPLES` squads."""
    restricted_share: float
    """Share of them run as a split (restricted contexts); nan without squads."""
    kernels: int
    """Kernels launched since the server started (not windowed)."""


@dataclass(frozen=True)
class SquadSeries:
    """Squads and kernels since the server started (``/metrics``)."""

    created: float
    configs: dict[str, tuple[int, float]]
    """Squads by configuration (``unrestricted``, ``split``) that occurred: (count, unix time first seen)."""
    durations: Buckets
    kernels: int


class SquadStats:
    """Squads and kernels launched (squad durations on the device)."""

    def __init__(self) -> None:
        self.created = time.time()
        self._lock = threading.Lock()
        self._configs: dict[str, tuple[int, float]] = {}
        self._histogram = Histogram(SQUAD_BUCKETS)
        self._kernels = 0
        self._clear_window()

    def _clear_window(self) -> None:
        self._count = 0
        self._restricted = 0
        self._durations: deque[float] = deque(maxlen=WINDOW_SAMPLES)

    @property
    def kernels(self) -> int:
        return self._kernels

    def ran(self, squads: list[tuple[float, float, bool]], kernels: int) -> None:
        """``squads`` (duration, estimate, restricted) ended; ``kernels`` launched in all so far."""
        with self._lock:
            for duration, _estimate, restricted in squads:
                config = "split" if restricted else "unrestricted"
                count, first = self._configs.get(config, (0, time.time()))
                self._configs[config] = (count + 1, first)
                self._histogram.observe(duration)
                self._durations.append(duration)
                self._restricted += bool(restricted)
            self._count += len(squads)
            self._kernels = kernels

    def reset(self) -> None:
        with self._lock:
            self._clear_window()

    def window(self) -> SquadWindow:
        with self._lock:
            durations = np.array(self._durations, dtype=float)
            count, restricted, kernels = self._count, self._restricted, self._kernels
        share = restricted / count if count else math.nan
        return SquadWindow(count, Summary.of(durations), share, kernels)

    def series(self) -> SquadSeries:
        with self._lock:
            return SquadSeries(self.created, dict(self._configs), self._histogram.read(), self._kernels)


@dataclass(frozen=True)
class GpuSample:
    """The device's state as the serving loop last saw it (statistics the backend cannot
    measure are nan)."""

    at: float
    """Backend clock time of the sample."""
    utilisation: float
    """Busy SM-time share since the backend started."""
    sm_seconds: float
    memory_used_bytes: int
    memory_bytes: int
    sm_count: int


class ServerStats:
    """The store: an :class:`AppStats` per registered app, the squads, the GPU samples.

    An app's record goes with its registration (:meth:`remove_app`), and its
    series with it, so registering and unregistering apps does not grow what
    Prometheus scrapes; registering the name again starts a new record, which
    Prometheus sees as a counter reset (the ``_created`` samples say so).
    """

    def __init__(self, gpu: GpuSample) -> None:
        self.started = time.monotonic()
        self.window_start = self.started
        self.squads = SquadStats()
        self.gpu = gpu
        """Replaced whole by the serving loop (:meth:`sampled`), read whole by the views."""
        self.recent_utilisation = math.nan
        """Busy SM-time share over the last :data:`UTILISATION_WINDOW` (nan before two samples)."""
        self._history: deque[GpuSample] = deque([gpu])
        self._lock = threading.Lock()
        self._apps: dict[str, AppStats] = {}

    def add_app(self, name: str, quota: float) -> AppStats:
        """A new registration of ``name``: a fresh record."""
        stats = AppStats(name, quota)
        with self._lock:
            self._apps[name] = stats
        return stats

    def remove_app(self, stats: AppStats) -> None:
        """The app was unregistered: its record and series go (unless the name is registered anew)."""
        with self._lock:
            if self._apps.get(stats.name) is stats:
                del self._apps[stats.name]

    def apps(self) -> list[AppStats]:
        """Every registered app's record, in registration order."""
        with self._lock:
            return list(self._apps.values())

    def sampled(self, gpu: GpuSample) -> None:
        """A new GPU sample (serving loop only): the utilisation is the busy SM-seconds'
        rate since the oldest sample still within :data:`UTILISATION_WINDOW`."""
        history = self._history
        history.append(gpu)
        while len(history) > 2 and gpu.at - history[1].at >= UTILISATION_WINDOW:
            history.popleft()
        first = history[0]
        elapsed = gpu.at - first.at
        if elapsed > 0 and gpu.sm_count:
            busy = (gpu.sm_seconds - first.sm_seconds) / (elapsed * gpu.sm_count)
            self.recent_utilisation = min(max(busy, 0.0), 1.0)
        self.gpu = gpu

    def reset(self) -> None:
        """Start a new window for every app and the squads (ResetStats)."""
        for app in self.apps():
            app.reset()
        self.squads.reset()
        self.window_start = time.monotonic()
