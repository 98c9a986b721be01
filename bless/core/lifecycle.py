"""Requests and the per-app view the policies schedule from.

An app's :class:`AppState` owns the lifecycle of its requests: the runtime and
the server tell it what happened (:meth:`AppState.submit`,
:meth:`AppState.finish`, :meth:`AppState.withdraw`, :meth:`AppState.drain`),
policies ask it (:meth:`AppState.activate`, :meth:`AppState.take_queued`,
:meth:`AppState.release`), and nobody else moves a request between its
queue and its active slot.  A request's :attr:`Request.state` follows.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from bless.profiles.format import Profile

LATENCY_CRITICAL = "latency-critical"
BEST_EFFORT = "best-effort"
PRIORITIES = (LATENCY_CRITICAL, BEST_EFFORT)
"""An app's priority class.  Latency-critical (the default, what every app was before
classes existed) is owed its latency target; best-effort apps take what the
latency-critical ones leave, under the policies that read the class (tally, bless)."""


class RequestState(Enum):
    """Where a request is in its life."""

    QUEUED = "queued"
    """Waiting in its app's queue."""
    ACTIVE = "active"
    """Its app's request the scheduler paces; no kernel launched yet."""
    RUNNING = "running"
    """Some of its kernels launched."""
    DONE = "done"
    FAILED = "failed"
    """Ended with a kernel fault."""
    WITHDRAWN = "withdrawn"
    """Taken out before any kernel launched (cancelled, its app removed, the server stopping)."""


@dataclass(eq=False)
class Request:
    """One inference request (or training iteration) of one app."""

    rid: int
    app: AppState
    arrival: float
    scheduled: int = 0
    """Kernels handed to the GPU so far (the next kernel's index)."""
    end: float | None = None
    first_launch: Any = None
    """The backend's launch object of the request's first kernel (its start time)."""
    last_launch: Any = None
    """The backend's launch object of the latest scheduled kernel (ordering, timing)."""
    payload: Any = None
    """Whatever the caller attached (the server keeps its response future here)."""
    failed: str | None = None
    withdrawn: bool = False
    chunks_done: int = 0
    """Chunks of it (kernels launched together, the host told when the last ends) seen finished."""

    @property
    def state(self) -> RequestState:
        if self.withdrawn:
            return RequestState.WITHDRAWN
        if self.end is not None:
            return RequestState.FAILED if self.failed else RequestState.DONE
        if self.scheduled:
            return RequestState.RUNNING
        return RequestState.ACTIVE if self.app.active is self else RequestState.QUEUED

    @property
    def n_kernels(self) -> int:
        return self.app.profile.n_kernels

    @property
    def remaining(self) -> int:
        return self.n_kernels - self.scheduled

    @property
    def done(self) -> bool:
        return self.end is not None

    @property
    def latency(self) -> float:
        if self.end is None:
            raise ValueError(f"request {self.rid} of {self.app.name!r} has not finished: it has no latency yet")
        return self.end - self.arrival

    @property
    def queue_time(self) -> float:
        """Arrival to the start of the first kernel."""
        return self.first_launch.start - self.arrival


@dataclass(eq=False)
class AppState:
    """A deployed app as the scheduler sees it: profile, quota, queue, active request."""

    index: int
    name: str
    profile: Profile
    quota: float
    """Share of the GPU's SMs promised to this app, in (0, 1]."""
    slo: float | None = None
    """Latency target in seconds; None means the ISO latency T[quota]."""
    priority: str = LATENCY_CRITICAL
    """Its priority class, one of :data:`PRIORITIES`."""
    queue: deque[Request] = field(default_factory=deque)
    active: Request | None = None
    running: dict[Request, None] = field(default_factory=dict)
    """Requests taken whole (:meth:`take_queued`) whose last kernel has not ended, oldest first."""
    handle: Any = None
    """The backend's AppHandle."""
    granted_sms: dict[int, int] = field(default_factory=dict)
    """SMs each of its restricted contexts holds, by the SM limit asked for it: the kernel
    manager records what the backend granted when it makes them (a GPU may grant more, as a
    GH100's green remainder does); empty while the app is not deployed."""
    prefix: np.ndarray = field(init=False, repr=False)
    """Shape (K+1,): expected time from request start to the end of kernel i-1 at the quota."""
    iso_latency: float = field(init=False)
    """T[quota]: the isolated latency the quota promises."""
    _in_system: int = field(init=False, repr=False)
    """Requests submitted and not yet finished or withdrawn."""
    _busy_from: float = field(init=False, repr=False)
    """When the current busy period began (meaningful while ``_in_system``)."""
    _idle_at: float = field(init=False, repr=False)
    """When the app last had no request left (-inf: never busy, or its last was withdrawn)."""

    def fresh(self, index: int) -> AppState:
        """The same app (profile, quota, SLO, priority) as number ``index``, with nothing queued
        or deployed: for a run of its own (an isolated group's, a warm-up's)."""
        return AppState(index, self.name, self.profile, self.quota, slo=self.slo, priority=self.priority)

    def __post_init__(self) -> None:
        if self.slo is not None and self.slo <= 0:
            raise ValueError(f"slo of app {self.name!r} must be a positive number of seconds, got {self.slo}")
        if self.priority not in PRIORITIES:
            raise ValueError(
                f"priority of app {self.name!r} must be one of {', '.join(PRIORITIES)}, got {self.priority!r}"
            )
        self.set_quota(self.quota)
        # Set here, not as field defaults: mypyc's compiled dataclasses leave those unset.
        self._in_system = 0
        self._busy_from = math.nan
        self._idle_at = -math.inf

    def set_quota(self, quota: float) -> None:
        """Change the quota; the isolated schedule the scheduler paces against follows."""
        if not 0 < quota <= 1:
            raise ValueError(f"quota of app {self.name!r} must be in (0, 1], got {quota}")
        self.quota = quota
        n = quota * self.profile.level_sms[-1]
        t = self.profile.t_at_sms(n)
        self.prefix = np.concatenate(([0.0], np.cumsum(t)))
        self.iso_latency = self.profile.latency_at_sms(n)

    @property
    def best_effort(self) -> bool:
        return self.priority == BEST_EFFORT

    @property
    def backlogged(self) -> bool:
        """Requests wait behind its active one: they arrived faster than it was served."""
        return bool(self.queue)

    @property
    def target(self) -> float:
        """The latency the scheduler paces this app against (SLO if set, else ISO)."""
        return self.slo if self.slo is not None else self.iso_latency

    @property
    def busy_since(self) -> float | None:
        """Since when the app has had a request submitted and not finished, without a gap;
        None while it has none.  A request arriving at the instant the app's last one ended
        continues the busy period: a closed loop with no think time is never idle."""
        return self._busy_from if self._in_system else None

    def submit(self, request: Request) -> None:
        """A request arrived: it queues behind the app's earlier ones."""
        if not self._in_system and request.arrival > self._idle_at:
            self._busy_from = request.arrival
        self._in_system += 1
        self.queue.append(request)

    def _left(self, at: float) -> None:
        """One request left the app (finished at ``at``, or withdrawn: -inf)."""
        self._in_system -= 1
        if not self._in_system:
            self._idle_at = at

    def activate(self) -> Request | None:
        """Make the oldest queued request active if none is (one active request per app)."""
        if self.active is None and self.queue:
            self.active = self.queue.popleft()
        return self.active

    def take_queued(self, depth: int | None = None) -> Request | None:
        """The oldest queued request, for a policy that launches requests whole (not paced);
        None while ``depth`` requests taken so are still running (None: no limit)."""
        if not self.queue or (depth is not None and len(self.running) >= depth):
            return None
        request = self.queue.popleft()
        self.running[request] = None
        return request

    def release(self, request: Request) -> None:
        """Every kernel of the active ``request`` is launched: the next one may become active."""
        if self.active is request:
            self.active = None

    def finish(self, request: Request, end: float, error: str | None = None) -> None:
        """``request``'s last kernel ended at ``end`` (``error``: a kernel faulted)."""
        request.end = end
        request.failed = error or request.failed
        self.running.pop(request, None)
        self.release(request)
        self._left(end)

    def withdraw(self, request: Request) -> bool:
        """Take out ``request`` if none of its kernels launched; False if it already runs."""
        if request in self.queue:
            self.queue.remove(request)
        elif self.active is request and not request.scheduled:
            self.active = None
        else:
            return False
        request.withdrawn = True
        self._left(-math.inf)
        return True

    def drain(self) -> list[Request]:
        """Take out every request with no kernel launched (the active one first)."""
        waiting = [r for r in (self.active, *self.queue) if r is not None and not r.scheduled]
        for r in waiting:
            self.withdraw(r)
        return waiting
