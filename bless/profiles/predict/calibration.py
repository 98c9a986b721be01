"""Measured kernels the analytic model is fitted and validated on, as :class:`~bless.profiles.predict.analytic.KernelWork`.

Two sources under ``../shared/data/calibration`` (read in place, see its README):

* **NeuSight single ops** (sitar-lab/NeuSight, ASPLOS'25, MIT): one PyTorch op per
  row with its shape, the kernel cuBLAS/ATen ran, its grid and block, and the
  latency (ms, real time).  Shapes give FLOPs and DRAM bytes exactly: bmm/linear
  ``2*B*M*N*K`` FLOPs and their three fp32 matrices; elementwise, softmax and
  layernorm one read per input tensor and one write.  A100 (``A100-PCIE-40GB``,
  same SMs, clock and bandwidth as the SXM4-40GB) has every op; the H100 (SXM5
  ``H100 80GB HBM3``) has bmm and linear only.  Registers are not recorded.
* **A100 MPS per-kernel data** (a gpulet re-implementation's Nsight Compute
  profiles): each cuDNN/cuBLAS/ATen kernel of an inference pass at MPS
  20/40/50/60/80/100 % with grid, block and DRAM utilisation at 100 %, but no
  FLOPs.  We take the bytes it moved from its DRAM utilisation
  (``dram_pct * peak bandwidth * t(108)``); a kernel whose bytes alone explain
  its full-GPU time (above the launch floor) is memory-bound and gets no FLOPs,
  any other gets the FLOPs (SM-side work) that make its compute time at 108 SMs
  equal its measured time.  That tests how the model
  *scales* a kernel from the whole GPU down, not its absolute time.  Registers
  and shared memory come from the A100 PyTorch-profiler traces (kineto) where a
  kernel of the same name appears there.
"""

from __future__ import annotations

import csv
import gzip
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from bless.hw.gpus import A100, GpuSpec
from bless.profiles.predict.analytic import (
    AnalyticParams,
    KernelWork,
    blocks_per_sm,
    compute_seconds,
    memory_seconds,
)
from bless.shared_data import shared_file

NEUSIGHT = "calibration/neusight_multi_gpu_ops"
NEUSIGHT_DATASET = "the NeuSight single-op latencies (sitar-lab/NeuSight, calibration/neusight_multi_gpu_ops)"
MPS = "calibration/a100_mps_kernels"
MPS_DATASET = (
    "the A100 MPS kernel measurements (calibration/a100_mps_kernels: Nsight Compute under MPS, "
    "a public gpulet re-implementation's profiling data)"
)
KINETO = "calibration/kineto_traces"
KINETO_DATASET = "the PyTorch profiler traces (pytorch/kineto samples, HTA test data; calibration/kineto_traces)"

NEUSIGHT_DEVICES = {"a100": "NVIDIA A100-PCIE-40GB", "h100": "NVIDIA H100 80GB HBM3"}
MPS_PCTS = (20, 40, 50, 60, 80, 100)
MPS_MODELS = ("resnet50", "resnet152", "vgg16", "vgg19", "mobilenet", "inception")
FP32 = 4
ELEMENTWISE_READS = {"add": 2, "mul": 2, "div": 2, "pow": 2}
"""Binary ops read two tensors; the ``u`` variants (``addu``: tensor op scalar) and unary ops read one."""
ELEMENTWISE_FLOPS = {"gelu": 8, "tanh": 8, "pow": 4, "powu": 4}
"""Rough FLOPs per element of the transcendental ops; the rest do one.  They stay memory-bound."""


@dataclass(frozen=True)
class OpSample:
    """One measured single op: the kernel, the GPU and its latency (seconds)."""

    work: KernelWork
    gpu: str
    seconds: float
    op: str


@dataclass(frozen=True)
class ScalingSample:
    """One measured A100 kernel: its launch shape, DRAM use and time at each MPS SM count."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int | None
    shared_mem: int
    dram_pct: float
    """DRAM bandwidth used at 108 SMs, percent of peak (Nsight Compute)."""
    model: str
    batch: int
    seconds: dict[int, float]
    """SMs -> seconds, for every measured level."""

    def work(self, params: AnalyticParams, gpu: GpuSpec = A100) -> KernelWork:
        """The kernel as the model sees it (module docstring: bytes from DRAM use, FLOPs fill the full-GPU time)."""
        t_full = self.seconds[gpu.sm_count]
        base = KernelWork(
            name=self.name,
            grid=self.grid,
            block=self.block,
            flops=1.0,
            dram_bytes=self.dram_pct / 100 * gpu.dram_bandwidth * t_full,
            registers=self.registers,
            shared_mem=self.shared_mem,
        )
        body = t_full - params.launch_us * 1e-6
        if body <= 0 or memory_seconds(base, gpu, gpu.sm_count, params) >= body:
            return replace(base, flops=0.0)
        return replace(base, flops=body / compute_seconds(base, gpu, gpu.sm_count, params))


def mps_sms(pct: int, sm_count: int = 108) -> int:
    """SMs at MPS active-thread ``pct``: rounded up to whole TPCs of 2 SMs (as bless.profiles.groundtruth.mps)."""
    return min(sm_count, 2 * math.ceil(pct * sm_count / 100 / 2 - 1e-9))


# ------------------------------------------------------------------ NeuSight
def neusight_ops(gpu: str) -> list[OpSample]:
    """Every NeuSight single op measured on ``gpu`` (``a100`` or ``h100``)."""
    if gpu not in NEUSIGHT_DEVICES:
        raise ValueError(f"NeuSight data is used for {', '.join(NEUSIGHT_DEVICES)}, not {gpu!r}")
    device = NEUSIGHT_DEVICES[gpu]
    out: list[OpSample] = []
    for name in ("bmm", "linear", "elem", "softmax", "ln"):
        path = shared_file(f"{NEUSIGHT}/test_{name}.csv.gz", NEUSIGHT_DATASET)
        with gzip.open(path, "rt") as f:
            for row in csv.DictReader(f):
                if row["Device"] == device:
                    out.append(_neusight_sample(row, gpu))
    return out


def _neusight_sample(row: dict, gpu: str) -> OpSample:
    op = row["OPName"]
    grid = (int(row["Grid x"]), int(row["Grid y"]), int(row["Grid z"]))
    block = (int(row["Block x"]), int(row["Block y"]), int(row["Block z"]))
    if op in ("bmm", "linear"):
        b, m, n, k = (int(row[c]) for c in "BMNK")
        flops = 2.0 * b * m * n * k
        weights = k * n if op == "linear" else b * k * n
        dram = FP32 * (b * m * k + weights + b * m * n)
        kind = "matmul"
    else:
        elements = int(row["B"]) * int(row["H"])
        reads = ELEMENTWISE_READS.get(op, 1)
        dram = FP32 * elements * (reads + 1)
        flops = float(elements * ELEMENTWISE_FLOPS.get(op, 1))
        kind = "reduction" if op in ("softmax", "ln") else "elementwise"
    work = KernelWork(
        name=row["Kernel Name"], grid=grid, block=block, flops=flops, dram_bytes=float(dram), op_class=kind
    )
    return OpSample(work=work, gpu=gpu, seconds=float(row["Latency"]) * 1e-3, op=op)


# ------------------------------------------------------------------ A100 MPS
def mps_kernels(model: str, gpu: GpuSpec = A100) -> list[ScalingSample]:
    """Kernels of ``model`` (every batch) measured at all six MPS levels with a known grid."""
    names = _kernel_names()
    resources = _kineto_resources()
    path = shared_file(f"{MPS}/{model}_kernels_aligned.csv.gz", MPS_DATASET)
    out: list[ScalingSample] = []
    with gzip.open(path, "rt") as f:
        for row in csv.DictReader(f):
            cells = [row[f"dur_ns_mps{p}"] for p in MPS_PCTS]
            if not row["grid"] or not all(cells):
                continue
            name = names.get(row["name_id"], row["name_id"])
            regs, smem = resources.get(_normalise(name), (None, 0))
            block = _triple(row["block"])
            try:
                blocks_per_sm(gpu, block[0] * block[1] * block[2], regs, smem)
            except ValueError:
                continue
            out.append(
                ScalingSample(
                    name=name,
                    grid=_triple(row["grid"]),
                    block=block,
                    registers=regs,
                    shared_mem=smem,
                    dram_pct=float(row["dram_pct_at_ref"] or 0),
                    model=model,
                    batch=int(row["batch"]),
                    seconds={mps_sms(p, gpu.sm_count): float(c) * 1e-9 for p, c in zip(MPS_PCTS, cells)},
                )
            )
    return out


def mps_pass_seconds(model: str, batch: int, gpu: GpuSpec = A100) -> dict[int, float]:
    """Measured time of one inference pass (sum of its kernels) at each MPS SM count.

    Every (batch, level) sequence of the long files is two identical passes; one
    pass is half the sum (bless.profiles.groundtruth.mps checks this for the profiles).
    """
    path = shared_file(f"{MPS}/{model}_kernels_long.csv.gz", MPS_DATASET)
    totals: dict[int, float] = {}
    with gzip.open(path, "rt") as f:
        for row in csv.DictReader(f):
            if int(row["batch"]) == batch:
                n = mps_sms(int(row["mps_pct"]), gpu.sm_count)
                totals[n] = totals.get(n, 0.0) + float(row["dur_ns"]) * 1e-9 / 2
    if not totals:
        raise ValueError(f"{path}: no rows for batch {batch}")
    return dict(sorted(totals.items()))


def _triple(text: str) -> tuple[int, int, int]:
    x, y, z = (int(v) for v in text.strip("()").split(","))
    return (x, y, z)


def _kernel_names() -> dict[str, str]:
    path = shared_file(f"{MPS}/kernel_names.csv", MPS_DATASET)
    with open(path, newline="") as f:
        return {row["name_id"]: row["kernel_name"] for row in csv.DictReader(f)}


_CAST = re.compile(r"\((?:int|bool|unsigned int|long|cudnnKernelDataType_t)\)")


def _normalise(name: str) -> str:
    """Kernel name without casts, spaces and arguments, cut to its template head (matches across tools)."""
    name = name.replace("(bool)0", "false").replace("(bool)1", "true")
    name = _CAST.sub("", name).replace(" ", "")
    name = name.removeprefix("void")
    return name.split("(")[0][:80]


def _kineto_resources() -> dict[str, tuple[int, int]]:
    """Normalised kernel name -> (registers per thread, static shared memory) from the A100 traces."""
    out: dict[str, tuple[int, int]] = {}
    for file in (
        "a100_alexnet_fwd_kernels.csv",
        "a100_convnet_train_2rank_kernels.csv",
        "a100_llm_train_rank3_kernels.csv",
    ):
        path: Path = shared_file(f"{KINETO}/{file}", KINETO_DATASET)
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row["regs_per_thread"]:
                    key = _normalise(row["name"])
                    out.setdefault(key, (int(float(row["regs_per_thread"])), int(float(row["static_smem_bytes"] or 0))))
    return out
