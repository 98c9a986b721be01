#!/usr/bin/env python3
"""How well the SM scaling model predicts reduced-level times from the full-GPU column alone.

For every model and batch of the A100 MPS data measured at all levels, prints the
whole-pass error at MPS 20/40/50/60/80 % (22/44/54/66/88 SMs) of

* ``twins+model``: the predictor profiles use (a measured twin of the same kernel in
  another model where one exists, else the analytic model),
* ``model``: the analytic model alone,
* ``linear``: the plain rule t(n) = t(108) * 108 / n,

leave-one-model-out: the held-out model's passes and twins never inform its
prediction and the analytic constants are refitted without it (``--no-refit``
uses the shipped constants instead: faster, but not a held-out test).  Then
per-kernel error percentiles, and BERT (measured 20-80 % only) predicted from
its 80 % column.  ``--fit`` refits the shipped constants on all six models.

    .venv/bin/python tools/validate_scaling.py            # ~5 min (six refits)
    .venv/bin/python tools/validate_scaling.py --no-refit # seconds
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bless.groundtruth import calibrate, mps  # noqa: E402
from bless.scaling import FITTED, PARAM_NAMES, predict_many  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-refit", action="store_true", help="use the shipped constants for held-out models")
    ap.add_argument("--fit", action="store_true", help="refit the shipped constants on all six models and print them")
    ap.add_argument("--max-iter", type=int, default=3000, help="Nelder-Mead iterations per fit")
    args = ap.parse_args(argv)

    if args.fit:
        params = calibrate.fit_params(max_iter=args.max_iter)
        print("fitted constants (paste into bless/scaling.py FITTED):")
        for name in PARAM_NAMES:
            print(f"    {name}={getattr(params, name):.4g},")
        return 0

    levels = [mps.mps_sms(p) for p in mps.MPS_LEVELS[:-1]]
    header = "| model | batch | predictor | " + " | ".join(f"{p} % ({n} SMs)" for p, n in
                                                         zip(mps.MPS_LEVELS, levels)) + " |"
    print("## Whole-pass error, leave-one-model-out" + (" (shipped constants)" if args.no_refit else ""))
    print()
    print(header)
    print("|" + "---|" * (3 + len(levels)))
    worst = {"twins+model": 0.0, "model": 0.0, "linear": 0.0}
    per_model = {}
    kernel_errs = {"twins+model": [], "model": [], "linear": []}
    for held, params, with_twins, analytic in calibrate.leave_one_model_out(
        refit=not args.no_refit, max_iter=args.max_iter
    ):
        by_batch: dict[int, dict[str, list[float]]] = {}
        for e_t, e_a in zip(with_twins, analytic):
            row = by_batch.setdefault(e_t.batch, {"twins+model": [], "model": [], "linear": []})
            row["twins+model"].append(e_t.error)
            row["model"].append(e_a.error)
            row["linear"].append(e_t.linear_error)
        for batch, rows in sorted(by_batch.items()):
            for name, errs in rows.items():
                print(f"| {held} | {batch} | {name} | " + " | ".join(f"{100 * e:+.1f} %" for e in errs) + " |")
                worst[name] = max(worst[name], max(abs(e) for e in errs))
                per_model.setdefault((held, name), []).extend(errs)
        _kernel_errors(held, params, kernel_errs)
    print()
    print("## Worst whole-pass error per model (all batches and levels)")
    print()
    print("| model | twins+model | model | linear |")
    print("|---|---|---|---|")
    for held in calibrate.FIT_MODELS:
        cells = [f"{100 * max(abs(e) for e in per_model[(held, n)]):.1f} %" for n in ("twins+model", "model", "linear")]
        print(f"| {held} | " + " | ".join(cells) + " |")
    print(f"| **all** | {100 * worst['twins+model']:.1f} % | {100 * worst['model']:.1f} % | "
          f"{100 * worst['linear']:.1f} % |")
    print()
    print("## Per-kernel |error| percentiles (kernels measured as themselves at a reduced level)")
    print()
    print("| predictor | p50 | p90 | p99 | kernels x levels |")
    print("|---|---|---|---|---|")
    for name, errs in kernel_errs.items():
        a = np.abs(np.concatenate(errs))
        print(f"| {name} | {100 * np.percentile(a, 50):.1f} % | {100 * np.percentile(a, 90):.1f} % | "
              f"{100 * np.percentile(a, 99):.1f} % | {a.size} |")
    print()
    _bert()
    print()
    print("Constants:", ", ".join(f"{n}={getattr(FITTED, n):.4g}" for n in PARAM_NAMES))
    return 0


def _kernel_errors(held: str, params, out: dict) -> None:
    others = [m for m in calibrate.FIT_MODELS if m != held]
    library = calibrate.twin_library(others)
    for fp in calibrate.fit_passes([held]):
        twins = calibrate.twin_matrix(fp, library)
        for li in fp.reduced:
            same = fp.same[:, li] & np.isfinite(fp.t_us[:, li])
            truth = fp.t_us[same, li]
            out["twins+model"].append(calibrate.predict_level(fp, li, params, twins)[same] / truth - 1)
            out["model"].append(calibrate.predict_level(fp, li, params, None)[same] / truth - 1)
            out["linear"].append(fp.t_us[same, -1] * fp.sms[-1] / fp.sms[li] / truth - 1)


def _bert() -> None:
    """BERT has no 100 % column: predict 20-60 % from its 80 % column (no grids, so no twins)."""
    print("## BERT (measured 20-80 % only): whole-pass error predicted from 80 % (88 SMs), shipped constants")
    print()
    print("| batch | predictor | 20 % (22) | 40 % (44) | 50 % (54) | 60 % (66) |")
    print("|---|---|---|---|---|---|")
    for batch in mps.batches("bert"):
        fp = calibrate.fit_pass("bert", batch)
        t_ref = fp.t_us[:, -1]
        model, linear = [], []
        for li in fp.reduced:
            pred = predict_many(t_ref, fp.sms[li], blocks=fp.blocks, dram_util=fp.dram,
                                conv_family=fp.conv, n_ref=fp.sms[-1]).sum()
            model.append(pred / fp.totals_us[li] - 1)
            linear.append(fp.totals_us[-1] * fp.sms[-1] / fp.sms[li] / fp.totals_us[li] - 1)
        for name, errs in (("model", model), ("linear", linear)):
            print(f"| {batch} | {name} | " + " | ".join(f"{100 * e:+.1f} %" for e in errs) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
