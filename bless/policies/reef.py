"""REEF+: biased sharing -- one real-time app first, best-effort apps in the rest.

Models REEF (Han et al., "Microsecond-scale preemption for concurrent
GPU-accelerated DNN inferences", OSDI'22) extended to spatial sharing, as the
BLESS paper's REEF+ baseline: the real-time (RT) app's requests launch whole
the moment they arrive into an unrestricted context, and the best-effort (BE)
apps share one restricted partition of the SMs the RT app's quota leaves
(``SMs - RT quota``: one shared partition, not one cap per BE app, since MPS
caps of two BE apps would overlap and together take every SM).  Because BE
kernels together can never hold more than that partition, an RT kernel always
finds at least its quota's SMs free when it arrives -- the effect REEF gets
from preempting BE kernels -- and it may take every SM the BE apps leave idle
(REEF's dynamic kernel padding, seen from the other side).

``realtime`` picks the RT app by index or name; by default the latency-critical
app with the largest quota (the first on ties; any app if all are best-effort).  Simplifies: no kernel preemption or
reset (BE kernels are bounded instead), no per-kernel padding decisions.
"""

from __future__ import annotations

from bless.core.lifecycle import AppState
from bless.core.policy import Decision, Policy
from bless.hw.gpus import GpuSpec
from bless.policies.common import launch_queued, quota_sms


class ReefPolicy(Policy):
    """The real-time app unrestricted and first; best-effort apps in the remaining SMs."""

    name = "reef"

    def __init__(self, realtime: int | str | None = None, mechanism: str = "mps") -> None:
        self.realtime = realtime
        self.mechanism = mechanism
        self._rt: int | None = None
        self._be_sms: int | None = None

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        rt = self._pick(apps)
        self._rt = rt.index
        rt_sms = quota_sms(rt.quota, gpu, self.mechanism) or gpu.sm_count
        rest = gpu.sm_count - rt_sms
        self._be_sms = gpu.round_sms(rest, self.mechanism) if rest > 0 else gpu.round_sms(1, self.mechanism)
        self.rt_name = rt.name

    def _pick(self, apps: list[AppState]) -> AppState:
        if self.realtime is None:
            critical = [a for a in apps if not a.best_effort] or apps
            return max(critical, key=lambda a: (a.quota, -a.index))
        for a in apps:
            if (isinstance(self.realtime, int) and a.index == self.realtime) or a.name == self.realtime:
                return a
        known = ", ".join(f"{a.index}={a.name}" for a in apps)
        raise ValueError(f"reef realtime: no app {self.realtime!r}; give an app index or name ({known})")

    def _limit(self, app: AppState) -> int | None:
        return None if app.index == self._rt else self._be_sms

    def context_limits(self, app: AppState, gpu: GpuSpec) -> list[int | None]:
        return [self._limit(app)]

    def shared_partition(self, app: AppState) -> str | None:
        return None if app.index == self._rt else "best-effort"

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        rt = [a for a in apps if a.index == self._rt]
        be = [a for a in apps if a.index != self._rt]
        return launch_queued(rt + be, self._limit)

    def describe(self) -> dict:
        return {"policy": self.name, "realtime": getattr(self, "rt_name", self.realtime)}
