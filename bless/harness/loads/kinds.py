"""Request loads: when each app's requests arrive.

* :class:`ClosedLoop` -- a client sends a request, waits for the answer, waits
  ``interval`` and sends the next.  The paper's workloads A, B and C are closed
  loops with an interval of 1/3, 2/3 and 1 times the app's solo latency
  (T[100%]).
* :class:`Poisson` -- open loop, exponential inter-arrival times at ``rate``.
* :class:`Arrivals` -- open loop from a list of times (traces, see
  :mod:`bless.harness.loads.traces`).

A config names a load by its registered type; :func:`bless.harness.loads.parse_load`
reads it.

Loads are seeded: the same seed gives the same arrivals.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

WORKLOAD_INTERVALS = {"A": 1 / 3, "B": 2 / 3, "C": 1.0}
"""Closed-loop interval as a multiple of the solo latency (the paper's workloads A-C)."""


class Load(ABC):
    """Arrival process of one app."""

    closed: bool = False

    @abstractmethod
    def bind(self, solo_latency: float, rng: np.random.Generator) -> None:
        """Fix the app's solo latency (for loads given in its units) and the RNG."""

    def initial(self) -> list[float]:
        """Arrivals known before the run starts (closed loops: the first request)."""
        return []

    def open_arrivals(self) -> Iterator[float]:
        """Open loops: increasing arrival times (may be endless)."""
        return iter(())

    def after_completion(self, end: float) -> float | None:
        """Closed loops: the next arrival after a request ended at ``end``."""
        return None

    @abstractmethod
    def describe(self) -> str: ...


@dataclass
class ClosedLoop(Load):
    """``clients`` closed-loop clients, each waiting ``interval`` between requests.

    ``interval`` is in seconds, or in multiples of the solo latency when
    ``relative`` (workloads A/B/C).
    """

    interval: float
    relative: bool = True
    clients: int = 1
    think: str = "fixed"
    """fixed: wait exactly ``interval``; exponential: a random wait with that mean
    (clients that do not act in lockstep)."""
    closed = True

    def __post_init__(self) -> None:
        if self.interval < 0:
            raise ValueError(f"load interval must be >= 0, got {self.interval}")
        if self.clients < 1:
            raise ValueError(f"load clients must be >= 1, got {self.clients}")
        if self.think not in ("fixed", "exponential"):
            raise ValueError(f"load think must be fixed or exponential, got {self.think!r}")
        self._seconds = self.interval
        self._rng: np.random.Generator | None = None

    def bind(self, solo_latency: float, rng: np.random.Generator) -> None:
        self._seconds = self.interval * solo_latency if self.relative else self.interval
        self._rng = rng
        self._solo = solo_latency

    def initial(self) -> list[float]:
        # Stagger the clients' first requests over one solo latency so that
        # symmetric apps do not start in lockstep.
        return sorted(float(self._rng.uniform(0.0, self._solo)) for _ in range(self.clients))

    def after_completion(self, end: float) -> float | None:
        if self.think == "exponential":
            return end + float(self._rng.exponential(self._seconds))
        return end + self._seconds

    def describe(self) -> str:
        name = next((k for k, v in WORKLOAD_INTERVALS.items() if self.relative and abs(v - self.interval) < 1e-9), None)
        if name and self.clients == 1 and self.think == "fixed":
            return name
        unit = "x" if self.relative else "s"
        clients = f"{self.clients}x " if self.clients > 1 else ""
        think = "~exp " if self.think == "exponential" else ""
        return f"{clients}closed {think}{self.interval:.2g}{unit}"


@dataclass
class Poisson(Load):
    """Open-loop Poisson arrivals at ``rate`` requests per second."""

    rate: float

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"poisson rate must be > 0 requests/s, got {self.rate}")

    def bind(self, solo_latency: float, rng: np.random.Generator) -> None:
        self._rng = rng

    def open_arrivals(self) -> Iterator[float]:
        t = 0.0
        while True:
            t += float(self._rng.exponential(1.0 / self.rate))
            yield t

    def describe(self) -> str:
        return f"poisson {self.rate:g}/s"


@dataclass
class Arrivals(Load):
    """Open loop from explicit arrival times (seconds, sorted on bind)."""

    times: tuple[float, ...]
    label: str = "trace"

    def bind(self, solo_latency: float, rng: np.random.Generator) -> None:
        if any(t < 0 or math.isnan(t) for t in self.times):
            raise ValueError(f"{self.label}: arrival times must be >= 0")
        self._sorted = sorted(self.times)

    def open_arrivals(self) -> Iterator[float]:
        return iter(self._sorted)

    def describe(self) -> str:
        return f"{self.label}: {len(self.times)} arrivals"
