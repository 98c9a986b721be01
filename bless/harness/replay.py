"""The runtime loop: arrivals in, policy decisions out, completions back.

One loop serves every policy.  At each step it admits the requests that have
arrived, asks the policy for a :class:`~bless.core.policy.Decision`, has the
kernel manager launch it, and then either synchronises (a squad) or waits for
the next completion, arrival or wake-up time.  On the simulated GPU in
virtual time this replays hours of traffic as fast as Python runs; the same
loop drives a real GPU.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterator

import numpy as np

from bless.backend.interface import Backend
from bless.backend.trace_events import TraceRecorder
from bless.core.executor import Executor
from bless.core.heap import frozen_heap
from bless.core.lifecycle import AppState, Request
from bless.core.policy import Policy
from bless.harness.fcfs import fcfs_completions
from bless.harness.loads import Load
from bless.harness.results import AppResult, RunResult


def load_rngs(seed: int, n: int) -> list[np.random.Generator]:
    """The generators a replay seeded ``seed`` binds its ``n`` apps' loads with, in app order
    (the bound reads the same arrivals through it)."""
    root = np.random.default_rng(seed)
    return [np.random.default_rng(root.integers(2**63)) for _ in range(n)]


class Replay:
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
        for app, load, rng in zip(apps, loads, load_rngs(seed, len(loads))):
            # A float: a NumPy scalar would spread to every arrival and clock reading.
            load.bind(float(app.profile.T[-1]), rng)
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
        with frozen_heap():  # before the clock starts: its first pass takes tens of ms
            wall0 = time.perf_counter()
            dev0 = self._t0 = self.backend.now()
            self._seed_arrivals()
            self._loop(dev0)
        self.executor.close()
        return self._result(time.perf_counter() - wall0, self.backend.now() - dev0)

    def _loop(self, dev0: float) -> None:
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

    def _complete(self, req: Request) -> None:
        self._in_flight -= 1
        self._done[req.app.index].append(req)
        nxt = self.loads[req.app.index].after_completion(req.end)
        if nxt is not None:
            self._push(nxt, req.app.index)

    def _result(self, wall: float, device: float) -> RunResult:
        results = []
        start, end = self._t0 + self.warmup, self._t0 + self.duration
        for app, load, done in zip(self.apps, self.loads, self._done):
            window = [r for r in done if r.arrival >= start]
            served = [r for r in window if not r.failed]  # a failed request has no latency to count
            ends = np.array([r.end for r in done if not r.failed], dtype=float)
            before = float(np.sum(ends <= start))
            due = math.nan
            if not load.closed:  # a closed loop's arrivals follow its own completions: no ISO run of them
                arrivals = np.sort(np.array([r.arrival for r in done], dtype=float))
                iso_done = float(np.sum(fcfs_completions(arrivals, app.iso_latency) <= end))
                due = max(iso_done - before, 0.0) / (end - start)
            results.append(
                AppResult(
                    app=app.name,
                    quota=app.quota,
                    load=load.describe(),
                    iso_latency=app.iso_latency,
                    solo_latency=float(app.profile.T[-1]),
                    slo=app.slo,
                    latencies=np.array([r.latency for r in served]),
                    queue_times=np.array([r.queue_time for r in served]),
                    arrivals=np.array([r.arrival - self._t0 for r in served]),
                    window=self.duration - self.warmup,
                    submitted=self._submitted[app.index],
                    failed=len(window) - len(served),
                    served_rate=(float(np.sum(ends <= end)) - before) / (end - start),
                    due_rate=due,
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
