"""Per-app and per-GPU measurements behind GetStats and ModelStatistics.

Two views of the same events:

* a **window** (since start or the last ResetStats): request counts by
  outcome and the latest latencies, for percentiles (GetStats);
* **cumulative** Triton-style totals since start (count and nanoseconds of
  successes, failures, queueing, input/compute/output), never reset
  (ModelStatistics, like Triton's).

Written by the serving loop and the RPC handlers, read by the RPC handlers:
every method takes the object's lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

WINDOW_SAMPLES = 200_000
"""Latencies kept per app for percentiles (the most recent ones)."""

OUTCOMES = ("succeeded", "failed", "rejected", "cancelled", "aborted")


@dataclass(frozen=True)
class Summary:
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


@dataclass
class Duration:
    """Triton's StatisticDuration: a count and a total in nanoseconds."""

    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += max(int(seconds * 1e9), 0)


@dataclass
class Cumulative:
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    last_inference_ms: int = 0


@dataclass(frozen=True)
class AppSnapshot:
    counts: dict[str, int]
    received: int
    latency: Summary
    queue: Summary
    compute: Summary
    target_violation_rate: float
    cumulative: Cumulative


class AppStats:
    """Everything measured for one app."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        self.cumulative = Cumulative()

    def _reset(self) -> None:
        self.received = 0
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=WINDOW_SAMPLES)

    def reset(self) -> None:
        with self._lock:
            self._reset()

    def received_one(self) -> None:
        with self._lock:
            self.received += 1

    def outcome(
        self, status: str, latency: float = math.nan, queue: float = math.nan, compute: float = math.nan
    ) -> None:
        """A request ended on the scheduler side (``status`` one of :data:`OUTCOMES`)."""
        with self._lock:
            self.counts[status] += 1
            if status == "succeeded":
                self._samples.append((latency, queue, compute))
                self.cumulative.queue.add(queue)
                self.cumulative.compute_infer.add(compute)

    def response(self, ok: bool, total: float, decode: float = 0.0, encode: float = 0.0) -> None:
        """A ModelInfer RPC answered after ``total`` seconds in the server."""
        with self._lock:
            c = self.cumulative
            if ok:
                c.success.add(total)
                c.compute_input.add(decode)
                c.compute_output.add(encode)
                c.last_inference_ms = int(time.time() * 1e3)
            else:
                c.fail.add(total)

    def snapshot(self, target: float) -> AppSnapshot:
        with self._lock:
            samples = np.array(self._samples, dtype=float).reshape(-1, 3)
            counts = dict(self.counts)
            received = self.received
            c = self.cumulative
            cumulative = Cumulative(
                *(
                    Duration(d.count, d.ns)
                    for d in (c.success, c.fail, c.queue, c.compute_input, c.compute_infer, c.compute_output)
                ),
                c.last_inference_ms,
            )
        lat = samples[:, 0]
        violation = float(np.mean(lat > target)) if len(lat) else math.nan
        return AppSnapshot(
            counts,
            received,
            Summary.of(lat),
            Summary.of(samples[:, 1]),
            Summary.of(samples[:, 2]),
            violation,
            cumulative,
        )


class SquadStats:
    """Squads run since the last reset (durations on the device)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0
        self.kernels = 0
        self._reset()

    def _reset(self) -> None:
        self._durations: deque[float] = deque(maxlen=WINDOW_SAMPLES)
        self._restricted = 0
        self._count = 0

    def reset(self) -> None:
        with self._lock:
            self._reset()

    def add(self, squads: list[tuple[float, float, bool]], kernels: int) -> None:
        with self._lock:
            for duration, _estimate, restricted in squads:
                self._durations.append(duration)
                self._restricted += bool(restricted)
            self._count += len(squads)
            self.total += len(squads)
            self.kernels = kernels

    def summary(self) -> tuple[int, Summary, float]:
        """(squads in the window, their durations, share run as a split)."""
        with self._lock:
            durations = np.array(self._durations, dtype=float)
            share = self._restricted / self._count if self._count else math.nan
            return self._count, Summary.of(durations), share
