"""Ground truth of an app's kernels for the simulated GPU.

The simulator needs, per kernel, its solo duration at *every* SM count, the SMs
it spreads over, the share of them it keeps busy and how hard it pulls on DRAM.  All
come from the app's
ground-truth profile through :mod:`bless.profiles.features` (see there why the
curves are not flattened at the SMs a kernel occupies).
"""

from __future__ import annotations

from dataclasses import dataclass

from bless.hw.gpus import GpuSpec
from bless.profiles import features
from bless.profiles.format import Profile


@dataclass(frozen=True, eq=False)
class SimKernel:
    """One kernel as the engine sees it (plain lists: scalar reads are hot)."""

    name: str
    is_memcpy: bool
    max_sms: int
    """Most SMs the kernel spreads its blocks over; 0 for memory copies (copy engine)."""
    busy_sms: int
    """SMs' worth of capacity it uses on them at full speed (:func:`bless.profiles.features.busy_sms`);
    the rest is open to other kernels' blocks."""
    solo: list[float]
    """solo[n]: duration alone on n SMs, n = 0..N (solo[0] = inf)."""
    dram_seconds: float
    """Bytes moved, as seconds of peak DRAM bandwidth: dram_util * t(full)."""
    drain_seconds: float = 0.0
    """How long an ordinary kernel waits, on average, for an SM these blocks fill when this
    kernel runs in a low-priority stream (:func:`bless.profiles.features.drain_seconds`); 0 if unknown."""


@dataclass(frozen=True, eq=False)
class SimApp:
    """All kernels of one app, ready for the engine."""

    name: str
    kernels: tuple[SimKernel, ...]

    @classmethod
    def from_profile(cls, profile: Profile, gpu: GpuSpec) -> SimApp:
        """The engine's kernels of ``profile``: the per-kernel readings of
        :mod:`bless.profiles.features` (which KACE and the bound read too), as plain lists."""
        solo = features.solo_curves(profile, gpu)
        caps = features.max_sms(profile, gpu)
        busy = features.busy_sms(profile, gpu)
        dram = features.dram_seconds(profile, solo[-1])
        drain = features.drain_seconds(profile, gpu)
        return cls(
            profile.app,
            tuple(
                SimKernel(
                    desc.name,
                    desc.kind == "memcpy",
                    int(caps[k]),
                    int(busy[k]),
                    solo[:, k].tolist(),
                    float(dram[k]),
                    float(drain[k]),
                )
                for k, desc in enumerate(profile.kernels)
            ),
        )
