"""A KACE-format data set (F and P, :mod:`bless.colocation.kace_data`) from the real A100 MPS pairs.

The shared data (``colocation/a100_mps_pairs``, see its README) measures ResNet50
at ``sm_pct`` % MPS active threads beside a co-runner at ``100 - sm_pct`` %.
Only the measured model's throughput is recorded, so a pair has *both*
throughputs only where the co-runner is ResNet50 as well and the mirrored row
(the co-runner's batch at ``100 - sm_pct`` beside the first batch) exists.
Those rows make the data set:

* a **workload** is ResNet50 at one batch under one MPS limit,
  ``resnet50_b{batch}_mps{sm_pct}`` (7 batches x 5 limits = 35);
* a **pair** is two workloads whose limits add up to 100 %: ``b1@s`` beside
  ``b2@(100-s)``; ``throughput1`` and ``throughput2`` are the two rows' measured
  throughputs (49 + 49 + 28 = 126 pairs);
* ``solo_throughput`` is the workload alone under its own limit (the solo
  file), so a pair's throughput sum is ``1/slowdown1 + 1/slowdown2``: what the
  two lose to each other, KACE's target.  With ``solo="full"`` it is the model
  alone on the whole GPU instead, so the sum also rewards splits that use the
  GPU well.

Per-workload features, each measured with the workload alone (as KACE's are):

=========================  ==================================================
``mps_pct``                the MPS active-thread limit
``batch``                  inference batch size
``solo_throughput``        images per second alone under the limit
``solo_latency_ms``        one inference alone under the limit
``dram_throughput_pct``    DRAM bandwidth, duration-weighted over kernels (memory file)
``l2_throughput_pct``      L2 bandwidth, likewise
``threads_per_block``      Nsight kernel data under the limit, duration-weighted
``blocks_per_kernel``      grid size, duration-weighted
``sm_busy_pct``            share of the solo period a kernel runs: solo
                           throughput / batch x summed kernel time (ncu times
                           are 10-30 % high, so this is capped at 100)
``memory_busy_pct``        ``sm_busy_pct`` x DRAM %: bandwidth averaged over time
=========================  ==================================================

No device-memory footprint is in the data, so the MEMCAP rule has no column.
Small-batch rows are bound by the measuring harness (see the README and
:mod:`bless.sim.corun`); they are real measurements and are kept: KACE has to
rank partners on real, noisy data.
"""

from __future__ import annotations

import csv
import gzip
from collections import defaultdict
from pathlib import Path

import numpy as np

from bless.colocation.kace_data import FeatureTable, PairMeasurement

MODEL = "resnet50"
PAIRS_FILE = "corun_resnet50.csv"
COLUMNS = (
    "mps_pct",
    "batch",
    "solo_throughput",
    "solo_latency_ms",
    "dram_throughput_pct",
    "l2_throughput_pct",
    "threads_per_block",
    "blocks_per_kernel",
    "sm_busy_pct",
    "memory_busy_pct",
)


def workload_name(batch: int, sm_pct: int) -> str:
    return f"{MODEL}_b{batch}_mps{sm_pct}"


def _rows(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        return list(csv.DictReader(f))


def _kernel_metrics(kernels: Path) -> dict[tuple[int, int], tuple[float, float, float]]:
    """(batch, mps) -> (threads/block, blocks/kernel, summed kernel seconds), duration-weighted."""
    acc: dict[tuple[int, int], list[tuple[float, float, float]]] = defaultdict(list)
    for r in _rows(kernels):
        grid = [int(v) for v in r["grid"].strip("() ").split(",")]
        block = [int(v) for v in r["block"].strip("() ").split(",")]
        for key, text in r.items():
            if key.startswith("dur_ns_mps") and text:
                acc[(int(r["batch"]), int(key.removeprefix("dur_ns_mps")))].append(
                    (float(np.prod(block)), float(np.prod(grid)), float(text) * 1e-9)
                )
    out = {}
    for k, v in acc.items():
        a = np.array(v)
        w = a[:, 2]
        out[k] = (float(a[:, 0] @ w / w.sum()), float(a[:, 1] @ w / w.sum()), float(w.sum()))
    return out


def convert(pairs_dir: Path, kernels_dir: Path, solo: str = "own") -> tuple[FeatureTable, tuple[PairMeasurement, ...]]:
    """F and P from the shared A100 files (see the module docstring)."""
    if solo not in ("own", "full"):
        raise ValueError(f"solo must be 'own' or 'full', got {solo!r}")
    solo_rows = {(int(r["batch"]), int(r["sm_pct"])): r for r in _rows(pairs_dir / "solo.csv") if r["model"] == MODEL}
    mem = {(int(r["batch"]), int(r["sm_pct"])): r for r in _rows(pairs_dir / "mem_util.csv") if r["model"] == MODEL}
    kern = _kernel_metrics(kernels_dir / f"{MODEL}_kernels_aligned.csv.gz")
    corun = {
        (int(r["batch"]), int(r["sm_pct"]), int(r["corunner_batch"])): float(r["throughput_per_s"])
        for r in _rows(pairs_dir / PAIRS_FILE)
        if r["corunner"] == MODEL
    }
    keys = sorted({(b, s) for b, s, _ in corun})
    names, values = [], []
    for b, s in keys:
        alone = solo_rows[(b, s)]
        thr = float(alone["throughput_per_s"])
        if solo == "full":
            thr = float(solo_rows[(b, 100)]["throughput_per_s"])
        dram, l2 = float(mem[(b, s)]["dram_util_pct"]), float(mem[(b, s)]["l2_util_pct"])
        tpb, bpk, kernel_s = kern[(b, s)]
        busy = min(100.0, 100.0 * float(alone["throughput_per_s"]) / b * kernel_s)
        names.append(workload_name(b, s))
        values.append([s, b, thr, 1e3 * float(alone["latency_s"]), dram, l2, tpb, bpk, busy, busy * dram / 100.0])
    table = FeatureTable(tuple(names), COLUMNS, np.array(values), "features.csv")
    pairs = []
    for b1, s, b2 in sorted(corun):
        mirror = corun.get((b2, 100 - s, b1))
        if mirror is None or (s > 100 - s) or (s == 50 and b1 > b2):
            continue  # each unordered pair once, and only where both sides were measured
        pairs.append(PairMeasurement(workload_name(b1, s), workload_name(b2, 100 - s), corun[(b1, s, b2)], mirror))
    return table, tuple(pairs)
