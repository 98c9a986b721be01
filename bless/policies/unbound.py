"""UNBOUND: unlimited MPS sharing, the "no scheduler" baseline."""

from __future__ import annotations

from bless.core.lifecycle import AppState
from bless.core.policy import Decision, Policy, RequestLaunch


class UnboundPolicy(Policy):
    """Every app in an unrestricted context; each request is launched whole as
    soon as it arrives (its kernels queue behind the app's earlier requests in
    the app's stream).

    Models MPS without active-thread limits: the hardware block scheduler
    alone arbitrates SMs (in launch order) and DRAM bandwidth is shared.
    Simplifies: no per-client MPS overheads, launches are never throttled.
    """

    name = "unbound"

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        plans = []
        for app in apps:
            while (req := app.take_queued()) is not None:
                plans.append(RequestLaunch(req, 0, req.n_kernels))
        return Decision(tuple(plans)) if plans else None
