"""The A100 MPS kernel measurements: one inference pass per model and batch, aligned across levels.

Source: ``../shared/data/calibration/a100_mps_kernels`` (Nsight Compute under MPS
active-thread 20/40/50/60/80/100 %, a public gpulet re-implementation's profiling
data; see the data README).  We read the ``*_kernels_long`` files (one row per
kernel and level) rather than the ``*_aligned`` ones, which hold the same numbers
but drop every kernel that cuDNN/cuBLAS ran *instead* of the 100 % kernel at a
reduced level (their column sums undercount reduced levels: BERT's look
non-monotonic for that reason alone) and mis-align BERT's replaced GEMMs.

Facts the reader relies on (checked for every file, an error names the file if not):

* each (model, batch, level) sequence is two identical inference passes back to
  back; we average the two per kernel (one request = one pass);
* at the operator level the sequence is the same at every level: only the
  kernels *inside* a convolution/GEMM operator change (another algorithm, a split-K
  reduction, layout transforms).  We collapse consecutive conv/GEMM-family kernels
  into one operator, align operators across levels, and where an operator's
  kernels differ from the reference level we apportion the operator's measured
  time at that level to the reference kernels in proportion to their reference
  durations.  Every level's pass total is therefore kept exactly.

The reference level is 100 % where measured, else the highest level (BERT: 80 %).
"""

from __future__ import annotations

import csv
import functools
import gzip
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bless.profiles.groundtruth.ops import align, is_conv_family, operators
from bless.shared_data import shared_file

DATA_DIR = "calibration/a100_mps_kernels"
DATASET = (
    "the A100 MPS kernel measurements (calibration/a100_mps_kernels: Nsight Compute under MPS, "
    "a public gpulet re-implementation's profiling data)"
)
MPS_LEVELS = (20, 40, 50, 60, 80, 100)
SM_COUNT = 108
TPC_SMS = 2


def mps_sms(pct: float, sm_count: int = SM_COUNT) -> int:
    """SMs an MPS client gets at active-thread ``pct`` %: pct*SMs rounded up to whole TPCs (2 SMs)."""
    if not 0 < pct <= 100:
        raise ValueError(f"MPS active-thread percentage must be in (0, 100], got {pct}")
    return min(sm_count, TPC_SMS * math.ceil(pct * sm_count / 100 / TPC_SMS - 1e-9))


@dataclass(frozen=True)
class MpsKernel:
    """One kernel of the reference pass and the time its operator's work took at every level."""

    name_id: int
    name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    dram_pct: float
    """DRAM bandwidth used at the reference level, % of peak."""
    t_ns: tuple[float | None, ...]
    """Duration at each level of the pass (None: the operator vanished at that level)."""
    same: tuple[bool, ...]
    """True where this very kernel (name and grid) ran at that level; False where its
    time is a share of the replacement kernels' time."""

    @property
    def blocks(self) -> int | None:
        return None if self.grid is None else self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def is_conv_family(self) -> bool:
        return is_conv_family(self.name)


@dataclass(frozen=True)
class MpsPass:
    """One inference pass of ``model`` at ``batch``, kernels in launch order."""

    model: str
    batch: int
    levels: tuple[int, ...]
    """MPS active-thread percentages measured, ascending."""
    ref_level: int
    kernels: tuple[MpsKernel, ...]
    totals_ns: tuple[float, ...]
    """Measured pass total at each level (sum of every kernel that ran)."""
    source: str

    @property
    def sms(self) -> tuple[int, ...]:
        return tuple(mps_sms(p) for p in self.levels)

    def times_ns(self) -> np.ndarray:
        """Shape (K, L): every kernel's duration at every level (NaN where it vanished)."""
        return np.array([[np.nan if v is None else v for v in k.t_ns] for k in self.kernels])


# ------------------------------------------------------------------ files
def data_file(model: str, kind: str) -> Path:
    """``kind``: ``long`` (all levels) or ``full_gpu_only``."""
    return shared_file(f"{DATA_DIR}/{model}_kernels_{kind}.csv.gz", DATASET)


@functools.lru_cache(maxsize=1)
def kernel_names() -> dict[int, str]:
    path = shared_file(f"{DATA_DIR}/kernel_names.csv", DATASET)
    with path.open(newline="") as fh:
        return {int(r["name_id"]): r["kernel_name"] for r in csv.DictReader(fh)}


def available_models() -> dict[str, str]:
    """Model name -> file kind (``long`` or ``full_gpu_only``) for every model in the data."""
    folder = shared_file(DATA_DIR, DATASET)
    out: dict[str, str] = {}
    for kind in ("full_gpu_only", "long"):
        for p in folder.glob(f"*_kernels_{kind}.csv.gz"):
            out[p.name[: -len(f"_kernels_{kind}.csv.gz")]] = kind
    return dict(sorted(out.items()))


@functools.lru_cache(maxsize=16)
def _read_rows(model: str) -> tuple[str, dict[tuple[int, int], list[dict]]]:
    kinds = available_models()
    if model not in kinds:
        raise ValueError(f"model {model!r} is not in the A100 MPS data; known: {', '.join(kinds)}")
    kind = kinds[model]
    path = data_file(model, kind)
    seqs: dict[tuple[int, int], list[dict]] = {}
    with gzip.open(path, "rt", newline="") as fh:
        for r in csv.DictReader(fh):
            if kind == "long":
                key, dur, dram = (int(r["batch"]), int(r["mps_pct"])), r["dur_ns"], r["dram_pct_of_peak"]
            else:
                key, dur, dram = (int(r["batch"]), 100), r["dur_ns_mps100"], r["dram_pct_at_ref"]
            seqs.setdefault(key, []).append(
                {
                    "name_id": int(r["name_id"]),
                    "grid": _dims(r["grid"]),
                    "block": _dims(r["block"]),
                    "dur": float(dur),
                    "dram": float(dram or 0.0),
                }
            )
    return path.name, seqs


def batches(model: str) -> list[int]:
    """Batch sizes measured for ``model``."""
    return sorted({b for b, _ in _read_rows(model)[1]})


@functools.lru_cache(maxsize=64)
def load_pass(model: str, batch: int) -> MpsPass:
    """One aligned inference pass of ``model`` at ``batch`` (see module docstring)."""
    source, seqs = _read_rows(model)
    levels = tuple(sorted(p for b, p in seqs if b == batch))
    if not levels:
        raise ValueError(f"{model} batch {batch} is not in {source}; measured batches: {batches(model)}")
    names = kernel_names()
    per_level = {p: _one_pass(seqs[(batch, p)], source, batch, p) for p in levels}
    ref_level = 100 if 100 in levels else levels[-1]
    ref = per_level[ref_level]
    ref_ops = operators([names.get(k["name_id"], "") for k in ref])
    L, K = len(levels), len(ref)
    t = np.full((K, L), np.nan)
    same = np.zeros((K, L), dtype=bool)
    for li, p in enumerate(levels):
        lvl_ops = operators([names.get(k["name_id"], "") for k in per_level[p]])
        for ref_idx, lvl_idx in align(ref_ops, lvl_ops):
            _apportion(ref, per_level[p], ref_idx, lvl_idx, t[:, li], same[:, li])
    kernels = tuple(
        MpsKernel(
            name_id=k["name_id"],
            name=names.get(k["name_id"], f"kernel_{k['name_id']}"),
            grid=k["grid"],
            block=k["block"],
            dram_pct=k["dram"],
            t_ns=tuple(None if np.isnan(v) else float(v) for v in t[i]),
            same=tuple(bool(s) for s in same[i]),
        )
        for i, k in enumerate(ref)
    )
    totals = tuple(float(sum(k["dur"] for k in per_level[p])) for p in levels)
    return MpsPass(model, batch, levels, ref_level, kernels, totals, source)


def _dims(s: str) -> tuple[int, int, int] | None:
    s = (s or "").strip().strip("()")
    if not s:
        return None
    x, y, z = (int(v) for v in s.split(","))
    return (x, y, z)


def _one_pass(seq: list[dict], source: str, batch: int, pct: int) -> list[dict]:
    """Average the two identical back-to-back passes of a level's kernel sequence."""
    half = len(seq) // 2
    first, second = seq[:half], seq[half:]
    if len(seq) % 2 or [k["name_id"] for k in first] != [k["name_id"] for k in second]:
        raise ValueError(
            f"{source}: batch {batch} at {pct} % is not two identical passes; "
            "this reader expects the data set's two-pass layout"
        )
    return [{**a, "dur": (a["dur"] + b["dur"]) / 2, "dram": (a["dram"] + b["dram"]) / 2} for a, b in zip(first, second)]


def _apportion(ref, lvl, ref_idx, lvl_idx, t_out, same_out) -> None:
    if not lvl_idx:
        return  # the operator did not run at this level: stays NaN
    r = [ref[i] for i in ref_idx]
    q = [lvl[j] for j in lvl_idx]
    if len(r) == len(q) and all(x["name_id"] == y["name_id"] and x["grid"] == y["grid"] for x, y in zip(r, q)):
        for i, y in zip(ref_idx, q):
            t_out[i] = y["dur"]
            same_out[i] = True
        return
    total = sum(y["dur"] for y in q)
    weights = np.array([x["dur"] for x in r], dtype=float)
    weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(r), 1 / len(r))
    for i, w in zip(ref_idx, weights):
        t_out[i] = total * w
        same_out[i] = False
