"""The serving loop: one thread runs BLESS on the GPU; RPC handlers talk to it through an inbox.

Threads and ownership:

* The **loop thread** owns the :class:`~bless.harness.replay.Executor`, the backend
  and every :class:`~bless.core.lifecycle.AppState`.  Each turn it drains the inbox
  (new requests, cancellations, admin commands), runs one executor step (on
  BLESS a squad: launch, then sleep until its simulated kernels end) and
  answers the requests that finished.
* **RPC handlers** (the gRPC asyncio thread) never touch scheduler state: they
  validate, append a message (:mod:`bless.serving.server.inbox`) to the inbox,
  wake the loop (an event while it idles, ``backend.wake()`` while it waits on
  the GPU) and await the answer, which the loop hands back through a callback.

Each event is recorded once, in the measurement store
(:mod:`bless.serving.server.stats`), which GetStats and ``/metrics`` read.

A lock guards the app table and admission (the ``max_queue`` check and the
count of requests it reads move together); messages are posted under it, so
once the loop has shut down no message can slip in unanswered.

Faults and endings, each answered explicitly:

* a full per-app queue (``max_queue`` requests queued or running) refuses new
  requests (RESOURCE_EXHAUSTED);
* a cancelled request, or one whose client's deadline passed, is removed from
  its queue before it runs; one already on the GPU runs to the end (kernels
  cannot be recalled) and is counted as cancelled, as is one that ends after
  its deadline;
* unregistering an app fails its queued requests (ABORTED) at once, lets a
  request already on the GPU finish, then removes the app;
* a faulting kernel fails its own request only (INTERNAL);
* on shutdown the loop keeps serving what it has for ``grace`` seconds,
  then fails whatever is left (UNAVAILABLE, with a retry pushback).
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import logging
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, NamedTuple, TypeVar

from bless.backend.interface import Backend, BackendError
from bless.core.executor import Executor
from bless.core.heap import frozen_heap
from bless.core.lifecycle import AppState, Request
from bless.policies.bless import BlessPolicy
from bless.profiles.format import Profile
from bless.serving.server.admission import (
    Admission,
    AdmissionLimits,
    AppDemand,
    admit,
    memory_budget,
)
from bless.serving.server.errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    KernelFault,
    NotFound,
    ResourceExhausted,
    ServiceError,
    Unavailable,
)
from bless.serving.server.inbox import Call, Cancel, Message, Submit, Unregister
from bless.serving.server.jobs import Job, Outcome, ServedApp, UnavailableApp
from bless.serving.server.spec import AppSpec, slo_seconds
from bless.serving.server.stats import GpuSample, ServerStats
from bless.serving.server.store import StateStore, UnreadableApp
from bless.serving.server.tensors import check_output_sizes

log = logging.getLogger("bless.serving.server")
T = TypeVar("T")

GPU_SAMPLE_PERIOD = 0.1
"""Seconds between refreshes of the GPU figures the metrics endpoint reports (also while
idle: the loop wakes this often to sample, so an idle GPU reads idle)."""
SHUTDOWN_RETRY_AFTER = 1.0
"""Seconds a client refused by a stopping server is told to wait before retrying: about
what a restart takes (warm-up and restoring the apps), or time to pick another server."""


DEADLINE_HEAP_SLACK = 1024
"""Entries of answered requests the deadline heap may hold beyond twice the live ones
before it is compacted (a compaction costs one pass over it)."""


class Route(NamedTuple):
    """What the loop does with one kind of inbox message."""

    run: Callable[[Any], None]
    fail: Callable[[Any, ServiceError], None]
    """At shutdown, instead of running it: answer it with the error."""


def settle(fut: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``fut`` unless its caller gave up on it (an RPC cancelled while it waited
    cancels the future, and resolving a cancelled future raises)."""
    with contextlib.suppress(InvalidStateError):
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)


class ServingCore:
    """BLESS on one GPU behind a thread-safe request/command interface."""

    def __init__(
        self,
        backend: Backend,
        policy: BlessPolicy,
        *,
        store: StateStore,
        max_queue: int,
        limits: AdmissionLimits,
        max_message_bytes: int,
    ) -> None:
        self.backend = backend
        self.policy = policy
        self.gpu = backend.gpu
        self.store = store
        self.max_queue = max_queue
        self.limits = limits
        self.max_message_bytes = max_message_bytes
        """The largest gRPC message the server sends: every app's outputs must fit."""
        self.executor = Executor(backend, policy, [])
        self.executor.on_launch = self._on_launch
        self.stats = ServerStats(self._sample_gpu())
        """Every measurement, recorded here once (GetStats, ModelStatistics and /metrics read it)."""
        self.failure: str | None = None
        """Why the loop died, if it did (the server then reports not ready)."""
        self._lock = threading.Lock()
        self._apps: dict[str, ServedApp] = {}
        self._unavailable: dict[str, UnavailableApp] = {}
        """Stored apps that could not be restored (under the lock)."""
        self._inbox: collections.deque[Message] = collections.deque()
        self._routes: dict[type, Route] = {
            Submit: Route(self._run_submit, self._fail_submit),
            Cancel: Route(self._run_cancel, self._fail_cancel),
            Unregister: Route(self._run_unregister, self._fail_future),
            Call: Route(self._run_call, self._fail_future),
        }
        self._wakeup = threading.Event()
        self._rids = itertools.count(1)
        self._indices = itertools.count()
        self._removals: list[tuple[ServedApp, Future, int]] = []
        self._deadlines: list[tuple[float, int, Job]] = []
        """Heap of admitted requests' deadlines (loop thread)."""
        self._sampled_at = -math.inf
        self._stopping = False
        self._closed = False
        self._stop_deadline = math.inf
        self._thread = threading.Thread(target=self._run, name="bless-serving-loop", daemon=True)

    # ================================================================ any thread
    def start(self) -> None:
        self._thread.start()

    def stop(self, grace: float) -> None:
        """Refuse new requests, serve the admitted ones for up to ``grace`` s, fail the rest."""
        with self._lock:
            self._stopping = True
            self._stop_deadline = self.backend.now() + grace
        self._wake()
        self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def ready(self) -> bool:
        return self.alive and not self._stopping and self.failure is None

    def apps(self) -> list[ServedApp]:
        with self._lock:
            return [a for a in self._apps.values() if not a.closing]

    def lookup(self, name: str) -> ServedApp:
        with self._lock:
            served = self._apps.get(name)
            if served is None or served.closing:
                known = ", ".join(sorted(n for n, a in self._apps.items() if not a.closing)) or "none"
                raise NotFound(f"no app {name!r} on this server (registered: {known})")
            return served

    def submit(self, served: ServedApp, answer: Callable[[Outcome], None], timeout: float | None = None) -> Job:
        """Queue one inference request of ``served``; ``answer`` gets its outcome.  ``timeout``:
        seconds until the client's deadline (None: none); past it the request is dropped
        before it runs, and does not count as succeeded if it ends later."""
        with self._lock:
            try:
                self._admit(served)
            except ServiceError as e:
                served.stats.refused(e.reason)
                raise
            served.stats.admitted(served.state.iso_latency)
            now = self.backend.now()
            deadline = math.inf if timeout is None else now + timeout
            job = Job(Request(next(self._rids), served.state, now), served, answer, deadline)
            job.request.payload = job
            self._inbox.append(Submit(job))
        self._wake()
        return job

    def _admit(self, served: ServedApp) -> None:
        """Raise why a request of ``served`` cannot queue now (under the lock)."""
        if self._stopping:
            raise Unavailable(
                f"the server is shutting down; retry in {SHUTDOWN_RETRY_AFTER:g} s or on another server",
                retry_after=SHUTDOWN_RETRY_AFTER,
            )
        if served.closing or self._apps.get(served.name) is not served:
            raise NotFound(f"no app {served.name!r} on this server (it was unregistered)")
        if served.pending >= self.max_queue:
            raise ResourceExhausted(
                f"app {served.name!r} already has {served.pending} requests queued or running, "
                f"the most it may have (max_queue); retry later"
            )

    def cancel(self, job: Job) -> None:
        """The client gave up: drop the request if it has not started; count it as cancelled
        if it ran to the end but was not answered yet."""
        if job.finished:
            if job.claim():
                job.served.stats.counted("cancelled", self._cancel_error(job).reason)
            return
        self._post(Cancel(job), refuse=False)

    def call(self, body: Callable[[], T]) -> Future[T]:
        """Run ``body`` on the loop thread (admin commands); its result or error in the future."""
        fut: Future = Future()
        self._post(Call(body, fut))
        return fut

    def register(
        self, spec: AppSpec, profile: Profile, dry_run: bool = False
    ) -> Future[tuple[Admission, ServedApp | None]]:
        return self.call(lambda: self._register(spec, profile, dry_run, persist=True))

    def set_quota(self, name: str, quota: float) -> Future[ServedApp]:
        return self.call(lambda: self._set_quota(name, quota))

    def unregister(self, name: str) -> Future[int]:
        """Resolves, with the number of aborted queued requests, once the app is gone."""
        fut: Future = Future()
        self._post(Unregister(name, fut))
        return fut

    def inject_fault(self, name: str, kernel: int, count: int) -> Future:
        return self.call(lambda: self._inject_fault(name, kernel, count))

    def restore(self) -> None:
        """Re-register the apps of the state store (at start, before serving).  One that
        cannot be is kept in the store and listed as unavailable, with why, until it is
        unregistered."""
        for stored in self.store.load():
            if isinstance(stored, UnreadableApp):
                failed = UnavailableApp(stored.name, stored.error)
            else:
                fut = self.call(lambda s=stored: self._register(s.spec, s.profile, dry_run=False, persist=False))
                try:
                    fut.result()
                    log.info("restored app %r (quota %.0f%%)", stored.spec.name, stored.spec.quota * 100)
                    continue
                except ServiceError as e:
                    failed = UnavailableApp(stored.spec.name, str(e), stored.spec)
            with self._lock:
                self._unavailable[failed.name] = failed
            log.error(
                "could not restore app %r from %s: %s (listed as unavailable; UnregisterApp removes it)",
                failed.name,
                self.store.path,
                failed.error,
            )

    def unavailable(self) -> list[UnavailableApp]:
        with self._lock:
            return list(self._unavailable.values())

    def forget_unavailable(self, name: str) -> bool:
        """Delete an unavailable app from the store; False if ``name`` is not one."""
        with self._lock:
            if self._unavailable.pop(name, None) is None:
                return False
        self.store.delete(name)
        log.info("unregistered app %r, which could not be restored", name)
        return True

    def _post(self, message: Message, refuse: bool = True) -> None:
        with self._lock:
            if self._closed or (refuse and self._stopping):
                if refuse:
                    raise Unavailable("the server is shutting down", retry_after=SHUTDOWN_RETRY_AFTER)
                return
            self._inbox.append(message)
        self._wake()

    def _wake(self) -> None:
        self._wakeup.set()
        self.backend.wake()

    # ================================================================ loop thread
    def _run(self) -> None:
        try:
            with frozen_heap():
                self._serve()
        except Exception as e:  # a bug: fail everything loudly rather than hang clients
            log.exception("the serving loop crashed")
            self.failure = f"the serving loop crashed: {e!r}"
        finally:
            self._shut_down()

    def _serve(self) -> None:
        """The loop: take messages, step the executor, answer what finished, until stopped."""
        while True:
            self._wakeup.clear()
            self._drain()
            self._expire()
            self._complete_removals()
            self._sample()
            busy = self._busy()
            if self._stopping and (not busy or self.backend.now() >= self._stop_deadline):
                break
            if not busy:
                self._wakeup.wait(0.05 if self._stopping else GPU_SAMPLE_PERIOD)
                continue
            step = self.executor.step(math.inf)
            self._after_step()  # the counts first: a client that hears its answer may read them next
            for req in step.finished:
                self._on_finished(req)
            if not step.launched and not step.finished:
                self._wakeup.wait(1e-3)  # the policy chose to wait: do not spin

    def _busy(self) -> bool:
        ex = self.executor
        return bool(ex.launched) or any(a.queue or a.active is not None for a in ex.apps)

    def _drain(self, failing: ServiceError | None = None) -> None:
        """Handle every message in the inbox: run it, or, shutting down, fail it with ``failing``."""
        while self._inbox:
            message = self._inbox.popleft()
            route = self._routes[type(message)]
            if failing is None:
                route.run(message)
            else:
                route.fail(message, failing)

    def _finish(self, job: Job, outcome: Outcome) -> None:
        """The scheduler is done with ``job``: record it and answer.  One that ran to the end
        is counted by its RPC handler, which knows whether its client is still there."""
        if job.finished:
            return
        started = job.request.first_launch is not None
        stats = job.served.stats
        if outcome.status == "succeeded":
            stats.ran(started=started, latency=outcome.latency, queue=outcome.queue, compute=outcome.compute)
        else:
            job.claim()  # always won here: a handler claims only finished jobs
            stats.ended(outcome.status, outcome.reason, started=started)
        job.finished = True
        try:
            job.answer(outcome)
        except Exception:
            log.exception("answering a request of %r failed", job.served.name)

    # ---------------------------------------------------------------- inbox (loop thread)
    def _run_submit(self, message: Submit) -> None:
        job = message.job
        served = job.served
        if served.closing or not any(a is served.state for a in self.executor.apps):
            self._finish(
                job, Outcome("aborted", Aborted(f"app {served.name!r} was unregistered before the request ran"))
            )
            return
        served.state.submit(job.request)
        if job.deadline < math.inf:
            heapq.heappush(self._deadlines, (job.deadline, job.request.rid, job))

    def _fail_submit(self, message: Submit, error: ServiceError) -> None:
        self._finish(message.job, Outcome("aborted", error))

    def _run_cancel(self, message: Cancel) -> None:
        job = message.job
        error = self._cancel_error(job)
        if job.finished:
            if job.claim():  # it ran to the end, and its client left before the answer
                job.served.stats.counted("cancelled", error.reason)
            return
        self._drop(job, error)

    def _cancel_error(self, job: Job) -> ServiceError:
        if self.backend.now() >= job.deadline:
            return DeadlineExceeded("the client's deadline passed before the request finished")
        return Cancelled("cancelled by the client")

    def _drop(self, job: Job, error: ServiceError) -> None:
        """The client left: drop the request if it has not started, else mark it (kernels cannot be recalled)."""
        req = job.request
        if req.app.withdraw(req):
            self._finish(job, Outcome("cancelled", error))
        else:
            job.cancelled = error

    def _expire(self) -> None:
        """Drop the requests whose client's deadline has passed (they would run for nobody)."""
        heap = self._deadlines
        now = self.backend.now()
        while heap and heap[0][0] <= now:
            _, _, job = heapq.heappop(heap)
            if not job.finished and job.cancelled is None:
                self._drop(job, DeadlineExceeded("the client's deadline passed before the request ran"))
        live = sum(s.pending for s in self._apps.values())
        if len(heap) > 2 * live + DEADLINE_HEAP_SLACK:  # mostly answered requests: compact
            self._deadlines = [e for e in heap if not e[2].finished]
            heapq.heapify(self._deadlines)

    def _fail_cancel(self, message: Cancel, error: ServiceError) -> None:
        """Nothing to answer: the request it names is failed on its own."""

    def _run_call(self, message: Call) -> None:
        if message.done.set_running_or_notify_cancel():
            try:
                message.done.set_result(message.body())
            except Exception as e:
                message.done.set_exception(e)

    def _fail_future(self, message: Call | Unregister, error: ServiceError) -> None:
        settle(message.done, error=error)

    def _run_unregister(self, message: Unregister) -> None:
        name = message.name
        try:
            served = self._get(name)
        except NotFound as e:
            settle(message.done, error=e)
            return
        with self._lock:
            served.closing = True
        self.store.delete(name)
        gone = Outcome("aborted", Aborted(f"app {name!r} was unregistered before this request ran"))
        waiting = served.state.drain()
        for req in waiting:
            self._finish(req.payload, gone)
        self._removals.append((served, message.done, len(waiting)))
        self._complete_removals()

    # ---------------------------------------------------------------- scheduler (loop thread)
    def _on_finished(self, req: Request) -> None:
        job: Job = req.payload
        name = job.served.name
        if req.failed:
            outcome = Outcome(
                "failed",
                KernelFault(
                    f"a kernel of app {name!r} faulted on the GPU ({req.failed}); only this request failed, retry it"
                ),
            )
        elif job.cancelled is not None:
            outcome = Outcome("cancelled", job.cancelled)
        elif self.backend.now() > job.deadline:
            outcome = Outcome("cancelled", DeadlineExceeded("the request finished after its client's deadline"))
        else:
            start = req.first_launch.start
            outcome = Outcome(
                "succeeded",
                None,
                req.end - req.arrival,
                start - req.arrival,
                req.end - start,
                max(self.backend.now() - req.end, 0.0),
            )
        self._finish(job, outcome)

    def _on_launch(self, decision) -> None:
        """A request whose first kernel was just launched is running (counted before the host waits)."""
        for plan in decision.launches:
            if plan.start == 0:
                plan.request.payload.served.stats.started()

    def _after_step(self) -> None:
        ex = self.executor
        kernels = ex.manager.kernels_launched
        if ex.squads or kernels != self.stats.squads.kernels:
            self.stats.squads.ran(ex.squads, kernels)
            ex.squads.clear()  # consumed: a long-running server must not keep every squad
        self._sample()

    def _sample(self) -> None:
        if self.backend.now() - self._sampled_at >= GPU_SAMPLE_PERIOD:
            sample = self._sample_gpu()
            self._sampled_at = sample.at
            self.stats.sampled(sample)

    def _sample_gpu(self) -> GpuSample:
        b = self.backend
        return GpuSample(
            at=b.now(),
            utilisation=b.utilisation(),
            sm_seconds=b.sm_seconds(),
            memory_used_bytes=b.memory_used,
            memory_bytes=self.gpu.memory_bytes,
            sm_count=self.gpu.sm_count,
        )

    # ---------------------------------------------------------------- admin (loop thread)
    def _get(self, name: str) -> ServedApp:
        served = self._apps.get(name)
        if served is None or served.closing:
            raise NotFound(f"no app {name!r} on this server (registered: {', '.join(sorted(self._apps)) or 'none'})")
        return served

    def _admission(self, state: AppState, replacing: ServedApp | None = None, memory: bool = True) -> Admission:
        others = [AppDemand.of(s.state) for s in self._apps.values() if s is not replacing]
        budget = None
        if memory:
            mechanism = self.policy.mechanism
            try:
                budget = memory_budget(
                    [*self.executor.apps, state],
                    self.gpu,
                    mechanism,
                    self.policy.max_level,
                    self.gpu.memory_bytes,
                    self.backend.memory_used,
                    self.backend.context_bytes(mechanism),
                )
            except ValueError as e:
                return Admission(False, str(e))
        return admit(AppDemand.of(state), others, budget, self.policy.squad_size, self.limits)

    def _register(
        self, spec: AppSpec, profile: Profile, dry_run: bool, persist: bool
    ) -> tuple[Admission, ServedApp | None]:
        if spec.name in self._apps or spec.name in self._unavailable:
            raise AlreadyExists(
                f"name: app {spec.name!r} is already registered; unregister it first or pick another name"
            )
        check_output_sizes(spec.inputs, spec.outputs, profile.batch, self.max_message_bytes)
        state = AppState(next(self._indices), spec.name, profile, spec.quota, priority=spec.priority)
        state.slo = slo_seconds(spec.slo, state.iso_latency)
        admission = self._admission(state)
        if dry_run:
            return admission, None
        if not admission.accepted:
            raise FailedPrecondition(f"admission rejected app {spec.name!r}: {admission.reason}")
        try:
            self.executor.add_app(state)
        except (BackendError, ValueError) as e:
            if state.handle is not None:
                self.executor.manager.undeploy(state)
            raise FailedPrecondition(f"cannot deploy app {spec.name!r}: {e}") from None
        if persist:
            try:
                self.store.put(spec, profile)
            except Exception:
                self.executor.remove_app(state)
                raise
        served = ServedApp(spec, state, self.stats.add_app(spec.name, spec.quota))
        with self._lock:
            self._apps[spec.name] = served
        log.info("registered app %r: %s, quota %.0f%%", spec.name, spec.profile, spec.quota * 100)
        return admission, served

    def _set_quota(self, name: str, quota: float) -> ServedApp:
        served = self._get(name)
        trial = AppState(served.state.index, name, served.state.profile, quota)
        trial.slo = slo_seconds(served.spec.slo, trial.iso_latency)
        admission = self._admission(trial, replacing=served, memory=False)
        if not admission.accepted:
            raise FailedPrecondition(f"admission rejected quota {quota:.0%} for app {name!r}: {admission.reason}")
        spec = served.spec.with_quota(quota)
        self.store.update_spec(spec)
        served.state.slo = trial.slo
        self.executor.set_quota(served.state, quota)
        served.spec = spec
        served.stats.set_quota(quota)
        log.info("app %r: quota %.0f%%", name, quota * 100)
        return served

    def _complete_removals(self) -> None:
        if not self._removals:
            return
        left = []
        for served, fut, aborted in self._removals:
            if any(r.app is served.state for r in self.executor.launched):
                left.append((served, fut, aborted))  # a request is on the GPU: let it finish
                continue
            if any(a is served.state for a in self.executor.apps):
                for req in self.executor.remove_app(served.state):
                    self._finish(req.payload, Outcome("aborted", Aborted(f"app {served.name!r} was unregistered")))
                with self._lock:
                    self._apps.pop(served.name, None)
                self.stats.remove_app(served.stats)
                log.info("unregistered app %r (%d queued requests aborted)", served.name, aborted)
            settle(fut, aborted)
        self._removals = left

    def _inject_fault(self, name: str, kernel: int, count: int) -> None:
        served = self._get(name)
        n = served.state.profile.n_kernels
        if not 0 <= kernel < n:
            raise InvalidArgument(f"kernel: app {name!r} has {n} kernels (0..{n - 1}), got {kernel}")
        try:
            self.backend.inject_fault(served.state.handle, kernel, max(count, 1))
        except BackendError as e:
            raise FailedPrecondition(f"cannot inject a fault into app {name!r}: {e}") from None

    def _shut_down(self) -> None:
        """Fail everything still here, explicitly, and refuse what comes later."""
        with self._lock:
            self._closed = True
            self._stopping = True
        error = Unavailable(
            self.failure
            or f"the server shut down before this request finished; retry it in {SHUTDOWN_RETRY_AFTER:g} s",
            retry_after=SHUTDOWN_RETRY_AFTER,
        )
        left = Outcome("aborted", error)
        ex = self.executor
        for app in ex.apps:
            for req in app.drain():
                self._finish(req.payload, left)
        for req in list(ex.launched):
            self._finish(req.payload, left)
        self._drain(failing=error)
        for _served, fut, aborted in self._removals:
            settle(fut, aborted)
        self._removals = []
        try:
            ex.close()
        except Exception:
            log.exception("releasing the GPU failed")
