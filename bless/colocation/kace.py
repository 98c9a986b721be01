"""KACE: predict how well two workloads co-run from metrics of each one measured alone.

KACE (Han, Paul, Liu, Gandhi, "KACE: Kernel-Aware Colocation for Efficient GPU
Spatial Sharing", SoCC'24; artifact github.com/nba556677go/KACE-artifact)
describes each workload by its kernels' metrics, weighted by kernel duration,
plus a few system metrics of a solo run, and predicts a pair's *throughput
sum* -- each workload's co-run throughput relative to its solo throughput,
summed -- with a plain linear regression.  Following the paper's artifact
(``utils/loaddata.py``, ``utils/trainer.py``):

* a pair's features are its two workloads' features **summed**, except
  percentages, which are **averaged**;
* features whose Pearson correlation with the target on the training pairs is
  below 0.2 in magnitude are dropped (the artifact's ``--correlation`` default);
* the kept features are z-scored with the training pairs' mean and standard
  deviation (the artifact z-scores train and test sets separately; here the
  normaliser is fitted on the training set only and reused, as it must be);
* an ordinary least-squares fit with an intercept (the artifact's
  ``LinearRegression``).

The random-forest baseline stands for Xu et al. ("Characterization and
Prediction of Performance Interference on Mediated Passthrough GPUs for
Interference-aware Scheduler", HotCloud'19), which the KACE paper compares
against with a random forest; it gets the same pair features and preprocessing
(as in the artifact, where both models go through the same loader), so the
comparison is between models, not feature sets.

Per-app features (:func:`app_features`) come from the app's profile, read the
way the simulated GPU reads it (:mod:`bless.profiles.features`: the same solo
times, SMs and DRAM demand per kernel), plus a solo run:

=========================  ==================================================
``threads_per_block``      launch block size, duration-weighted mean
``registers_per_thread``   duration-weighted mean (kernels where known)
``static_shared_mem_bytes`` per block, duration-weighted mean (where known)
``sm_throughput_pct``      SMs the kernel keeps busy (``max_sm_share``),
                           duration-weighted: the fraction of SMs busy while
                           the app's kernels run
``dram_throughput_pct``    ``dram_util`` (DRAM bandwidth used alone, % of
                           peak), duration-weighted
``memory_throughput_pct``  Nsight's "memory throughput" is the busiest memory
                           unit; a profile has no cache metrics, so L2 hits
                           cannot be estimated and are not invented.  It is
                           the memory-system load over *all* GPU operations:
                           kernels at their DRAM %, copies (memcpy) at 100 %
                           (a copy streams through DRAM for its whole run).
``sm_busy_pct``            solo run: share of time an SM kernel runs (the
                           ``nvidia-smi`` "GPU utilisation" notion)
``memory_busy_pct``        solo run: DRAM bandwidth used, averaged over time
``memory_mib``             device memory the app holds (itself + context)
``solo_throughput``        solo run: requests (iterations) per second
=========================  ==================================================

Kernel metrics are weighted by each kernel's duration alone on the whole GPU
(:func:`bless.profiles.features.full_gpu_times`) and averaged over compute
kernels only (copies are not kernels to a kernel profiler).  A
launch-configuration metric unknown for every kernel of an app is left out of
that app's features; the generator then drops the column.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bless.colocation.kace_data import FeatureTable, is_percentage
from bless.documents import load_document
from bless.hw.gpus import MIB, GpuSpec
from bless.profiles.features import dram_seconds, full_gpu_times, max_sms
from bless.profiles.format import Profile

MIN_CORRELATION = 0.2
"""Features less correlated than this with the target are dropped (KACE artifact, main.py)."""

MIN_TRAINING_PAIRS = 3
"""Fewest training pairs: two for a spread to normalise by, one more for a correlation to mean anything."""

RANK_TOLERANCE = 1e-10
"""Least-squares directions with singular values below this fraction of the largest are
dropped.  The inputs are z-scored (order 1), so such directions are float rounding of
exactly dependent columns (two features that are one quantity, e.g. DRAM and memory
throughput of an app without copies); numpy's default (machine epsilon) keeps them and
returns coefficients of 1e10 that make predictions on new pairs meaningless."""

MODEL_FORMAT = "bless-kace-model"
MODEL_VERSION = 1

LAUNCH_METRICS = ("threads_per_block", "registers_per_thread", "static_shared_mem_bytes")
KERNEL_METRICS = ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct")
SYSTEM_METRICS = ("sm_busy_pct", "memory_busy_pct", "memory_mib", "solo_throughput")
APP_FEATURES = LAUNCH_METRICS + KERNEL_METRICS + SYSTEM_METRICS
"""Column order of the features an app can have (see the module docstring)."""


class ModelError(ValueError):
    """A model cannot be fitted or read; the message says why."""


# ------------------------------------------------------------------ per-app features
@dataclass(frozen=True)
class SoloRun:
    """What one app's solo run measured."""

    throughput: float
    """Requests (inference) or iterations (training) per second."""
    memory_bytes: int
    """Device memory the app held: its own plus its context."""


def app_features(profile: Profile, solo: SoloRun, gpu: GpuSpec) -> dict[str, float]:
    """An app's KACE features from its profile (read by :mod:`bless.profiles.features`) and a solo run."""
    full_gpu = full_gpu_times(profile, gpu)
    copy = profile.memcpy_mask()
    if copy.all():
        raise ValueError(f"app {profile.app!r} has no compute kernels; KACE describes apps by their kernels")
    t = full_gpu[~copy]
    dram = dram_seconds(profile, full_gpu)[~copy]
    busy_sms = max_sms(profile, gpu)[~copy] / gpu.sm_count
    copy_seconds = full_gpu[copy].sum()
    compute = [d for d, c in zip(profile.kernels, copy) if not c]
    row: dict[str, float] = {}
    launch = {
        "threads_per_block": [d.threads_per_block for d in compute],
        "registers_per_thread": [d.registers for d in compute],
        "static_shared_mem_bytes": [d.shared_mem for d in compute],
    }
    for name, values in launch.items():
        known = np.array([v is not None for v in values])
        if known.any():
            row[name] = _weighted_mean(np.array([v or 0 for v in values], dtype=float)[known], t[known])
    row["sm_throughput_pct"] = 100.0 * _weighted_mean(busy_sms, t)
    row["memory_throughput_pct"] = 100.0 * (dram.sum() + copy_seconds) / (t.sum() + copy_seconds)
    row["dram_throughput_pct"] = 100.0 * dram.sum() / t.sum()
    # One request's busy time over the solo period between requests.
    row["sm_busy_pct"] = 100.0 * min(1.0, solo.throughput * t.sum())
    row["memory_busy_pct"] = 100.0 * min(1.0, solo.throughput * dram.sum())
    row["memory_mib"] = solo.memory_bytes / MIB
    row["solo_throughput"] = solo.throughput
    return row


def _weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
    return float(np.dot(values, weights) / weights.sum())


# ------------------------------------------------------------------ pair features
def pair_matrix(table: FeatureTable, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """Pair features, shape (pairs, columns): sums, and means for percentages."""
    a = table.values[[table.index(p[0]) for p in pairs]]
    b = table.values[[table.index(p[1]) for p in pairs]]
    x = a + b
    x[:, table.percentage_mask()] /= 2.0
    return x


@dataclass(frozen=True, eq=False)
class Normaliser:
    """Z-scores with statistics of the training pairs (constant columns: centred only)."""

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> Normaliser:
        std = x.std(axis=0, ddof=1) if len(x) > 1 else np.zeros(x.shape[1])
        return cls(x.mean(axis=0), np.where(std > 0, std, 1.0))

    def apply(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) / self.scale


def correlated_columns(x: np.ndarray, y: np.ndarray, min_correlation: float) -> np.ndarray:
    """Indices of columns whose |Pearson r| with ``y`` is at least ``min_correlation``.

    When none is, the single most correlated column is kept: a model needs one
    input, and the most correlated one is what the paper's rule would keep first.
    """
    if np.ptp(y) == 0:
        raise ModelError("every training pair has the same throughput sum; nothing to learn from")
    xc = x - x.mean(axis=0)
    yc = y - y.mean()
    denom = np.sqrt((xc**2).sum(axis=0) * (yc**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.abs(xc.T @ yc) / denom
    r = np.where(denom > 0, r, np.nan)
    if np.all(np.isnan(r)):
        raise ModelError("no feature varies over the training pairs; nothing to learn from")
    keep = np.flatnonzero(r >= min_correlation)
    return keep if keep.size else np.array([int(np.nanargmax(r))])


@dataclass(frozen=True, eq=False)
class PairInputs:
    """What both models do to pair features before the fit: select, then z-score."""

    columns: tuple[str, ...]
    """F columns the pair features were built from, in order."""
    selected: tuple[int, ...]
    """Indices (into ``columns``) of the pair features kept by the correlation filter."""
    normaliser: Normaliser

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, columns: tuple[str, ...], min_correlation: float) -> PairInputs:
        keep = correlated_columns(x, y, min_correlation)
        return cls(columns, tuple(int(i) for i in keep), Normaliser.fit(x[:, keep]))

    @property
    def selected_names(self) -> tuple[str, ...]:
        return tuple(self.columns[i] for i in self.selected)

    def transform(self, x: np.ndarray) -> np.ndarray:
        return self.normaliser.apply(x[:, list(self.selected)])


def _check_training(x: np.ndarray, y: np.ndarray, columns: tuple[str, ...]) -> None:
    if x.ndim != 2 or x.shape != (len(y), len(columns)):
        raise ModelError(f"pair features of shape {x.shape} do not match {len(y)} targets and {len(columns)} columns")
    if len(y) < MIN_TRAINING_PAIRS:
        raise ModelError(f"{len(y)} training pairs; a fit needs at least {MIN_TRAINING_PAIRS}")


# ------------------------------------------------------------------ KACE linear model
@dataclass(frozen=True, eq=False)
class KaceModel:
    """KACE's linear regression on selected, z-scored pair features."""

    inputs: PairInputs
    intercept: float
    coefficients: np.ndarray
    training_pairs: int
    min_correlation: float = MIN_CORRELATION

    @classmethod
    def fit(
        cls, x: np.ndarray, y: np.ndarray, columns: tuple[str, ...], min_correlation: float = MIN_CORRELATION
    ) -> KaceModel:
        """Least squares with an intercept (minimum-norm when features outnumber pairs)."""
        _check_training(x, y, columns)
        inputs = PairInputs.fit(x, y, columns, min_correlation)
        design = np.column_stack([np.ones(len(y)), inputs.transform(x)])
        solution, *_ = np.linalg.lstsq(design, y, rcond=RANK_TOLERANCE)
        return cls(inputs, float(solution[0]), solution[1:], len(y), min_correlation)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted throughput sums for raw pair features (columns as in ``inputs.columns``)."""
        return self.intercept + self.inputs.transform(x) @ self.coefficients

    def predict_pairs(self, table: FeatureTable, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Predicted throughput sums of named pairs; ``table`` needs only the columns the model uses."""
        x = pair_matrix(table.subset(self.inputs.selected_names), pairs)
        return self.intercept + self.inputs.normaliser.apply(x) @ self.coefficients

    # -------------------------------------------------------------- file
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": MODEL_FORMAT,
            "version": MODEL_VERSION,
            "model": "KACE linear regression (Han et al., SoCC'24)",
            "target": "throughput sum: each workload's co-run throughput / its solo throughput, summed",
            "feature_columns": list(self.inputs.columns),
            "percentage_columns": [c for c in self.inputs.columns if is_percentage(c)],
            "used_columns": list(self.inputs.selected_names),
            "normaliser": {
                "mean": self.inputs.normaliser.mean.tolist(),
                "scale": self.inputs.normaliser.scale.tolist(),
            },
            "intercept": self.intercept,
            "coefficients": self.coefficients.tolist(),
            "min_correlation": self.min_correlation,
            "training_pairs": self.training_pairs,
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> KaceModel:
        return load_document(
            path,
            cls.from_dict,
            ModelError,
            "model",
            parse_errors=(KeyError, TypeError, ValueError),
            missing_hint="write one with `bless kace fit`",
        )

    @classmethod
    def from_dict(cls, raw: Any) -> KaceModel:
        if not isinstance(raw, dict) or raw.get("format") != MODEL_FORMAT:
            raise ValueError(f"format: expected {MODEL_FORMAT!r}; is this a `bless kace fit` model file?")
        if raw.get("version") != MODEL_VERSION:
            raise ValueError(f"version: this bless reads version {MODEL_VERSION}, got {raw.get('version')!r}")
        columns = tuple(str(c) for c in raw["feature_columns"])
        used = [str(c) for c in raw["used_columns"]]
        unknown = [c for c in used if c not in columns]
        if unknown:
            raise ValueError(f"used_columns: {', '.join(unknown)} not among feature_columns")
        mean = np.array(raw["normaliser"]["mean"], dtype=float)
        scale = np.array(raw["normaliser"]["scale"], dtype=float)
        coef = np.array(raw["coefficients"], dtype=float)
        if not (len(mean) == len(scale) == len(coef) == len(used)):
            raise ValueError("normaliser.mean, normaliser.scale and coefficients need one value per used column")
        if np.any(scale <= 0):
            raise ValueError("normaliser.scale: every value must be positive")
        inputs = PairInputs(columns, tuple(columns.index(c) for c in used), Normaliser(mean, scale))
        return cls(
            inputs,
            float(raw["intercept"]),
            coef,
            int(raw.get("training_pairs", 0)),
            float(raw.get("min_correlation", MIN_CORRELATION)),
        )


# ------------------------------------------------------------------ Xu et al. random forest
@dataclass(frozen=True, eq=False)
class ForestModel:
    """Random-forest baseline (Xu et al.) on the same pair inputs as KACE."""

    inputs: PairInputs
    forest: Any

    TREES = 100
    """scikit-learn's default forest size; the artifact's randomised hyper-parameter
    search (5-fold CV) is not meaningful on the few dozen pairs KACE trains on."""

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        y: np.ndarray,
        columns: tuple[str, ...],
        seed: int,
        min_correlation: float = MIN_CORRELATION,
    ) -> ForestModel:
        from sklearn.ensemble import RandomForestRegressor

        _check_training(x, y, columns)
        inputs = PairInputs.fit(x, y, columns, min_correlation)
        forest = RandomForestRegressor(n_estimators=cls.TREES, random_state=seed, n_jobs=1)
        forest.fit(inputs.transform(x), y)
        return cls(inputs, forest)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.forest.predict(self.inputs.transform(x))
