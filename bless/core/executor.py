"""The executor: one step of any policy, on any backend.

A step asks the policy for a :class:`~bless.core.policy.Decision`, has the
kernel manager launch it, and reports what finished as a typed
:class:`StepResult`.  The trace replay (:mod:`bless.harness.replay`) and the
server (:mod:`bless.serving.server.core`) both drive their policy through it,
so a policy behaves the same under a replay and under live traffic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from bless.backend.interface import Backend, BackendError
from bless.backend.trace_events import TraceRecorder
from bless.core.lifecycle import AppState, Request
from bless.core.manager import KernelManager
from bless.core.policy import Decision, Policy


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
            self._deploy(app)
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
        self._deploy(app)
        self.apps.append(app)

    def set_quota(self, app: AppState, quota: float) -> None:
        """Give a deployed app a new quota (the server's SetQuota); the policy sets up again, so
        what it derived from the quotas (pacing tables, interference margins) follows."""
        app.set_quota(quota)
        self._ahead = None
        self.policy.setup(self.apps, self.backend.gpu)

    def _deploy(self, app: AppState) -> None:
        """Deploy ``app`` with the contexts its policy asks for."""
        gpu, policy = self.backend.gpu, self.policy
        self.manager.deploy(
            app,
            policy.context_limits(app, gpu),
            policy.shared_partition(app),
            policy.best_effort(app, gpu),
            policy.low_priority(app),
        )

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
        launched = False
        wake_at = decision.wake_at if decision is not None else math.inf
        if decision is not None and decision.launches:
            launched = True
            backend.charge_host(cost)
            launches = self.manager.execute(decision)
            self.policy.on_launch(decision)
            if trace is not None:
                trace.launched(decision, launches, *squad_estimate(decision))
                trace.host("decide and launch", backend.now())
            self.launched.update(p.request for p in decision.launches)
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
            if req.scheduled < req.n_kernels or run is not req.last_launch:
                req.chunks_done += 1  # the end of a chunk (RequestLaunch.notify): the policy goes on
                continue
            end = run.end
            if end is None:
                raise BackendError(
                    f"{backend.describe()} reported a kernel of request {req.rid} finished with no end time"
                )
            req.app.finish(req, end, run.error)
            self.launched.discard(req)
            self.policy.on_complete(req, end)
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
        return decision, self.policy.decision_cost(decision) if decision is not None and decision.launches else 0.0

    def _decide_ahead(self, running: Decision) -> None:
        """Let the policy take its next decision on the host while ``running`` occupies the GPU."""
        ahead = self.policy.decide_ahead(self.backend.now(), self.apps, running)
        if ahead is not None and ahead.launches:
            self.backend.charge_host(self.policy.decision_cost(ahead))
            self._ahead = (ahead, self._request_state())

    def _request_state(self) -> tuple:
        """What a decision depends on besides progress: each app's active request and its latency targets."""
        return tuple((a.index, None if a.active is None else a.active.rid, a.iso_latency, a.target) for a in self.apps)

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
