"""BLESS: kernel squads from every app's requests, each squad run in the contexts
that keep every request's quota promise and give the GPU's rest to whoever gains most.

Two pacing rules build the squads (``pacing``):

* ``deadline`` (the default): each request has a deadline, its finish time in the
  ISO run of the same arrivals; the earliest deadline runs unrestricted, the
  others run in the smallest restricted context that still meets theirs, or wait
  while they can (:func:`bless.core.deadline_pacing.build_deadline_squad`).
* ``paper``: the paper's rule -- the request furthest behind its isolated
  schedule first, squads of ``squad_size`` kernels run unrestricted or as a
  Semi-SP split, whichever the determiner prices faster (the ablation).
  ``none`` takes kernels round-robin (the paper's ablation without the scheduler).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bless.backend.interface import HostCosts
from bless.core.deadline_pacing import (
    CAUTION_GAIN,
    SATURATION_HOLD,
    build_deadline_squad,
    caution_after,
    lead_after,
)
from bless.core.determiner import Determiner, restricted_count
from bless.core.lifecycle import AppState, Request
from bless.core.paced_request import PacedRequest, PaceTable
from bless.core.policy import Decision, Policy, RequestLaunch, SquadEstimate
from bless.core.scheduler import Squad, build_squad
from bless.documents import is_number
from bless.hw.gpus import N_LEVELS, GpuSpec
from bless.hw.interference import InterferenceModel
from bless.profiles import features


@dataclass(frozen=True)
class DecisionCost:
    """Host seconds a policy step costs, charged on the virtual clock before its launches."""

    per_launch: float
    """Per request launched (one request's window of kernels in one context)."""
    per_kernel: float
    """Per kernel scheduled."""

    def of(self, launches: int, kernels: int) -> float:
        return self.per_launch * launches + self.per_kernel * kernels


DECISION_COST = {
    "deadline": DecisionCost(per_launch=35e-6, per_kernel=0.0),
    "paper": DecisionCost(per_launch=0.0, per_kernel=1e-6),
    "none": DecisionCost(per_launch=0.0, per_kernel=1e-6),
}
"""The decision's host time per pacing rule (``bless bench overhead``).  Deadline pacing's
step costs what the requests it looks at and launches cost, not its kernels: it takes each
request's next window whole, and its walk prices the same windows whatever their length (a
step's median 8-46 us with 1-8 apps; a least-squares fit over the steps puts 0 +- 0.2 us on
each kernel; a lone request's step of 26 kernels costs 9 us, as a step of a few).  So it is
charged per launch, not per kernel: 35 us, above the 90th percentile of a step's time per
launch in the 2-, 4- and 8-app replays as a server runs the step, compiled (a wheel:
16-18 / 20-22 / 32-33 us, session 29).  Interpreted (an editable install) it is 28-30 /
37-38 / 56-58 us, over the charge with 4 and 8 apps.  Our assumption, kept since the first
replays (23-34 us interpreted, 2026-11-25) rather than re-run every experiment at a new charge.
The paper's squads are searched kernel by kernel: its scheduler and determiner take 0.72-1.07 us
per kernel with 2-8 active apps, charged 1 us; the whole step, the interpreted policy around
them included, 0.92 / 1.29 / 1.82 us with 2 / 4 / 8 apps (one run, session 29), so the ablation's rows
understate its host cost with 4 and 8 apps.  The paper's C++ runtime: 6.7 us per kernel."""

MEMORY_HEADROOM = 0.95
"""Share of device memory BLESS plans to use for apps and their contexts."""

PACING = ("deadline", "paper", "none")

WINDOW = 1e-3
"""Seconds of each running request's kernels deadline pacing launches at a time: the
longest a newcomer waits for its first kernel and the slack a waiting request keeps in
hand.  Our assumption: 0.5 and 2 ms move single Fig. 13 pairs by up to 17 % either way
with no setting best for all (``experiments/fig13_ablation.yaml``)."""


def parse_pacing(value: str | bool) -> str:
    """A pacing rule name; ``True``/``False`` (older configs) mean ``paper``/``none``."""
    if isinstance(value, bool):
        return "paper" if value else "none"
    if value not in PACING:
        raise ValueError(f"pacing must be one of {', '.join(PACING)}, got {value!r}")
    return value


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
    if not is_number(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"split_ratio must be a number in [0, 1] or 'auto', got {value!r}")
    return float(value)


class BlessPolicy(Policy):
    """BLESS: deadline pacing (default) or the paper's squads, priced by the configuration determiner."""

    name = "bless"

    def __init__(
        self,
        squad_size: int = 50,
        split_ratio: float | str | None = 0.5,
        determiner: str = "auto",
        pacing: str | bool = "deadline",
        window: float = WINDOW,
        mechanism: str = "mps",
        switch_cost: float | None = None,
        decide_per_kernel: float | None = None,
        decide_per_launch: float | None = None,
        ahead: bool = True,
        caution_gain: float = CAUTION_GAIN,
        lend: bool = True,
        wake_when_due: bool = True,
        background: bool = True,
        lone_low_priority: bool = False,
        yield_to_arrivals: bool = True,
        give_lead: bool = False,
    ) -> None:
        if squad_size < 1:
            raise ValueError(f"squad_size must be >= 1, got {squad_size}")
        self.squad_size = squad_size
        self.split_ratio = parse_split_ratio(split_ratio)
        self.determiner_mode = determiner
        self.pacing = parse_pacing(pacing)
        if not is_number(window) or not window > 0:
            raise ValueError(f"window must be a positive number of seconds, got {window!r}")
        self.window = window
        self.mechanism = mechanism
        self.switch_cost = switch_cost
        """Context-switch idle time the determiner weighs against a split's gain; None until
        :meth:`setup` takes the GPU's ``HostCosts.context_switch`` (what the simulator charges)."""
        cost = DECISION_COST[self.pacing]
        for name, value in (("decide_per_kernel", decide_per_kernel), ("decide_per_launch", decide_per_launch)):
            if value is not None and (not is_number(value) or not value >= 0):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
        self.decision = DecisionCost(
            cost.per_launch if decide_per_launch is None else float(decide_per_launch),
            cost.per_kernel if decide_per_kernel is None else float(decide_per_kernel),
        )
        """Host time a decision costs (:data:`DECISION_COST`; the two arguments override it)."""
        self.ahead = ahead
        """Build and configure the next squad while the current one runs (hides the decision's host time)."""
        if not is_number(caution_gain) or not caution_gain >= 0:
            raise ValueError(f"caution_gain must be a number >= 0 (0: no caution), got {caution_gain!r}")
        self.caution_gain = caution_gain
        """Deadline pacing's :data:`~bless.core.deadline_pacing.CAUTION_GAIN` (0: the projection always
        counts on the GPU the top frees, the ablation)."""
        for name, flag in (
            ("lend", lend),
            ("wake_when_due", wake_when_due),
            ("background", background),
            ("lone_low_priority", lone_low_priority),
            ("yield_to_arrivals", yield_to_arrivals),
            ("give_lead", give_lead),
        ):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be true or false, got {flag!r}")
        self.lend = lend
        """SMs beyond a quota move to a late request from one with time to spare: a late top borrows
        from urgent neighbours that keep their deadlines or whose apps are over their share, a sole
        late urgent request from the top's spare quota (False: the ablation)."""
        self.wake_when_due = wake_when_due
        """Pacing wakes when a waiting request must start (False: every window, the ablation)."""
        self.background = background
        """The earliest waiting request runs in the bubbles, in a low-priority stream (False: it
        waits idle, the ablation)."""
        self.lone_low_priority = lone_low_priority
        """A lone request runs in its low-priority stream, so an arrival's kernels take the SMs
        as its queued blocks drain (opt-in: it brings Fig. 13's exponential pairs within 1 % of
        ISO but takes an app beside a neighbour's closed loop with no think time over it;
        ``experiments/design_log.md``, item 20)."""
        self.yield_to_arrivals = yield_to_arrivals
        """A top runs in its low-priority stream while another app, idle now, could arrive with an
        earlier deadline and the top can spare that arrival its time (False: the ablation;
        :data:`~bless.core.deadline_pacing.ARRIVAL_SLACK`)."""
        self.give_lead = give_lead
        """A request's deadline is its ISO deadline plus its app's lead, the time its earlier
        requests finished ahead of theirs (:func:`~bless.core.deadline_pacing.lead_after`), while
        no other app is over its share.  Opt-in: it keeps an app's mean, not each request, within
        its ISO latency.  On quick re-runs the means of Fig. 13 with exponential think times,
        Fig. 14, Fig. 16 and the SLO runs fell 2-3 %, but the requests later than ISO by more
        than one kernel went from 8.8 to 10.3 %, and ResNet50's p99 beside BERT at 20 requests a
        second from 1.15x ISO or less to 1.35x (``experiments/design_log.md``, item 32)."""
        self._last_limit: dict[int, int | None] = {}
        """Per request id: SM limit of its latest launched kernel."""
        self.determiner: Determiner | None = None
        self.max_level = N_LEVELS - 1
        self._limits: tuple[int, ...] = ()
        """SM limits of every app's restricted contexts, ascending."""
        self._pace_tables: dict[tuple[int, tuple[int, ...]], PaceTable] = {}
        """Per profile (by id) and granted SMs of its contexts: kernel times in each of them."""
        self._stretch: dict[int, float] = {}
        """Per app index: the slowdown its neighbours' DRAM traffic is expected to cause."""
        self._imposes: dict[int, float] = {}
        """Per app index: the slowdown its DRAM traffic on the whole GPU causes a neighbour."""
        self._drains: dict[int, float] = {}
        """Per app index: a neighbour kernel's wait for the SMs its blocks fill in the bubbles."""
        self._paced: dict[int, PacedRequest] = {}
        """Per request id: its deadline-pacing state (deadline, context row, when its launched
        kernels are expected to end), from its first step to its completion."""
        self._iso_finish: dict[int, float] = {}
        """Per app index: when its latest request would finish in the ISO run."""
        self._caution: dict[int, float] = {}
        """Per app index: its caution (:func:`bless.core.deadline_pacing.caution_after`).  The
        projections use the highest, so one app falling behind makes every top yield to it; a
        top whose app has been late may take SMs from neighbours whose apps have not."""
        self._lead: dict[int, float] = {}
        """Per app index: its lead, seconds (:func:`bless.core.deadline_pacing.lead_after`)."""
        self._saturation_hold: dict[int, float] = {}
        """Per app index: how long it must be busy to count as saturated (inf: best-effort)."""

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
        self._limits = tuple(sorted(n for n in self.context_limits(apps[0], gpu) if n is not None)) if apps else ()
        self._pace_tables = {}
        self._stretch = neighbour_stretch(apps, gpu)
        self._imposes = imposed_stretch(apps, gpu)
        self._drains = imposed_drain(apps, gpu)
        self._caution = {a.index: self._caution[a.index] for a in apps if a.index in self._caution}
        self._lead = {a.index: self._lead[a.index] for a in apps if a.index in self._lead}
        self._saturation_hold = {a.index: math.inf if a.best_effort else SATURATION_HOLD * a.target for a in apps}
        self._paced = {rid: self._rebased(p) for rid, p in self._paced.items()}

    def _rebased(self, paced: PacedRequest) -> PacedRequest:
        """``paced`` under the tables, quota and neighbours :meth:`setup` just computed
        (an app added or removed, a quota changed): its deadline and queued work stay."""
        app = paced.request.app
        tab = self.pace_table(app)
        row = tab.row_of(paced.table.row_sms[paced.row]) if paced.row >= 0 else -1
        i = app.index
        return PacedRequest(
            paced.request,
            paced.deadline,
            tab,
            app.quota * tab.sm_count,
            self._stretch.get(i, 1.0),
            self._imposes.get(i, 1.0),
            self._drains.get(i, 0.0),
            row,
            paced.busy_until,
            paced.windows,
            paced.given,
        )

    def low_priority(self, app: AppState) -> bool:
        """Deadline pacing runs a waiting request in the bubbles, a top that yields to the last
        kernels of a request served before it, and (opt-in) a lone request through a
        low-priority stream."""
        return self.pacing == "deadline"

    def context_limits(self, app: AppState, gpu: GpuSpec) -> list[int | None]:
        """The unrestricted context plus one restricted context per level 1..max_level."""
        levels = range(1, self.max_level + 1)
        return [None, *dict.fromkeys(gpu.sms_for_level(n, self.mechanism) for n in levels)]

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        active = [r for a in apps if (r := a.active or a.activate()) is not None]
        if not active:
            return None
        if self.pacing == "deadline":
            return self._deadline_squad(now, active, apps)
        active.sort(key=lambda r: (r.arrival, r.rid))
        squad = build_squad(active, now, self.squad_size, self.pacing == "paper")
        if not squad.entries:
            return None  # every active request has all its kernels launched already
        return self._configured(squad)

    def _configured(self, squad: Squad) -> Decision:
        """``squad`` in the configuration the determiner prices fastest."""
        prev = [self._last_limit.get(e.request.rid) for e in squad.entries]
        config = self._determiner().decide(squad, prev)
        if config.restricted:
            sms = [self.gpu.sms_for_level(n, self.mechanism) for n in config.partitions]
            plans, order = semi_sp_plans(squad, sms, config.split_ratio)
            return Decision(plans, order, sync=True, estimate=SquadEstimate(config.estimate, True))
        plans = tuple(RequestLaunch(e.request, e.start, e.count) for e in squad.entries)
        return Decision(plans, squad.entry_of_kernel, sync=True, estimate=SquadEstimate(config.estimate, False))

    def decide_ahead(self, now: float, apps: list[AppState], running: Decision) -> Decision | None:
        """The next squad, as the scheduler would build it when ``running`` ends (its estimated end)."""
        if not self.ahead or running.estimate is None:
            return None
        return self.step(now + running.estimate.duration, apps)

    def on_launch(self, decision: Decision) -> None:
        paced = self._paced
        for p in decision.launches:
            r = p.request
            self._last_limit[r.rid] = p.sm_limit
            if r.rid in paced:
                paced[r.rid].launched(r.last_launch)

    def decision_cost(self, decision: Decision) -> float:
        """Pacing or squad building and configuration search (:data:`DECISION_COST`)."""
        launches = decision.launches
        return self.decision.of(len(launches), sum(p.count for p in launches))

    def on_complete(self, request, now: float) -> None:
        self._last_limit.pop(request.rid, None)
        paced = self._paced.pop(request.rid, None)
        app = request.app
        if paced is not None and not app.best_effort:
            i = app.index
            promised = paced.deadline - paced.given
            self._caution[i] = caution_after(self._caution.get(i, 0.0), now - promised, app.target, self.caution_gain)
            if self.give_lead:
                self._lead[i] = lead_after(self._lead.get(i, 0.0), paced.deadline - now, app.target)

    def _pacing_state(self, request: Request, apps: list[AppState]) -> PacedRequest:
        """The request's deadline-pacing state, made the first time it is asked for.

        Its deadline is fixed then (its app's earlier requests were all asked for before it):
        its finish in the ISO run of the same arrivals (``max(arrival, the app's previous one)
        + T[quota]``), or ``arrival + SLO`` if earlier, plus what it takes of its app's lead
        (:meth:`_lead_given`).  A best-effort app's requests have none (inf): deadline pacing
        runs them only while no latency-critical request is active."""
        paced = self._paced.get(request.rid)
        if paced is None:
            app = request.app
            finish, deadline = self._deadline_at(app, request.arrival)
            self._iso_finish[app.index] = finish
            given = 0.0
            if app.best_effort:
                deadline = math.inf
            elif self.give_lead:
                given = self._lead_given(app, request.arrival, deadline, apps)
                if given:
                    self._lead[app.index] -= given  # spent now: requests in flight together share it
                    deadline += given
            tab = self.pace_table(app)
            i = app.index
            paced = self._paced[request.rid] = PacedRequest(
                request,
                deadline,
                tab,
                app.quota * tab.sm_count,
                self._stretch.get(i, 1.0),
                self._imposes.get(i, 1.0),
                self._drains.get(i, 0.0),
                given=given,
            )
        return paced

    def _lead_given(self, app: AppState, arrival: float, deadline: float, apps: list[AppState]) -> float:
        """Seconds of ``app``'s lead its request arriving at ``arrival``, with ISO deadline
        ``deadline``, takes as a later deadline: all of it, within its SLO, unless another app
        has requests queued.  An overloaded app's deadlines are its ISO queue's, far behind, so it
        would take every lead its neighbours give; they keep them.  BERT's closed loop at 1/18
        beside ResNet50 at 12/18 and its quota's throughput and VGG11's loop at 5/18
        (``random_groups.py``, group 23) gave its lead and ran at 1.073x ISO; it keeps it, 1.005x
        (``experiments/design_log.md``, item 32)."""
        lead = self._lead.get(app.index, 0.0)
        if lead <= 0.0 or any(a.backlogged for a in apps if a is not app):
            return 0.0
        if app.slo is not None:
            lead = min(lead, arrival + app.slo - deadline)
        return max(lead, 0.0)

    def pace_table(self, app: AppState) -> PaceTable:
        """The app's kernel times in each of its contexts, at the SMs the backend granted them
        (``app.granted_sms``, recorded at deployment, after :meth:`setup`); apps of one profile
        whose contexts got the same SMs share one table."""
        granted = tuple(app.granted_sms.get(n, n) for n in self._limits)
        key = (id(app.profile), granted)
        tab = self._pace_tables.get(key)
        if tab is None:
            prefix = self._determiner().tables(app.profile).level_prefix((*granted, self.gpu.sm_count))
            tab = self._pace_tables[key] = PaceTable(
                self._limits, self.gpu.sm_count, prefix, None if granted == self._limits else granted
            )
        return tab

    def _deadline_squad(self, now: float, active: list[Request], apps: list[AppState]) -> Decision:
        """Stream each request's next window of kernels in its context (no barrier)."""
        known = self._paced
        state = [known.get(r.rid) or self._pacing_state(r, apps) for r in active]
        for p in state:
            if p.windows:
                p.observe(now)
        launch = build_deadline_squad(
            state,
            now,
            self.window,
            self._determiner().window_durations,
            self._caution,
            self.lend,
            self.wake_when_due,
            self.background,
            self.lone_low_priority,
            self._arrivals(now, apps) if self.yield_to_arrivals else (),
            self._saturated(now, apps),
        )
        for e, row, d in zip(launch.launches, launch.rows, launch.durations):
            known[e.request.rid].decided(now, row, d)
        return Decision(launch.launches, launch.launch_of_kernel or None, wake_at=launch.wake_at)

    def _saturated(self, now: float, apps: list[AppState]) -> list[int]:
        """The indices of the latency-critical apps that have had a request in the system
        without a gap (:attr:`~bless.core.lifecycle.AppState.busy_since`) for
        :data:`~bless.core.deadline_pacing.SATURATION_HOLD` of their latency targets."""
        hold = self._saturation_hold
        saturated = []
        for app in apps:
            since = app.busy_since
            if since is not None and now - since >= hold[app.index]:
                saturated.append(app.index)
        return saturated

    def _deadline_at(self, app: AppState, arrival: float) -> tuple[float, float]:
        """A request of ``app`` arriving at ``arrival``: its finish in the ISO run of the same
        arrivals (``max(arrival, the app's previous one) + T[quota]``) and its deadline (that
        finish, or ``arrival + SLO`` if earlier)."""
        finish = max(arrival, self._iso_finish.get(app.index, -math.inf)) + app.iso_latency
        return finish, finish if app.slo is None else min(finish, arrival + app.slo)

    def _arrivals(self, now: float, apps: list[AppState]) -> tuple[tuple[float, float], ...]:
        """For each latency-critical app with no active request: the deadline a request of it
        arriving now would have and its latency target."""
        return tuple(
            (self._deadline_at(app, now)[1], app.target) for app in apps if app.active is None and not app.best_effort
        )

    def _determiner(self) -> Determiner:
        if self.determiner is None:
            raise RuntimeError("BlessPolicy.setup(apps, gpu) must run before the policy steps")
        return self.determiner

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "squad_size": self.squad_size,
            "split_ratio": "auto" if self.split_ratio is None else self.split_ratio,
            "determiner": self.determiner_mode,
            "pacing": self.pacing,
            "window": self.window,
            "ahead": self.ahead,
            "caution_gain": self.caution_gain,
            "lend": self.lend,
            "wake_when_due": self.wake_when_due,
            "background": self.background,
            "lone_low_priority": self.lone_low_priority,
            "yield_to_arrivals": self.yield_to_arrivals,
            "give_lead": self.give_lead,
            "decide_per_launch": self.decision.per_launch,
            "decide_per_kernel": self.decision.per_kernel,
        }


def neighbour_stretch(apps: list[AppState], gpu: GpuSpec) -> dict[int, float]:
    """Per app index, the simulated GPU's interference term
    (:meth:`~bless.hw.interference.InterferenceModel.stretch`) with every app at its quota's
    mean DRAM demand: a request's margin against its deadline."""
    model = InterferenceModel.for_gpu(gpu.name)
    demand = {a.index: _dram_busy(a) / a.iso_latency if a.iso_latency > 0 else 0.0 for a in apps}
    total = sum(demand.values())
    return {i: float(model.stretch(u, total)) for i, u in demand.items()}  # plain floats for the hot loops


def imposed_stretch(apps: list[AppState], gpu: GpuSpec) -> dict[int, float]:
    """Per app index, the interference term a kernel with no DRAM demand of its own suffers
    beside the app running alone on the whole GPU (at its mean DRAM demand there): what a
    request of the app running in the bubbles may cost its neighbours.  The whole GPU's
    demand, not its quota's: the bubbles may be most of the GPU (with its quota's, the
    Fig. 15 8-app cells over ISO went from 14 to 18 of 24 on a quick re-run)."""
    model = InterferenceModel.for_gpu(gpu.name)
    return {a.index: float(model.stretch(0.0, _dram_busy(a) / float(a.profile.t[-1].sum()))) for a in apps}


def imposed_drain(apps: list[AppState], gpu: GpuSpec) -> dict[int, float]:
    """Per app index, how long a neighbour's kernel waits, on average, for the SMs the app's
    blocks fill when it runs in the bubbles: the mean over its request's time on the whole GPU
    of :func:`bless.profiles.features.drain_seconds` (0 where its profile lacks the launch
    configuration).  VGG11's convolutions, rounds of 0.2-0.7 ms, in the bubbles beside
    BERT-base's 35 us kernels put BERT-base at 1.04x ISO on an H200 (0.98x without the
    bubbles; ``experiments/design_log.md``, item 23)."""
    out = {}
    for a in apps:
        full = features.full_gpu_times(a.profile, gpu)
        out[a.index] = float(np.dot(features.drain_seconds(a.profile, gpu), full) / full.sum())
    return out


def _dram_busy(app: AppState) -> float:
    """Seconds of peak DRAM bandwidth one request of ``app`` moves (its kernels on the whole GPU)."""
    p = app.profile
    return float(np.dot([k.dram_util for k in p.kernels], p.t[-1]))


def semi_sp_plans(
    squad: Squad, sms: list[int], ratio: float, requests: list[Request] | None = None
) -> tuple[tuple[RequestLaunch, ...], tuple[int, ...]]:
    """Semi-SP's launches of ``squad``: the first ``ratio`` of each entry's kernels in its
    context of ``sms[j]`` SMs, the rest unrestricted, in the squad's kernel order.
    ``requests`` stand in for the entries' requests (a replay of the same squad)."""
    reqs = requests if requests is not None else [e.request for e in squad.entries]
    plans: list[RequestLaunch] = []
    first_plan: list[tuple[int, int, int]] = []  # (restricted plan, restricted count, free plan)
    for r, e, limit in zip(reqs, squad.entries, sms):
        restricted = restricted_count(ratio, e.count)
        r_idx = f_idx = -1
        if restricted:
            r_idx = len(plans)
            plans.append(RequestLaunch(r, e.start, restricted, limit))
        if restricted < e.count:
            f_idx = len(plans)
            plans.append(RequestLaunch(r, e.start + restricted, e.count - restricted))
        first_plan.append((r_idx, restricted, f_idx))
    taken = [0] * len(squad.entries)
    order = []
    for j in squad.entry_of_kernel:
        r_idx, restricted, f_idx = first_plan[j]
        order.append(r_idx if taken[j] < restricted else f_idx)
        taken[j] += 1
    return tuple(plans), tuple(order)
