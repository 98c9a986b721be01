"""The app profile: every kernel of one request and its duration at 18 SM levels.

File format ``bless-profile`` version 1 (JSON, one file per app and GPU)::

    {
      "format": "bless-profile", "version": 1,
      "app": "resnet50", "gpu": "a100", "kind": "inference", "batch": 8,
      "level_sms": [6, 12, ..., 108],        # SMs of levels 1..18
      "memory_bytes": 1234567,               # device memory of one instance
      "provenance": {"method": "derived", "gpu": "a100", "source": "...",
                     "model": "...", "tool": "...", "details": {...}},
      "kernels": [                           # launch order
        {"name": "...", "kind": "compute",   # or "memcpy"
         "grid": [x, y, z], "block": [x, y, z],     # null where unknown
         "registers": 64, "shared_mem": 0,          # per thread / bytes per block, null where unknown
         "max_sm_share": 0.74,               # d%: most SMs the kernel can keep busy, as a fraction
         "dram_util": 0.31,                  # DRAM bandwidth used alone on the whole GPU, fraction of peak
         "flops": null, "dram_bytes": null}, ...],
      "t_us":   [[...K...], ... 18 rows],    # t[level][k], microseconds
      "tau_us": [[...K...], ... 18 rows],    # cumulative sum of t along k
      "T_us":   [...18...]                   # isolated request latency per level
    }

``T`` is the measured end-to-end latency of a lone request (launch gaps
included), so ``T >= tau[:, -1]``.  Loading checks shapes, ranges and these
consistency rules and names the offending field in a :class:`ProfileError`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bless.documents import is_integer, is_number, load_document
from bless.hw.gpus import N_LEVELS, GpuSpec, get_gpu
from bless.profiles import curves

FORMAT = "bless-profile"
VERSION = 1
KERNEL_KINDS = ("compute", "memcpy")
APP_KINDS = ("inference", "training")
METHODS = ("measured", "derived", "predicted", "simulated")
"""measured: timed on a real GPU; derived: built from others' measurements by a
model; predicted: analytic model from kernel descriptors; simulated: timed on
the simulated GPU by the offline profiler."""


class ProfileError(ValueError):
    """A profile file is malformed or inconsistent; the message names the field."""


@dataclass(frozen=True)
class KernelDesc:
    """What is known of one kernel launch, independent of its timing."""

    name: str
    kind: str = "compute"
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    registers: int | None = None
    shared_mem: int | None = None
    max_sm_share: float = 1.0
    dram_util: float = 0.0
    flops: float | None = None
    dram_bytes: float | None = None

    @property
    def blocks(self) -> int | None:
        return None if self.grid is None else self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads_per_block(self) -> int | None:
        return None if self.block is None else self.block[0] * self.block[1] * self.block[2]

    def max_sms(self, sm_count: int) -> int:
        """Most SMs this kernel can use on a GPU of ``sm_count`` SMs."""
        return max(1, min(sm_count, math.ceil(self.max_sm_share * sm_count - 1e-9)))


@dataclass(frozen=True)
class Provenance:
    """Where the numbers of a profile came from."""

    method: str
    gpu: str
    source: str
    model: str = ""
    tool: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Profile:
    """Kernel list and per-level timing of one app on one GPU (times in seconds)."""

    app: str
    gpu: str
    kind: str
    batch: int
    level_sms: tuple[int, ...]
    kernels: tuple[KernelDesc, ...]
    t: np.ndarray
    """Shape (18, K): duration of kernel k alone at level l."""
    T: np.ndarray
    """Shape (18,): isolated latency of a whole request at level l."""
    memory_bytes: int
    provenance: Provenance

    def __post_init__(self) -> None:
        self.t.setflags(write=False)
        self.T.setflags(write=False)

    @property
    def n_kernels(self) -> int:
        return len(self.kernels)

    @property
    def tau(self) -> np.ndarray:
        """Shape (18, K): expected time from request start to the end of kernel k."""
        return np.cumsum(self.t, axis=1)

    @property
    def gpu_spec(self) -> GpuSpec:
        return get_gpu(self.gpu)

    def t_at_sms(self, n: float) -> np.ndarray:
        """Every kernel's duration at ``n`` SMs, shape (K,)."""
        return np.asarray(curves.at_sms(np.array(self.level_sms), self.t, n))

    def latency_at_sms(self, n: float) -> float:
        """Isolated request latency at ``n`` SMs."""
        return float(curves.at_sms(np.array(self.level_sms), self.T, n))

    def latency_at_quota(self, quota: float) -> float:
        """Isolated latency with ``quota`` (fraction of the GPU's SMs), the ISO target."""
        if not 0 < quota <= 1:
            raise ValueError(f"quota must be in (0, 1], got {quota}")
        return self.latency_at_sms(quota * self.level_sms[-1])

    def memcpy_mask(self) -> np.ndarray:
        return np.array([k.kind == "memcpy" for k in self.kernels], dtype=bool)

    # ---------------------------------------------------------------- I/O
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "app": self.app,
            "gpu": self.gpu,
            "kind": self.kind,
            "batch": self.batch,
            "level_sms": list(self.level_sms),
            "memory_bytes": int(self.memory_bytes),
            "provenance": {
                "method": self.provenance.method,
                "gpu": self.provenance.gpu,
                "source": self.provenance.source,
                "model": self.provenance.model,
                "tool": self.provenance.tool,
                "details": self.provenance.details,
            },
            "kernels": [_kernel_to_dict(k) for k in self.kernels],
            "t_us": (t_us := _round_rows(self.t * 1e6)),
            # tau from the rounded t, so the file is consistent to the last digit.
            "tau_us": _round_rows(np.cumsum(np.array(t_us), axis=1)),
            "T_us": [round(float(v), 3) for v in self.T * 1e6],
        }

    def save(self, path: str | Path) -> Path:
        """Write the profile atomically (temp file + rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), separators=(",", ":")) + "\n")
        tmp.replace(path)
        return path


def _round_rows(a: np.ndarray) -> list[list[float]]:
    return [[round(float(v), 3) for v in row] for row in a]


def _kernel_to_dict(k: KernelDesc) -> dict[str, Any]:
    return {
        "name": k.name,
        "kind": k.kind,
        "grid": None if k.grid is None else list(k.grid),
        "block": None if k.block is None else list(k.block),
        "registers": k.registers,
        "shared_mem": k.shared_mem,
        "max_sm_share": round(k.max_sm_share, 6),
        "dram_util": round(k.dram_util, 6),
        "flops": k.flops,
        "dram_bytes": k.dram_bytes,
    }


# ------------------------------------------------------------------ loading
def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file."""
    return load_document(path, profile_from_dict, ProfileError, "profile")


def profile_from_dict(raw: Any) -> Profile:
    """Build a :class:`Profile` from parsed JSON, validating every field."""
    if not isinstance(raw, dict):
        raise ProfileError("top level must be a JSON object")
    if raw.get("format") != FORMAT:
        raise ProfileError(f"format: expected {FORMAT!r}, got {raw.get('format')!r}")
    if raw.get("version") != VERSION:
        raise ProfileError(f"version: this bless reads version {VERSION}, got {raw.get('version')!r}")
    app = _str(raw, "app")
    gpu_name = _str(raw, "gpu")
    try:
        gpu = get_gpu(gpu_name)
    except ValueError as e:
        raise ProfileError(f"gpu: {e}") from None
    kind = _choice(raw, "kind", APP_KINDS)
    batch = _int(raw, "batch", minimum=1)
    memory = _int(raw, "memory_bytes", minimum=0)
    level_sms = _level_sms(raw, gpu)
    prov = _provenance(raw.get("provenance"))
    kernels_raw = raw.get("kernels")
    if not isinstance(kernels_raw, list) or not kernels_raw:
        raise ProfileError("kernels: expected a non-empty list of kernel objects")
    kernels = tuple(_kernel(k, i) for i, k in enumerate(kernels_raw))
    n = len(kernels)
    t = _matrix(raw, "t_us", n) * 1e-6
    if not np.all(t > 0):
        lvl, k = np.argwhere(~(t > 0))[0]
        raise ProfileError(f"t_us[{lvl}][{k}]: kernel durations must be positive")
    tau = _matrix(raw, "tau_us", n) * 1e-6
    expected = np.cumsum(t, axis=1)
    bad = np.abs(tau - expected) > 1e-9 + 1e-5 * expected
    if bad.any():
        lvl, k = np.argwhere(bad)[0]
        raise ProfileError(
            f"tau_us[{lvl}][{k}]: {tau[lvl, k] * 1e6:.3f} is not the cumulative sum of t_us "
            f"({expected[lvl, k] * 1e6:.3f}); regenerate the profile"
        )
    T = _vector(raw, "T_us", N_LEVELS) * 1e-6
    short = expected[:, -1] * (1 - 1e-5) - 1e-9 > T
    if short.any():
        lvl = int(np.argmax(short))
        raise ProfileError(
            f"T_us[{lvl}]: isolated latency {T[lvl] * 1e6:.3f} us is shorter than the sum of its "
            f"kernels {expected[lvl, -1] * 1e6:.3f} us"
        )
    return Profile(
        app=app,
        gpu=gpu.name,
        kind=kind,
        batch=batch,
        level_sms=level_sms,
        kernels=kernels,
        t=t,
        T=T,
        memory_bytes=memory,
        provenance=prov,
    )


def _str(d: dict, key: str, where: str = "") -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise ProfileError(f"{where}{key}: expected a non-empty string, got {v!r}")
    return v


def _choice(d: dict, key: str, choices: tuple[str, ...], where: str = "") -> str:
    v = d.get(key)
    if v not in choices:
        raise ProfileError(f"{where}{key}: expected one of {', '.join(choices)}, got {v!r}")
    return v


def _int(d: dict, key: str, minimum: int, where: str = "", optional: bool = False) -> int | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if not is_integer(v) or v < minimum:
        raise ProfileError(f"{where}{key}: expected an integer >= {minimum}, got {v!r}")
    return v


def _float(d: dict, key: str, lo: float, hi: float, where: str = "", optional: bool = False):
    v = d.get(key)
    if v is None and optional:
        return None
    if not is_number(v) or not (lo <= v <= hi) or math.isnan(v):
        raise ProfileError(f"{where}{key}: expected a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _dims(d: dict, key: str, where: str) -> tuple[int, int, int] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != 3 or not all(is_integer(x) and x >= 1 for x in v):
        raise ProfileError(f"{where}{key}: expected [x, y, z] of positive integers or null, got {v!r}")
    return (v[0], v[1], v[2])


def _level_sms(raw: dict, gpu: GpuSpec) -> tuple[int, ...]:
    v = raw.get("level_sms")
    if not isinstance(v, list) or len(v) != N_LEVELS or not all(isinstance(x, int) for x in v):
        raise ProfileError(f"level_sms: expected {N_LEVELS} integers, got {v!r}")
    if any(b < a for a, b in zip(v, v[1:])) or v[0] < 1:
        raise ProfileError(f"level_sms: must be positive and non-decreasing, got {v}")
    if v[-1] != gpu.sm_count:
        raise ProfileError(f"level_sms: level 18 must be the whole {gpu.name} ({gpu.sm_count} SMs), got {v[-1]}")
    return tuple(v)


def _provenance(v: Any) -> Provenance:
    if not isinstance(v, dict):
        raise ProfileError("provenance: expected an object with method, gpu and source")
    details = v.get("details", {})
    if not isinstance(details, dict):
        raise ProfileError("provenance.details: expected an object")
    return Provenance(
        method=_choice(v, "method", METHODS, "provenance."),
        gpu=_str(v, "gpu", "provenance."),
        source=_str(v, "source", "provenance."),
        model=str(v.get("model", "")),
        tool=str(v.get("tool", "")),
        details=details,
    )


def _kernel(v: Any, i: int) -> KernelDesc:
    where = f"kernels[{i}]."
    if not isinstance(v, dict):
        raise ProfileError(f"kernels[{i}]: expected an object")
    return KernelDesc(
        name=_str(v, "name", where),
        kind=_choice(v, "kind", KERNEL_KINDS, where),
        grid=_dims(v, "grid", where),
        block=_dims(v, "block", where),
        registers=_int(v, "registers", 0, where, optional=True),
        shared_mem=_int(v, "shared_mem", 0, where, optional=True),
        max_sm_share=_float(v, "max_sm_share", 1e-6, 1.0, where),
        dram_util=_float(v, "dram_util", 0.0, 1.0, where),
        flops=_float(v, "flops", 0.0, math.inf, where, optional=True),
        dram_bytes=_float(v, "dram_bytes", 0.0, math.inf, where, optional=True),
    )


def _matrix(raw: dict, key: str, n: int) -> np.ndarray:
    v = raw.get(key)
    if not isinstance(v, list) or len(v) != N_LEVELS:
        raise ProfileError(f"{key}: expected {N_LEVELS} rows (one per level), got {_len(v)}")
    for i, row in enumerate(v):
        if not isinstance(row, list) or len(row) != n:
            raise ProfileError(f"{key}[{i}]: expected {n} values (one per kernel), got {_len(row)}")
    a = _floats(v, key)
    if not np.all(np.isfinite(a)):
        lvl, k = np.argwhere(~np.isfinite(a))[0]
        raise ProfileError(f"{key}[{lvl}][{k}]: must be a finite number")
    return a


def _vector(raw: dict, key: str, n: int) -> np.ndarray:
    v = raw.get(key)
    if not isinstance(v, list) or len(v) != n:
        raise ProfileError(f"{key}: expected {n} values, got {_len(v)}")
    a = _floats(v, key)
    if not np.all(np.isfinite(a) & (a > 0)):
        raise ProfileError(f"{key}[{int(np.argmax(~(np.isfinite(a) & (a > 0))))}]: must be a positive number")
    return a


def _floats(v: list, key: str) -> np.ndarray:
    try:
        return np.array(v, dtype=float)
    except (TypeError, ValueError):
        raise ProfileError(f"{key}: every entry must be a number") from None


def _len(v: Any) -> str:
    return f"{len(v)} items" if isinstance(v, list) else type(v).__name__
