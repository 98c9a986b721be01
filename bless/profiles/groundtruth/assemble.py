"""Turning a PassData into a validated ground-truth profile.

Each kernel's known points become its 18-level curve with
:func:`bless.profiles.groundtruth.scaling.fit_curve`; a host-to-device copy of the input comes first
and a device-to-host copy of the output last; ``T`` is the kernels' sum plus the
host's launch cost of the first kernel.

PCIe: the A100 sits on PCIe 4.0 x16, whose unidirectional copy-engine bandwidth
measured with nvbandwidth on A100-SXM4 is about 24.8 GB/s (NVIDIA developer
forum, "Asymmetric PCIe bandwidth in bidirectional transfers", 2025:
``host_to_device_memcpy_ce`` 24.81 GB/s; D2H ~24 GB/s); 31.5 GB/s is the link's
theoretical payload rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bless.hw.gpus import A100, GpuSpec
from bless.profiles.format import KernelDesc, Profile, Provenance, profile_from_dict
from bless.profiles.groundtruth import networks
from bless.profiles.groundtruth.names import short_name
from bless.profiles.groundtruth.passes import SOURCE_CODES, KernelSeries, PassData
from bless.profiles.groundtruth.scaling import FITTED, Curve, ScalingParams, fit_curve

PCIE_BYTES_PER_S = 24.8e9
LAUNCH_S = 3e-6
"""Host cost of launching the first kernel (the simulator's ``HostCosts.launch``)."""


@dataclass(frozen=True)
class Copy:
    """One host-device copy: its bytes and fixed time."""

    name: str
    bytes: int

    @property
    def seconds(self) -> float:
        return self.bytes / PCIE_BYTES_PER_S


def io_copies(model: str, batch: int) -> tuple[Copy, Copy]:
    f = networks.facts(model)
    return (
        Copy("memcpy_h2d_input", f.input_bytes_per_sample * batch),
        Copy("memcpy_d2h_output", f.output_bytes_per_sample * batch),
    )


def kernel_curves(pd: PassData, gpu: GpuSpec = A100, params: ScalingParams = FITTED, level_sms=None) -> list[Curve]:
    """Every kernel's curve at ``gpu``'s 18 levels (or at ``level_sms``) from its known points, in us.

    The one assembly step that profiles and ``tools/validate_scaling.py`` share.
    """
    level_sms = gpu.level_sms() if level_sms is None else level_sms
    return [fit_curve(level_sms, k.points, k.traits, sm_count=gpu.sm_count, params=params) for k in pd.kernels]


def build_profile(
    app: str,
    pd: PassData,
    *,
    kind: str,
    facts_model: str,
    memory_bytes: int,
    proxy: bool = False,
    source: str,
    details: dict,
    gpu: GpuSpec = A100,
) -> Profile:
    """The profile of ``pd`` (``facts_model`` names the architecture for the copies; ``proxy``: it
    stands in for another network, and the provenance says so)."""
    level_sms = gpu.level_sms()
    h2d, d2h = io_copies(facts_model, pd.batch)
    descs = [_copy_desc(h2d)]
    cols = [np.full(len(level_sms), h2d.seconds)]
    for k, curve in zip(pd.kernels, kernel_curves(pd, gpu)):
        cols.append(curve.t * 1e-6)
        descs.append(_kernel_desc(k, curve.max_sm_share, curve.t[-1] * 1e-6, gpu))
    descs.append(_copy_desc(d2h))
    cols.append(np.full(len(level_sms), d2h.seconds))
    t = np.round(np.column_stack(cols) * 1e6, 3) * 1e-6  # the file's ns resolution, so tau stays exact
    T = t.sum(axis=1) + LAUNCH_S
    codes = "c" + "".join(k.source for k in pd.kernels) + "c"
    prov = {
        "method": "derived",
        "gpu": gpu.name,
        "source": source,
        "model": ("PROXY for " + app.removesuffix("_train") + ": " if proxy else "")
        + f"{networks.facts(facts_model).description}, batch {pd.batch}",
        "tool": "tools/build_a100_profiles.py",
        "details": {
            **details,
            "data_files": list(pd.files),
            "steps": list(pd.notes),
            "kernel_sources": codes,
            "source_legend": {c: _legend(c) for c in sorted(set(codes))},
            "pcie_bytes_per_s": PCIE_BYTES_PER_S,
            "copies_bytes": {"h2d": h2d.bytes, "d2h": d2h.bytes},
            "T_rule": "sum of the kernels at the level + 3 us host launch of the first kernel",
        },
    }
    profile = Profile(
        app=app,
        gpu=gpu.name,
        kind=kind,
        batch=pd.batch,
        level_sms=tuple(level_sms),
        kernels=tuple(descs),
        t=t,
        T=T,
        memory_bytes=int(memory_bytes),
        provenance=Provenance(**prov),
    )
    return profile_from_dict(profile.to_dict())  # validate exactly what will be written


def _legend(code: str) -> str:
    if code.islower():
        return SOURCE_CODES[code]
    return SOURCE_CODES[code.lower()] + "; then interpolated in batch operator by operator (see steps)"


def _copy_desc(c: Copy) -> KernelDesc:
    return KernelDesc(name=c.name, kind="memcpy", max_sm_share=1.0, dram_util=0.0, dram_bytes=float(c.bytes))


def _kernel_desc(k: KernelSeries, share: float, full_s: float, gpu: GpuSpec) -> KernelDesc:
    dram = min(max(k.dram_util, 0.0), 1.0)
    return KernelDesc(
        name=short_name(k.name),
        kind="compute",
        grid=k.grid,
        block=k.block,
        registers=k.registers,
        shared_mem=k.shared_mem,
        max_sm_share=share,
        dram_util=dram,
        flops=None,
        dram_bytes=round(dram * gpu.dram_bandwidth * full_s, 1) if dram > 0 else None,
    )
