"""BLESS: kernel squads paced by isolated-latency progress, run as the faster of
no restriction or a Semi-SP split (the policy of the paper this project follows)."""

from __future__ import annotations

from dataclasses import dataclass

from bless.backend import HostCosts
from bless.determiner import Determiner, SquadConfig
from bless.gpu import N_LEVELS, GpuSpec
from bless.policy import Decision, LaunchPlan, Policy
from bless.requests import AppState
from bless.scheduler import Squad, build_squad


DECIDE_PER_KERNEL = 1e-6
"""Host time per scheduled kernel for squad building and configuration search:
0.8-1.2 us measured by ``bless bench overhead`` with 2-8 active apps (the
paper's C++ runtime: 6.7 us)."""

MEMORY_HEADROOM = 0.95
"""Share of device memory BLESS plans to use for apps and their contexts."""


def max_restricted_level(apps: list[AppState], gpu: GpuSpec, mechanism: str = "mps") -> int:
    """The highest level for which every app can hold a restricted context.

    Every app needs its own memory plus one context per restricted level and an
    unrestricted one; level 18 is the whole GPU, served by the unrestricted
    context.  On MPS (hundreds of MiB per context) many apps cap the level;
    green contexts cost almost nothing.
    """
    per_ctx = gpu.context_bytes(mechanism)
    budget = gpu.memory_bytes * MEMORY_HEADROOM - sum(a.profile.memory_bytes for a in apps)
    level = int(budget // (per_ctx * max(len(apps), 1))) - 1
    if level < 1:
        need = sum(a.profile.memory_bytes for a in apps) + 2 * per_ctx * len(apps)
        raise ValueError(
            f"not enough GPU memory for {len(apps)} apps with one restricted and one unrestricted context each: "
            f"need {need / 2**30:.1f} GiB of {gpu.memory_bytes * MEMORY_HEADROOM / 2**30:.1f} GiB usable"
        )
    return min(level, N_LEVELS - 1)


def parse_split_ratio(value: float | str | None) -> float | None:
    """A split ratio in [0, 1], or ``"auto"``/None: the determiner picks one per squad."""
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"split_ratio must be a number in [0, 1] or 'auto', got {value!r}")
    return float(value)


@dataclass(frozen=True)
class SquadRecord:
    """What the runtime records per squad (for squad-duration statistics)."""

    squad: Squad
    config: SquadConfig


class BlessPolicy(Policy):
    """The BLESS policy (multi-task scheduler + configuration determiner)."""

    name = "bless"

    def __init__(
        self,
        squad_size: int = 50,
        split_ratio: float | str | None = 0.5,
        determiner: str = "auto",
        pacing: bool = True,
        mechanism: str = "mps",
        switch_cost: float | None = None,
        decide_per_kernel: float = DECIDE_PER_KERNEL,
        ahead: bool = True,
    ) -> None:
        if squad_size < 1:
            raise ValueError(f"squad_size must be >= 1, got {squad_size}")
        self.squad_size = squad_size
        self.split_ratio = parse_split_ratio(split_ratio)
        self.determiner_mode = determiner
        self.pacing = pacing
        self.mechanism = mechanism
        self.switch_cost = switch_cost
        """Context-switch idle time the determiner weighs against a split's gain; None until
        :meth:`setup` takes the GPU's ``HostCosts.context_switch`` (what the simulator charges)."""
        self.decide_per_kernel = decide_per_kernel
        self.ahead = ahead
        """Build and configure the next squad while the current one runs (hides the decision's host time)."""
        self._last_limit: dict[int, int | None] = {}
        """Per request id: SM limit of its latest launched kernel."""
        self.determiner: Determiner | None = None
        self.max_level = N_LEVELS - 1

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        # Contexts already created stay; the level cap only ever goes down so
        # that every deployed app has a context for every level in use.
        self.max_level = min(self.max_level, max_restricted_level(apps, gpu, self.mechanism))
        self.gpu = gpu
        if self.switch_cost is None:
            self.switch_cost = HostCosts.for_gpu(gpu).context_switch
        self.determiner = Determiner(
            gpu, self.determiner_mode, self.max_level, self.switch_cost, self.split_ratio, self.mechanism
        )
        for app in apps:
            self.determiner.tables(app.profile)

    def context_limits(self, app: AppState, gpu: GpuSpec) -> list[int | None]:
        """The unrestricted context plus one restricted context per level 1..max_level."""
        levels = range(1, self.max_level + 1)
        return [None, *dict.fromkeys(gpu.sms_for_level(n, self.mechanism) for n in levels)]

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        active = [r for a in apps if (r := a.activate()) is not None]
        if not active:
            return None
        active.sort(key=lambda r: (r.arrival, r.rid))
        squad = build_squad(active, now, self.squad_size, self.pacing)
        if not squad.entries:
            return None  # every active request has all its kernels launched already
        prev = [self._last_limit.get(e.request.rid) for e in squad.entries]
        config = self.determiner.decide(squad, prev)
        record = SquadRecord(squad, config)
        if config.restricted:
            return self._semi_sp(squad, config, record)
        plans = tuple(LaunchPlan(e.request, e.start, e.count) for e in squad.entries)
        return Decision(plans, squad.order, sync=True, info=record)

    def decide_ahead(self, now: float, apps: list[AppState], running: Decision) -> Decision | None:
        """The next squad, as the scheduler would build it when ``running`` ends (its estimated end)."""
        if not self.ahead:
            return None
        return self.step(now + running.info.config.estimate, apps)

    def on_launch(self, decision: Decision) -> None:
        for p in decision.plans:
            self._last_limit[p.request.rid] = p.sm_limit

    def decision_cost(self, decision: Decision) -> float:
        """Squad building and configuration search, per scheduled kernel."""
        return self.decide_per_kernel * sum(p.count for p in decision.plans)

    def on_complete(self, request, now: float) -> None:
        self._last_limit.pop(request.rid, None)

    def _semi_sp(self, squad: Squad, config: SquadConfig, record: SquadRecord) -> Decision:
        """The first ``config.split_ratio`` of each request's squad kernels restricted, the rest not."""
        plans: list[LaunchPlan] = []
        first_plan: list[tuple[int, int, int]] = []  # (restricted plan, restricted count, free plan)
        for e, parts in zip(squad.entries, config.partitions):
            restricted = config.restricted_count(e.count)
            sms = self.gpu.sms_for_level(parts, self.mechanism)
            r_idx = f_idx = -1
            if restricted:
                r_idx = len(plans)
                plans.append(LaunchPlan(e.request, e.start, restricted, sms))
            if restricted < e.count:
                f_idx = len(plans)
                plans.append(LaunchPlan(e.request, e.start + restricted, e.count - restricted))
            first_plan.append((r_idx, restricted, f_idx))
        taken = [0] * len(squad.entries)
        order = []
        for j in squad.order:
            r_idx, restricted, f_idx = first_plan[j]
            order.append(r_idx if taken[j] < restricted else f_idx)
            taken[j] += 1
        return Decision(tuple(plans), tuple(order), sync=True, info=record)

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "squad_size": self.squad_size,
            "split_ratio": "auto" if self.split_ratio is None else self.split_ratio,
            "determiner": self.determiner_mode,
            "pacing": self.pacing,
            "ahead": self.ahead,
        }
