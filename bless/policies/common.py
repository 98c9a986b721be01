"""Pieces the baseline policies share: SM counts of quotas, whole-request launches."""

from __future__ import annotations

from collections.abc import Callable

from bless.core.lifecycle import AppState, Request
from bless.core.policy import Decision, RequestLaunch
from bless.hw.gpus import GpuSpec


def quota_sms(quota: float, gpu: GpuSpec, mechanism: str = "mps") -> int | None:
    """SMs a context restricted to ``quota`` of ``gpu`` gets (None: the whole GPU).

    The restriction mechanism's rounding applies (whole TPCs under MPS), as it
    does for BLESS's own restricted contexts.
    """
    sms = gpu.round_sms(quota * gpu.sm_count, mechanism)
    return None if sms >= gpu.sm_count else sms


IN_FLIGHT = 2
"""Requests of one app a whole-request policy keeps launched at once: one running and the next
queued behind it in the app's stream, so the GPU never waits for the host between them, as a
serving instance that prepares its next batch while one runs.  Our assumption.  Launching an
app's whole backlog instead filled its stream's launch queue on an H200
(tools/gpu_check_results/2026-11-27-h200): GSLICE's neighbours of an app at 5x its share ran at
33-284x their ISO latency, every launch waiting for the backlog to drain."""


STREAM_BUDGET = 500
"""Kernels a whole-request policy keeps launched and unfinished in one stream at most, below
the :data:`~bless.backend.interface.LAUNCH_QUEUE` of 530 measured on an H200.  With it, GSLICE's
isolation cells on that GPU (an app at 5x its share beside each victim) kept every victim within
0.04 of the simulator's figure, none held up by a full stream
(``tools/gpu_check_results/2026-11-27-h200-2``)."""

CHUNK = STREAM_BUDGET // 2
"""Kernels of a longer request launched at a time, two chunks at most unfinished: the request
streams through its stream's launch queue without filling it."""


def in_flight(app: AppState) -> int:
    """Requests of ``app`` a whole-request policy keeps launched: :data:`IN_FLIGHT`, fewer where
    their kernels would pass :data:`STREAM_BUDGET` (at least one)."""
    return max(1, min(IN_FLIGHT, STREAM_BUDGET // app.profile.n_kernels))


def next_chunks(req: Request, sm_limit: int | None) -> list[RequestLaunch]:
    """What a whole-request policy launches of ``req`` now: all of it if it has at most
    :data:`CHUNK` kernels, else its next chunks, up to two unfinished (each end notified)."""
    n = req.n_kernels
    if n <= CHUNK:
        return [RequestLaunch(req, 0, n, sm_limit)] if req.scheduled == 0 else []
    plans = []
    start, launched = req.scheduled, -(-req.scheduled // CHUNK)
    while start < n and launched - req.chunks_done < 2:
        count = min(CHUNK, n - start)
        plans.append(RequestLaunch(req, start, count, sm_limit, notify=True))
        start, launched = start + count, launched + 1
    return plans


def running_chunks(app: AppState, sm_limit: int | None) -> list[RequestLaunch]:
    """The next chunks of ``app``'s requests already taken whole (:func:`next_chunks`)."""
    return [plan for req in app.running for plan in next_chunks(req, sm_limit)]


def launch_queued(apps: list[AppState], sm_limit: Callable[[AppState], int | None]) -> Decision | None:
    """Launch queued requests whole, each into its app's ``sm_limit(app)`` context, keeping up
    to :func:`in_flight` of each app's requests launched (the rest wait in its queue) and a
    longer request's kernels in chunks (:func:`next_chunks`).

    No synchronisation: a request's kernels queue behind the app's earlier
    requests in the app's stream and the host goes on reacting to arrivals.
    """
    plans = []
    for app in apps:
        limit = sm_limit(app)
        plans.extend(running_chunks(app, limit))
        if not app.queue:
            continue
        depth = in_flight(app)
        while (req := app.take_queued(depth)) is not None:
            plans.extend(next_chunks(req, limit))
    return Decision(tuple(plans)) if plans else None
