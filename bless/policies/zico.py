"""ZICO: unbounded overlap of concurrent training iterations, staggered by phase.

Models ZICO (Lim et al., "Zico: Efficient GPU memory sharing for concurrent
DNN training", USENIX ATC'21): training jobs share the GPU without any SM
restriction (every iteration launched into an unrestricted context as it
comes, as their streams would in one process, in chunks of at most 250 kernels
so no stream's launch queue fills), and ZICO's scheduler staggers them so that
no two jobs are in their forward pass at once (a job's memory peaks at the
end of its forward pass; overlapping one job's forward with another's backward
keeps the combined footprint low).  A job may start an iteration only when
every other job's running iteration is estimated to be past its forward pass;
otherwise it waits until then.  The estimate, like ZICO's, comes from the
iterations seen so far: the forward share of the iteration's kernels (by
full-GPU time; backward kernels are the profile's ``bwd:`` kernels) times the
job's last measured iteration time.

Only training apps (profile ``kind: training``) are accepted.  Simplifies: the
memory footprint itself is not tracked (it never binds for these jobs on a
40 GB A100), only the phase stagger that ZICO imposes for it.
"""

from __future__ import annotations

import math

from bless.core.lifecycle import AppState, Request
from bless.core.policy import Decision, Policy
from bless.hw.gpus import GpuSpec
from bless.policies.common import next_chunks, running_chunks

BACKWARD_PREFIX = "bwd:"


def forward_share(app: AppState) -> float:
    """Share of an iteration's full-GPU time before its first backward kernel."""
    full = app.profile.t[-1]
    first_bwd = next((k for k, d in enumerate(app.profile.kernels) if d.name.startswith(BACKWARD_PREFIX)), len(full))
    return float(full[:first_bwd].sum() / full.sum())


class ZicoPolicy(Policy):
    """Unrestricted concurrent training iterations with ZICO's forward-phase stagger."""

    name = "zico"

    def __init__(self) -> None:
        self._forward: dict[int, float] = {}
        self._iteration: dict[int, float] = {}
        """Per job: the latest measured iteration time (initially the solo time)."""
        self._forward_end: dict[int, float] = {}
        """Per job with an iteration running: when its forward pass should end."""

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        for app in apps:
            if app.profile.kind != "training":
                raise ValueError(
                    f"zico schedules training jobs only; app {app.name!r} is {app.profile.kind} "
                    f"(use a *_train profile, or another policy for inference)"
                )
            self._forward[app.index] = forward_share(app)
            self._iteration.setdefault(app.index, float(app.profile.T[-1]))

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        plans = []
        wake = math.inf
        for app in sorted(apps, key=lambda a: a.index):
            plans.extend(running_chunks(app, None))  # an iteration longer than a chunk goes on
            if not app.queue or app.index in self._forward_end:
                continue  # nothing to start, or its previous iteration still runs
            blockers = [t for j, t in self._forward_end.items() if j != app.index and t > now]
            if blockers:
                wake = min(wake, max(blockers))
                continue
            req = app.take_queued()
            if req is None:
                continue
            plans.extend(next_chunks(req, None))
            self._forward_end[app.index] = now + self._forward[app.index] * self._iteration[app.index]
        if not plans:
            return Decision(wake_at=wake) if wake < math.inf else None
        return Decision(tuple(plans), wake_at=wake)

    def on_complete(self, request: Request, now: float) -> None:
        i = request.app.index
        if request.first_launch is not None and request.first_launch.start is not None:
            self._iteration[i] = now - request.first_launch.start
        self._forward_end.pop(i, None)

    def describe(self) -> dict:
        return {"policy": self.name}
