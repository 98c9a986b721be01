"""Discrete-event fluid model of one GPU: SMs, contexts, streams, DRAM bandwidth.

Time is virtual (seconds, float).  Work arrives as operations on streams; a
stream runs its operations in order, streams run concurrently.  Between two
events (a kernel starting or ending, a stream becoming ready) every running
kernel progresses at a constant rate; rates are recomputed at every event:

* **SMs.**  Kernels take SMs in launch order, as the hardware block scheduler
  dispatches the earlier kernel's blocks first: each gets
  ``min(cap, free)`` where ``cap`` is the kernel's own maximum useful SMs,
  further limited by its context's SM restriction.  A kernel that finds no free
  SM waits (rate 0) until one frees up.  Memory copies use the copy engine, not
  SMs; concurrent copies share it equally.
* **Solo speed.**  On ``s`` SMs a kernel alone would take ``solo[s]`` seconds.
* **DRAM interference.**  At ``s`` SMs a kernel alone would use
  ``u = dram_seconds / solo[s]`` of peak bandwidth.  With total demand
  ``U = sum(u)`` each kernel's time stretches by
  ``1 + u*(max(U, 1) - 1) + gamma*u*(U - u)``: the first term is bandwidth
  saturation (a memory-bound kernel slows in proportion to oversubscription),
  the second is queueing in L2/DRAM below saturation.  Both vanish when a
  kernel runs alone, so solo timing is exactly the profile.
* **Bandwidth share.**  A GPU partition with its own slice of the memory system
  (a MIG instance) has only ``bandwidth_share`` of the peak: demands are read
  relative to that share (``u / share``) and a kernel alone that would need
  more than the share stretches to ``u / share`` of its time (bandwidth bound).
  At the default share of 1 nothing changes.

The engine knows nothing of apps, requests or policies; it executes
operations and reports when each kernel started and ended.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from bless.sim.kernels import SimKernel

_EPS = 1e-12


@dataclass(frozen=True)
class InterferenceModel:
    """Parameters of the DRAM interference term (see module docstring)."""

    gamma: float = 0.5
    """Below-saturation contention per unit of co-runner bandwidth demand."""


class Context:
    """An execution context: unrestricted (``sm_limit is None``) or limited to n SMs."""

    __slots__ = ("cid", "sm_limit", "label")

    def __init__(self, cid: int, sm_limit: int | None, label: str = "") -> None:
        self.cid = cid
        self.sm_limit = sm_limit
        self.label = label

    def __repr__(self) -> str:
        lim = "all" if self.sm_limit is None else self.sm_limit
        return f"Context({self.cid}, sms={lim}, {self.label!r})"


class KernelRun:
    """One launched kernel instance; start/end are filled in by the engine."""

    __slots__ = (
        "kernel", "stream", "issue_time", "tag", "start", "end",
        "remaining", "sms", "rate", "cap", "noise", "seq", "on_done", "after", "gap", "error",
    )

    def __init__(
        self, kernel: SimKernel, stream: "Stream", issue_time: float, tag, noise: float, on_done,
        after: "KernelRun | None", gap: float,
    ) -> None:
        self.kernel = kernel
        self.stream = stream
        self.issue_time = issue_time
        self.tag = tag
        self.after = after
        """A kernel in another stream that must end first (cross-context order)."""
        self.gap = gap
        """Idle time between ``after`` ending and this kernel starting."""
        self.start: float | None = None
        self.end: float | None = None
        self.remaining = 1.0
        self.sms = 0
        self.rate = 0.0
        self.noise = noise
        self.seq = 0
        self.on_done = on_done
        lim = stream.context.sm_limit
        self.cap = kernel.max_sms if lim is None or lim >= kernel.max_sms else lim
        self.error: str | None = None
        """Set when the kernel faulted (the engine still runs it; see SimBackend.inject_fault)."""

    @property
    def duration(self) -> float:
        return self.end - self.start


class Stream:
    """An in-order queue of kernels bound to a context."""

    __slots__ = ("sid", "context", "ops", "busy", "ready_at", "engine")

    def __init__(self, sid: int, context: Context, engine: "Engine") -> None:
        self.sid = sid
        self.context = context
        self.ops: deque[KernelRun] = deque()
        self.busy = False
        self.ready_at = 0.0
        self.engine = engine


@dataclass
class EngineStats:
    kernels_done: int = 0
    sm_seconds: float = 0.0
    """Integral of busy SMs over time (for utilisation)."""
    busy_seconds: float = 0.0
    """Time with at least one kernel running."""


class Engine:
    """The simulated GPU: create contexts and streams, enqueue work, run time forward."""

    def __init__(
        self,
        sm_count: int,
        *,
        interference: InterferenceModel | None = None,
        context_switch: float = 50e-6,
        event_latency: float = 2e-6,
        noise_sigma: float = 0.0,
        seed: int = 0,
        bandwidth_share: float = 1.0,
    ) -> None:
        if not 0.0 < bandwidth_share <= 1.0:
            raise ValueError(f"bandwidth_share must be in (0, 1], got {bandwidth_share}")
        self.sm_count = sm_count
        self.bandwidth_share = bandwidth_share
        self.gamma = (interference or InterferenceModel()).gamma
        self.context_switch = context_switch
        self.event_latency = event_latency
        self.noise_sigma = noise_sigma
        self._rng = random.Random(seed)
        self.now = 0.0
        self.running: list[KernelRun] = []
        self.streams: list[Stream] = []
        self._pending: dict[int, Stream] = {}
        """Streams with operations left, by id (dict: deterministic order)."""
        self._contexts = 0
        self._seq = 0
        self._halt = False
        self.stats = EngineStats()

    # ------------------------------------------------------------ setup
    def create_context(self, sm_limit: int | None, label: str = "") -> Context:
        if sm_limit is not None and not 1 <= sm_limit <= self.sm_count:
            raise ValueError(f"sm_limit must be in 1..{self.sm_count} or None, got {sm_limit}")
        self._contexts += 1
        return Context(self._contexts, sm_limit, label)

    def create_stream(self, context: Context) -> Stream:
        s = Stream(len(self.streams), context, self)
        self.streams.append(s)
        return s

    # ------------------------------------------------------------ enqueue
    def launch(
        self,
        stream: Stream,
        kernel: SimKernel,
        issue_time: float,
        *,
        after: KernelRun | None = None,
        tag=None,
        on_done=None,
    ) -> KernelRun:
        """Enqueue a kernel: it starts once issued, its stream is free and ``after`` ended.

        ``after`` orders kernels across streams (a request moving between
        contexts); when it ran in another context the kernel also waits the
        context-switch time, as the host switches the launching context.
        """
        noise = self._rng.lognormvariate(0.0, self.noise_sigma) if self.noise_sigma > 0 else 1.0
        gap = 0.0
        if after is not None and after.stream is not stream:
            gap = self.event_latency if after.stream.context is stream.context else self.context_switch
        run = KernelRun(kernel, stream, issue_time, tag, noise, on_done, after, gap)
        stream.ops.append(run)
        self._pending[stream.sid] = stream
        return run

    # ------------------------------------------------------------ run
    @property
    def idle(self) -> bool:
        return not self.running and not any(s.ops for s in self._pending.values())

    def run(self, until: float = math.inf) -> None:
        """Advance virtual time to ``until``, until no work is left, or until a
        completion callback called :meth:`halt` (the time of that completion)."""
        self._halt = False
        while True:
            t_next, ending = self._next_event()
            if t_next == math.inf:
                return
            if t_next > until:
                self._advance(until)
                return
            self._advance(t_next)
            if ending:
                self._finish_done()
                if self._halt:
                    self._halt = False
                    return

    def halt(self) -> None:
        """Make the current :meth:`run` return after this completion (from ``on_done``)."""
        self._halt = True

    def next_event_time(self) -> float:
        """When the next kernel starts or ends if nothing new is launched (inf: idle)."""
        return self._next_event()[0]

    def _next_event(self) -> tuple[float, bool]:
        next_start = self._start_ready()
        next_end = math.inf
        now = self.now
        for r in self.running:
            if r.rate > 0.0:
                t = now + r.remaining / r.rate
                if t < next_end:
                    next_end = t
        if next_end <= next_start:
            return next_end, True
        return next_start, False

    def _start_ready(self) -> float:
        """Start every kernel that can start now; return the next start time.

        Kernels that become startable at the same instant start in the order the
        host issued them (ties by stream id), so runs are reproducible.
        """
        now = self.now
        limit = now + _EPS
        started: list[KernelRun] = []
        nxt = math.inf
        idle_streams = []
        for s in self._pending.values():
            if s.busy:
                continue
            ops = s.ops
            if not ops:
                idle_streams.append(s.sid)
                continue
            r = ops[0]
            t = r.issue_time if r.issue_time > s.ready_at else s.ready_at
            dep = r.after
            if dep is not None:
                if dep.end is None:
                    continue  # re-checked when something ends
                d = dep.end + r.gap
                if d > t:
                    t = d
            if t > limit:
                if t < nxt:
                    nxt = t
                continue
            ops.popleft()
            s.busy = True
            started.append(r)
        for sid in idle_streams:
            del self._pending[sid]
        if started:
            if len(started) > 1:
                started.sort(key=lambda r: (r.issue_time, r.stream.sid))
            for r in started:
                self._seq += 1
                r.seq = self._seq
                self.running.append(r)
            self._allocate()
        return nxt

    def _allocate(self) -> None:
        """Give SMs in launch order, then set each kernel's progress rate."""
        free = self.sm_count
        copies = 0
        demand = 0.0
        running = self.running
        now = self.now
        for r in running:
            k = r.kernel
            if k.is_memcpy:
                copies += 1
                if r.start is None:
                    r.start = now
                continue
            s = r.cap if r.cap <= free else free
            r.sms = s
            free -= s
            if s:
                demand += k.dram_seconds / k.solo[s]
                if r.start is None:
                    r.start = now  # its first blocks run now
        share = self.bandwidth_share
        if share != 1.0:
            demand /= share
        over = demand - 1.0 if demand > 1.0 else 0.0
        gamma = self.gamma
        for r in running:
            k = r.kernel
            if k.is_memcpy:
                r.rate = 1.0 / (k.solo[-1] * r.noise * copies)
                continue
            s = r.sms
            if not s:
                r.rate = 0.0
                continue
            t = k.solo[s]
            u = k.dram_seconds / t / share
            w = u if u < 1.0 else 1.0
            r.rate = 1.0 / (t * r.noise * (1.0 + w * over + gamma * w * (demand - u)))

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt > 0.0 and self.running:
            busy = 0
            for r in self.running:
                r.remaining -= r.rate * dt
                busy += r.sms
            self.stats.sm_seconds += busy * dt
            self.stats.busy_seconds += dt
        self.now = t

    def _finish_done(self) -> None:
        now = self.now
        still = []
        finished = []
        for r in self.running:
            if r.rate > 0.0 and r.remaining <= r.rate * 1e-12:
                finished.append(r)
            else:
                still.append(r)
        if not finished:
            # Float rounding left a sliver of work: finish the closest kernel.
            r = min((r for r in self.running if r.rate > 0.0), key=lambda r: r.remaining / r.rate)
            still.remove(r)
            finished.append(r)
        self.running = still
        for r in finished:
            r.end = now
            r.remaining = 0.0
            s = r.stream
            s.busy = False
            if s.ready_at < now:
                s.ready_at = now
            if s.ops:
                self._pending[s.sid] = s
            self.stats.kernels_done += 1
            if r.on_done is not None:
                r.on_done(r)
        self._allocate()
