"""Which GPU of the cluster gets a new app: feasibility, then a policy.  Pure functions.

The state of each GPU is plain data (:class:`GpuState`: its apps with their
profiles and quotas, the memory held).  A GPU is *feasible* for a new app when
the single server's admission accepts it there: the same rules, run by the
same functions (:func:`bless.serving.server.admission.admit`): quotas add up
to at most 100 %, the app's memory plus one context per partition level it
gets fits next to what is held, and its kernel lengths are compatible with
the residents'.  Among the feasible GPUs a policy picks one:

* ``first-fit``: the first feasible GPU, in the cluster's order;
* ``best-fit-memory``: the one left with the least free memory once the app
  is there (packs, keeps whole GPUs free for large apps);
* ``colocation``: the one whose residents the new app co-runs best with,
  by predicted throughput sum (each app's throughput next to the other,
  relative to alone, summed; 2 is no interference).  A GPU scores the worst
  (lowest) sum of the new app with any resident; an empty GPU scores 2.
  The sums come from a fitted KACE model when one is given
  (:func:`bless.colocation.advisor.rank`), else from the simulated GPU: the
  pair co-run in closed loops (:func:`bless.colocation.kace_generate.closed_loop`,
  about 50 ms a pair, cached), exactly how ``bless kace generate`` measures
  the pairs KACE is fitted on.

:func:`place` answers a :class:`Placement`: the GPU (or none) and why,
including why every other GPU was not taken.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from bless.colocation.advisor import rank
from bless.colocation.kace import KaceModel
from bless.core.lifecycle import AppState
from bless.hw.gpus import GpuSpec, get_gpu
from bless.policies.bless import MEMORY_HEADROOM
from bless.profiles.format import Profile
from bless.serving.server.admission import (
    Admission,
    AdmissionLimits,
    AppDemand,
    MemoryBudget,
    admit,
    memory_budget,
)
from bless.serving.server.spec import slo_seconds

POLICIES = ("first-fit", "best-fit-memory", "colocation")
N_LEVELS_RESTRICTED = 17
"""BLESS's highest restricted level before memory caps it (level 18 is the unrestricted context)."""
EMPTY_GPU_SCORE = 2.0
"""Predicted throughput sum on a GPU with no resident: the new app runs as alone, and nobody slows."""
SIM_PAIR_SECONDS = 0.05
"""Virtual seconds of the simulated pair co-run (each app completes at least 4 requests anyway)."""

GIB = 2**30
DEFAULT_LIMITS = AdmissionLimits()
"""The single server's default thresholds (frozen: safe to share)."""


@dataclass(frozen=True)
class PlacedApp:
    """An app on a GPU, or one to place: what admission needs of it."""

    name: str
    profile: Profile
    quota: float
    slo: str = ""
    """As registered: "" none, "25ms", "2x" (of the ISO latency at the quota)."""

    def state(self, index: int = 0) -> AppState:
        state = AppState(index, self.name, self.profile, self.quota)
        state.slo = slo_seconds(self.slo, state.iso_latency)
        return state


@dataclass(frozen=True)
class GpuState:
    """One GPU as placement sees it."""

    gpu_id: str
    gpu: str
    """GPU model name (``a100``, ``h100``)."""
    memory_used_bytes: int = 0
    """Device memory held now: apps and their contexts."""
    apps: tuple[PlacedApp, ...] = ()
    mechanism: str = "mps"
    squad_size: int = 50
    max_level: int = N_LEVELS_RESTRICTED
    """The serving policy's highest restricted level (memory may cap it further)."""
    context_bytes: int | None = None
    """Memory per context; None: the GPU model's data file (what the simulated backend uses)."""
    memory_bytes: int | None = None
    """Device memory; None: the GPU model's."""

    @property
    def spec(self) -> GpuSpec:
        return get_gpu(self.gpu)

    @property
    def capacity_bytes(self) -> int:
        return self.memory_bytes if self.memory_bytes is not None else self.spec.memory_bytes

    @property
    def per_context_bytes(self) -> int:
        return self.context_bytes if self.context_bytes is not None else self.spec.context_bytes(self.mechanism)

    @property
    def quota_used(self) -> float:
        return sum(a.quota for a in self.apps)

    @property
    def usable_bytes(self) -> float:
        return self.capacity_bytes * MEMORY_HEADROOM


@dataclass(frozen=True)
class Fit:
    """Whether one GPU can take the app, and what it would hold then."""

    gpu_id: str
    admission: Admission
    memory_after_bytes: int = 0
    """Memory held once the app and its contexts are deployed (feasible GPUs only)."""

    @property
    def feasible(self) -> bool:
        return self.admission.accepted


@dataclass(frozen=True)
class Placement:
    """The answer: a GPU (None: no GPU can take the app) and why."""

    gpu_id: str | None
    policy: str
    why: str
    fits: tuple[Fit, ...] = ()
    scores: dict[str, float] = field(default_factory=dict)
    """Per feasible GPU, what the policy ranked by (free GiB after, or predicted throughput sum)."""
    estimator: str = ""
    """colocation: ``kace`` or ``simulator``."""

    @property
    def rejected(self) -> dict[str, str]:
        """Why each infeasible GPU could not take the app."""
        return {f.gpu_id: f.admission.reason for f in self.fits if not f.feasible}

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu_id,
            "policy": self.policy,
            "why": self.why,
            "estimator": self.estimator,
            "scores": dict(self.scores),
            "rejected": self.rejected,
            "warnings": [w for f in self.fits if f.gpu_id == self.gpu_id for w in f.admission.warnings],
        }


# ---------------------------------------------------------------- feasibility
def budget_for(app: PlacedApp, gpu: GpuState) -> MemoryBudget:
    """The memory ``gpu`` has for ``app``, as the single server prices it (ValueError if not even
    two contexts fit)."""
    states = [a.state(i) for i, a in enumerate(gpu.apps)] + [app.state(len(gpu.apps))]
    return memory_budget(
        states, gpu.spec, gpu.mechanism, gpu.max_level, gpu.capacity_bytes, gpu.memory_used_bytes, gpu.per_context_bytes
    )


def check(app: PlacedApp, gpu: GpuState, limits: AdmissionLimits = DEFAULT_LIMITS) -> Fit:
    """The single server's admission of ``app`` on ``gpu`` (the same rules, the same code)."""
    if app.profile.gpu != gpu.gpu:
        reason = f"the profile of {app.name!r} is for {app.profile.gpu}, not {gpu.gpu}"
        return Fit(gpu.gpu_id, Admission(False, reason))
    try:
        budget = budget_for(app, gpu)
    except ValueError as e:
        return Fit(gpu.gpu_id, Admission(False, str(e)))
    others = [AppDemand.of(a.state(i)) for i, a in enumerate(gpu.apps)]
    admission = admit(AppDemand.of(app.state(len(gpu.apps))), others, budget, gpu.squad_size, limits)
    after = gpu.memory_used_bytes + budget.need(app.profile.memory_bytes)
    return Fit(gpu.gpu_id, admission, after if admission.accepted else 0)


def fits(app: PlacedApp, gpus: Sequence[GpuState], limits: AdmissionLimits = DEFAULT_LIMITS) -> list[Fit]:
    """Every GPU's answer, in the cluster's order."""
    return [check(app, g, limits) for g in gpus]


def with_app(gpu: GpuState, app: PlacedApp) -> GpuState:
    """``gpu`` once ``app`` is deployed there (memory as admission priced it)."""
    after = gpu.memory_used_bytes + budget_for(app, gpu).need(app.profile.memory_bytes)
    return dataclasses.replace(gpu, apps=(*gpu.apps, app), memory_used_bytes=after)


# ---------------------------------------------------------------- co-location estimates
PairEstimator = Callable[[PlacedApp, Sequence[PlacedApp]], list[float]]
"""Predicted throughput sums of an app next to each of the given residents."""


def _profile_key(p: Profile) -> tuple:
    return (p.gpu, p.n_kernels, p.memory_bytes, float(p.T[-1]), float(p.t.sum()))


_PROFILES: dict[tuple, Profile] = {}


@lru_cache(maxsize=4096)
def _sim_pair_sum(a: tuple, b: tuple) -> float:
    from bless.colocation.kace_generate import closed_loop

    pa, pb = _PROFILES[a], _PROFILES[b]
    solo_a = closed_loop([pa], pa.gpu, SIM_PAIR_SECONDS)
    solo_b = closed_loop([pb], pb.gpu, SIM_PAIR_SECONDS)
    pair = closed_loop([pa, pb], pa.gpu, SIM_PAIR_SECONDS)
    if pair is None or solo_a is None or solo_b is None:
        return 0.0  # they do not fit together at all
    return pair.throughputs[0] / solo_a.throughputs[0] + pair.throughputs[1] / solo_b.throughputs[0]


def simulator_estimator(app: PlacedApp, residents: Sequence[PlacedApp]) -> list[float]:
    """Throughput sums measured on the simulated GPU: each pair co-run in closed loops, each
    app in its own unrestricted context (as ``bless kace generate`` measures pairs)."""
    out = []
    for other in residents:
        ka, kb = _profile_key(app.profile), _profile_key(other.profile)
        _PROFILES.setdefault(ka, app.profile)
        _PROFILES.setdefault(kb, other.profile)
        out.append(_sim_pair_sum(*sorted((ka, kb))))
    return out


def kace_estimator(model: KaceModel) -> PairEstimator:
    """Throughput sums a fitted KACE model predicts from the apps' profile features."""

    def estimate(app: PlacedApp, residents: Sequence[PlacedApp]) -> list[float]:
        if not residents:
            return []
        # rank() keys by name: give the new app a name no resident has
        target = f"{app.name}\x00new"
        sums = dict(rank(model, (target, app.profile), [(f"{i}", r.profile) for i, r in enumerate(residents)]))
        return [sums[f"{i}"] for i in range(len(residents))]

    return estimate


# ---------------------------------------------------------------- policies
def _free_gib(gpu: GpuState, fit: Fit) -> float:
    return (gpu.usable_bytes - fit.memory_after_bytes) / GIB


def place(
    app: PlacedApp,
    gpus: Sequence[GpuState],
    policy: str = "first-fit",
    *,
    limits: AdmissionLimits = DEFAULT_LIMITS,
    kace_model: KaceModel | None = None,
    estimator: PairEstimator | None = None,
) -> Placement:
    """Pick a GPU for ``app`` among ``gpus`` (in the cluster's order) by ``policy``.

    ``colocation`` predicts with ``estimator`` if given, else ``kace_model`` if given,
    else the simulated GPU.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    if not gpus:
        return Placement(None, policy, "the cluster has no GPUs")
    answers = tuple(fits(app, gpus, limits))
    by_id = {g.gpu_id: g for g in gpus}
    feasible = [f for f in answers if f.feasible]
    if not feasible:
        why = "; ".join(f"{f.gpu_id}: {f.admission.reason}" for f in answers)
        return Placement(None, policy, f"no GPU can take {app.name!r}: {why}", answers)
    others = len(feasible) - 1
    scores: dict[str, float] = {}
    used = ""
    if policy == "first-fit":
        chosen = feasible[0]
        why = f"first-fit: {chosen.gpu_id} is the first GPU (in cluster order) that can take {app.name!r}"
    elif policy == "best-fit-memory":
        scores = {f.gpu_id: _free_gib(by_id[f.gpu_id], f) for f in feasible}
        chosen = min(feasible, key=lambda f: scores[f.gpu_id])  # min() keeps the first of ties
        why = (
            f"best-fit-memory: {chosen.gpu_id} is left with the least free memory, "
            f"{scores[chosen.gpu_id]:.2f} GiB usable, once {app.name!r} is there"
            + (f" (of {others + 1} GPUs that can take it)" if others else "")
        )
    else:
        if estimator is not None:
            estimate, used = estimator, "custom"
        elif kace_model is not None:
            estimate, used = kace_estimator(kace_model), "kace"
        else:
            estimate, used = simulator_estimator, "simulator"
        worst: dict[str, str] = {}
        for f in feasible:
            residents = by_id[f.gpu_id].apps
            sums = estimate(app, residents)
            if not residents:
                scores[f.gpu_id] = EMPTY_GPU_SCORE
                continue
            i = min(range(len(sums)), key=lambda j: sums[j])
            scores[f.gpu_id] = float(sums[i])
            worst[f.gpu_id] = residents[i].name
        chosen = max(feasible, key=lambda f: scores[f.gpu_id])  # max() keeps the first of ties
        best = scores[chosen.gpu_id]
        detail = (
            f"next to {worst[chosen.gpu_id]!r}, its worst pair there"
            if chosen.gpu_id in worst
            else "(no resident: it runs as alone)"
        )
        source = {"kace": "KACE model", "simulator": "simulated GPU", "custom": "estimator"}[used]
        why = f"colocation ({source}): {chosen.gpu_id} has the highest predicted throughput sum, {best:.2f} {detail}"
        if others:
            rest = ", ".join(f"{g} {s:.2f}" for g, s in scores.items() if g != chosen.gpu_id)
            why += f"; other GPUs: {rest}"
    rejected = [f for f in answers if not f.feasible]
    if rejected:
        why += "; cannot take it: " + "; ".join(f"{f.gpu_id}: {f.admission.reason}" for f in rejected)
    return Placement(chosen.gpu_id, policy, why, answers, scores, used)
