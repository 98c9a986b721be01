"""Launch records, CUDA events and the clock that puts device times on the host clock.

Every launch records an *end* event after its kernel; a ``timed`` launch
also records a *start* event just before it.  The end event serves three
purposes: a later launch in another stream that must follow this one waits
on it (``cuStreamWaitEvent``), :meth:`Timeline.poll` asks it whether the
launch finished (``cuEventQuery``), and it gives the launch's end time.
Events are recycled once their launch is *resolved* (its times read), which
is safe because a stream wait captures the event's state when it is issued.

Device times become host times through a per-context *anchor*: an event
of that context whose host time is known, so an event ``e`` of the context
happened at ``anchor.host + elapsed(anchor, e)``.  Recording an event and
synchronising it between host times ``t0`` and ``t1`` proves it happened in
``[t0, t1]`` (its *causal window*).  The first anchor takes ``t0`` of the
narrowest of three such windows.  Every :data:`ANCHOR_MAX_AGE` seconds a new
event is measured the same way (short elapsed times keep the float
milliseconds of ``cuEventElapsedTime`` precise); its host time is *chained*
from the old anchor through the device's elapsed time and moved only as far
as needed to lie inside its own window.  So renewals never make device time
jump, a jump happens only when the window proves the chain wrong (GPU/host
clock drift, or a first anchor taken too early), and without drift it can
only move times later: a stream's launches never appear to overlap across a
renewal.  A launch keeps the anchor it was issued under until it is resolved.

An untimed launch's start is estimated as the latest of the moments it could
not have started before: its issue on the host, the end of the previous
launch in its stream, and the end of its ``after`` launch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from bless.backend.trace_events import Placement
from bless.cuda.contexts import ExecContext
from bless.cuda.driver import Driver

ANCHOR_MAX_AGE = 1.0
"""Seconds an anchor is used before it is renewed."""


class Anchor:
    """An event of a context that happened at host time ``host``."""

    __slots__ = ("event", "host", "pending", "retired")

    def __init__(self, event: Any, host: float) -> None:
        self.event = event
        self.host = host
        self.pending = 0
        """Unresolved launches timed against this anchor."""
        self.retired = False


class ContextClock:
    """Per context: recycled timing events, a clock stream and the current anchor."""

    def __init__(self, driver: Driver, current: Callable[[], Any], stream: Any, now: Callable[[], float]) -> None:
        self.driver = driver
        self._current = current
        """A context manager factory that makes this clock's context current."""
        self.stream = stream
        self._now = now
        self._free: list[Any] = []
        tries = sorted((self._measure() for _ in range(3)), key=lambda m: m[2] - m[1])
        event, earliest, _ = tries[0]
        self.anchor = Anchor(event, earliest)
        for other, _, _ in tries[1:]:
            self.give(other)

    def take(self) -> Any:
        """A timing event of this context (recycled or new)."""
        if self._free:
            return self._free.pop()
        with self._current():
            return self.driver.call("cuEventCreate", self.driver.cu.CUevent_flags.CU_EVENT_DEFAULT)

    def give(self, event: Any) -> None:
        self._free.append(event)

    def renew_if_old(self, now: float) -> None:
        """Take a new anchor, chained from the current one, when that is older than :data:`ANCHOR_MAX_AGE`."""
        if now - self.anchor.host <= ANCHOR_MAX_AGE:
            return
        event, earliest, latest = self._measure()
        elapsed = float(self.driver.call("cuEventElapsedTime", self.anchor.event, event)) * 1e-3
        old, self.anchor = self.anchor, Anchor(event, min(max(self.anchor.host + elapsed, earliest), latest))
        old.retired = True
        if old.pending == 0:
            self.give(old.event)

    def release(self, anchor: Anchor) -> None:
        """A launch timed against ``anchor`` has been resolved."""
        anchor.pending -= 1
        if anchor.retired and anchor.pending == 0:
            self.give(anchor.event)

    def _measure(self) -> tuple[Any, float, float]:
        """An event recorded on the idle clock stream, and its causal window on the host clock."""
        event = self.take()
        t0 = self._now()
        self.driver.call("cuEventRecord", event, self.stream)
        self.driver.call("cuEventSynchronize", event)
        return event, t0, self._now()

    def events(self) -> list[Any]:
        """Every event this clock holds (for destruction)."""
        return [*self._free, self.anchor.event]


class CudaStream:
    """A stream of one context, with its launches not yet resolved."""

    __slots__ = ("clock", "context", "handle", "label", "last_end", "notify", "pending")

    def __init__(self, handle: Any, clock: ContextClock, label: str, context: ExecContext) -> None:
        self.handle = handle
        self.clock = clock
        self.context = context
        """The context it launches into (its SMs, for timelines)."""
        self.pending: deque[CudaLaunch] = deque()
        self.notify: deque[CudaLaunch] = deque()
        """Unresolved ``notify`` launches, in order (only the first can finish first)."""
        self.last_end: float | None = None
        """End of the last resolved launch (host clock)."""
        self.label = label

    def __repr__(self) -> str:
        return f"CudaStream({self.label})"


class CudaLaunch:
    """One launched kernel; ``start`` and ``end`` (host clock, seconds) are None until resolved."""

    __slots__ = (
        "after",
        "anchor",
        "end",
        "end_event",
        "error",
        "issue",
        "kernel",
        "notify",
        "seq",
        "start",
        "start_event",
        "stream",
        "tag",
    )

    def __init__(
        self,
        tag: Any,
        stream: CudaStream,
        kernel: int,
        issue: float,
        after: CudaLaunch | None,
        anchor: Anchor,
        start_event: Any,
        end_event: Any,
        notify: bool,
        seq: int,
    ) -> None:
        self.tag = tag
        self.stream = stream
        self.kernel = kernel
        self.issue = issue
        self.after = after
        self.anchor = anchor
        self.start_event = start_event
        self.end_event = end_event
        self.notify = notify
        self.start: float | None = None
        self.end: float | None = None
        self.error: str | None = None
        """Always None: a CUDA fault poisons the whole context, and the backend raises it as a BackendError."""
        self.seq = seq

    @property
    def duration(self) -> float:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"CudaLaunch(kernel {self.kernel} on {self.stream.label}, start={self.start}, end={self.end})"


def placement(run: CudaLaunch) -> Placement:
    """Where a launch ran, for a timeline (:mod:`bless.backend.trace_events`).

    Events time a launch but do not say how many SMs its blocks held, so
    only the context's grant is known.
    """
    ctx = run.stream.context
    return Placement(ctx.label, ctx.sm_count)


def needs_wait(stream: CudaStream, after: CudaLaunch | None) -> bool:
    """Whether a launch on ``stream`` must wait on ``after``'s end event.

    Not when there is no ``after``, when it is in the same stream (streams
    run in order) or when it is already known to have finished.
    """
    return after is not None and after.stream is not stream and after.end is None


def estimate_start(issue: float, previous_end: float | None, after_end: float | None) -> float:
    """The earliest an untimed launch can have started: issued, stream free, dependency done."""
    start = issue
    if previous_end is not None and previous_end > start:
        start = previous_end
    if after_end is not None and after_end > start:
        start = after_end
    return start


class Timeline:
    """Resolution of launches: reading their times in an order that respects their dependencies."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.completed: list[CudaLaunch] = []
        """Resolved ``notify`` launches not yet handed to the host."""

    def elapsed(self, anchor: Anchor, event: Any) -> float:
        return float(self.driver.call("cuEventElapsedTime", anchor.event, event)) * 1e-3

    def resolve(self, run: CudaLaunch) -> None:
        """Read a finished launch's times and recycle its events.

        Its stream predecessors and its ``after`` must be resolved already.
        """
        stream, clock, anchor = run.stream, run.stream.clock, run.anchor
        end = anchor.host + self.elapsed(anchor, run.end_event)
        if run.start_event is not None:
            start = anchor.host + self.elapsed(anchor, run.start_event)
            clock.give(run.start_event)
            run.start_event = None
        else:
            start = estimate_start(run.issue, stream.last_end, None if run.after is None else run.after.end)
        run.start, run.end = min(start, end), end
        stream.last_end = end
        clock.give(run.end_event)
        run.end_event = None
        clock.release(anchor)
        run.after = None  # drop the chain so old launches can be freed
        if run.notify:
            if stream.notify and stream.notify[0] is run:
                stream.notify.popleft()
            self.completed.append(run)

    def resolve_through(self, run: CudaLaunch) -> None:
        """Resolve ``run`` (finished) and everything before it in its stream, dependencies first."""
        pending = run.stream.pending
        while run.end is None:
            head = pending[0]
            after = head.after
            if after is not None and after.end is None:
                self.resolve_through(after)
            pending.popleft()
            self.resolve(head)

    def resolve_all(self, streams: list[CudaStream]) -> None:
        """Resolve every pending launch (all finished: after a synchronisation), in issue order."""
        runs = sorted((r for s in streams for r in s.pending), key=lambda r: r.seq)
        for s in streams:
            s.pending.clear()
        for r in runs:
            self.resolve(r)

    def poll(self, streams: list[CudaStream]) -> None:
        """Resolve every launch that has finished, each stream's in order (``cuEventQuery`` on
        its end event): the host sees a finished ``notify`` launch, and a policy sees the end of
        every finished kernel (deadline pacing corrects its expectations with them).  A stream
        costs one query that fails, plus one per launch that finished since the last poll."""
        for s in streams:
            pending = s.pending
            while pending and self.driver.done("cuEventQuery", pending[0].end_event):
                self.resolve_through(pending[0])

    def take_completed(self) -> list[CudaLaunch]:
        done, self.completed = self.completed, []
        return done
