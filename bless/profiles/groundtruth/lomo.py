"""Leave-one-model-out check of reduced-level times *through the profile assembly*.

For a held-out model, each measured pass is rebuilt the way a profile of a model
measured at full GPU only is built (ResNet-101, DenseNets): every kernel keeps
only its reference-level point, gets the reduced-level points of a measured twin
in the *other* models where one exists (:func:`bless.profiles.groundtruth.passes.with_twins`),
and becomes its 18-level curve with :func:`bless.profiles.groundtruth.assemble.kernel_curves`
(:func:`bless.profiles.groundtruth.scaling.fit_curve`, the step the shipped profiles use).  The curves
are read at the measured SM counts the way the simulator reads a profile
(:func:`bless.profiles.curves.at_sms`: 54 and 66 SMs are profile levels, 22/44/88 lie between
levels) and their sum is compared with the measured pass total.

Predictors:

* ``twins+model``: what the profiles use (twins from the other models, else the
  scaling model with constants fitted without the held-out model);
* ``model``: the reference point and the scaling model only;
* ``measured``: the pass's *own* measured points assembled (no prediction: it
  shows what assembly does to real measurements; a flattening bug shows here);
* ``linear``: t(n) = t(ref) * ref / n for the whole pass.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from bless.hw.gpus import A100, GpuSpec
from bless.profiles import curves
from bless.profiles.groundtruth import mps
from bless.profiles.groundtruth.assemble import kernel_curves
from bless.profiles.groundtruth.calibrate import (
    FIT_MODELS,
    TwinLibrary,
    fit_params,
    twin_library,
)
from bless.profiles.groundtruth.passes import PassData, from_mps, with_twins
from bless.profiles.groundtruth.scaling import FITTED, ScalingParams

PREDICTORS = ("twins+model", "model", "measured", "linear")
MEASURED_MODELS = FIT_MODELS + ("bert",)
"""Every model of the A100 data measured at reduced levels (BERT at 20-80 % only, reference 88 SMs)."""


@dataclass(frozen=True)
class LevelCheck:
    """One predictor's whole-pass time at one measured level of one pass."""

    model: str
    batch: int
    sms: int
    predictor: str
    predicted_us: float
    measured_us: float

    @property
    def error(self) -> float:
        return self.predicted_us / self.measured_us - 1


def reference_only(pd: PassData) -> PassData:
    """The pass as a full-GPU-only measurement: each kernel keeps its highest-SM point."""
    kernels = []
    for k in pd.kernels:
        ref = max(k.points)
        kernels.append(replace(k, points={ref: k.points[ref]}, source="s"))
    return replace(pd, kernels=tuple(kernels))


def assembled(pd: PassData, params: ScalingParams, gpu: GpuSpec = A100, level_sms=None) -> np.ndarray:
    """Shape (levels, K): the pass's kernel curves (us) as a profile holds them (``gpu``'s 18 levels)."""
    return np.column_stack([c.t for c in kernel_curves(pd, gpu, params, level_sms)])


def check_pass(
    model: str,
    batch: int,
    params: ScalingParams = FITTED,
    twins: TwinLibrary | None = None,
    *,
    kernels_out: dict[str, list[np.ndarray]] | None = None,
    gpu: GpuSpec = A100,
    exact_sms: bool = False,
) -> list[LevelCheck]:
    """Every predictor's whole-pass error at every reduced measured level of one pass.

    ``twins`` must not contain ``model`` (leave-one-model-out).  ``kernels_out``, if
    given, collects per-kernel relative errors (kernels measured as themselves).
    ``exact_sms``: assemble the curves at the measured SM counts themselves instead
    of the 18 profile levels (isolates what reading between levels adds).
    """
    if twins is not None and model in twins.models:
        raise ValueError(f"twins from {', '.join(twins.models)} include the held-out model {model}")
    p = mps.load_pass(model, batch)
    measured = np.array(p.totals_ns) / 1e3
    sms = p.sms
    own = from_mps(model, batch)
    ref = reference_only(own)
    sources = {
        "twins+model": with_twins(ref, twins) if twins is not None and sms[-1] == gpu.sm_count else ref,
        "model": ref,
        "measured": own,
    }
    level_sms = np.array(sorted(set(sms) | {gpu.sm_count}) if exact_sms else gpu.level_sms())
    truth = p.times_ns() / 1e3
    same = np.array([k.same for k in p.kernels])
    out = []
    for name in PREDICTORS[:3]:
        t = assembled(sources[name], params, gpu, tuple(int(x) for x in level_sms))
        for li in range(len(sms) - 1):
            at = np.asarray(curves.at_sms(level_sms, t, sms[li]))
            out.append(LevelCheck(model, batch, sms[li], name, float(at.sum()), float(measured[li])))
            if kernels_out is not None and name != "measured":
                ok = same[:, li] & np.isfinite(truth[:, li])
                kernels_out.setdefault(name, []).append(at[ok] / truth[ok, li] - 1)
    for li in range(len(sms) - 1):
        linear = measured[-1] * sms[-1] / sms[li]
        out.append(LevelCheck(model, batch, sms[li], "linear", float(linear), float(measured[li])))
        if kernels_out is not None:
            ok = same[:, li] & np.isfinite(truth[:, li])
            kernels_out.setdefault("linear", []).append(truth[ok, -1] * sms[-1] / sms[li] / truth[ok, li] - 1)
    return out


def leave_one_model_out(
    models=MEASURED_MODELS,
    refit: bool = True,
    max_iter: int = 3000,
    kernels_out: dict[str, list[np.ndarray]] | None = None,
    exact_sms: bool = False,
):
    """Per held-out model: (model, constants used, [LevelCheck] over all its batches).

    Twins come from the models of :data:`FIT_MODELS` other than the held-out one;
    with ``refit`` the constants are refitted on those too (BERT, never fitted on,
    keeps the shipped constants: they are already held out for it).
    """
    for held in models:
        others = [m for m in FIT_MODELS if m != held]
        params = fit_params(others, max_iter=max_iter) if refit and held in FIT_MODELS else FITTED
        library = twin_library(others)
        checks = []
        for batch in mps.batches(held):
            checks.extend(check_pass(held, batch, params, library, kernels_out=kernels_out, exact_sms=exact_sms))
        yield held, params, checks
