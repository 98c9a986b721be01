"""The PyTorch-profiler (kineto) kernel traces: the A100 ResNet-50 training iteration and launch resources.

``calibration/kineto_traces/*_kernels.csv`` flatten PyTorch profiler traces to one
row per kernel with its duration, grid, block, registers per thread, static shared
memory and enclosing aten op.  The A100 conv-net trace is two-rank DDP training of
ResNet-50 (53 batch-norms per iteration) at batch 32 (its first ReLU covers
32 x 64 x 112 x 112 elements), three iterations.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

from bless.profiles.groundtruth.names import short_name
from bless.shared_data import shared_file

KINETO_A100 = "calibration/kineto_traces/a100_convnet_train_2rank_kernels.csv"
KINETO_A100_ALEXNET = "calibration/kineto_traces/a100_alexnet_fwd_kernels.csv"
DATASET = "the pytorch/kineto and HolisticTraceAnalysis sample traces (calibration/kineto_traces)"


@dataclass(frozen=True)
class CnnTrace:
    """Per-iteration means of the A100 ResNet-50 training trace, by (phase, aten op)."""

    time_us: dict[tuple[str, str], float]
    kernels: dict[tuple[str, str], float]
    iterations: int
    registers: dict[tuple[str, tuple[int, int, int]], tuple[int, int]]
    """(short kernel name, grid) -> (registers per thread, static shared memory bytes)."""


@functools.lru_cache(maxsize=1)
def cnn_trace() -> CnnTrace:
    path = shared_file(KINETO_A100, DATASET)
    with path.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if not r["name"].startswith("ncclKernel")]
    iterations: list[list[dict]] = [[]]
    for r in rows:  # an iteration ends with the optimizer's _foreach kernels
        if r["cpu_op"] == "aten::cat" and any(x["cpu_op"].startswith("aten::_foreach") for x in iterations[-1]):
            iterations.append([])
        iterations[-1].append(r)
    time_us: dict[tuple[str, str], float] = {}
    count: dict[tuple[str, str], float] = {}
    registers = {}
    for it in iterations:
        phase = "pre"
        for r in it:
            op = r["cpu_op"]
            if phase == "pre" and op == "aten::cudnn_convolution":
                phase = "fwd"
            elif op == "aten::_log_softmax_backward_data":
                phase = "bwd"
            elif op.startswith("aten::_foreach"):
                phase = "opt"
            if op == "aten::add_" and r["grid_x"] == "1" and r["grid_y"] == "1" and r["grid_z"] == "1":
                op = "num_batches_tracked"  # BN's counter increment, not a residual add
            key = (phase, op)
            time_us[key] = time_us.get(key, 0.0) + float(r["dur_us"]) / len(iterations)
            count[key] = count.get(key, 0.0) + 1 / len(iterations)
            grid = (int(r["grid_x"]), int(r["grid_y"]), int(r["grid_z"]))
            registers[(short_name(r["name"]), grid)] = (int(r["regs_per_thread"]), int(r["static_smem_bytes"]))
    return CnnTrace(time_us, count, len(iterations), registers)


@functools.lru_cache(maxsize=1)
def launch_resources() -> dict[tuple[str, tuple[int, int, int]], tuple[int, int]]:
    """(short kernel name, grid) -> (registers per thread, static shared memory) seen on the A100 traces."""
    table = dict(cnn_trace().registers)
    path = shared_file(KINETO_A100_ALEXNET, DATASET)
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            grid = (int(r["grid_x"]), int(r["grid_y"]), int(r["grid_z"]))
            table.setdefault((short_name(r["name"]), grid), (int(r["regs_per_thread"]), int(r["static_smem_bytes"])))
    return table
