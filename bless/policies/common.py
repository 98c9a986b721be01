"""Pieces the baseline policies share: SM counts of quotas, whole-request launches."""

from __future__ import annotations

from collections.abc import Callable

from bless.core.lifecycle import AppState
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
serving instance that prepares its next batch while one runs.  Our assumption."""

LAUNCH_QUEUE = 1000
"""Kernels a CUDA stream holds launched and not yet run before the next launch blocks the host
until one ends: about 1000, measured by a user with a short kernel launched 10000 times, each
of three streams holding about 1000 (NVIDIA developer forum, "CUDA stream are blocked when
launch lots of kernels (>1000)", 2018; GPU and driver not given).  Here one host thread launches
for every app, so a blocked launch holds up every app: on an H200 (tools/gpu_check_results/
2026-11-27-h200), GSLICE launching an app's whole backlog at 5x its share put its neighbours at
34-284x their ISO latency."""


def in_flight(app: AppState) -> int:
    """Requests of ``app`` a whole-request policy keeps launched: :data:`IN_FLIGHT`, fewer where
    their kernels would overfill the stream's launch queue (at least one)."""
    return max(1, min(IN_FLIGHT, LAUNCH_QUEUE // app.profile.n_kernels))


def launch_queued(apps: list[AppState], sm_limit: Callable[[AppState], int | None]) -> Decision | None:
    """Launch queued requests whole, each into its app's ``sm_limit(app)`` context, keeping up
    to :func:`in_flight` of each app's requests launched; the rest wait in its queue.

    No synchronisation: a request's kernels queue behind the app's earlier
    requests in the app's stream and the host goes on reacting to arrivals.
    """
    plans = []
    for app in apps:
        if not app.queue:
            continue
        limit, depth = sm_limit(app), in_flight(app)
        while (req := app.take_queued(depth)) is not None:
            plans.append(RequestLaunch(req, 0, req.n_kernels, limit))
    return Decision(tuple(plans)) if plans else None
