"""Fitting and checking the SM scaling model on the A100 MPS measurements.

The predictor a profile uses for a kernel with no reduced-level measurement is:

1. a *measured twin*: the same kernel (name, grid, block) measured at every MPS
   level in another pass of the data (median of its instances' t(n)/t(108));
2. otherwise the analytic model :func:`bless.profiles.groundtruth.scaling.predict_many`.

Validation is leave-one-model-out: for a held-out model, neither its twins nor its
passes may inform the prediction, and the analytic constants are refitted without
it.  Every level's truth is the measured pass total (all kernels that ran).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.optimize

from bless.profiles.groundtruth import mps
from bless.profiles.groundtruth.scaling import FITTED, ScalingParams, predict_many

FIT_MODELS = ("resnet50", "resnet152", "vgg16", "vgg19", "mobilenet", "inception")
"""Models measured at every level with 100 % as reference: what the constants are fitted on."""

TwinKey = tuple[str, tuple[int, int, int] | None, tuple[int, int, int] | None]


@dataclass(frozen=True)
class FitPass:
    """One measured pass as arrays: K kernels by the L levels (last = reference)."""

    model: str
    batch: int
    sms: np.ndarray
    t_us: np.ndarray
    totals_us: np.ndarray
    same: np.ndarray
    blocks: np.ndarray
    dram: np.ndarray
    conv: np.ndarray
    keys: tuple[TwinKey, ...]

    @property
    def reduced(self) -> range:
        return range(len(self.sms) - 1)


def fit_pass(model: str, batch: int) -> FitPass:
    p = mps.load_pass(model, batch)
    return FitPass(
        model=model,
        batch=batch,
        sms=np.array(p.sms, dtype=float),
        t_us=p.times_ns() / 1e3,
        totals_us=np.array(p.totals_ns) / 1e3,
        same=np.array([k.same for k in p.kernels]),
        blocks=np.array([k.blocks or 0 for k in p.kernels], dtype=float),
        dram=np.array([k.dram_pct / 100 for k in p.kernels]),
        conv=np.array([k.is_conv_family for k in p.kernels]),
        keys=tuple(twin_key(k.name, k.grid, k.block) for k in p.kernels),
    )


def fit_passes(models=FIT_MODELS) -> list[FitPass]:
    return [fit_pass(m, b) for m in models for b in mps.batches(m)]


# ------------------------------------------------------------------ twins
def twin_key(name: str, grid, block) -> TwinKey:
    return (name, None if grid is None else tuple(grid), None if block is None else tuple(block))


@dataclass(frozen=True)
class TwinLibrary:
    """Measured t(n)/t(108) of every kernel seen at all MPS levels, by (name, grid, block)."""

    sms: tuple[int, ...]
    """The reduced SM counts the ratios are at (MPS 20..80 %)."""
    ratios: dict[TwinKey, np.ndarray]
    models: tuple[str, ...]

    def lookup(self, key: TwinKey) -> np.ndarray | None:
        return None if key[1] is None else self.ratios.get(key)


def twin_library(models) -> TwinLibrary:
    """Twins from every pass of ``models`` that has the 100 % reference and all MPS levels."""
    samples: dict[TwinKey, list[np.ndarray]] = {}
    sms = tuple(mps.mps_sms(p) for p in mps.MPS_LEVELS[:-1])
    for model in models:
        for fp in (fit_pass(model, b) for b in mps.batches(model)):
            if tuple(fp.sms[:-1].astype(int)) != sms:
                continue
            ratios = fp.t_us[:, :-1] / fp.t_us[:, -1:]
            for key, r in zip(fp.keys, ratios):
                if key[1] is not None and np.all(np.isfinite(r)):
                    samples.setdefault(key, []).append(r)
    return TwinLibrary(sms, {k: np.median(np.array(v), axis=0) for k, v in samples.items()}, tuple(models))


# ------------------------------------------------------------------ prediction
def twin_matrix(fp: FitPass, twins: TwinLibrary | None) -> np.ndarray | None:
    """Shape (K, reduced levels): each kernel's twin t(n)/t(ref) at the pass's reduced levels, NaN if none."""
    if twins is None or fp.sms[-1] != 108:
        return None
    out = np.full((len(fp.keys), len(fp.reduced)), np.nan)
    cols = [twins.sms.index(int(n)) if int(n) in twins.sms else None for n in fp.sms[:-1]]
    for i, key in enumerate(fp.keys):
        r = twins.lookup(key)
        if r is not None:
            out[i] = [np.nan if c is None else r[c] for c in cols]
    return out


def predict_level(fp: FitPass, li: int, params: ScalingParams, twin_ratios: np.ndarray | None) -> np.ndarray:
    """Every kernel's predicted duration (us) at level ``li`` from the reference column only."""
    t_ref = fp.t_us[:, -1]
    out = predict_many(
        t_ref,
        fp.sms[li],
        blocks=fp.blocks,
        dram_util=fp.dram,
        conv_family=fp.conv,
        n_ref=fp.sms[-1],
        params=params,
    )
    if twin_ratios is not None:
        r = twin_ratios[:, li]
        out = np.where(np.isnan(r), out, t_ref * r)
    return out


@dataclass(frozen=True)
class LevelError:
    model: str
    batch: int
    sms: int
    predicted_us: float
    measured_us: float
    linear_us: float

    @property
    def error(self) -> float:
        return self.predicted_us / self.measured_us - 1

    @property
    def linear_error(self) -> float:
        return self.linear_us / self.measured_us - 1


def whole_model_errors(passes, params: ScalingParams, twin_ratios=None) -> list[LevelError]:
    """Whole-pass error at every reduced level (``twin_ratios``: one :func:`twin_matrix` per pass, or None)."""
    out = []
    for fp, tw in zip(passes, twin_ratios or [None] * len(passes)):
        for li in fp.reduced:
            pred = predict_level(fp, li, params, tw).sum()
            linear = fp.totals_us[-1] * fp.sms[-1] / fp.sms[li]
            out.append(LevelError(fp.model, fp.batch, int(fp.sms[li]), pred, fp.totals_us[li], linear))
    return out


def kernel_log_errors(passes, params: ScalingParams, twin_ratios=None) -> tuple[np.ndarray, np.ndarray]:
    """log(predicted/measured) of every kernel measured as itself at a reduced level, and its weight (us)."""
    errs, weights = [], []
    for fp, tw in zip(passes, twin_ratios or [None] * len(passes)):
        for li in fp.reduced:
            same = fp.same[:, li] & np.isfinite(fp.t_us[:, li])
            pred = predict_level(fp, li, params, tw)[same]
            errs.append(np.log(pred / fp.t_us[same, li]))
            weights.append(fp.t_us[same, li])
    return np.concatenate(errs), np.concatenate(weights)


# ------------------------------------------------------------------ fitting
def loss(params: ScalingParams, passes, twin_ratios) -> float:
    """Smooth stand-in for the worst whole-pass error, with and without twins, plus a small
    time-weighted per-kernel term that keeps individual curves sensible.

    Both predictors matter: twins cover most CNN kernels, but BERT, training and
    models of other families rely on the analytic model alone.
    """

    def norm8(errors) -> float:
        e = np.array([np.log1p(x.error) for x in errors])
        return float(np.mean(np.abs(e) ** 8) ** (1 / 8))

    ke, kw = kernel_log_errors(passes, params)
    return (
        norm8(whole_model_errors(passes, params, twin_ratios))
        + norm8(whole_model_errors(passes, params))
        + 0.1 * float(np.sqrt(np.sum(kw * ke**2) / np.sum(kw)))
    )


def loo_twin_ratios(passes, models) -> list[np.ndarray | None]:
    """For each pass, twins from the *other* models of ``models`` only."""
    libraries = {m: twin_library([x for x in models if x != m]) for m in models}
    return [twin_matrix(fp, libraries.get(fp.model)) for fp in passes]


def fit_params(models=FIT_MODELS, start: ScalingParams = FITTED, max_iter: int = 3000) -> ScalingParams:
    """Fit the analytic constants on ``models``; each pass sees twins from the other models only."""
    passes = fit_passes(models)
    twins = loo_twin_ratios(passes, models)
    result = scipy.optimize.minimize(
        lambda v: loss(ScalingParams.from_vector(v), passes, twins),
        start.as_vector(),
        method="Nelder-Mead",
        options={"maxiter": max_iter, "xatol": 1e-4, "fatol": 1e-9},
    )
    return ScalingParams.from_vector(result.x)


def leave_one_model_out(models=FIT_MODELS, refit: bool = True, max_iter: int = 3000):
    """Per held-out model: its errors with constants (and twins) from the other models only.

    Yields (model, params used, [LevelError] with twins, [LevelError] analytic only).
    """
    for held in models:
        others = [m for m in models if m != held]
        params = fit_params(others, max_iter=max_iter) if refit else FITTED
        passes = fit_passes([held])
        library = twin_library(others)
        yield (
            held,
            params,
            whole_model_errors(passes, params, [twin_matrix(fp, library) for fp in passes]),
            whole_model_errors(passes, params),
        )
