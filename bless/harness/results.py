"""What a run measured: per app latencies and throughput, and the run's own costs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bless.backend.trace_events import Trace

OVER_ISO = 1.01
"""An app whose mean over its ISO target (:attr:`AppResult.over_iso`) is above this is over it:
issue 14's tolerance ("at or below its ISO target (1 % tolerance)"), which the experiments that
check the quota's promise apply."""


@dataclass
class AppResult:
    """Per-app outcome of a run (times in seconds)."""

    app: str
    quota: float
    load: str
    iso_latency: float
    """T[quota]: the latency the quota promises (the ISO target)."""
    solo_latency: float
    """T[100%]: the app alone on the whole GPU."""
    slo: float | None
    latencies: np.ndarray
    queue_times: np.ndarray
    arrivals: np.ndarray
    """Arrival of each measured request, seconds after the run started (same order as ``latencies``)."""
    window: float
    submitted: int
    failed: int = 0
    """Requests in the window that failed (a kernel fault): counted here, kept out of the latencies."""
    served_rate: float = math.nan
    """Requests done between the warmup and the end of the arrivals, whenever they arrived, per
    second: what the app was served while the load lasted.  (:attr:`throughput` counts the
    requests that arrived in the window, and a run drains every arrival, so for an open loop it
    is the offered rate whatever was served.)"""
    due_rate: float = math.nan
    """Open loops: what the ISO run of the same arrivals (one request at a time, each taking
    :attr:`iso_latency`) has done by the end of the arrivals, less what the app had done by the
    warmup (0 if that is more: it was ahead), per second.  Served at least this, the app has
    done by the end at least what its quota alone would have: the throughput half of the
    quota's promise.  nan for a closed loop, whose arrivals follow its own completions."""

    @property
    def completed(self) -> int:
        return len(self.latencies)

    @property
    def mean(self) -> float:
        return float(self.latencies.mean()) if self.completed else math.nan

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) if self.completed else math.nan

    @property
    def throughput(self) -> float:
        return self.completed / self.window if self.window > 0 else math.nan

    @property
    def over_iso(self) -> float:
        """The mean latency over the ISO target: at or below 1 when the app got at least what its
        quota alone would give it (nan: no request finished)."""
        return self.mean / self.iso_latency

    @property
    def deviation(self) -> float:
        """How far the mean latency exceeds the ISO target (0 when within it)."""
        return max(self.mean - self.iso_latency, 0.0) if self.completed else math.nan

    @property
    def slo_violation_rate(self) -> float:
        if self.slo is None or not self.completed:
            return math.nan
        return float(np.mean(self.latencies > self.slo))

    def summary(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "quota": self.quota,
            "load": self.load,
            "requests": self.completed,
            "failed": self.failed,
            "mean_ms": self.mean * 1e3,
            "p50_ms": self.percentile(50) * 1e3,
            "p99_ms": self.percentile(99) * 1e3,
            "iso_ms": self.iso_latency * 1e3,
            "solo_ms": self.solo_latency * 1e3,
            "deviation_ms": self.deviation * 1e3,
            "throughput_rps": self.throughput,
            "served_rps": self.served_rate,
            "due_rps": self.due_rate,
            "queue_mean_ms": float(self.queue_times.mean()) * 1e3 if len(self.queue_times) else math.nan,
            "slo_ms": None if self.slo is None else self.slo * 1e3,
            "slo_violation_rate": self.slo_violation_rate,
        }


@dataclass
class RunResult:
    """Everything a run measured."""

    policy: dict[str, Any]
    gpu: str
    duration: float
    warmup: float
    apps: list[AppResult]
    squad_durations: np.ndarray = field(default_factory=lambda: np.zeros(0))
    squad_estimates: np.ndarray = field(default_factory=lambda: np.zeros(0))
    squad_restricted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    utilisation: float = math.nan
    kernels: int = 0
    wall_seconds: float = 0.0
    device_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    """Warnings worth showing with the results (e.g. from admission)."""
    trace: Trace | None = None
    """The run's timeline, when one was recorded (``Replay(trace=...)``)."""

    @classmethod
    def merge(cls, parts: list[RunResult], policy: dict[str, Any], gpu: str) -> RunResult:
        """One result from runs of apps on GPUs (slices) of their own (ISO, MIG, MIG + MPS), apps in ``parts`` order."""
        kernels = sum(p.kernels for p in parts)
        trace = None
        if all(p.trace is not None for p in parts):
            trace = Trace()
            for p in parts:
                trace.extend(p.trace)
        return cls(
            policy=policy,
            gpu=gpu,
            duration=parts[0].duration,
            warmup=parts[0].warmup,
            apps=[a for p in parts for a in p.apps],
            squad_durations=np.concatenate([p.squad_durations for p in parts]),
            squad_estimates=np.concatenate([p.squad_estimates for p in parts]),
            squad_restricted=np.concatenate([p.squad_restricted for p in parts]),
            utilisation=_mean_known([p.utilisation for p in parts]),
            kernels=kernels,
            wall_seconds=sum(p.wall_seconds for p in parts),
            device_seconds=max(p.device_seconds for p in parts),
            trace=trace,
        )

    @property
    def latency_deviation(self) -> float:
        """sum_j max(T_sys_j - T_iso_j, 0), the paper's quota-violation measure."""
        return float(sum(a.deviation for a in self.apps if a.completed))

    @property
    def worst_over_iso(self) -> float:
        """The largest of the apps' :attr:`~AppResult.over_iso`: at or below 1 when every app got
        at least what its quota alone would give it (nan: no app finished a request)."""
        ratios = [a.over_iso for a in self.apps if a.completed]
        return max(ratios) if ratios else math.nan

    def summary(self) -> dict[str, Any]:
        sq = self.squad_durations
        return {
            **self.policy,
            "gpu": self.gpu,
            "duration_s": self.duration,
            "latency_deviation_ms": self.latency_deviation * 1e3,
            "mean_latency_ms": float(np.mean([a.mean for a in self.apps])) * 1e3,
            "utilisation": self.utilisation,
            "kernels": self.kernels,
            "squads": len(sq),
            "squad_mean_us": float(sq.mean()) * 1e6 if len(sq) else math.nan,
            "squad_p99_us": float(np.percentile(sq, 99)) * 1e6 if len(sq) else math.nan,
            "restricted_share": float(self.squad_restricted.mean()) if len(sq) else math.nan,
            "wall_s": self.wall_seconds,
            "kernels_per_wall_s": self.kernels / self.wall_seconds if self.wall_seconds > 0 else math.nan,
        }


def _mean_known(values: list[float]) -> float:
    """Mean of the values that are not NaN (a backend that cannot measure utilisation reports NaN); NaN if none is."""
    known = [v for v in values if not math.isnan(v)]
    return float(np.mean(known)) if known else math.nan
