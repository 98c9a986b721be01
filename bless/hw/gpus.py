"""GPU models: the hardware facts every other module reads.

BLESS divides a GPU into ``N = 18`` partition levels: level ``k`` (1..18) is
``k/18`` of the SMs.  Hardware cannot hand out arbitrary SM counts, so each
level is rounded to the SM granularity of the mechanism that restricts the
context:

* MPS execution affinity (``CU_EXEC_AFFINITY_TYPE_SM_COUNT``): the driver rounds
  a request *up* to whole TPCs (2 SMs) on Ampere and Hopper.
* Green contexts (``cuDevSmResourceSplitByCount``): groups of at least 2 SMs on
  compute capability 8.x and 8 SMs on 9.x (CUDA driver API documentation).

Rounding rule (documented in the README): ``round_half_up(k * sms / 18)`` to the
nearest multiple of the granularity, at least one granule, for green contexts at
most the SMs the driver's split groups (``GpuSpec.green_groupable_sms``), and level
18 is always the whole GPU.  On the A100 (108 SMs) every level is an exact multiple of 6 SMs,
so no rounding happens under either mechanism with granularity <= 6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bless.hw.costs import gpu_constants

N_LEVELS = 18
"""Number of SM partition levels (the paper's N)."""

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile (e.g. A100 ``3g.20gb``)."""

    name: str
    compute_slices: int
    """GPCs of ``GpuSpec.mig_slice_sms`` SMs each (the ``g`` in ``3g``)."""
    memory_slices: int
    """Eighths of the memory and of its bandwidth (L2 and DRAM channels)."""
    placements: tuple[int, ...]
    """Memory-slice indices an instance may start at (``nvidia-smi mig -lgipp``)."""


@dataclass(frozen=True)
class GpuSpec:
    """Static description of one GPU model."""

    name: str
    """Short name used on the command line and in profiles (``a100``)."""
    full_name: str
    sm_count: int
    dram_bandwidth: float
    """Peak DRAM bandwidth in bytes/second."""
    memory_bytes: int
    fp32_flops: float
    """Peak FP32 (non-tensor) throughput in FLOP/s."""
    tensor_flops: float
    """Peak dense FP16/BF16 tensor-core throughput in FLOP/s."""
    compute_capability: tuple[int, int]
    granularity: dict[str, int] = field(default_factory=dict)
    """SM granularity per restriction mechanism (``mps``, ``green``)."""
    green_groupable_sms: int = 0
    """SMs that ``cuDevSmResourceSplitByCount`` puts in whole groups of the green granule
    (0: all of them).  The driver splits into symmetrical groups and may make fewer than
    ``sm_count / granule`` (CUDA driver API, green contexts).  The level table, whose unions
    are taken from the low end, holds at most this many SMs per restricted level; the rest
    is the split's remainder, which joins the unions taken from the high end
    (:meth:`green_group_sizes`)."""
    tf32_flops: float = 0.0
    """Peak dense TF32 tensor-core throughput in FLOP/s (0: no TF32 tensor cores)."""
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    shared_mem_per_sm: int = 164 * 1024
    """Per-SM limits on resident blocks (CUDA C++ Programming Guide, "Technical Specifications
    per Compute Capability": 2048 threads, 32 blocks and 64 K 32-bit registers per SM on
    compute capability 8.0 and 9.0; shared memory 164 KB per SM on 8.0, 228 KB on 9.0).  They
    decide how many of a kernel's blocks share an SM (:func:`bless.profiles.features.resident_blocks`)."""
    l2_bytes: int = 40 * MIB
    clock_hz: float = 1.41e9
    mig_slice_sms: int = 0
    """SMs in one MIG compute slice (0: no MIG)."""
    mig_memory_slices: int = 0
    mig_profiles: tuple[MigProfile, ...] = ()
    """GPU-instance profiles MIG offers on this GPU (empty: not modelled)."""

    @property
    def bandwidth_share(self) -> float:
        """Share of the full GPU's DRAM bandwidth (below 1 for a MIG slice of it)."""
        full = GPUS.get(self.name)
        if full is None or full.dram_bandwidth <= 0:
            return 1.0
        return min(1.0, self.dram_bandwidth / full.dram_bandwidth)

    @property
    def arch(self) -> str:
        """The CUDA target architecture, e.g. ``sm_80``."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def context_bytes(self, mechanism: str) -> int:
        """Device memory one context restricted by ``mechanism`` costs, from this GPU's
        data file (``bless/hw/<name>.toml``, where its source or assumption is
        stated).  On a real GPU prefer ``Backend.context_bytes``: the CUDA backend
        measures it."""
        data = gpu_constants(self.name)
        try:
            return data.context_memory[mechanism]
        except KeyError:
            raise ValueError(
                f"no context memory for mechanism {mechanism!r} on {self.name} ({data.path}); "
                f"use one of: {', '.join(sorted(data.context_memory))}"
            ) from None

    def level_sms(self, mechanism: str = "mps") -> tuple[int, ...]:
        """SM count of each of the 18 partition levels (index 0 is level 1)."""
        return tuple(self.sms_for_level(k, mechanism) for k in range(1, N_LEVELS + 1))

    def sms_for_level(self, level: int, mechanism: str = "mps") -> int:
        """SM count of partition level ``level`` (1..18) under ``mechanism``."""
        if not 1 <= level <= N_LEVELS:
            raise ValueError(f"level must be in 1..{N_LEVELS}, got {level}")
        if level == N_LEVELS:
            return self.sm_count
        return self.round_sms(level * self.sm_count / N_LEVELS, mechanism)

    def green_group_sizes(self) -> list[int]:
        """SMs of each group a green-context split makes, in SM order: whole groups of the
        granule, then the split's remainder as one more group (as the driver merged it on a GH100)."""
        granule = self.granularity.get("green", 1)
        grouped = self.green_groupable_sms or self.sm_count // granule * granule
        rest = self.sm_count - grouped
        return [granule] * (grouped // granule) + ([rest] if rest else [])

    def round_sms(self, sms: float, mechanism: str = "mps") -> int:
        """Round an SM request to what ``mechanism`` can grant."""
        try:
            granule = self.granularity[mechanism]
        except KeyError:
            known = ", ".join(sorted(self.granularity))
            raise ValueError(
                f"unknown SM restriction mechanism {mechanism!r} for {self.name}; use one of: {known}"
            ) from None
        granted = granule * math.floor(sms / granule + 0.5)
        if granted >= self.sm_count:
            return self.sm_count
        if mechanism == "green" and self.green_groupable_sms:
            granted = min(granted, self.green_groupable_sms)
        return int(max(granule, granted))


A100 = GpuSpec(
    name="a100",
    full_name="NVIDIA A100-SXM4-40GB",
    sm_count=108,
    dram_bandwidth=1555e9,
    memory_bytes=40 * GIB,
    fp32_flops=19.5e12,
    tensor_flops=312e12,
    tf32_flops=156e12,
    compute_capability=(8, 0),
    granularity={"mps": 2, "green": 2},
    shared_mem_per_sm=164 * 1024,
    l2_bytes=40 * MIB,
    clock_hz=1.41e9,
    mig_slice_sms=14,
    mig_memory_slices=8,
    mig_profiles=(
        MigProfile("1g.5gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        MigProfile("2g.10gb", 2, 2, (0, 2, 4)),
        MigProfile("3g.20gb", 3, 4, (0, 4)),
        MigProfile("4g.20gb", 4, 4, (0,)),
        MigProfile("7g.40gb", 7, 8, (0,)),
    ),
)
"""A100 40 GB SXM: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), Table 1: FP32 19.5,
TF32 tensor 156, FP16 tensor 312 TFLOP/s dense; HBM2 1555 GB/s.
MIG profiles and placements: NVIDIA Multi-Instance GPU User Guide, "A100 MIG
profiles" (a GPC slice has 14 SMs, so 7g.40gb has 98 of the 108 SMs)."""

H100 = GpuSpec(
    name="h100",
    full_name="NVIDIA H100-SXM5-80GB",
    sm_count=132,
    dram_bandwidth=3350e9,
    memory_bytes=80 * GIB,
    fp32_flops=66.9e12,
    tensor_flops=989e12,
    tf32_flops=494.7e12,
    compute_capability=(9, 0),
    granularity={"mps": 2, "green": 8},
    green_groupable_sms=120,
    shared_mem_per_sm=228 * 1024,
    l2_bytes=50 * MIB,
    clock_hz=1.98e9,
    mig_slice_sms=16,
    mig_memory_slices=8,
)
"""H100 SXM5 80 GB: NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), Table 1 (SXM5):
FP32 66.9, TF32 tensor 494.7, FP16 tensor 989.4 TFLOP/s dense (half the sparse figures); HBM3 3.35 TB/s.
Green contexts: a split into 8-SM groups made 15 groups (120 SMs) and a 12-SM remainder on a
132-SM GH100 (an H200, driver 580.159.04; tools/gpu_check_results/2026-11-26-h200/gpu_check.json),
so levels 16 and 17 are both 120 SMs there."""

GPUS: dict[str, GpuSpec] = {g.name: g for g in (A100, H100)}

DEFAULT_GPU = A100.name
"""The GPU model a run, a server or a command uses when none is named: the BLESS paper's testbed
(an A100), the model the shipped profiles and the interference fit come from
(``../shared/data``)."""


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU model up by short name, with an error that lists the known ones."""
    key = name.strip().lower().replace("-", "")
    for gpu in GPUS.values():
        if key in (gpu.name, gpu.full_name.lower().replace("-", "")):
            return gpu
    raise ValueError(f"unknown GPU {name!r}; known GPUs: {', '.join(GPUS)}")
