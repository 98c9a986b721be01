"""MIG: static hardware slices (A100: 1g/2g/3g/4g/7g of 14-SM GPCs, memory in eighths).

Each app runs alone in a GPU instance: its compute slices' SMs
(``g x 14`` on the A100, so even 7g has 98 of the 108 SMs), its memory slices'
share of the device memory and -- because each memory slice brings its own L2
and DRAM channels -- the same share of the DRAM bandwidth (the simulated
engine's ``bandwidth_share``).  Apps cannot interfere, nor can one use SMs
another leaves idle.  Requests launch whole as they arrive, up to two at a time
per app.

A quota is a share of the GPU; MIG expresses only ``g/7`` for the profiles
that exist (1, 2, 3, 4 and 7 slices) and only combinations that fit the
instance placements.  Anything else is **unsupported** and says so
(:class:`MigUnsupported`).  For comparisons the opt-in ``rounding`` modes map
a quota to a slice -- ``down`` (largest profile not above the quota) or
``nearest`` -- and the slices used are recorded in the results
(``describe()['slices']``).

Simplifies: instance creation and reconfiguration are not modelled (slices are
fixed for the run); the per-slice bandwidth is proportional to memory slices.
"""

from __future__ import annotations

import dataclasses

from bless.core.lifecycle import AppState
from bless.core.policy import Decision, Policy
from bless.hw.gpus import GpuSpec, MigProfile
from bless.hw.mig import compute_slices, place
from bless.policies.common import launch_queued

__all__ = ["MigPolicy", "MigUnsupported", "mig_profile", "mig_slice_gpu", "place"]

ROUNDING = ("exact", "down", "nearest")


class MigUnsupported(ValueError):
    """MIG cannot give these quotas; the message says what it can do."""


def _supported(gpu: GpuSpec) -> str:
    slices = compute_slices(gpu)
    return ", ".join(
        f"{p.compute_slices}/{slices} ({p.name}, {p.compute_slices / slices:.1%})" for p in gpu.mig_profiles
    )


def mig_profile(quota: float, gpu: GpuSpec, rounding: str = "exact", app: str = "app") -> MigProfile:
    """The MIG profile that serves ``quota`` of ``gpu`` under ``rounding``."""
    if rounding not in ROUNDING:
        raise ValueError(f"mig rounding must be one of {', '.join(ROUNDING)}, got {rounding!r}")
    if not gpu.mig_profiles:
        raise MigUnsupported(f"MIG is not modelled for {gpu.name}; no MIG profiles are known for it")
    slices = compute_slices(gpu)
    want = quota * slices
    if rounding == "exact":
        for p in gpu.mig_profiles:
            if abs(p.compute_slices - want) < 1e-6:
                return p
        raise MigUnsupported(
            f"MIG cannot give app {app!r} a quota of {quota:.1%}: {gpu.name} MIG instances hold "
            f"{_supported(gpu)} of the GPU. Use one of those quotas, or set the mig policy's "
            f"rounding to 'down' or 'nearest' to compare with the closest slice (recorded in the results)"
        )
    if rounding == "down":
        fits = [p for p in gpu.mig_profiles if p.compute_slices <= want + 1e-9]
        if not fits:
            raise MigUnsupported(
                f"MIG cannot give app {app!r} a quota of {quota:.1%}: the smallest {gpu.name} instance "
                f"({gpu.mig_profiles[0].name}) is {gpu.mig_profiles[0].compute_slices / slices:.1%}; "
                f"use rounding 'nearest'"
            )
        return max(fits, key=lambda p: p.compute_slices)
    return min(gpu.mig_profiles, key=lambda p: (abs(p.compute_slices - want), p.compute_slices))


def mig_slice_gpu(gpu: GpuSpec, profile: MigProfile) -> GpuSpec:
    """The device an app sees inside one instance: memory and DRAM bandwidth in proportion to
    its memory slices.  SMs stay the GPU's (the app's context is restricted to the slice's SMs)
    so that kernels scale on the whole GPU's curves."""
    share = profile.memory_slices / gpu.mig_memory_slices
    return dataclasses.replace(
        gpu,
        full_name=f"{gpu.full_name} MIG {profile.name}",
        memory_bytes=int(gpu.memory_bytes * share),
        dram_bandwidth=gpu.dram_bandwidth * share,
    )


class MigPolicy(Policy):
    """Static MIG instances, one per app (``isolated``: the runner gives each app its own slice)."""

    name = "mig"
    isolated = True

    def __init__(self, rounding: str = "exact") -> None:
        if rounding not in ROUNDING:
            raise ValueError(f"mig rounding must be one of {', '.join(ROUNDING)}, got {rounding!r}")
        self.rounding = rounding
        self._chosen: dict[int, MigProfile] = {}
        self._limits: dict[int, int] = {}

    def _profile(self, app: AppState, gpu: GpuSpec) -> MigProfile:
        return mig_profile(app.quota, gpu, self.rounding, app.name)

    def check(self, quotas: list[float], gpu: GpuSpec, names: list[str] | None = None) -> list[MigProfile]:
        """The instances for ``quotas``, or :class:`MigUnsupported` when MIG cannot host them together."""
        names = names or [f"app {i}" for i in range(len(quotas))]
        chosen = [mig_profile(q, gpu, self.rounding, n) for q, n in zip(quotas, names)]
        if place(chosen, gpu.mig_memory_slices) is None:
            combo = " + ".join(p.name for p in chosen)
            raise MigUnsupported(
                f"MIG cannot host {combo} on one {gpu.name}: no valid placement of these instances "
                f"(at most {compute_slices(gpu)} compute and "
                f"{gpu.mig_memory_slices} memory slices, fixed start positions)"
            )
        return chosen

    def app_gpu(self, app: AppState, gpu: GpuSpec) -> GpuSpec:
        self._chosen[app.index] = self._profile(app, gpu)
        ordered = [self._chosen[i] for i in sorted(self._chosen)]
        if place(ordered, gpu.mig_memory_slices) is None:
            raise MigUnsupported(
                f"MIG cannot host {' + '.join(p.name for p in ordered)} on one {gpu.name}: "
                f"no valid placement of these instances"
            )
        return mig_slice_gpu(gpu, self._chosen[app.index])

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        self.check([a.quota for a in apps], gpu, [a.name for a in apps])
        self._limits = {a.index: self._profile(a, gpu).compute_slices * gpu.mig_slice_sms for a in apps}

    def context_limits(self, app: AppState, gpu: GpuSpec) -> list[int | None]:
        return [self._limits[app.index]]

    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        return launch_queued(apps, lambda app: self._limits[app.index])

    def describe(self) -> dict:
        slices = "+".join(self._chosen[i].name for i in sorted(self._chosen))
        return {"policy": self.name, "rounding": self.rounding, **({"slices": slices} if slices else {})}
