"""TEMPORAL: round-robin time slices in proportion to the quotas.

One app owns the whole GPU at a time.  Apps take turns in index order; an
app's slice is its quota's share of a round of ``n_apps x slice`` seconds, so
at an even split every slice is ``slice`` long and a 2/3 app's slice is twice
a 1/3 app's.  Kernels cannot be preempted, so a slice launches only the
kernels whose estimated durations (alone on the whole GPU, from the profile)
fit in what is left of it -- at least one, so a kernel longer than a slice
overruns it -- then synchronises; the next app starts after a context switch
of ``switch_cost`` during which the GPU is idle.

Choices (parameters, and why):

* ``slice = 2 ms`` -- the order of the time slice of NVIDIA's time-sliced
  vGPU schedulers (1-2 ms by default, NVIDIA vGPU documentation "vGPU
  Schedulers"); short enough against our 8-33 ms requests to interleave them.
* ``switch_cost`` -- by default the GPU's context-switch cost
  (:meth:`bless.backend.interface.HostCosts.for_gpu`, from ``bless/hw/<gpu>.toml``),
  the same figure BLESS pays when a request changes contexts, so neither side
  is favoured.

Work conserving, like vGPU's best-effort scheduler: an app with nothing to do
is skipped and a slice ends early when its app runs out of work; when only the
app that holds the GPU has work it keeps it without a switch.  Simplifies: no
preemption of a running kernel, no time accounting across rounds (an overrun
is not paid back).
"""

from __future__ import annotations

import math

import numpy as np

from bless.backend.interface import HostCosts
from bless.core.lifecycle import AppState
from bless.core.policy import Decision, Policy, RequestLaunch
from bless.hw.gpus import GpuSpec


class TemporalPolicy(Policy):
    """Quota-proportional round-robin time slicing of the whole GPU."""

    name = "temporal"

    def __init__(self, slice: float = 2e-3, switch_cost: float | None = None) -> None:
        if not slice > 0:
            raise ValueError(f"temporal slice must be > 0 seconds, got {slice}")
        if switch_cost is not None and switch_cost < 0:
            raise ValueError(f"temporal switch_cost must be >= 0 seconds, got {switch_cost}")
        self.slice = slice
        self._requested_switch = switch_cost
        self.switch_cost = 0.0 if switch_cost is None else switch_cost
        """Idle seconds between two apps' slices (the GPU's context switch unless given; set by :meth:`setup`)."""
        self._slice_len: dict[int, float] = {}
        self._prefix: dict[int, np.ndarray] = {}
        """Per app: cumulative full-GPU kernel durations (the fit estimate)."""
        self._holder: int | None = None
        """Index of the app that owns the GPU (its context is loaded)."""
        self._slice_end = -math.inf
        self._switch_until = -math.inf

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        if self._requested_switch is None:
            self.switch_cost = HostCosts.for_gpu(gpu).context_switch
        total = sum(a.quota for a in apps)
        round_len = self.slice * len(apps)
        self._slice_len = {a.index: round_len * a.quota / total for a in apps}
        for a in apps:
            self._prefix[a.index] = np.concatenate(([0.0], np.cumsum(a.profile.t[-1])))

    @staticmethod
    def _has_work(app: AppState) -> bool:
        return (app.active is not None and app.active.remaining > 0) or bool(app.queue)

    def _next_app(self, apps: list[AppState]) -> AppState | None:
        """The next app with work in round-robin order after the holder (the holder last)."""
        ordered = sorted(apps, key=lambda a: a.index)
        start = 0
        if self._holder is not None:
            start = next((i + 1 for i, a in enumerate(ordered) if a.index == self._holder), 0)
        for k in range(len(ordered)):
            app = ordered[(start + k) % len(ordered)]
            if self._has_work(app):
                return app
        return None

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        if now < self._switch_until:
            return Decision(wake_at=self._switch_until)
        holder = next((a for a in apps if a.index == self._holder), None)
        app = holder if holder is not None and now < self._slice_end and self._has_work(holder) else None
        if app is None:
            app = self._next_app(apps)
            if app is None:
                return None
            if self._holder is not None and app.index != self._holder and self.switch_cost > 0:
                self._holder = app.index
                self._switch_until = now + self.switch_cost
                self._slice_end = self._switch_until + self._slice_len[app.index]
                return Decision(wake_at=self._switch_until)
            self._holder = app.index
            self._slice_end = now + self._slice_len[app.index]
        return Decision(self._fill(app, self._slice_end - now), sync=True)

    def _fill(self, app: AppState, budget: float) -> tuple[RequestLaunch, ...]:
        """The app's next kernels, request after request, that fit in ``budget`` (at least one)."""
        prefix = self._prefix[app.index]
        plans: list[RequestLaunch] = []
        while budget > 0 or not plans:
            req = app.activate()
            if req is None:
                break
            start = req.scheduled
            fits = int(np.searchsorted(prefix, prefix[start] + budget, side="right")) - 1 - start
            count = min(max(fits, 0 if plans else 1), req.remaining)
            if count == 0:
                break
            plans.append(RequestLaunch(req, start, count))
            budget -= prefix[start + count] - prefix[start]
            if count < req.remaining:
                break
            app.release(req)  # fully launched: the app's next request may start in this slice
        return tuple(plans)

    def describe(self) -> dict:
        return {"policy": self.name, "slice_ms": self.slice * 1e3, "switch_us": self.switch_cost * 1e6}
