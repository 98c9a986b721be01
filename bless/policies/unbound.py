"""UNBOUND: unlimited MPS sharing, the "no scheduler" baseline."""

from __future__ import annotations

from bless.core.lifecycle import AppState
from bless.core.policy import Decision, Policy
from bless.policies.common import launch_queued


class UnboundPolicy(Policy):
    """Every app in an unrestricted context; each request is launched whole as
    soon as the app has fewer than :func:`~bless.policies.common.in_flight`
    launched (its kernels queue behind the app's earlier requests in its stream).

    Models MPS without active-thread limits: the hardware block scheduler
    alone arbitrates SMs (in launch order) and DRAM bandwidth is shared.
    Simplifies: no per-client MPS overheads.
    """

    name = "unbound"

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        return launch_queued(apps, lambda app: None)
