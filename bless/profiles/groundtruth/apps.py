"""The five BLESS inference apps on the A100: which measurements, which batch, which derivation.

The batch of each app is chosen so that its full-GPU solo latency ``T[100 %]``
approaches the BLESS paper's Table 1 (A100): a measured batch is used when one is
within :data:`MEASURED_TOLERANCE` of the paper; otherwise the integer batch closest
to the paper, interpolated operator by operator between the two measured batches
around it (or extrapolated from the two largest, see :mod:`batching`).

* ``resnet50``, ``bert``: measured (BERT-large, sequence 128; its data has no 100 %
  column: 90-108 SMs come from the scaling model anchored at 80 % = 88 SMs).
* ``resnet101``: measured at full GPU only; reduced levels from measured twins in
  ResNet-50/152 (the same cuDNN kernels on the same layer shapes) or the model.
* ``vgg11``: VGG16's measured kernels without the layers VGG11 lacks (:mod:`vgg`).
* ``nasnet``: **a proxy**.  NASNet-A is not in the data; Inception-v3 (multi-branch
  cells concatenated like NASNet's) stands in for it, at the batch that matches the
  paper's latency.  A later task predicts the real NASNet-A from TVM kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bless.hw.gpus import A100
from bless.profiles.format import Profile
from bless.profiles.groundtruth import mps
from bless.profiles.groundtruth.assemble import LAUNCH_S, build_profile, io_copies
from bless.profiles.groundtruth.batching import interpolate
from bless.profiles.groundtruth.calibrate import FIT_MODELS, TwinLibrary, twin_library
from bless.profiles.groundtruth.kineto import launch_resources
from bless.profiles.groundtruth.networks import memory_bytes
from bless.profiles.groundtruth.passes import (
    PassData,
    from_mps,
    with_launch_resources,
    with_twins,
)
from bless.profiles.groundtruth.scaling import FITTED, PARAM_NAMES, fit_curve
from bless.profiles.groundtruth.training import measured_iteration_ms, training_pass
from bless.profiles.groundtruth.vgg import vgg11_from_vgg16

PAPER_SOLO_MS = {"vgg11": 10.2, "resnet50": 8.7, "resnet101": 17.2, "nasnet": 32.7, "bert": 12.8}
"""BLESS (EuroSys'25) Table 1: solo latency of each app on an A100."""
PAPER_TVM_KERNELS = {"vgg11": 31, "resnet50": 80, "resnet101": 148, "nasnet": 458, "bert": 382}
"""Kernel counts of the paper's TVM builds (ours are the measured cuDNN/PyTorch kernels)."""

MEASURED_TOLERANCE = 0.10


@dataclass(frozen=True)
class Recipe:
    """How to get a pass of an app at any batch from the data."""

    app: str
    data_model: str
    """The model whose measurements the app is built from."""
    facts_model: str
    """The architecture whose parameters and tensors the profile reports."""
    derive: Callable[[PassData], PassData] | None = None
    proxy_note: str = ""


RECIPES = {
    r.app: r
    for r in (
        Recipe("resnet50", "resnet50", "resnet50"),
        Recipe("resnet101", "resnet101", "resnet101"),
        Recipe("vgg11", "vgg16", "vgg11", derive=vgg11_from_vgg16),
        Recipe(
            "nasnet",
            "inception",
            "inception",
            proxy_note="PROXY: NASNet-A is not in the A100 data; Inception-v3 (multi-branch, concatenating "
            "cells like NASNet) stands in for it. Architecture facts are Inception-v3's.",
        ),
        Recipe("bert", "bert", "bert"),
    )
}


def recipe_for(app: str) -> Recipe:
    """The recipe of one of the five apps, or of any model in the A100 data (as itself)."""
    if app in RECIPES:
        return RECIPES[app]
    if app in mps.available_models():
        return Recipe(app, app, app)
    raise ValueError(
        f"unknown app {app!r}: use one of {', '.join(RECIPES)} or a model of the A100 data "
        f"({', '.join(mps.available_models())})"
    )


def default_twins() -> TwinLibrary:
    """Measured twins from every model measured at all levels against 100 %."""
    return twin_library(FIT_MODELS)


def pass_at(recipe: Recipe, batch: int, twins: TwinLibrary | None = None) -> PassData:
    """The app's pass at ``batch``: measured if the data has it, else interpolated between batches."""
    measured = mps.batches(recipe.data_model)
    twins = twins if twins is not None else default_twins()

    def load(b: int) -> PassData:
        return with_twins(from_mps(recipe.data_model, b), twins)

    if batch in measured:
        pd = load(batch)
    else:
        below = [b for b in measured if b < batch]
        above = [b for b in measured if b > batch]
        if not below:
            raise ValueError(f"{recipe.data_model}: batch {batch} is below every measured batch {measured}")
        a, b = (below[-1], above[0]) if above else (measured[-2], measured[-1])
        pd = interpolate(load(a), load(b), batch)
    if recipe.derive is not None:
        pd = recipe.derive(pd)
    return with_launch_resources(pd, launch_resources())


def full_gpu_ms(pd: PassData, facts_model: str) -> float:
    """T[100 %] of the profile this pass gives, ms."""
    levels = A100.level_sms()
    total_us = sum(float(fit_curve(levels, k.points, k.traits).t[-1]) for k in pd.kernels)
    return (total_us * 1e-6 + sum(c.seconds for c in io_copies(facts_model, pd.batch)) + LAUNCH_S) * 1e3


@dataclass(frozen=True)
class BatchChoice:
    batch: int
    t100_ms: float
    measured: bool
    candidates: dict[int, float]
    """Batch -> T[100 %] ms of everything considered."""


def choose_batch(
    recipe: Recipe, target_ms: float, twins: TwinLibrary | None = None, max_batch: int | None = None
) -> BatchChoice:
    """The batch whose T[100 %] is closest to ``target_ms`` (measured batches first, see module docstring)."""
    measured = mps.batches(recipe.data_model)
    cand = {b: full_gpu_ms(pass_at(recipe, b, twins), recipe.facts_model) for b in measured}
    best = min(cand, key=lambda b: abs(cand[b] / target_ms - 1))
    if abs(cand[best] / target_ms - 1) <= MEASURED_TOLERANCE:
        return BatchChoice(best, cand[best], True, cand)
    limit = max_batch or 2 * measured[-1]
    lo = max([b for b in measured if cand[b] < target_ms], default=measured[0])
    hi = min([b for b in measured if cand[b] > target_ms], default=limit)
    for b in range(lo + 1, hi):
        if b not in cand:
            cand[b] = full_gpu_ms(pass_at(recipe, b, twins), recipe.facts_model)
            if cand[b] > target_ms:
                break
    best = min(cand, key=lambda b: abs(cand[b] / target_ms - 1))
    return BatchChoice(best, cand[best], best in measured, dict(sorted(cand.items())))


LEVEL_FILL = (
    "levels at known SM counts (MPS 20/40/50/60/80/100 % = 22/44/54/66/88/108 SMs; measured, twin or derived "
    "points) carry those points after isotonic smoothing; levels between two points are linear in 1/n; levels "
    "below the lowest point come from bless.profiles.groundtruth.scaling.predict anchored there; above the highest point when it is "
    "not 108 (BERT: 88) from the kernel's own a+b/n trend through its top three points; no level is flattened at "
    "the kernel's block count or max_sm_share (= min(blocks, first level within 3 % of the full-GPU time) / 108, "
    "the SMs it occupies): under MPS a kernel with fewer blocks than SMs can still be slower than at 108"
)


def build_inference(app: str, batch: int | None = None, twins: TwinLibrary | None = None) -> tuple[Profile, str]:
    """The ground-truth inference profile of ``app`` and a one-line account of its batch."""
    recipe = recipe_for(app)
    twins = twins if twins is not None else default_twins()
    target = PAPER_SOLO_MS.get(app)
    if batch is None:
        if target is None:
            raise ValueError(f"{app}: give a batch (no paper latency to aim at)")
        choice = choose_batch(recipe, target, twins)
        batch = choice.batch
        how = ("measured batch" if choice.measured else "derived batch") + (
            f" closest to the paper's {target} ms (measured batches used when within "
            f"{MEASURED_TOLERANCE:.0%}); candidates T[100%] ms: "
            + ", ".join(f"{b}: {v:.2f}" for b, v in choice.candidates.items())
        )
    else:
        how = f"batch {batch} requested"
    pd = pass_at(recipe, batch, twins)
    details = {
        "batch_choice": how,
        "level_fill": LEVEL_FILL,
        "scaling_params": dict(zip(PARAM_NAMES, map(float, FITTED.as_vector()))),
        "known_sms": sorted({s for k in pd.kernels for s in k.points}),
    }
    if target is not None:
        details["paper_solo_ms"] = target
        details["paper_tvm_kernels"] = PAPER_TVM_KERNELS[app]
    if recipe.proxy_note:
        details["proxy"] = recipe.proxy_note
    profile = build_profile(
        app,
        pd,
        kind="inference",
        facts_model=recipe.facts_model,
        proxy=bool(recipe.proxy_note),
        memory_bytes=memory_bytes(recipe.facts_model, pd, training=False),
        source=SOURCE,
        details=details,
    )
    return profile, how


SOURCE = (
    "A100 MPS kernel measurements, ../shared/data/calibration/a100_mps_kernels (Nsight Compute under MPS "
    "active-thread 20-100 %; profiling data of a public gpulet re-implementation)"
)


TRAIN_BATCH = {"resnet50": 32, "resnet101": 32, "vgg11": 32, "nasnet": 32, "bert": 8}
"""Training batches: the batches of the measured training iterations (Orion's and the A100 trace's
ResNets at 32, Orion's BERT at 8), all measured batches of the A100 forward data."""
TRANSFORMERS = ("bert",)


def build_training(app: str, batch: int | None = None, twins: TwinLibrary | None = None) -> Profile:
    """The ground-truth profile of one training iteration of ``app`` (see :mod:`training`)."""
    recipe = recipe_for(app)
    twins = twins if twins is not None else default_twins()
    batch = batch or TRAIN_BATCH.get(app)
    if batch is None:
        raise ValueError(f"{app}: give a training batch")
    family = "transformer" if recipe.data_model in TRANSFORMERS else "cnn"
    forward = pass_at(recipe, batch, twins)
    train, used = training_pass(forward, family, recipe.facts_model)
    details = {
        "training": used,
        "level_fill": LEVEL_FILL,
        "scaling_params": dict(zip(PARAM_NAMES, map(float, FITTED.as_vector()))),
        "forward_kernels": len(forward.kernels),
    }
    if recipe.data_model == "resnet50" and batch == 32:
        measured = measured_iteration_ms()
        details["check_a100_trace_ms"] = {
            "measured_iteration_real_time": round(sum(measured.values()), 3),
            "note": "the A100 ResNet-50 b32 training trace (PyTorch profiler, real time, DDP kernels dropped); "
            "this profile is in the inference data's Nsight Compute time, 10-30 % above real time",
        }
    if recipe.proxy_note:
        details["proxy"] = recipe.proxy_note
    return build_profile(
        f"{app}_train",
        train,
        kind="training",
        facts_model=recipe.facts_model,
        proxy=bool(recipe.proxy_note),
        memory_bytes=memory_bytes(recipe.facts_model, forward, training=True),
        source=SOURCE + "; backward ratios and optimizer bandwidth: " + ", ".join(train.files[len(forward.files) :]),
        details=details,
    )
