"""Admission: may one more app (or a new quota) share this GPU?  Pure functions.

:func:`admit` answers accepted, or rejected with every reason, from plain
numbers; the server gathers them (:class:`AppDemand` per app, a
:class:`MemoryBudget` from the backend).  Rules:

1. **Quotas.**  The quotas of all apps add up to at most 100 % of the SMs.
2. **Memory.**  The new app's memory plus one context per partition level it
   will get (BLESS pre-creates an unrestricted context and one restricted
   context per level, :meth:`~bless.policies.bless.BlessPolicy.context_limits`;
   MPS contexts cost hundreds of MiB each) must fit in the usable device
   memory (``MEMORY_HEADROOM`` of it) next to what is already held.
3. **Kernel granularity** (the paper's §4.2.2 caveat: squads synchronise, so
   kernels of very different lengths share squads badly):

   * *too long*: no app's longest kernel may exceed ``long_kernel_share`` of
     another app's latency target (SLO, else ISO latency).  A squad lasts at
     least as long as its longest kernel, which takes at least its
     whole-GPU time, so such a kernel alone uses up that share of the other
     app's budget whenever they share a squad.
   * *too short*: the mean kernel lengths (whole GPU) of two apps may
     differ by at most ``max_kernel_ratio`` (default: half the squad size).
     While one kernel of the long app runs, the short app needs about that
     ratio of kernels to keep pace, and a squad holds only ``squad_size``.

4. **Co-location** (optional): a fitted KACE model predicts the throughput
   sum of the new app next to each registered one; below a threshold it
   warns or rejects (:class:`~bless.colocation.advisor.ColocationGate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from bless.colocation.advisor import ColocationGate
from bless.core.lifecycle import AppState
from bless.hw.gpus import GpuSpec
from bless.policies.bless import MEMORY_HEADROOM, max_restricted_level
from bless.profiles.format import Profile

QUOTA_EPS = 1e-9


@dataclass(frozen=True)
class AdmissionLimits:
    """Tunable thresholds of the kernel-granularity rule, and the optional KACE gate."""

    long_kernel_share: float = 0.25
    max_kernel_ratio: float | None = None
    """None: half the squad size."""
    colocation: ColocationGate | None = None
    """KACE's predicted co-location quality (:mod:`bless.colocation.advisor`)."""

    def __post_init__(self) -> None:
        if not 0 < self.long_kernel_share <= 1:
            raise ValueError(f"admission.long_kernel_share must be in (0, 1], got {self.long_kernel_share}")
        if self.max_kernel_ratio is not None and self.max_kernel_ratio < 1:
            raise ValueError(f"admission.max_kernel_ratio must be >= 1, got {self.max_kernel_ratio}")

    def kernel_ratio(self, squad_size: int) -> float:
        return self.max_kernel_ratio if self.max_kernel_ratio is not None else max(squad_size / 2, 1.0)


@dataclass(frozen=True)
class AppDemand:
    """What admission needs to know of one app (seconds, bytes)."""

    name: str
    quota: float
    memory_bytes: int
    longest_kernel: float
    """Longest kernel alone on the whole GPU (the least time a squad holding it takes)."""
    mean_kernel: float
    """Mean kernel length on the whole GPU."""
    target: float
    """Latency target: the SLO, else the ISO latency T[quota]."""
    profile: Profile | None = field(default=None, compare=False, repr=False)
    """The app's profile, for the KACE gate."""

    @classmethod
    def of(cls, app: AppState) -> AppDemand:
        t = app.profile.t[-1]
        return cls(
            app.name, app.quota, app.profile.memory_bytes, float(np.max(t)), float(np.mean(t)), app.target, app.profile
        )


@dataclass(frozen=True)
class MemoryBudget:
    """Device memory: what exists, what is held, what the new app's contexts cost."""

    capacity_bytes: int
    used_bytes: int
    context_bytes: int
    contexts: int
    """Contexts the new app gets (unrestricted + one per restricted level)."""

    @property
    def usable_bytes(self) -> float:
        return self.capacity_bytes * MEMORY_HEADROOM

    def need(self, app_bytes: int) -> int:
        """What an app of ``app_bytes`` takes once deployed: itself and its contexts."""
        return app_bytes + self.contexts * self.context_bytes


@dataclass(frozen=True)
class Admission:
    accepted: bool
    reason: str = ""
    warnings: tuple[str, ...] = ()
    """Concerns that did not reject the app (the KACE gate in warn mode)."""


def contexts_per_app(gpu: GpuSpec, max_level: int, mechanism: str) -> int:
    """Contexts BLESS creates for an app when restricted levels go up to ``max_level``."""
    return 1 + len({gpu.sms_for_level(n, mechanism) for n in range(1, max_level + 1)} - {gpu.sm_count})


def memory_budget(
    resident: Sequence[AppState],
    gpu: GpuSpec,
    mechanism: str,
    max_level: int,
    capacity_bytes: int,
    used_bytes: int,
    context_bytes: int,
) -> MemoryBudget:
    """The memory a GPU holding ``resident`` (the new app among them) has for the new app: BLESS
    caps its restricted levels at ``max_level`` and at what memory allows for these apps, and
    each app gets a context per distinct level.  ValueError (naming the memory) if not even the
    unrestricted and one restricted context fit."""
    try:
        level = min(max_level, max_restricted_level(list(resident), gpu, mechanism))
    except ValueError as e:
        raise ValueError(f"GPU memory exhausted: {e}") from None
    return MemoryBudget(capacity_bytes, used_bytes, context_bytes, contexts_per_app(gpu, level, mechanism))


def check_quota(
    app: AppDemand, others: Sequence[AppDemand], memory: MemoryBudget | None, squad_size: int, limits: AdmissionLimits
) -> list[str]:
    total = app.quota + sum(o.quota for o in others)
    if total <= 1 + QUOTA_EPS:
        return []
    taken = ", ".join(f"{o.name} {o.quota:.0%}" for o in others)
    left = max(1 - sum(o.quota for o in others), 0.0)
    return [
        f"quotas would add up to {total:.0%} of the GPU (registered: {taken}); "
        f"at most {left:.0%} is left for {app.name!r}"
    ]


def check_memory(
    app: AppDemand, others: Sequence[AppDemand], memory: MemoryBudget | None, squad_size: int, limits: AdmissionLimits
) -> list[str]:
    if memory is None:
        return []
    need = memory.need(app.memory_bytes)
    free = memory.usable_bytes - memory.used_bytes
    if need <= free:
        return []
    gib = 2**30
    return [
        f"GPU memory exhausted: {app.name!r} needs {app.memory_bytes / gib:.2f} GiB plus {memory.contexts} contexts x "
        f"{memory.context_bytes / 2**20:.0f} MiB = {need / gib:.2f} GiB, but only {max(free, 0) / gib:.2f} GiB of "
        f"{memory.usable_bytes / gib:.2f} GiB usable is free"
    ]


def check_kernels(
    app: AppDemand, others: Sequence[AppDemand], memory: MemoryBudget | None, squad_size: int, limits: AdmissionLimits
) -> list[str]:
    reasons = []
    ratio_limit = limits.kernel_ratio(squad_size)
    for other in others:
        for long, short in ((app, other), (other, app)):
            share = long.longest_kernel / short.target
            if share > limits.long_kernel_share:
                reasons.append(
                    f"kernels too long to share a squad: {long.name!r} has a {long.longest_kernel * 1e3:.3g} ms kernel, "
                    f"{share:.0%} of {short.name!r}'s {short.target * 1e3:.3g} ms latency target "
                    f"(limit {limits.long_kernel_share:.0%})"
                )
        lo, hi = sorted((app, other), key=lambda d: d.mean_kernel)
        ratio = hi.mean_kernel / lo.mean_kernel
        if ratio > ratio_limit:
            reasons.append(
                f"kernels too short to share a squad: {lo.name!r} kernels average {lo.mean_kernel * 1e6:.3g} us, "
                f"{ratio:.0f}x shorter than {hi.name!r}'s {hi.mean_kernel * 1e6:.3g} us "
                f"(limit {ratio_limit:g}x with squads of {squad_size} kernels)"
            )
    return reasons


Check = Callable[[AppDemand, Sequence[AppDemand], "MemoryBudget | None", int, AdmissionLimits], list[str]]
CHECKS: tuple[Check, ...] = (check_quota, check_memory, check_kernels)


def admit(
    app: AppDemand,
    others: Sequence[AppDemand],
    memory: MemoryBudget | None,
    squad_size: int,
    limits: AdmissionLimits = AdmissionLimits(),
) -> Admission:
    """Accept ``app`` next to ``others``, or reject it with every reason.

    ``memory`` None skips the memory rule (a quota change allocates nothing).
    """
    reasons = [r for check in CHECKS for r in check(app, others, memory, squad_size, limits)]
    warnings: list[str] = []
    gate = limits.colocation
    if gate is not None and app.profile is not None:
        rejected, warnings = gate.judge(app.name, app.profile, [(o.name, o.profile) for o in others if o.profile])
        reasons += rejected
    return Admission(not reasons, "; ".join(reasons), tuple(warnings))
