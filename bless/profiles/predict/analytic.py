"""Analytic kernel timing: one kernel's duration at ``n`` SMs from its descriptor alone.

Used where no GPU can time the kernels (a model compiled here, an H100 we do not
have).  For a kernel of ``B`` blocks doing ``flops`` and moving ``dram_bytes``::

    t(n) = launch + max(t_compute(n), t_memory(n))

* **Occupancy**: ``k`` blocks fit on one SM, the smallest of the thread, block,
  register and shared-memory limits of the GPU (CUDA occupancy rules: registers
  are allocated per warp in units of 256, each block reserves 1 KiB of shared
  memory on compute capability 8.x/9.x; CUDA C++ Programming Guide, "Compute
  Capabilities").
* **Waves** (wave quantisation): the busiest SM holds ``c = min(k, ceil(B/n))``
  blocks at once, in ``waves = ceil(B / (c*n))`` rounds.  Each round costs ``c``
  blocks' work at the SM's throughput, ``peak/SMs * efficiency[op class] *
  min(1, resident warps / warps_to_saturate)``: a lone small block cannot keep an
  SM's pipelines busy.  Below ``B/k`` SMs the time grows in steps; above ``B``
  SMs it is flat.
* **Memory**: ``dram_bytes / (bandwidth * dram_efficiency * min(1, m / (knee *
  SMs)))`` with ``m = min(n, B)`` SMs holding blocks: a few SMs cannot pull the
  whole DRAM bandwidth, and a memory-bound kernel stops gaining at ``knee`` of
  the GPU (the A100 data: at about half the SMs).
* **launch**: launch, ramp-up and tail, which no SM count shortens.
* **Block latency**: a round of resident blocks takes at least ``wave_us`` on an
  SM however little each block does (issue, a chain of dependent loads,
  retirement), so a kernel of millions of tiny blocks costs
  ``ceil(B / (k*n)) * wave_us``: NASNet's TVM pooling kernels (3.2 M blocks)
  run for 3.6 ms on a GH100 where their bytes and FLOPs say 20 us.
* **Compiled kernels**: a kernel TVM's default schedules compiled here
  (``KernelWork.compiled``) reaches ``compiled_matmul_efficiency`` of the FP32
  peak on matmul-class work, far below what cuBLAS and cuDNN reach.

The efficiency constants are fitted by ``tools/validate_analytic.py --fit`` on
single-op measurements with known shapes (NeuSight, A100 and H100) and on the
A100 MPS per-kernel measurements, and the H100's ``wave_us`` and
``compiled_matmul_efficiency`` by ``tools/validate_compiled.py --fit`` on TVM
kernels measured on a GH100; :data:`FITTED` records the data and the fit
error.  Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from bless.hw.gpus import GpuSpec

PRECISIONS = ("fp32", "tf32")
"""fp32: a kernel's arithmetic runs on the FP32 CUDA cores (a plain fp32 build such as
TVM's default schedules); tf32: matmul-class kernels run on TF32 tensor cores (what
cuDNN and cuBLAS do for fp32 convolutions and GEMMs under PyTorch's defaults on
Ampere and Hopper; the measured A100 profiles ran so)."""

OP_CLASSES = ("matmul", "reduction", "elementwise")
"""matmul: convolutions and matrix products (tiled, compute-heavy); reduction:
softmax, norms, pooling, reductions; elementwise: everything else."""

REGISTER_UNIT = 256
"""Registers are allocated per warp in units of 256 (compute capability 8.x/9.x)."""
RESERVED_SHARED_PER_BLOCK = 1024
"""Shared memory the runtime reserves per block on compute capability 8.x/9.x."""
DEFAULT_REGISTERS = 32
"""Registers per thread assumed when a descriptor does not say (occupancy then
limited by threads and shared memory)."""
KNEE_TOLERANCE = 0.03
"""d%: the first SM count within 3 % of the full-GPU time (as :mod:`bless.build.profiler`)."""

_MATMUL = re.compile(r"conv|matmul|dense|gemm|bmm|linear|winograd|fprop|xmma|cutlass|s1688|dot|addmm|\bmm\b", re.I)
_REDUCTION = re.compile(r"softmax|norm|reduce|mean|sum|pool|argmax|max_|min_|variance|cumsum", re.I)


@dataclass(frozen=True)
class KernelWork:
    """What the model needs to know of one kernel launch."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    flops: float = 0.0
    dram_bytes: float = 0.0
    registers: int | None = None
    """Per thread; None: :data:`DEFAULT_REGISTERS`."""
    shared_mem: int = 0
    """Static + dynamic shared memory per block, bytes."""
    op_class: str = ""
    """One of :data:`OP_CLASSES`; empty: from the name (:func:`op_class`)."""
    precision: str = "fp32"
    """One of :data:`PRECISIONS`: which units do a matmul-class kernel's arithmetic."""
    compiled: bool = False
    """Compiled by TVM's default schedules (a build plan's PTX) rather than a vendor library's kernel."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"kernel {self.name!r}: precision must be one of {', '.join(PRECISIONS)}")
        for key in ("grid", "block"):
            dims = getattr(self, key)
            if len(dims) != 3 or any(int(d) < 1 for d in dims):
                raise ValueError(f"kernel {self.name!r}: {key} must be 3 positive integers, got {dims!r}")
        if self.flops < 0 or self.dram_bytes < 0 or not math.isfinite(self.flops + self.dram_bytes):
            raise ValueError(f"kernel {self.name!r}: flops and dram_bytes must be finite and >= 0")
        if self.op_class and self.op_class not in OP_CLASSES:
            raise ValueError(f"kernel {self.name!r}: op_class must be one of {', '.join(OP_CLASSES)}")

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def kind(self) -> str:
        return self.op_class or op_class(self.name)


@dataclass(frozen=True)
class AnalyticParams:
    """The model's constants (see the module docstring)."""

    compute_efficiency: dict[str, float]
    """Fraction of the SM's peak FLOP rate a saturated SM reaches, per op class."""
    dram_efficiency: float
    """Fraction of peak DRAM bandwidth a memory-bound kernel reaches on the whole GPU."""
    mem_knee: float
    """Share of the GPU's SMs at which DRAM bandwidth saturates."""
    warps_to_saturate: float
    """Resident warps one SM needs to reach its full throughput."""
    launch_us: float
    """Launch, ramp-up and tail: the floor of every kernel."""
    quantisation: float = 1.0
    """How much of the wave step is real: 1 charges every wave in full (blocks that do not share
    an SM's throughput), 0 charges only the busiest SM's ``ceil(B/n)`` blocks (blocks that do)."""
    tensor_efficiency: float = 0.0
    """Fraction of the TF32 tensor-core peak matmul-class kernels reach at ``precision`` tf32."""
    wave_us: float = 0.0
    """Least time one round of resident blocks takes on an SM (0: no floor)."""
    compiled_matmul_efficiency: float = 0.0
    """Fraction of the FP32 peak a compiled (TVM default-schedule) matmul-class kernel reaches
    (0: as a library kernel, ``compute_efficiency['matmul']``)."""
    provenance: dict[str, str] = field(default_factory=dict, compare=False)


FITTED: dict[str, AnalyticParams] = {
    "a100": AnalyticParams(
        compute_efficiency={"matmul": 0.768, "reduction": 0.250, "elementwise": 0.250},
        dram_efficiency=0.874,
        mem_knee=0.50,
        warps_to_saturate=4.0,
        launch_us=6.00,
        quantisation=0.00,
        tensor_efficiency=0.293,
        provenance={
            "data": "NeuSight A100 ops >= 50 us, even rows: mean |log err| 0.168; A100 MPS per-kernel "
            "scaling resnet152/vgg19/mobilenet/inception: time-weighted mean |log err| 0.125; "
            "TF32: TVM plans of resnet152/vgg16 batch 8 vs their measured A100 passes: 0.234"
        },
    ),
    "h100": AnalyticParams(
        compute_efficiency={"matmul": 0.661, "reduction": 0.250, "elementwise": 0.250},
        dram_efficiency=0.956,
        mem_knee=0.50,
        warps_to_saturate=4.0,
        launch_us=6.00,
        quantisation=0.00,
        tensor_efficiency=0.293,
        wave_us=0.948,
        compiled_matmul_efficiency=0.234,
        provenance={
            "data": "NeuSight H100 bmm/linear >= 50 us, even rows: mean |log err| 0.192; launch_us, "
            "mem_knee, warps_to_saturate, quantisation, tensor_efficiency and the non-matmul "
            "classes from the A100; wave_us and compiled_matmul_efficiency: 1712 kernels of six TVM "
            "plans measured at 18 levels on a GH100 (tools/validate_compiled.py --fit, "
            "tools/gpu_check_results/2026-11-26-h200): time-weighted mean |log err| 0.141 "
            "(3.262 without them); leave-one-app-out T error 2.9-7.5 % (CNNs, NASNet), 15-19 % (BERTs)"
        },
    ),
}
"""Fitted constants per GPU (``tools/validate_analytic.py --fit`` prints this block, ~2 min).

``reduction`` and ``elementwise`` efficiencies are not fitted: every such kernel in
the data is memory-bound, so they are not identifiable; 0.25 only matters for a
kernel of those classes with high arithmetic intensity."""


def params_for(gpu: GpuSpec) -> AnalyticParams:
    """The fitted constants of ``gpu``, or a clear error."""
    try:
        return FITTED[gpu.name]
    except KeyError:
        raise ValueError(
            f"no analytic-model constants for {gpu.name}; fitted GPUs: {', '.join(FITTED)} "
            f"(fit them with tools/validate_analytic.py --fit)"
        ) from None


# ------------------------------------------------------------------ pieces
def op_class(name: str) -> str:
    """The op class of a kernel from its name (TVM ``fused_conv2d_add_relu``, cuDNN, ATen names)."""
    if _MATMUL.search(name):
        return "matmul"
    if _REDUCTION.search(name):
        return "reduction"
    return "elementwise"


def blocks_per_sm(gpu: GpuSpec, threads: int, registers: int | None, shared_mem: int) -> int:
    """Blocks of this shape one SM holds at once (the occupancy limit)."""
    if not 1 <= threads <= 1024:
        raise ValueError(f"threads per block must be in 1..1024, got {threads}")
    regs = DEFAULT_REGISTERS if registers is None else max(1, registers)
    if regs > 255:
        raise ValueError(f"registers per thread must be <= 255, got {regs}")
    warps = math.ceil(threads / 32)
    regs_per_warp = REGISTER_UNIT * math.ceil(regs * 32 / REGISTER_UNIT)
    smem = shared_mem + RESERVED_SHARED_PER_BLOCK
    if smem > gpu.shared_mem_per_sm:
        raise ValueError(
            f"shared memory per block {shared_mem} B exceeds the {gpu.name}'s {gpu.shared_mem_per_sm} B per SM"
        )
    limits = (
        gpu.max_blocks_per_sm,
        gpu.max_threads_per_sm // (warps * 32),
        gpu.registers_per_sm // (regs_per_warp * warps),
        gpu.shared_mem_per_sm // smem,
    )
    k = min(limits)
    if k < 1:
        raise ValueError(f"a block of {threads} threads x {regs} registers does not fit on one {gpu.name} SM")
    return k


def compute_seconds(work: KernelWork, gpu: GpuSpec, n: int, params: AnalyticParams) -> float:
    """Time the busiest SM spends on its blocks' arithmetic (wave-quantised)."""
    if work.flops <= 0:
        return 0.0
    b = work.blocks
    k = blocks_per_sm(gpu, work.threads_per_block, work.registers, work.shared_mem)
    resident = min(k, math.ceil(b / n))
    waves = math.ceil(b / (resident * n))
    q = params.quantisation
    blocks_on_busiest = q * waves * resident + (1 - q) * math.ceil(b / n)
    warps = resident * math.ceil(work.threads_per_block / 32)
    sm_rate = peak_flops(work, gpu, params) / gpu.sm_count * min(1.0, warps / params.warps_to_saturate)
    return blocks_on_busiest * (work.flops / b) / sm_rate


def peak_flops(work: KernelWork, gpu: GpuSpec, params: AnalyticParams) -> float:
    """The FLOP/s a saturated GPU reaches on this kernel: the unit's peak times its efficiency."""
    kind = work.kind
    if work.precision == "tf32" and kind == "matmul":
        if gpu.tf32_flops <= 0 or params.tensor_efficiency <= 0:
            raise ValueError(f"no TF32 tensor-core peak or efficiency for {gpu.name}; use precision fp32")
        return gpu.tf32_flops * params.tensor_efficiency
    if work.compiled and kind == "matmul" and params.compiled_matmul_efficiency > 0:
        return gpu.fp32_flops * params.compiled_matmul_efficiency
    return gpu.fp32_flops * params.compute_efficiency[kind]


def memory_seconds(work: KernelWork, gpu: GpuSpec, n: int, params: AnalyticParams) -> float:
    """Time to move the kernel's DRAM bytes with the SMs that hold its blocks."""
    if work.dram_bytes <= 0:
        return 0.0
    busy = min(n, work.blocks)
    share = min(1.0, busy / (params.mem_knee * gpu.sm_count))
    return work.dram_bytes / (gpu.dram_bandwidth * params.dram_efficiency * share)


def duration(work: KernelWork, gpu: GpuSpec, n: int, params: AnalyticParams | None = None) -> float:
    """Seconds the kernel takes alone on ``n`` SMs of ``gpu``."""
    if not 1 <= n <= gpu.sm_count:
        raise ValueError(f"SM count must be in 1..{gpu.sm_count} for {gpu.name}, got {n}")
    params = params or params_for(gpu)
    body = max(
        compute_seconds(work, gpu, n, params),
        memory_seconds(work, gpu, n, params),
        latency_seconds(work, gpu, n, params),
    )
    return params.launch_us * 1e-6 + body


def latency_seconds(work: KernelWork, gpu: GpuSpec, n: int, params: AnalyticParams) -> float:
    """The blocks' latency floor: full rounds of resident blocks times ``wave_us``."""
    if params.wave_us <= 0:
        return 0.0
    k = blocks_per_sm(gpu, work.threads_per_block, work.registers, work.shared_mem)
    return math.ceil(work.blocks / (k * n)) * params.wave_us * 1e-6


def curve(work: KernelWork, gpu: GpuSpec, sms, params: AnalyticParams | None = None) -> np.ndarray:
    """Durations (seconds) at each SM count of ``sms``."""
    return np.array([duration(work, gpu, int(n), params) for n in sms])


def max_sm_share(work: KernelWork, gpu: GpuSpec, params: AnalyticParams | None = None) -> float:
    """d%: the smallest share of the SMs at which the kernel runs within 3 % of its full-GPU time.

    For a kernel whose blocks do not share an SM's throughput this is
    ``min(1, B / (k * SMs))``; it is larger when co-resident blocks compete for
    an SM, and ``B / SMs`` bounds it from above (a block runs on one SM).
    """
    full = duration(work, gpu, gpu.sm_count, params)
    hi = min(gpu.sm_count, work.blocks)
    lo = 1
    # The curve is non-increasing up to hi (see tests), so bisect for the knee.
    while lo < hi:
        mid = (lo + hi) // 2
        if duration(work, gpu, mid, params) <= full * (1 + KNEE_TOLERANCE):
            hi = mid
        else:
            lo = mid + 1
    return min(1.0, hi / gpu.sm_count)


def dram_util(work: KernelWork, gpu: GpuSpec, params: AnalyticParams | None = None) -> float:
    """Share of peak DRAM bandwidth the kernel uses alone on the whole GPU (the simulator's interference input)."""
    t = duration(work, gpu, gpu.sm_count, params)
    return float(min(1.0, work.dram_bytes / (gpu.dram_bandwidth * t)))
