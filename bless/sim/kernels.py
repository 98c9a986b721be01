"""Ground truth of an app's kernels for the simulated GPU.

The simulator needs, per kernel, its solo duration at *every* SM count and how
hard it pulls on DRAM.  Both come from the app's ground-truth profile: the
18-level durations are expanded to a dense table over 1..N SMs with
:func:`bless.profiles.curves.dense_curve` (the time with that many SMs available; not flat
from the kernel's ``max_sm_share``, which says how many SMs it occupies), and
``dram_util`` (fraction of peak bandwidth used alone on the whole GPU) gives the
bytes the kernel moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bless.hw.gpus import GpuSpec
from bless.profiles import curves
from bless.profiles.format import Profile


@dataclass(frozen=True, eq=False)
class SimKernel:
    """One kernel as the engine sees it (plain lists: scalar reads are hot)."""

    name: str
    is_memcpy: bool
    max_sms: int
    """Most SMs the kernel keeps busy; 0 for memory copies (copy engine)."""
    solo: list[float]
    """solo[n]: duration alone on n SMs, n = 0..N (solo[0] = inf)."""
    dram_seconds: float
    """Bytes moved, as seconds of peak DRAM bandwidth: dram_util * t(full)."""


@dataclass(frozen=True, eq=False)
class SimApp:
    """All kernels of one app, ready for the engine."""

    name: str
    kernels: tuple[SimKernel, ...]

    @classmethod
    def from_profile(cls, profile: Profile, gpu: GpuSpec) -> SimApp:
        """The engine's kernels of ``profile``.

        A compute kernel's ``solo`` is its profile curve read at every SM count
        (:func:`bless.profiles.curves.dense_curve`), made non-increasing in SMs and **not**
        flattened from ``max_sms`` on: the engine reads it at the SMs available to
        the kernel, while the kernel occupies at most ``max_sms`` of them
        (``max_sm_share``: occupancy).  ``dram_seconds`` is ``dram_util``
        (measured on the whole GPU) times the full-GPU time.  A copy takes its
        full-GPU time at every count.
        """
        if profile.gpu != gpu.name:
            raise ValueError(
                f"profile {profile.app!r} is for {profile.gpu}, not {gpu.name}; "
                f"use a profile made for {gpu.name} (bless profile {profile.app} --gpu {gpu.name})"
            )
        dense = curves.dense_curve(np.array(profile.level_sms), profile.t, gpu.sm_count)
        kernels = []
        for k, desc in enumerate(profile.kernels):
            col = dense[:, k].copy()
            if desc.kind == "memcpy":
                col[1:] = col[-1]
                kernels.append(SimKernel(desc.name, True, 0, [float(col[-1])] * len(col), 0.0))
                continue
            cap = desc.max_sms(gpu.sm_count)
            # Not flattened at ``cap``: solo[n] is the time with n SMs *available*, and a
            # kernel occupying only ``cap`` of them can still run faster with more available
            # (measured under MPS: a 64-block convolution is 1.58x slower at 66 SMs than at
            # 88).  Solo time only never grows with more SMs (noise can say otherwise).
            col[1:] = np.minimum.accumulate(col[1:])
            kernels.append(
                SimKernel(
                    name=desc.name,
                    is_memcpy=False,
                    max_sms=cap,
                    solo=col.tolist(),
                    dram_seconds=float(desc.dram_util * col[-1]),
                )
            )
        return cls(profile.app, tuple(kernels))
