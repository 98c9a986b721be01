"""Discrete-event fluid model of one GPU: SMs, contexts, streams, DRAM bandwidth.

Time is virtual (seconds, float).  Work arrives as operations on streams; a
stream runs its operations in order, streams run concurrently.  Between two
events (a kernel starting or ending, a stream becoming ready) every running
kernel progresses at a constant rate; rates are recomputed at every event:

* **SMs and contexts.**  Kernels take SMs in launch order, as the hardware
  block scheduler dispatches the earlier kernel's blocks first: each holds
  ``min(busy_sms, avail)`` SMs, ``avail`` being what its context leaves it and
  ``busy_sms`` the SMs' worth of capacity it uses at full speed: the
  ``max_sms`` its blocks spread over, less the room its blocks leave on them
  (:func:`bless.profiles.features.busy_sms`), which a later kernel's blocks
  use beside them.  SMs here are units of capacity, so co-resident blocks are
  a fluid share, not a placement.  An unrestricted context may use every
  free SM.  An MPS context (execution affinity, ``sm_limit``) is a *cap*: its
  running kernels together hold at most that many SMs, any of them, so two
  capped contexts may share SMs over time and their caps may add up to more
  than the GPU.  A green context is an SM *set*: its kernels run only on those
  SMs, and contexts with disjoint sets never meet.  A kernel that finds no SM
  waits (rate 0) until one frees up.  Memory copies use the copy engine, not
  SMs; concurrent copies share it equally.
* **Solo speed.**  With ``n`` SMs available a kernel alone takes ``solo[n]``.
  Under an MPS cap the kernel runs at the cap's speed even when it holds fewer
  SMs than the cap (the profile's levels were measured under MPS limits, where a
  64-block kernel is measured 1.6x slower at 66 SMs than at 108); unrestricted,
  holding its ``busy_sms`` is full speed; on its own SM set, room for all the
  ``max_sms`` it spreads over is.
* **Interference.**  A kernel alone at ``n`` SMs demands ``u = dram_seconds /
  solo[n]`` of the peak DRAM bandwidth; ``U`` is the demand of all running
  kernels.  Each kernel stretches by (:meth:`bless.hw.interference.InterferenceModel.stretch`,
  written out in the event loop for speed)::

      (1 + min(u, 1) * max(U - 1, 0)) * (1 + bandwidth * (U - u))

  The first factor is saturation: past the peak a memory-bound kernel slows in
  proportion to the oversubscription.  The second is contention below it: a
  kernel slows in proportion to the bandwidth *the others* demand, whatever its
  own SM count.  That is what the A100 MPS co-location data shows (a model on
  20 % of the SMs beside a co-runner on 80 % suffers about twice the excess
  slowdown it suffers at 80 %: the co-runner's demand grows with its SMs, the
  victim's sensitivity does not shrink with its own).  ``bandwidth`` is fitted
  on those measurements (``bless/hw/<gpu>.toml``, and
  ``tools/validate_interference.py`` reports the fit per split and co-runner).
  Both factors are 1 for a kernel alone, so solo timing is exactly the profile.
* **Bandwidth share.**  A GPU partition with its own slice of the memory system
  (a MIG instance) has only ``bandwidth_share`` of the peak: demands are read
  relative to that share (``u / share``) and a kernel alone that would need
  more than the share stretches to ``u / share`` of its time (bandwidth bound).
  At the default share of 1 nothing changes.
* **Stream priorities.**  A stream created ``low_priority`` gets SMs only after
  the running kernels of ordinary streams have taken theirs, in launch order
  among themselves; as every share, this is given out again at each event, so
  an ordinary kernel that starts takes back SMs a low-priority one held.  The
  hardware does the same at block granularity: pending blocks of higher-priority
  streams are dispatched first (CUDA C++ Programming Guide, "Stream
  Priorities"), and the SMs a low-priority kernel's resident blocks hold come
  free only when those blocks end.  So an ordinary kernel that needs SMs such
  blocks fill (or would fill: a low-priority kernel with blocks still to place
  takes every SM freed while no ordinary block is pending, even between two
  kernels of one stream) starts after waiting for them
  (:func:`bless.profiles.features.drain_seconds`, in proportion to the share of
  their SMs it needs; known only where the profile gives the launch
  configuration, else at once).  Its interference is not lowered: its DRAM
  traffic counts as any kernel's.
* **Best-effort contexts** (Tally, Zhao et al., ASPLOS'25).  A context created
  ``best_effort`` runs its kernels only while no kernel of an ordinary context
  runs or is ready, and one at a time.  Each is launched transformed
  (:class:`~bless.backend.interface.KernelTransform`): it can stop only at
  ``chunks`` evenly spaced points of its work and each chunk adds
  ``chunk_cost`` seconds.  When an ordinary kernel becomes ready the running
  best-effort kernel goes on to its next chunk boundary, then gives up its SMs
  and waits, ``resume_cost`` seconds after its turn comes back, to run the
  rest.  An ordinary kernel that finds SMs free starts at once beside it.
  Without best-effort contexts none of this runs.

The engine knows nothing of apps, requests or policies; it executes
operations and reports when each kernel started and ended.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass

from bless.backend.interface import KernelTransform
from bless.hw.interference import InterferenceModel
from bless.sim.kernels import SimKernel

_EPS = 1e-12


def _lowest_bits(mask: int, n: int) -> int:
    """The ``n`` lowest set bits of ``mask`` (it has at least ``n``): bisect on the bit count."""
    if n >= mask.bit_count():
        return mask
    lo, hi = n, mask.bit_length()
    while lo < hi:
        mid = (lo + hi) // 2
        if (mask & ((1 << mid) - 1)).bit_count() >= n:
            hi = mid
        else:
            lo = mid + 1
    return mask & ((1 << lo) - 1)


class Context:
    """An execution context: unrestricted, capped at n SMs (MPS), or bound to an SM set (green).

    * ``sm_limit is None``: every SM of the GPU.
    * ``sm_set is None`` and ``sm_limit = n`` (MPS execution affinity): the
      context's running kernels *together* hold at most n SMs, any n: two capped
      contexts may use the same SMs at different times, and their caps may add
      up to more than the GPU.
    * ``sm_set`` (a bitmask of SM ids; green contexts): its kernels run only on
      those SMs; two contexts whose sets are disjoint never share an SM.
    """

    __slots__ = ("best_effort", "cid", "label", "sm_limit", "sm_set")

    def __init__(
        self, cid: int, sm_limit: int | None, label: str = "", sm_set: int | None = None, best_effort: bool = False
    ) -> None:
        self.cid = cid
        self.sm_limit = sm_limit
        self.sm_set = sm_set
        self.label = label
        self.best_effort = best_effort
        """Its kernels run best-effort (see the module docstring)."""

    def __repr__(self) -> str:
        lim = "all" if self.sm_limit is None else self.sm_limit
        kind = "" if self.sm_set is None else " set"
        return f"Context({self.cid}, sms={lim}{kind}, {self.label!r})"


class KernelRun:
    """One launched kernel instance; start/end are filled in by the engine."""

    __slots__ = (
        "after",
        "demand",
        "drained_at",
        "end",
        "error",
        "gap",
        "issue_time",
        "kernel",
        "mask",
        "noise",
        "on_done",
        "overhead",
        "rate",
        "ready",
        "remaining",
        "resume_at",
        "seq",
        "sms",
        "solo",
        "start",
        "stop",
        "stream",
        "tag",
        "transform",
        "yields",
    )

    def __init__(
        self,
        kernel: SimKernel,
        stream: Stream,
        issue_time: float,
        tag,
        noise: float,
        on_done,
        after: KernelRun | None,
        gap: float,
        transform: KernelTransform | None = None,
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
        """SMs the kernel's blocks occupy now."""
        self.solo = 0.0
        """Its duration alone with the SMs available to it now (before interference)."""
        self.demand = 0.0
        """Share of the peak DRAM bandwidth it demands at that speed (``dram_seconds / solo``)."""
        self.mask = 0
        """Which SMs it occupies (bitmask), kept only while a context has an SM set."""
        self.rate = 0.0
        self.noise = noise
        self.seq = 0
        self.on_done = on_done
        self.error: str | None = None
        """Set when the kernel faulted (the engine still runs it; see SimBackend.inject_fault)."""
        self.ready: float | None = None
        """When it could first start (issued, its stream free, ``after`` ended); set when it starts."""
        self.transform = transform
        """How it yields, in a best-effort context (None: it never does)."""
        self.overhead = 0.0 if transform is None else transform.chunks * transform.chunk_cost
        """Seconds its transformation adds to it alone (every chunk's cost)."""
        self.stop = 0.0
        """``remaining`` at which it stops: 0 runs to the end, more yields at that chunk boundary."""
        self.resume_at = math.inf
        """A yielded kernel whose turn came back: when it may run again (inf: not yet)."""
        self.yields = 0
        """How often it gave the GPU back."""
        self.drained_at: float | None = None
        """When the low-priority blocks on the SMs it needs have drained (set when it is first
        ready beside them; see :meth:`Engine._drain`)."""

    @property
    def duration(self) -> float:
        if self.start is None or self.end is None:
            raise ValueError(f"kernel {self.kernel.name!r} has not run yet: it has no duration")
        return self.end - self.start


class Stream:
    """An in-order queue of kernels bound to a context."""

    __slots__ = ("busy", "context", "engine", "low_priority", "ops", "ready_at", "sid")

    def __init__(self, sid: int, context: Context, engine: Engine, low_priority: bool = False) -> None:
        self.sid = sid
        self.context = context
        self.low_priority = low_priority
        """Its kernels get only the SMs ordinary streams' kernels leave (the module docstring)."""
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
        self.interference = interference or InterferenceModel()
        self._all_mask = (1 << sm_count) - 1
        self._masked = False
        """True once a context has an SM set: kernels then take concrete SMs."""
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
        self._stale = False
        """Kernels ended since the SMs were last given out (re-allocated before time moves)."""
        self._best_effort = False
        """True once a best-effort context exists: kernel starts are then gated."""
        self._low_priority = False
        """True once a low-priority stream exists: SMs then go to ordinary streams first."""
        self._be_running: KernelRun | None = None
        """The best-effort kernel on the device (at most one)."""
        self.stats = EngineStats()

    # ------------------------------------------------------------ setup
    def create_context(
        self, sm_limit: int | None, label: str = "", *, sm_set: int | None = None, best_effort: bool = False
    ) -> Context:
        """A context capped at ``sm_limit`` SMs (None: all), or bound to the SMs of ``sm_set``;
        ``best_effort``: an unrestricted context whose kernels run best-effort."""
        if best_effort:
            if sm_limit is not None or sm_set is not None:
                raise ValueError("a best-effort context is unrestricted: give no sm_limit or sm_set")
            self._best_effort = True
        if sm_set is not None:
            if not 0 < sm_set <= self._all_mask:
                raise ValueError(f"sm_set must be a non-empty set of SMs 0..{self.sm_count - 1}")
            sm_limit = sm_set.bit_count()
            if sm_limit == self.sm_count:
                sm_set, sm_limit = None, None
            else:
                self._masked = True
        if sm_limit is not None and not 1 <= sm_limit <= self.sm_count:
            raise ValueError(f"sm_limit must be in 1..{self.sm_count} or None, got {sm_limit}")
        self._contexts += 1
        return Context(self._contexts, sm_limit, label, sm_set, best_effort)

    def create_stream(self, context: Context, *, low_priority: bool = False) -> Stream:
        """An in-order stream in ``context``; ``low_priority``: its kernels get only the SMs
        ordinary streams' kernels leave."""
        self._low_priority = self._low_priority or low_priority
        s = Stream(len(self.streams), context, self, low_priority)
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
        transform: KernelTransform | None = None,
    ) -> KernelRun:
        """Enqueue a kernel: it starts once issued, its stream is free and ``after`` ended.

        ``after`` orders kernels across streams (a request moving between
        contexts); when it ran in another context the kernel also waits the
        context-switch time, as the host switches the launching context.
        ``transform``: how it yields, in a best-effort context only.
        """
        if transform is not None and not stream.context.best_effort:
            raise ValueError(f"kernel {kernel.name!r}: only a best-effort context's kernels are transformed")
        noise = self._rng.lognormvariate(0.0, self.noise_sigma) if self.noise_sigma > 0 else 1.0
        gap = 0.0
        if after is not None and after.stream is not stream:
            gap = self.event_latency if after.stream.context is stream.context else self.context_switch
        run = KernelRun(kernel, stream, issue_time, tag, noise, on_done, after, gap, transform)
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
        if until < self.now:
            until = self.now  # time only moves forward
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
        if self._stale:
            self._allocate()
        next_end = math.inf
        now = self.now
        for r in self.running:
            if r.rate > 0.0:
                t = now + (r.remaining - r.stop) / r.rate
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
        gated = self._best_effort
        low = self._low_priority and any(r.stream.low_priority for r in self.running)
        waiting: list[Stream] = []  # best-effort streams with a kernel to run
        for s in self._pending.values():
            if s.busy:
                continue
            ops = s.ops
            if not ops:
                idle_streams.append(s.sid)
                continue
            if gated and s.context.best_effort:
                waiting.append(s)
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
            if low and not s.low_priority:
                if r.drained_at is None and t <= limit:
                    r.drained_at = now + self._drain(r)
                if r.drained_at is not None and r.drained_at > t:
                    t = r.drained_at
            if t > limit:
                if t < nxt:
                    nxt = t
                continue
            ops.popleft()
            s.busy = True
            r.ready = t
            started.append(r)
        for sid in idle_streams:
            del self._pending[sid]
        if gated:
            nxt = min(nxt, self._best_effort_turn(waiting, started, limit))
        if started:
            if len(started) > 1:
                started.sort(key=lambda r: (r.issue_time, r.stream.sid))
            for r in started:
                self._enter(r)
            self._allocate()
        return nxt

    def _drain(self, run: KernelRun) -> float:
        """How long ordinary kernel ``run``, ready now, waits for the SMs it needs that running
        low-priority kernels' blocks fill (see the module docstring, "Stream priorities").

        Of the SMs in its reach, those no kernel holds go first to low-priority kernels with
        blocks still to place (they took them while no ordinary block was pending); what it
        needs beyond the rest, it takes from them as their resident blocks end: the longest
        of their waits (:attr:`SimKernel.drain_seconds`), in proportion to the share of their
        SMs it needs."""
        k = run.kernel
        if k.busy_sms == 0:
            return 0.0
        ctx = run.stream.context
        scope = ctx.sm_set
        reach = self.sm_count if scope is None else scope.bit_count()
        if ctx.sm_limit is not None and ctx.sm_limit < reach:
            reach = ctx.sm_limit
        held = 0
        held_mask = 0
        fill = 0
        lows = []
        for x in self.running:
            if scope is not None and self._masked and x.sms and not x.mask & scope:
                continue  # its SMs are out of reach
            held += x.sms
            held_mask |= x.mask
            xk = x.kernel
            if x.stream.low_priority and xk.drain_seconds > 0.0:
                fill += xk.busy_sms - x.sms if xk.busy_sms > x.sms else 0
                lows.append(xk)
        if not lows:
            return 0.0
        free = (scope & ~held_mask).bit_count() if scope is not None and self._masked else self.sm_count - held
        short = min(k.busy_sms, reach) - max(free - fill, 0)  # SMs it takes from their blocks
        if short <= 0:
            return 0.0
        return max(xk.drain_seconds * min(1.0, short / xk.busy_sms) for xk in lows)

    def _enter(self, run: KernelRun) -> None:
        """Number a started kernel and add it to the running ones, which stay in the order
        :meth:`_allocate` gives out SMs in: launch order, ordinary streams' kernels before
        low-priority ones (kept here, at each start, rather than sorted at every event)."""
        self._seq += 1
        run.seq = self._seq
        run.after = None  # its wait is over; dropping the link lets finished kernels be freed
        running = self.running
        i = len(running)
        if self._low_priority and not run.stream.low_priority:
            while i and running[i - 1].stream.low_priority:
                i -= 1
        running.insert(i, run)

    def _best_effort_turn(self, waiting: list[Stream], started: list[KernelRun], limit: float) -> float:
        """Tally's gate: yield the best-effort kernel to ordinary work, or start one if none is about.

        Returns when a best-effort kernel may next start (inf: not before an ordinary kernel ends).
        """
        ordinary = bool(started) or any(not r.stream.context.best_effort for r in self.running)
        be = self._be_running
        if ordinary:
            if be is not None and be.stop == 0.0 and be.transform is not None:
                chunks = be.transform.chunks
                # The next chunk boundary below its remaining work (0: its last chunk, it just ends).
                be.stop = max(math.ceil(be.remaining * chunks - 1e-9) - 1, 0) / chunks
            for s in waiting:
                s.ops[0].resume_at = math.inf  # a yielded kernel's turn is not back yet
            return math.inf
        if be is not None or not waiting:
            return math.inf
        nxt = math.inf
        best: tuple[float, int, Stream] | None = None
        for s in waiting:
            r = s.ops[0]
            t = r.issue_time if r.issue_time > s.ready_at else s.ready_at
            dep = r.after
            if dep is not None:
                if dep.end is None:
                    continue
                t = max(t, dep.end + r.gap)
            if r.yields:
                if r.resume_at == math.inf:
                    r.resume_at = self.now + (r.transform.resume_cost if r.transform is not None else 0.0)
                t = max(t, r.resume_at)
            if t > limit:
                nxt = min(nxt, t)
            elif best is None or (r.issue_time, s.sid) < best[:2]:
                best = (r.issue_time, s.sid, s)
        if best is None:
            return nxt
        s = best[2]
        r = s.ops.popleft()
        s.busy = True
        if r.ready is None:
            r.ready = self.now
        r.resume_at = math.inf
        self._enter(r)
        self._be_running = r
        self._allocate()
        return math.inf

    def _allocate(self) -> None:
        """Give SMs in the running kernels' order (launch order, ordinary streams' kernels
        first: :meth:`_enter`), then set each kernel's progress rate.

        A kernel holds ``min(busy_sms, avail)`` SMs, where ``avail`` is what its
        context still has free: the GPU's free SMs, less what the context's
        earlier kernels hold under an MPS cap, or the free SMs of its set.  It
        progresses at its solo speed with ``avail`` SMs available (under an MPS
        cap a kernel of few blocks still runs slower than on the whole GPU, as
        measured), stretched by the interference of the other running kernels.
        """
        free = n_all = self.sm_count
        masked = self._masked
        free_mask = self._all_mask
        copies = 0
        demand = 0.0
        capped: dict[int, int] | None = None
        self._stale = False
        running = self.running
        now = self.now
        for r in running:
            k = r.kernel
            busy = k.busy_sms
            if busy == 0:  # a memory copy: the copy engine, not SMs
                copies += 1
                if r.start is None:
                    r.start = now
                continue
            ctx = r.stream.context
            lim = ctx.sm_limit
            if lim is None:
                avail = free
                pool = free_mask
                s = busy if busy < avail else avail
                t = k.solo[n_all if s == busy else avail]
            elif ctx.sm_set is None:
                # An MPS cap binds the context's kernels together; a kernel runs at the
                # cap's measured speed even with spare SMs (profiles were measured so).
                if capped is None:
                    capped = {}
                used = capped.get(ctx.cid, 0)
                avail = free if free < lim - used else lim - used
                pool = free_mask
                s = busy if busy < avail else avail
                capped[ctx.cid] = used + s
                t = k.solo[avail]
            else:
                # Its own SM set: room for all the SMs it spreads over is full speed.
                pool = free_mask & ctx.sm_set
                avail = pool.bit_count()
                s = busy if busy < avail else avail
                t = k.solo[n_all if avail >= k.max_sms else avail]
            r.sms = s
            r.solo = t
            if s:
                free -= s
                if masked:
                    r.mask = _lowest_bits(pool, s)
                    free_mask ^= r.mask
                u = r.demand = k.dram_seconds / t
                demand += u
                if r.start is None:
                    r.start = now  # its first blocks run now
        share = self.bandwidth_share
        if share != 1.0:
            demand /= share
        over = demand - 1.0 if demand > 1.0 else 0.0
        c_bw = self.interference.bandwidth
        for r in running:
            k = r.kernel
            if k.is_memcpy:
                r.rate = 1.0 / (k.solo[-1] * r.noise * copies)
                continue
            s = r.sms
            if not s:
                r.rate = 0.0
                continue
            u = r.demand / share
            w = u if u < 1.0 else 1.0
            r.rate = 1.0 / (r.solo * r.noise * (1.0 + w * over) * (1.0 + c_bw * (demand - u)) + r.overhead)

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
            if r.rate > 0.0 and r.remaining - r.stop <= r.rate * 1e-12:
                finished.append(r)
            else:
                still.append(r)
        if not finished:
            # Float rounding left a sliver of work: finish the closest kernel.
            r = min((r for r in self.running if r.rate > 0.0), key=lambda r: (r.remaining - r.stop) / r.rate)
            still.remove(r)
            finished.append(r)
        self.running = still
        if self._best_effort:
            finished = self._yield_stopped(finished)
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
            if r is self._be_running:
                self._be_running = None
            if r.on_done is not None:
                r.on_done(r)
        # The SMs are given out again before time next moves (:meth:`_next_event`), once
        # for this end and whatever starts in its place.
        self._stale = True

    def _yield_stopped(self, stopped: list[KernelRun]) -> list[KernelRun]:
        """Put best-effort kernels that reached the boundary they were asked to stop at back
        at the head of their streams (their SMs free); return the kernels that really ended."""
        ended = []
        for r in stopped:
            if r.stop <= 0.0:
                ended.append(r)
                continue
            r.remaining, r.stop = r.stop, 0.0
            r.sms = 0
            r.rate = 0.0
            r.yields += 1
            s = r.stream
            s.busy = False
            s.ops.appendleft(r)
            self._pending[s.sid] = s
            self._be_running = None
        return ended
