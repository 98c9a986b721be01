"""The runtime loop: arrivals in, policy decisions out, completions back.

One loop serves every policy.  At each step it admits the requests that have
arrived, asks the policy for a :class:`~bless.policy.Decision`, has the
kernel manager launch it, and then either synchronises (a squad) or waits for
the next completion, arrival or wake-up time.  On the simulated GPU in
virtual time this replays hours of traffic as fast as Python runs; the same
loop drives a real GPU.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from bless.backend import Backend
from bless.manager import KernelManager
from bless.policy import Decision, Policy
from bless.requests import AppState, Request
from bless.trace_events import Trace, TraceRecorder
from bless.workload import Load


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
    """The run's timeline, when one was recorded (``Runtime(trace=...)``)."""

    @classmethod
    def merge(cls, parts: list["RunResult"], policy: dict[str, Any], gpu: str) -> "RunResult":
        """One result from runs of single apps on GPUs of their own (ISO, MIG)."""
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
            utilisation=float(np.nanmean([p.utilisation for p in parts])),
            kernels=kernels,
            wall_seconds=sum(p.wall_seconds for p in parts),
            device_seconds=max(p.device_seconds for p in parts),
            trace=trace,
        )

    @property
    def latency_deviation(self) -> float:
        """sum_j max(T_sys_j - T_iso_j, 0), the paper's quota-violation measure."""
        return float(sum(a.deviation for a in self.apps if a.completed))

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


@dataclass(frozen=True)
class StepResult:
    """What one executor step did."""

    finished: list[Request]
    """Requests whose last kernel ended (failed ones carry ``failed``)."""
    launched: bool
    """Whether the policy's decision launched any kernel."""
    wake_at: float
    """When the policy asked to be asked again even if nothing arrives or finishes (inf: never)."""


class Executor:
    """The step shared by every driver of a policy (trace replay, the server).

    One :meth:`step` asks the policy for a decision, launches it through the
    kernel manager, then synchronises (a squad) or waits for the next
    completion until ``deadline``, and returns the requests that finished.
    """

    def __init__(self, backend: Backend, policy: Policy, apps: list[AppState]) -> None:
        self.backend = backend
        self.policy = policy
        self.apps = apps
        self.manager = KernelManager(backend)
        policy.setup(apps, backend.gpu)
        for app in apps:
            self.manager.deploy(app, policy.context_limits(app, backend.gpu), policy.shared_partition(app))
        self.squads: list[tuple[float, float, bool]] = []
        """Per squad: device duration, the determiner's estimate, restricted or not."""
        self.launched: set[Request] = set()
        """Requests with kernels on the GPU that have not completed."""
        self.on_launch: Callable[[Decision], None] | None = None
        """Called after a decision is launched, before the host waits for it (the server's live counts)."""
        self._ahead: tuple[Decision, tuple] | None = None
        """A decision taken while the previous squad ran, and the request state it assumed."""
        self.trace: TraceRecorder | None = None
        """Collects launches and host phases for a timeline; None (the default) costs nothing."""

    def close(self) -> None:
        for app in self.apps:
            self.manager.undeploy(app)

    def add_app(self, app: AppState) -> None:
        """Deploy one more app while running (the server's RegisterApp)."""
        if any(a.index == app.index for a in self.apps):
            raise ValueError(f"app index {app.index} is already in use")
        apps = [*self.apps, app]
        self._ahead = None
        self.policy.setup(apps, self.backend.gpu)
        self.manager.deploy(app, self.policy.context_limits(app, self.backend.gpu), self.policy.shared_partition(app))
        self.apps.append(app)

    def remove_app(self, app: AppState) -> list[Request]:
        """Undeploy an app whose kernels have all finished; returns its queued requests.

        The caller decides what happens to them (the server fails them).
        """
        if any(r.app is app for r in self.launched):
            raise RuntimeError(f"app {app.name!r} still has kernels on the GPU; wait for them first")
        # The active request has launched nothing (it is not in self.launched): it is queued too.
        self._ahead = None
        queued = app.drain()
        self.apps.remove(app)
        self.manager.undeploy(app)
        self.policy.setup(self.apps, self.backend.gpu)
        return queued

    def step(self, deadline: float) -> StepResult:
        """One decision, launched; then a squad's barrier, or a wait for the next completion
        until ``deadline`` or the policy's wake-up time."""
        backend = self.backend
        trace = self.trace
        if trace is not None:
            trace.begin(backend.now())
        decision, cost = self._decide()
        launched = decision is not None and bool(decision.plans)
        wake_at = decision.wake_at if decision is not None else math.inf
        if launched:
            backend.charge_host(cost)
            self.policy.on_launch(decision)
            launches = self.manager.execute(decision)
            if trace is not None:
                trace.launched(decision, launches, *squad_estimate(decision))
                trace.host("decide and launch", backend.now())
            self.launched.update(p.request for p in decision.plans)
            if self.on_launch is not None:
                self.on_launch(decision)
            if decision.sync:
                self._decide_ahead(decision)
                if trace is not None:
                    trace.host("decide ahead", backend.now())
                backend.synchronize()
                if trace is not None:
                    trace.host("synchronize", backend.now())
                self._record_squad(decision, launches)
                finished = backend.wait(backend.now())
            else:
                finished = backend.wait(min(deadline, wake_at))
        else:
            busy = self.launched or wake_at < math.inf or deadline < math.inf
            finished = backend.wait(min(deadline, wake_at)) if busy else []
        done = []
        for run in finished:
            req = run.tag
            if req.done:
                continue
            req.app.finish(req, run.end, getattr(run, "error", None))
            self.launched.discard(req)
            self.policy.on_complete(req, run.end)
            done.append(req)
        return StepResult(done, launched, wake_at)

    def _decide(self) -> tuple[Decision | None, float]:
        """The decision taken ahead if the requests are as it assumed (its cost is paid), else a new one."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            for app in self.apps:
                app.activate()
            if ahead[1] == self._request_state():
                return ahead[0], 0.0
        decision = self.policy.step(self.backend.now(), self.apps)
        return decision, self.policy.decision_cost(decision) if decision is not None and decision.plans else 0.0

    def _decide_ahead(self, running: Decision) -> None:
        """Let the policy take its next decision on the host while ``running`` occupies the GPU."""
        ahead = self.policy.decide_ahead(self.backend.now(), self.apps, running)
        if ahead is not None and ahead.plans:
            self.backend.charge_host(self.policy.decision_cost(ahead))
            self._ahead = (ahead, self._request_state())

    def _request_state(self) -> tuple:
        """What a decision depends on besides progress: each app's active request and its latency targets."""
        return tuple(
            (a.index, None if a.active is None else a.active.rid, a.iso_latency, a.target) for a in self.apps
        )

    def _record_squad(self, decision, launches: list) -> None:
        """Squad duration on the device: first kernel start to last kernel end."""
        start = min(r.start for r in launches)
        end = max(r.end for r in launches)
        self.squads.append((end - start, *squad_estimate(decision)))


def squad_estimate(decision: Decision) -> tuple[float, bool]:
    """The policy's predicted squad duration (nan: none) and whether the squad was restricted."""
    if decision.estimate is None:
        return math.nan, False
    return decision.estimate.duration, decision.estimate.restricted


class Runtime:
    """Runs ``apps`` under ``policy`` on ``backend`` for ``duration`` seconds of arrivals."""

    def __init__(
        self,
        backend: Backend,
        policy: Policy,
        apps: list[AppState],
        loads: list[Load],
        *,
        duration: float,
        warmup: float = 0.0,
        seed: int = 0,
        progress: Callable[[float], None] | None = None,
        trace: TraceRecorder | None = None,
    ) -> None:
        if len(apps) != len(loads):
            raise ValueError("one load per app is required")
        if duration <= 0 or not 0 <= warmup < duration:
            raise ValueError(f"need duration > 0 and 0 <= warmup < duration, got {duration}, {warmup}")
        self.backend = backend
        self.policy = policy
        self.apps = apps
        self.loads = loads
        self.duration = duration
        self.warmup = warmup
        self.progress = progress
        rng = np.random.default_rng(seed)
        for app, load in zip(apps, loads):
            load.bind(app.profile.T[-1], np.random.default_rng(rng.integers(2**63)))
        self.executor = Executor(backend, policy, apps)
        self.executor.trace = trace
        self._arrivals: list[tuple[float, int, int]] = []
        self._open: list[Iterator[float]] = []
        self._rid = 0
        self._in_flight = 0
        self._done: list[list[Request]] = [[] for _ in apps]
        self._submitted = [0] * len(apps)
        self._t0 = 0.0

    # ------------------------------------------------------------ arrivals
    def _push(self, t: float, app: int) -> None:
        """Queue an arrival at backend time ``t`` if it falls inside the run."""
        if t < self._t0 + self.duration:
            self._rid += 1
            heapq.heappush(self._arrivals, (t, self._rid, app))

    def _seed_arrivals(self) -> None:
        # Loads count from 0; the run starts at the backend's clock now (a
        # wall-clock backend has already spent time deploying the apps).
        for i, load in enumerate(self.loads):
            for t in load.initial():
                self._push(self._t0 + t, i)
            it = load.open_arrivals()
            self._open.append(it)
            self._pull_open(i)

    def _pull_open(self, i: int) -> None:
        t = next(self._open[i], None)
        if t is not None:
            self._push(self._t0 + t, i)

    def _admit(self, now: float) -> None:
        while self._arrivals and self._arrivals[0][0] <= now:
            t, rid, i = heapq.heappop(self._arrivals)
            app = self.apps[i]
            app.submit(Request(rid, app, t))
            self._submitted[i] += 1
            self._in_flight += 1
            if not self.loads[i].closed:
                self._pull_open(i)

    # ------------------------------------------------------------ loop
    def run(self) -> RunResult:
        wall0 = time.perf_counter()
        dev0 = self._t0 = self.backend.now()
        self._seed_arrivals()
        backend = self.backend
        last_report = 0.0
        while self._arrivals or self._in_flight:
            now = backend.now()
            self._admit(now)
            next_arrival = self._arrivals[0][0] if self._arrivals else math.inf
            step = self.executor.step(next_arrival)
            finished = step.finished
            stalled = not step.launched and not finished and step.wake_at == math.inf
            if stalled and next_arrival == math.inf and not self.executor.launched:
                raise RuntimeError(
                    f"policy {self.policy.name!r} left {self._in_flight} request(s) unscheduled with "
                    f"nothing running and no wake-up time"
                )
            for req in finished:
                self._complete(req)
            if self.progress is not None and now - last_report > 0.05 * self.duration:
                last_report = now
                self.progress(min((now - dev0) / self.duration, 1.0))
        self.executor.close()
        return self._result(time.perf_counter() - wall0, backend.now() - dev0)

    def _complete(self, req: Request) -> None:
        self._in_flight -= 1
        self._done[req.app.index].append(req)
        nxt = self.loads[req.app.index].after_completion(req.end)
        if nxt is not None:
            self._push(nxt, req.app.index)

    def _result(self, wall: float, device: float) -> RunResult:
        results = []
        for app, load, done in zip(self.apps, self.loads, self._done):
            window = [r for r in done if r.arrival >= self._t0 + self.warmup]
            results.append(
                AppResult(
                    app=app.name,
                    quota=app.quota,
                    load=load.describe(),
                    iso_latency=app.iso_latency,
                    solo_latency=float(app.profile.T[-1]),
                    slo=app.slo,
                    latencies=np.array([r.latency for r in window]),
                    queue_times=np.array([r.queue_time for r in window]),
                    arrivals=np.array([r.arrival - self._t0 for r in window]),
                    window=self.duration - self.warmup,
                    submitted=self._submitted[app.index],
                )
            )
        squads = self.executor.squads
        sq = np.array(squads) if squads else np.zeros((0, 3))
        return RunResult(
            policy=self.policy.describe(),
            gpu=self.backend.gpu.name,
            duration=self.duration,
            warmup=self.warmup,
            apps=results,
            squad_durations=sq[:, 0],
            squad_estimates=sq[:, 1],
            squad_restricted=sq[:, 2].astype(bool),
            utilisation=self.backend.utilisation(),
            kernels=self.executor.manager.kernels_launched,
            wall_seconds=wall,
            device_seconds=device,
            trace=None if self.executor.trace is None else self.executor.trace.trace(),
        )
