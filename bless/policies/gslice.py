"""GSLICE: static MPS-style SM partitions equal to the quotas, re-sized as load changes.

Models GSLICE (Dhakal, Kulkarni and Ramakrishnan, "GSLICE: controlled spatial
sharing of GPUs for a scalable inference platform", SoCC'20): every app runs in
its own context restricted to its share of the SMs (MPS active-thread
percentage), starting at its quota; requests launch whole as they arrive, up to
two at a time per app (:func:`~bless.policies.common.in_flight`).  GSLICE's
adaptive GPU re-allocation is modelled as a periodic controller.  Every
``period`` seconds it looks at each app's mean latency over the period against
its target (SLO if set, else the ISO latency of its quota) and at how busy its
partition was (share of the period with a request in it):

* an app *needs* SMs if its latency is over ``1 + tolerance`` of its target or
  its partition was busy at least ``busy_high`` of the time (the load saturates it);
* an app can *give* SMs if it does not need them and its latency is under
  ``1 - tolerance`` of its target or its partition idled more than
  ``1 - busy_low`` of the time (over-provisioned for its load).

It then moves ``step`` of the GPU from the most idle giver to the neediest app.
The new partition serves requests that arrive from then on, as GSLICE's
hot-standby ("shadow") instance hides the re-load.

The thresholds' defaults (``period``, ``step``, ``tolerance``, ``busy_low``,
``busy_high``) are the GPU's ``[gslice]`` section in ``bless/hw/<gpu>.toml``,
each marked there as our assumption: they tune this simplified controller,
not GSLICE's own.

Simplifies: GSLICE's adaptive batching is off (requests are the unit here), the
re-size is one step per period rather than its throughput-model jump, and the
partitions it may move to are pre-created contexts (as many as device memory
allows, nearest the quota first).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from bless.core.lifecycle import AppState, Request
from bless.core.policy import Decision, Policy
from bless.hw.costs import gpu_constants
from bless.hw.gpus import GpuSpec
from bless.policies.bless import MEMORY_HEADROOM
from bless.policies.common import launch_queued, quota_sms


@dataclass(frozen=True)
class GsliceThresholds:
    """The re-sizing controller's settings (their meaning: the module docstring)."""

    period: float
    """Seconds between two re-sizing decisions."""
    step: float
    """Share of the GPU moved per decision."""
    tolerance: float
    """Latency band around the target, as a share of it."""
    busy_low: float
    """Share of a period a partition is busy at or below which it may give SMs."""
    busy_high: float
    """Share of a period a partition is busy at or above which it needs SMs."""

    def __post_init__(self) -> None:
        if not self.period > 0:
            raise ValueError(f"gslice period must be > 0 seconds, got {self.period}")
        if not 0 < self.step < 1:
            raise ValueError(f"gslice step must be a share of the GPU in (0, 1), got {self.step}")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"gslice tolerance must be in [0, 1), got {self.tolerance}")
        if not 0 <= self.busy_low < self.busy_high <= 1:
            raise ValueError(f"gslice needs 0 <= busy_low < busy_high <= 1, got {self.busy_low}, {self.busy_high}")

    @classmethod
    def for_gpu(cls, gpu: GpuSpec) -> GsliceThresholds:
        """The ``[gslice]`` defaults of ``gpu``'s data file."""
        return gpu_constants(gpu.name).build("gslice", cls)


class GslicePolicy(Policy):
    """Spatial partitions at the quotas, with GSLICE-style adaptive re-sizing."""

    name = "gslice"

    def __init__(
        self,
        adaptive: bool = True,
        period: float | None = None,
        step: float | None = None,
        tolerance: float | None = None,
        busy_high: float | None = None,
        busy_low: float | None = None,
        mechanism: str = "mps",
    ) -> None:
        self.adaptive = adaptive
        given = {"period": period, "step": step, "tolerance": tolerance, "busy_low": busy_low, "busy_high": busy_high}
        self._overrides = {k: v for k, v in given.items() if v is not None}
        """Thresholds given here (None: the GPU's data file, read at :meth:`setup`, which checks them all)."""
        self.mechanism = mechanism
        self.resizes = 0
        self._sms: dict[int, int] = {}
        self._allowed: dict[int, set[int]] = {}
        self._latency: dict[int, list[float]] = {}
        self._busy: dict[int, float] = {}
        """Per app: seconds of the current period with a request in its partition."""
        self._busy_since: dict[int, float] = {}
        """Per app with requests in flight: when it last became busy (or the period began)."""
        self._next_check = math.nan

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        self.gpu = gpu
        self.thresholds = dataclasses.replace(GsliceThresholds.for_gpu(gpu), **self._overrides)
        self._step = gpu.round_sms(self.thresholds.step * gpu.sm_count, self.mechanism)
        spare = self._spare_contexts(apps, gpu) if self.adaptive else 0
        for app in apps:
            base = quota_sms(app.quota, gpu, self.mechanism) or gpu.sm_count
            self._sms.setdefault(app.index, base)
            around = [base + k * self._step for k in range(-gpu.sm_count, gpu.sm_count + 1) if k]
            around = [s for s in around if self._step <= s <= gpu.sm_count]
            around.sort(key=lambda s: (abs(s - base), s))
            self._allowed[app.index] = {base, *around[:spare]}
            self._latency.setdefault(app.index, [])
            self._busy.setdefault(app.index, 0.0)

    def _spare_contexts(self, apps: list[AppState], gpu: GpuSpec) -> int:
        """Restricted contexts each app may hold beyond its quota's, within device memory."""
        per_ctx = gpu.context_bytes(self.mechanism)
        budget = gpu.memory_bytes * MEMORY_HEADROOM - sum(a.profile.memory_bytes for a in apps)
        return max(int(budget // (per_ctx * max(len(apps), 1))) - 2, 0)

    def context_limits(self, app: AppState, gpu: GpuSpec) -> list[int | None]:
        return [self._limit(s) for s in sorted(self._allowed[app.index])]

    def _limit(self, sms: int) -> int | None:
        return None if sms >= self.gpu.sm_count else sms

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        if self.adaptive:
            if math.isnan(self._next_check):
                self._next_check = now + self.thresholds.period
            elif now >= self._next_check:
                self._resize(now, apps)
                self._next_check = now + self.thresholds.period
        idle = [app for app in apps if not app.running]
        decision = launch_queued(apps, lambda app: self._limit(self._sms[app.index]))
        for app in idle:
            if app.running:
                self._busy_since[app.index] = now
        return decision

    def on_complete(self, request: Request, now: float) -> None:
        i = request.app.index
        self._latency[i].append(now - request.arrival)
        if not request.app.running and i in self._busy_since:
            self._busy[i] += now - self._busy_since.pop(i)

    def _pressure(self, app: AppState, now: float) -> float:
        """Latency over the last period as a multiple of the app's target (0: idle)."""
        done = self._latency[app.index]
        waiting = [now - r.arrival for r in (*app.running, *app.queue)]
        if done:
            latency = sum(done) / len(done)
        elif waiting:
            latency = max(waiting)
        else:
            return 0.0
        return latency / app.target

    def _resize(self, now: float, apps: list[AppState]) -> None:
        th = self.thresholds
        pressure = {a.index: self._pressure(a, now) for a in apps}
        busy = {}
        for a in apps:
            i = a.index
            if i in self._busy_since:  # still busy: count up to now, carry on into the next period
                self._busy[i] += now - self._busy_since[i]
                self._busy_since[i] = now
            busy[i] = min(self._busy[i] / th.period, 1.0)
            self._busy[i] = 0.0
            self._latency[i].clear()
        needs = {i for i in pressure if pressure[i] > 1 + th.tolerance or busy[i] >= th.busy_high}
        gives = {i for i in pressure if i not in needs and (pressure[i] < 1 - th.tolerance or busy[i] <= th.busy_low)}
        needy = [i for i in needs if self._sms[i] + self._step in self._allowed[i]]
        donors = [i for i in gives if self._sms[i] - self._step in self._allowed[i]]
        if not needy or not donors:
            return
        to = max(needy, key=lambda i: (pressure[i], busy[i], -i))
        frm = min(donors, key=lambda i: (busy[i], pressure[i], i))
        self._sms[to] += self._step
        self._sms[frm] -= self._step
        self.resizes += 1

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "adaptive": self.adaptive,
            "period_s": self.thresholds.period,
            "resizes": self.resizes,
        }
