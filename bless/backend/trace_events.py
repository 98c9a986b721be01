"""Timelines of runs as Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing).

Both backends describe their kernels with the same neutral records
(:class:`KernelRecord`), so one writer serves the simulator and a real GPU.
A :class:`TraceRecorder` collects, while a run goes on, what the runtime
launched (the backends' own launch objects) and what its host did; once the
run is over, launches have their times and :meth:`TraceRecorder.trace`
turns them into records.  Recording is opt-in: without a recorder the
runtime does nothing for it.

The file has one process per app with a track per context, and a
``scheduler`` process with the squads (each launched decision, first kernel
start to last kernel end), the gaps between consecutive squads, and the host's
phases.  Times are seconds on the backend's clock, written in microseconds.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ABUT = 1e-6
"""Microseconds of float error under which a span starting at another's end still abuts it."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a launch ran, as its backend knows it (what a backend adapter reports)."""

    context: str
    """The context, e.g. ``all SMs`` or ``green 64 SMs (groups 0..7)``."""
    context_sms: int
    """SMs the hardware granted the context."""
    sms: int | None = None
    """SMs the kernel's blocks held when it ended; None where the backend cannot tell."""


PlacementOf = Callable[[Any], Placement]
"""A backend's adapter: the :class:`Placement` of one of its launch objects."""


@dataclass(frozen=True, slots=True)
class KernelRecord:
    """One kernel run, on any backend (times in seconds)."""

    app: str
    request: int
    kernel: int
    """Index of the kernel in its app's profile."""
    name: str
    placement: Placement
    start: float
    end: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SquadRecord:
    """One decision the policy launched: its kernels' span on the device."""

    index: int
    start: float
    end: float
    kernels: int
    apps: tuple[str, ...]
    sync: bool
    """True for a squad proper: the host waited for it before deciding again."""
    estimate: float = math.nan
    """The policy's predicted duration (nan: none)."""
    restricted: bool = False


@dataclass(frozen=True, slots=True)
class Span:
    """A named stretch of time without more to say (a host phase, a gap between squads)."""

    name: str
    start: float
    end: float


@dataclass
class Trace:
    """Everything a timeline shows; :meth:`write` makes the trace-event file."""

    kernels: list[KernelRecord] = field(default_factory=list)
    squads: list[SquadRecord] = field(default_factory=list)
    gaps: list[Span] = field(default_factory=list)
    """The device's idle time between one squad's last kernel and the next squad's first."""
    host: list[Span] = field(default_factory=list)
    """What the host was doing: deciding and launching, deciding ahead, synchronising."""

    def extend(self, other: Trace) -> None:
        """Add another run's records (the parts of an isolated run, each on its own GPU)."""
        self.kernels += other.kernels
        self.squads += other.squads
        self.gaps += other.gaps
        self.host += other.host

    def document(self) -> dict[str, Any]:
        return {"traceEvents": trace_events(self), "displayTimeUnit": "ms"}

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.document(), allow_nan=False, separators=(",", ":")))
        return path


# ------------------------------------------------------------------ records -> events
def trace_events(trace: Trace) -> list[dict[str, Any]]:
    """The trace-event list: metadata naming processes and tracks, then one X event per record."""
    writer = _Writer()
    scheduler = writer.process("scheduler")
    squads = writer.track(scheduler, "squads", sort=0)
    for s in trace.squads:
        args = {"index": s.index, "kernels": s.kernels, "apps": ", ".join(s.apps), "restricted": s.restricted}
        if math.isfinite(s.estimate):
            args["estimate_us"] = round(float(s.estimate) * 1e9) / 1e3
        squads.add("squad" if s.sync else "decision", "squad", s.start, s.end, args)
    for g in trace.gaps:
        squads.add(g.name, "gap", g.start, g.end)
    host = writer.track(scheduler, "host", sort=1)
    for h in trace.host:
        host.add(h.name, "host", h.start, h.end)
    for k in trace.kernels:
        p = k.placement
        track = writer.track(writer.process(f"app {k.app}"), p.context, sort=-p.context_sms)
        args = {
            "app": k.app,
            "request": k.request,
            "kernel": k.kernel,
            "context": p.context,
            "context_sms": p.context_sms,
        }
        if p.sms is not None:
            args["sms"] = p.sms
        if k.error is not None:
            args["error"] = k.error
        track.add(k.name, "kernel", k.start, k.end, args)
    return writer.events()


@dataclass
class _Track:
    """One named track of a process: its X events, before they get a thread id."""

    pid: int
    name: str
    sort: int
    spans: list[dict[str, Any]] = field(default_factory=list)

    def add(self, name: str, cat: str, start: float, end: float, args: dict[str, Any] | None = None) -> None:
        # Whole nanoseconds (int rounding: round(x, 3) is slow), ends rounded alike so adjacent spans abut.
        ns = round(start * 1e9)
        dur = max(round(end * 1e9) - ns, 0)
        event = {"ph": "X", "name": name, "cat": cat, "ts": ns / 1e3, "dur": dur / 1e3, "pid": self.pid}
        if args:
            event["args"] = args
        self.spans.append(event)


class _Writer:
    """Numbers processes and tracks, and splits a track into lanes where its spans overlap.

    Trace viewers expect the X events of one thread to nest; spans that
    merely overlap (decisions that do not wait for each other, the parts
    of an isolated run sharing one time axis) go to extra lanes instead.
    """

    def __init__(self) -> None:
        self._pids: dict[str, int] = {}
        self._tracks: dict[tuple[int, str], _Track] = {}

    def process(self, name: str) -> int:
        return self._pids.setdefault(name, len(self._pids) + 1)

    def track(self, pid: int, name: str, sort: int) -> _Track:
        """The track ``name`` of process ``pid``; tracks show in ascending ``sort``."""
        key = (pid, name)
        if key not in self._tracks:
            self._tracks[key] = _Track(pid, name, sort)
        return self._tracks[key]

    def events(self) -> list[dict[str, Any]]:
        events = []
        for name, pid in self._pids.items():
            events.append(_meta("process_name", pid, 0, name=name))
            events.append(_meta("process_sort_index", pid, 0, sort_index=pid))
        first = 1
        for track in self._tracks.values():
            track.spans.sort(key=lambda e: e["ts"])
            lanes = _lanes(track.spans)
            for lane in range(max(lanes, default=0) + 1):
                name = track.name if lane == 0 else f"{track.name} ({lane + 1})"
                events.append(_meta("thread_name", track.pid, first + lane, name=name))
                events.append(_meta("thread_sort_index", track.pid, first + lane, sort_index=track.sort))
            for event, lane in zip(track.spans, lanes):
                event["tid"] = first + lane
            events += track.spans
            first += max(lanes, default=0) + 1
        return events


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "ts": 0, "pid": pid, "tid": tid, "args": args}


def _lanes(spans: list[dict[str, Any]]) -> list[int]:
    """A lane per span (sorted by start), the first whose previous span has ended."""
    ends: list[float] = []
    lanes = []
    for e in spans:
        end = e["ts"] + e["dur"]
        lane = next((i for i, free_at in enumerate(ends) if e["ts"] >= free_at - _ABUT), len(ends))
        if lane == len(ends):
            ends.append(end)
        ends[lane] = end
        lanes.append(lane)
    return lanes


# ------------------------------------------------------------------ collection during a run
@dataclass
class _Launched:
    runs: list[tuple[Any, int]]
    """The backend's launch objects, each with its kernel index."""
    sync: bool
    estimate: float
    restricted: bool


class TraceRecorder:
    """Collects a run's launches and host phases; :meth:`trace` makes the records.

    The runtime calls :meth:`begin` when a step starts, :meth:`launched` with
    every decision it launched and :meth:`host` when a host phase ends.
    ``placement`` is the backend's adapter from its launch objects.

    A decision whose kernels have all ended is settled at the next step: its kernels become
    plain rows (tuples of numbers and strings, which the garbage collector stops tracking) and
    the backend's launch objects are let go. Holding every launch object to the end kept a
    traced run's whole history alive, and made the collector's full passes on a wall-clock
    backend take 50-150 ms (``tools/gpu_check_results/2026-11-27-h200-3``).
    """

    def __init__(self, placement: PlacementOf) -> None:
        self.placement = placement
        self._launched: deque[_Launched] = deque()
        self._index = 0
        """The index of the oldest unsettled decision (its squad's index)."""
        self._rows: list[tuple[Any, ...]] = []
        """Settled kernels: :class:`KernelRecord`'s fields, its placement's flattened."""
        self._squads: list[SquadRecord] = []
        self._gaps: list[Span] = []
        self._host: list[Span] = []
        self._mark = 0.0

    def begin(self, now: float) -> None:
        self._mark = now
        launched = self._launched
        while launched and all(run.end is not None for run, _ in launched[0].runs):
            self._settle(launched.popleft())

    def host(self, phase: str, now: float) -> None:
        """The host phase ``phase`` ran from the previous mark to ``now`` (kept if it took time)."""
        if now > self._mark:
            self._host.append(Span(phase, self._mark, now))
        self._mark = now

    def launched(self, decision: Any, launches: list[Any], estimate: float, restricted: bool) -> None:
        """A :class:`~bless.core.policy.Decision` and its launch objects, in launch order.

        A request's kernels launch in order, so each launch's kernel index
        counts on from its request's first plan in the decision.
        """
        nxt: dict[Any, int] = {}
        for p in decision.launches:
            nxt[p.request] = min(nxt.get(p.request, p.start), p.start)
        runs = []
        for run in launches:
            k = nxt[run.tag]
            nxt[run.tag] = k + 1
            runs.append((run, k))
        self._launched.append(_Launched(runs, bool(decision.sync), estimate, restricted))

    def trace(self) -> Trace:
        """The records of every launch that has finished (one still running is left out)."""
        for entry in list(self._launched):
            self._settle(entry)
        self._launched.clear()
        kernels = [
            KernelRecord(app, rid, k, name, Placement(context, sms, held), start, end, error)
            for app, rid, k, name, context, sms, held, start, end, error in self._rows
        ]
        return Trace(kernels, list(self._squads), list(self._gaps), list(self._host))

    def _settle(self, entry: _Launched) -> None:
        """Record ``entry``'s finished kernels and its squad (the next index, in launch order)."""
        index = self._index
        self._index += 1
        ended = [(run, k) for run, k in entry.runs if run.end is not None]
        if not ended:
            return
        self._rows += [self._row(run, k) for run, k in ended]
        squad = SquadRecord(
            index=index,
            start=min(run.start for run, _ in ended),
            end=max(run.end for run, _ in ended),
            kernels=len(ended),
            apps=tuple(dict.fromkeys(run.tag.app.name for run, _ in ended)),
            sync=entry.sync,
            estimate=entry.estimate,
            restricted=entry.restricted,
        )
        previous = self._squads[-1] if self._squads else None
        if squad.sync and previous is not None and previous.sync and squad.start > previous.end:
            self._gaps.append(Span("gap", previous.end, squad.start))
        self._squads.append(squad)

    def _row(self, run: Any, kernel: int) -> tuple[Any, ...]:
        req = run.tag
        where = self.placement(run)
        return (
            req.app.name,
            req.rid,
            kernel,
            req.app.profile.kernels[kernel].name,
            where.context,
            where.context_sms,
            where.sms,
            run.start,
            run.end,
            getattr(run, "error", None),
        )
