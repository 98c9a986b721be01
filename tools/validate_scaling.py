#!/usr/bin/env python3
"""How well profile curves predict reduced-level times from the full-GPU column alone.

Leave-one-model-out, through the same curve assembly the shipped profiles use
(:mod:`bless.profiles.groundtruth.lomo`): for every model of the A100 MPS data measured at
reduced levels (resnet50, resnet152, vgg16, vgg19, mobilenet, inception; bert at
20-80 % only) and every batch, batch 1 included, each kernel keeps only its
reference-level point, takes twins from the *other* models (or the scaling model,
refitted without the held-out model), becomes its 18-level curve with
``bless.profiles.groundtruth.scaling.fit_curve``, and the curves are read at the measured SM counts as the
simulator reads a profile.  Printed: the whole-pass error at MPS 20/40/50/60/80 %
(22/44/54/66/88 SMs) of

* ``twins+model``: what the profiles use,
* ``model``: the scaling model alone,
* ``measured``: the pass's own measured points assembled (no prediction: what
  assembly does to real points),
* ``linear``: the plain rule t(n) = t(ref) * ref / n,

then the worst |error| per model and level, and per-kernel error percentiles.
``--no-refit`` uses the shipped constants (faster, not held out for the CNNs);
``--exact-sms`` assembles the curves at the measured SM counts instead of the 18
profile levels; ``--fit`` refits the shipped constants on all six CNNs.

    .venv/bin/python tools/validate_scaling.py            # ~5 min (six refits)
    .venv/bin/python tools/validate_scaling.py --no-refit # ~30 s
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bless.profiles.groundtruth import calibrate, lomo, mps
from bless.profiles.groundtruth.scaling import FITTED, PARAM_NAMES

LEVELS = tuple(mps.mps_sms(p) for p in mps.MPS_LEVELS[:-1])
SUMMARISED = ("twins+model", "model", "measured")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-refit", action="store_true", help="use the shipped constants for held-out models")
    ap.add_argument(
        "--exact-sms", action="store_true", help="assemble curves at the measured SM counts, not the 18 profile levels"
    )
    ap.add_argument("--fit", action="store_true", help="refit the shipped constants on all six models and print them")
    ap.add_argument("--max-iter", type=int, default=3000, help="Nelder-Mead iterations per fit")
    args = ap.parse_args(argv)

    if args.fit:
        params = calibrate.fit_params(max_iter=args.max_iter)
        print("fitted constants (paste into bless/profiles/groundtruth/scaling.py FITTED):")
        for name in PARAM_NAMES:
            print(f"    {name}={getattr(params, name):.4g},")
        return 0

    how = "shipped constants" if args.no_refit else "constants refitted without the held-out model"
    where = "the measured SM counts" if args.exact_sms else "the 18 profile levels, read at the measured SMs"
    print(f"## Whole-pass error through the profile assembly, leave-one-model-out ({how}; curves at {where})")
    print()
    print(
        "| model | batch | predictor | " + " | ".join(f"{p} % ({n} SMs)" for p, n in zip(mps.MPS_LEVELS, LEVELS)) + " |"
    )
    print("|" + "---|" * (3 + len(LEVELS)))
    kernel_errs: dict[str, list[np.ndarray]] = {}
    worst: dict[tuple[str, str, int], tuple[float, int]] = {}
    used = {}
    for held, params, checks in lomo.leave_one_model_out(
        refit=not args.no_refit, max_iter=args.max_iter, kernels_out=kernel_errs, exact_sms=args.exact_sms
    ):
        used[held] = params
        rows: dict[tuple[int, str], dict[int, float]] = {}
        for c in checks:
            rows.setdefault((c.batch, c.predictor), {})[c.sms] = c.error
            key = (held, c.predictor, c.sms)
            if abs(c.error) > abs(worst.get(key, (0.0, 0))[0]):
                worst[key] = (c.error, c.batch)
        for (batch, name), errs in sorted(rows.items(), key=lambda kv: (kv[0][0], lomo.PREDICTORS.index(kv[0][1]))):
            cells = [f"{100 * errs[n]:+.1f} %" if n in errs else "—" for n in LEVELS]
            print(f"| {held} | {batch} | {name} | " + " | ".join(cells) + " |")
    print()
    print("## Worst whole-pass error over all batches (1-64, VGG16 to 256), per model and level")
    print()
    print(
        "Signed error of the worst batch (batch in brackets). BERT has no grids, so no twins: "
        "twins+model = model; its reference is 80 % (88 SMs)."
    )
    print()
    print("| model | predictor | " + " | ".join(f"{n} SMs" for n in LEVELS) + " | worst |")
    print("|" + "---|" * (3 + len(LEVELS)))
    overall = {(group, name): 0.0 for group in ("cnn", "bert") for name in SUMMARISED}
    for held in used:
        group = "cnn" if held in calibrate.FIT_MODELS else "bert"
        for name in SUMMARISED:
            cells = []
            model_worst = 0.0
            for n in LEVELS:
                if (held, name, n) not in worst:
                    cells.append("—")
                    continue
                e, b = worst[(held, name, n)]
                cells.append(f"{100 * e:+.1f} % ({b})")
                model_worst = max(model_worst, abs(e))
            overall[(group, name)] = max(overall[(group, name)], model_worst)
            print(f"| {held} | {name} | " + " | ".join(cells) + f" | {100 * model_worst:.1f} % |")
    print()
    for group, label in (
        ("cnn", f"the {len(calibrate.FIT_MODELS)} CNNs (reference 108 SMs)"),
        ("bert", "BERT (reference 88 SMs, model only)"),
    ):
        if any(overall[(group, n)] for n in SUMMARISED):
            print(f"Worst over {label}: " + ", ".join(f"{n} {100 * overall[(group, n)]:.1f} %" for n in SUMMARISED))
            print()
    print("## Per-kernel |error| percentiles (kernels measured as themselves at a reduced level)")
    print()
    print("| predictor | p50 | p90 | p99 | kernels x levels |")
    print("|---|---|---|---|---|")
    for name in ("twins+model", "model", "linear"):
        a = np.abs(np.concatenate(kernel_errs[name]))
        print(
            f"| {name} | {100 * np.percentile(a, 50):.1f} % | {100 * np.percentile(a, 90):.1f} % | "
            f"{100 * np.percentile(a, 99):.1f} % | {a.size} |"
        )
    print()
    print("Shipped constants:", ", ".join(f"{n}={getattr(FITTED, n):.4g}" for n in PARAM_NAMES))
    if not args.no_refit:
        print()
        print("Constants used per held-out model:")
        for held, params in used.items():
            print(f"* {held}: " + ", ".join(f"{n}={getattr(params, n):.4g}" for n in PARAM_NAMES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
