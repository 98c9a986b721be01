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

Where this differs from the artifact, and why: the 0.2 cut-off and the plain
least-squares fit are fixed in the paper; here both are *chosen by 5-fold
cross-validation on the training pairs only* (:data:`CORRELATION_GRID`, with
0.2 among them, and a ridge penalty from :data:`RIDGE_GRID`, with 0 -- plain
least squares -- among them; ties go to the paper's choice).  KACE trains on a
fifth of the pairs (a few dozen); with that few, a fixed |r| cut-off keeps
features that correlate by chance and drops features that matter only jointly
(DRAM and L2 load beside SM load), and an unpenalised fit on the rest follows
the noise.  ``experiments/kace.md`` has the measurements (real A100 pairs,
simulator pairs, the same with uninformative columns added).  Passing
``min_correlation`` and ``ridge`` fixes them (0.2 and 0.0 is the paper's model).

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

CORRELATION_GRID = (MIN_CORRELATION, 0.0, 0.1, 0.3)
"""|r| cut-offs cross-validation chooses from (the paper's first: it wins ties)."""
RIDGE_GRID = (0.0, *(float(a) for a in np.logspace(-2, 3, 11)))
"""Ridge penalties (on z-scored features) cross-validation chooses from; 0 is the paper's least squares."""
CV_FOLDS = 5
"""Folds of the cross-validation on the training pairs."""
CV_SEED = 0
"""Seed of the fold assignment: a model is a function of its training pairs alone."""

MIN_TRAINING_PAIRS = 3
"""Fewest training pairs: two for a spread to normalise by, one more for a correlation to mean anything."""

RANK_TOLERANCE = 1e-10
"""Least-squares directions with singular values below this fraction of the largest are
dropped.  The inputs are z-scored (order 1), so such directions are float rounding of
exactly dependent columns (two features that are one quantity, e.g. DRAM and memory
throughput of an app without copies); numpy's default (machine epsilon) keeps them and
returns coefficients of 1e10 that make predictions on new pairs meaningless."""

MODEL_FORMAT = "bless-kace-model"
MODEL_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 1 files (no ridge penalty: it was 0) still load."""

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
    sm_spread = max_sms(profile, gpu)[~copy] / gpu.sm_count  # share of the SMs its blocks spread over
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
    row["sm_throughput_pct"] = 100.0 * _weighted_mean(sm_spread, t)
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
def _solve(z: np.ndarray, y: np.ndarray, ridge: float) -> tuple[float, np.ndarray]:
    """Intercept and coefficients on z-scored inputs; ridge 0 is least squares (minimum norm)."""
    if ridge == 0:
        design = np.column_stack([np.ones(len(y)), z])
        solution, *_ = np.linalg.lstsq(design, y, rcond=RANK_TOLERANCE)
        return float(solution[0]), solution[1:]
    mean = z.mean(axis=0)
    zc = z - mean
    coef = np.linalg.solve(zc.T @ zc + ridge * np.eye(z.shape[1]), zc.T @ (y - y.mean()))
    return float(y.mean() - mean @ coef), coef


def _fit_fixed(x: np.ndarray, y: np.ndarray, columns: tuple[str, ...], min_correlation: float, ridge: float):
    inputs = PairInputs.fit(x, y, columns, min_correlation)
    intercept, coef = _solve(inputs.transform(x), y, ridge)
    return inputs, intercept, coef


def cross_validate(
    x: np.ndarray,
    y: np.ndarray,
    columns: tuple[str, ...],
    correlations: Sequence[float] = CORRELATION_GRID,
    ridges: Sequence[float] = RIDGE_GRID,
) -> tuple[float, float]:
    """The (|r| cut-off, ridge penalty) with the least squared error over CV folds of these pairs.

    Selection, normalisation and fit are redone inside every fold, so no fold's
    held-out pairs inform its model.  Ties go to the earlier grid entry; errors
    within a billionth of the target's spread are ties (an exact fit leaves
    rounding noise whose order changes with the BLAS build).
    """
    n = len(y)
    rounding = 1e-9 * float(((y - y.mean()) ** 2).sum())
    folds = np.array_split(np.random.default_rng(CV_SEED).permutation(n), min(CV_FOLDS, n))
    best, best_err = (correlations[0], ridges[0]), np.inf
    for r in correlations:
        for alpha in ridges:
            err = 0.0
            for held in folds:
                train = np.setdiff1d(np.arange(n), held)
                if len(train) < MIN_TRAINING_PAIRS or np.ptp(y[train]) == 0:
                    err = np.inf
                    break
                try:
                    inputs, b, w = _fit_fixed(x[train], y[train], columns, r, alpha)
                except ModelError:
                    err = np.inf
                    break
                err += float(((b + inputs.transform(x[held]) @ w - y[held]) ** 2).sum())
            if err < best_err * (1 - 1e-9) - rounding:
                best, best_err = (r, alpha), err
    return best


@dataclass(frozen=True, eq=False)
class KaceModel:
    """KACE's linear regression on selected, z-scored pair features."""

    inputs: PairInputs
    intercept: float
    coefficients: np.ndarray
    training_pairs: int
    min_correlation: float = MIN_CORRELATION
    ridge: float = 0.0

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        y: np.ndarray,
        columns: tuple[str, ...],
        min_correlation: float | None = None,
        ridge: float | None = None,
    ) -> KaceModel:
        """Select by |r|, z-score, fit a (ridge-penalised) linear regression with an intercept.

        ``min_correlation`` or ``ridge`` left as None is chosen by
        :func:`cross_validate` on these pairs; ``fit(x, y, columns, 0.2, 0.0)``
        is the paper's model (least squares, minimum-norm when features
        outnumber pairs).
        """
        _check_training(x, y, columns)
        if ridge is not None and ridge < 0:
            raise ModelError(f"ridge penalty must be at least 0, got {ridge}")
        if min_correlation is None or ridge is None:
            min_correlation, ridge = cross_validate(
                x,
                y,
                columns,
                CORRELATION_GRID if min_correlation is None else (min_correlation,),
                RIDGE_GRID if ridge is None else (ridge,),
            )
        inputs, intercept, coef = _fit_fixed(x, y, columns, min_correlation, ridge)
        return cls(inputs, intercept, coef, len(y), min_correlation, ridge)

    @property
    def exact_fit(self) -> bool:
        """No more training pairs than coefficients and no penalty: the fit interpolates."""
        return self.ridge == 0 and self.training_pairs <= len(self.inputs.selected) + 1

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
            "model": "KACE linear regression (Han et al., SoCC'24), |r| cut-off and ridge penalty chosen by CV",
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
            "ridge": self.ridge,
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
        if raw.get("version") not in READABLE_VERSIONS:
            raise ValueError(
                f"version: this bless reads versions {', '.join(map(str, READABLE_VERSIONS))}, got {raw.get('version')!r}"
            )
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
            float(raw.get("ridge", 0.0)),
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

    def predict_pairs(self, table: FeatureTable, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self.predict(pair_matrix(table.subset(self.inputs.columns), pairs))
