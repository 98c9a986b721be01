"""ISO: every app alone on a GPU of its own, restricted to its quota's SMs.

This is the latency the quota promises (the paper's ISO target): no other app
competes for SMs or DRAM bandwidth.  Requests launch whole as they arrive, up
to two at a time, into one context restricted to ``quota x SMs`` (rounded as
the mechanism grants, whole TPCs under MPS), so ISO differs from ``T[quota]`` of the profile only by
that rounding, launch costs and queueing behind the app's own requests.
Simplifies: the rest of the GPU is simply absent (no power or clock effects).
"""

from __future__ import annotations

from bless.core.lifecycle import AppState
from bless.core.policy import Decision, Policy
from bless.hw.gpus import GpuSpec
from bless.policies.common import launch_queued, quota_sms


class IsoPolicy(Policy):
    """Each app alone on its quota's SMs (``isolated``: the runner gives each app its own GPU)."""

    name = "iso"
    isolated = True

    def __init__(self, mechanism: str = "mps") -> None:
        self.mechanism = mechanism
        self._limits: dict[int, int | None] = {}

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        self._limits = {app.index: quota_sms(app.quota, gpu, self.mechanism) for app in apps}

    def context_limits(self, app: AppState, gpu: GpuSpec) -> list[int | None]:
        return [self._limits[app.index]]

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        return launch_queued(apps, lambda app: self._limits[app.index])
