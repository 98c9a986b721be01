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


def launch_queued(apps: list[AppState], sm_limit: Callable[[AppState], int | None]) -> Decision | None:
    """Launch every queued request whole, each into its app's ``sm_limit(app)`` context.

    No synchronisation: a request's kernels queue behind the app's earlier
    requests in the app's stream and the host goes on reacting to arrivals.
    """
    plans = []
    for app in apps:
        if not app.queue:
            continue
        limit = sm_limit(app)
        while (req := app.take_queued()) is not None:
            plans.append(RequestLaunch(req, 0, req.n_kernels, limit))
    return Decision(tuple(plans)) if plans else None
