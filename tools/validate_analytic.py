"""Fit and validate the analytic kernel model (bless/profiles/predict/analytic.py) on real measurements.

    .venv/bin/python tools/validate_analytic.py           # validation tables (~1 min)
    .venv/bin/python tools/validate_analytic.py --fit     # refit, print the FITTED block for bless/profiles/predict/analytic.py

Data (../shared/data/calibration, see bless/profiles/predict/calibration.py):

1. NeuSight single ops with shapes, A100 and H100: absolute full-GPU time.
   Fitted on the even rows, errors reported on the odd rows (train/test split).
2. A100 MPS per-kernel data (cuDNN/cuBLAS kernels at 22..108 SMs): how the model
   scales a kernel from its measured full-GPU time down to 22-88 SMs.  The
   saturation constants (mem_knee, warps_to_saturate) are fitted on resnet152,
   vgg19, mobilenet and inception; errors are reported on resnet50 and vgg16.
3. Whole model: the predicted A100 profiles of the TVM builds of resnet50 and bert
   (build plans from `bless apps build APP --gpu a100`) against the measured A100
   profiles (profiles/a100), T at every measured level.  Nothing in the fit sees
   these whole-model times.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bless.hw.gpus import A100, get_gpu
from bless.profiles.predict import analytic
from bless.profiles.predict import calibration as cal

SCALING_TRAIN = ("resnet152", "vgg19", "mobilenet", "inception")
SCALING_TEST = ("resnet50", "vgg16")
MEASURED_SMS = (22, 44, 54, 66, 88, 108)
WHOLE_MODEL_APPS = ("resnet50", "bert")
CALIBRATION_PLANS = (("resnet152", 8), ("vgg16", 8))
"""TVM builds (tools/calibration_apps.py) of measured models that are not validated: the TF32 efficiency is fitted on them."""
MIN_OP_SECONDS = 50e-6
"""NeuSight times a PyTorch op from the host (its floor is ~30-60 us of framework overhead), so ops
shorter than this say more about PyTorch than about the GPU; the launch floor comes from the
Nsight Compute kernel times of the MPS data instead."""


# ------------------------------------------------------------------ errors
def op_errors(samples, params, gpu) -> np.ndarray:
    """Relative error (pred/meas - 1) of every single op at full GPU."""
    return np.array([analytic.duration(s.work, gpu, gpu.sm_count, params) / s.seconds - 1 for s in samples])


def scaling_predictions(samples, params, gpu=A100) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(measured, predicted, naive N/n, weight) per (kernel, reduced level), rows by level in MEASURED_SMS[:-1]."""
    meas, pred, naive = [], [], []
    for s in samples:
        work = s.work(params, gpu)
        full = analytic.duration(work, gpu, gpu.sm_count, params)
        t_full = s.seconds[gpu.sm_count]
        meas.append([s.seconds[n] for n in MEASURED_SMS[:-1]])
        pred.append([t_full * analytic.duration(work, gpu, n, params) / full for n in MEASURED_SMS[:-1]])
        naive.append([t_full * gpu.sm_count / n for n in MEASURED_SMS[:-1]])
    return np.array(meas), np.array(pred), np.array(naive), np.array(meas)


def weighted_abs(err: np.ndarray, weight: np.ndarray) -> float:
    return float(np.sum(np.abs(err) * weight) / np.sum(weight))


# ------------------------------------------------------------------ fitting
def fit_absolute(samples, params, gpu, free=("matmul", "dram_efficiency")):
    """Nelder-Mead on the mean |log(pred/meas)| of the single ops."""
    from scipy.optimize import minimize

    def make(v):
        eff = dict(params.compute_efficiency)
        p = params
        for name, x in zip(free, v):
            if name in eff:
                eff[name] = float(np.clip(x, 0.01, 1.0))
            elif name == "dram_efficiency":
                p = replace(p, dram_efficiency=float(np.clip(x, 0.05, 1.0)))
            else:
                p = replace(p, launch_us=float(np.clip(x, 0.0, 20.0)))
        return replace(p, compute_efficiency=eff)

    def loss(v):
        e = op_errors(samples, make(v), gpu)
        return float(np.mean(np.abs(np.log1p(e))))

    start = [params.compute_efficiency[n] if n in params.compute_efficiency else getattr(params, n) for n in free]
    res = minimize(loss, start, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-4, "maxiter": 300})
    return make(res.x), res.fun


def fit_saturation(samples, params):
    """Grid search of launch_us, mem_knee and warps_to_saturate on the MPS scaling error (time-weighted).

    The grid is the neighbourhood of the optimum of a wider search (launch 1-6 us, knee 0.4-1.0,
    warps 1-8: 120 points, ~9 min on two shared cores), which chose 6 us, 0.6 and 4."""
    best = None
    for q in (0.0, 0.5, 1.0):
        for knee in (0.5, 0.6, 0.7):
            for warps in (2.0, 4.0, 8.0):
                p = replace(params, launch_us=6.0, quantisation=q, mem_knee=knee, warps_to_saturate=warps)
                m, pr, _, w = scaling_predictions(samples, p)
                err = weighted_abs(np.log(pr / m), w)
                if best is None or err < best[0]:
                    best = (err, p)
    return best[1], best[0]


def pass_errors(plans: dict, params, gpu=A100) -> np.ndarray:
    """Relative error of the predicted (tf32) pass time of each calibration plan at each measured level."""
    from bless.build.predicted import predict_profile

    errs = []
    for (model, batch), plan in plans.items():
        measured = cal.mps_pass_seconds(model, batch)
        predicted = predict_profile(plan, gpu, precision="tf32", params=params)
        errs += [predicted.t_at_sms(n).sum() / t - 1 for n, t in measured.items()]
    return np.array(errs)


def fit_tensor_efficiency(plans: dict, params):
    """1-D search of the TF32 efficiency on whole passes of models that are not validated (CALIBRATION_PLANS)."""
    from scipy.optimize import minimize_scalar

    def loss(x):
        return float(np.mean(np.abs(np.log1p(pass_errors(plans, replace(params, tensor_efficiency=x))))))

    res = minimize_scalar(loss, bounds=(0.02, 1.0), method="bounded", options={"xatol": 1e-3})
    return replace(params, tensor_efficiency=float(res.x)), float(res.fun)


def calibration_plans(plan_dir: Path | None) -> dict:
    from bless.build.plan import load_plan, plan_path

    plans = {}
    for model, batch in CALIBRATION_PLANS:
        path = (plan_dir / "a100" / model / "plan.json") if plan_dir else plan_path(model, "a100")
        if not path.is_file():
            raise SystemExit(f"no build plan at {path}: run `bless apps build tools/calibration_apps.py --gpu a100`")
        plans[(model, batch)] = load_plan(path)
    return plans


def fit(args) -> None:
    a100 = get_gpu("a100")
    ops = {g: cal.neusight_ops(g) for g in ("a100", "h100")}
    train = {g: [s for s in v[::2] if s.seconds >= MIN_OP_SECONDS] for g, v in ops.items()}
    p = analytic.params_for(a100)
    scaling = [s for m in SCALING_TRAIN for s in cal.mps_kernels(m)]
    p, loss_s = fit_saturation(scaling, p)
    p, loss_a = fit_absolute(train["a100"], p, a100)
    p, loss_t = fit_tensor_efficiency(calibration_plans(args.plans), p)
    h100 = get_gpu("h100")
    h, loss_h = fit_absolute(train["h100"], p, h100)
    print(f"A100 single ops (train, even rows): mean |log error| {loss_a:.3f}")
    print(f"A100 MPS scaling ({', '.join(SCALING_TRAIN)}): time-weighted mean |log error| {loss_s:.3f}")
    print(f"A100 TF32 whole passes (resnet152, vgg16 batch 8): mean |log error| {loss_t:.3f}")
    print(f"H100 single ops (train, even rows): mean |log error| {loss_h:.3f}\n")
    for name, q, note in (
        (
            "a100",
            p,
            f"NeuSight A100 ops even rows mean |log err| {loss_a:.3f}; "
            f"MPS scaling {'/'.join(SCALING_TRAIN)} {loss_s:.3f}; "
            f"TF32 passes resnet152/vgg16 b8 {loss_t:.3f}",
        ),
        (
            "h100",
            h,
            f"NeuSight H100 bmm/linear even rows mean |log err| {loss_h:.3f}; "
            "mem_knee, warps_to_saturate, quantisation, tensor_efficiency and non-matmul classes from the A100",
        ),
    ):
        eff = ", ".join(f'"{k}": {v:.3f}' for k, v in q.compute_efficiency.items())
        print(
            f'    "{name}": AnalyticParams(\n        compute_efficiency={{{eff}}},\n'
            f"        dram_efficiency={q.dram_efficiency:.3f},\n        mem_knee={q.mem_knee:.2f},\n"
            f"        warps_to_saturate={q.warps_to_saturate:.1f},\n        launch_us={q.launch_us:.2f},\n"
            f"        quantisation={q.quantisation:.2f},\n        tensor_efficiency={q.tensor_efficiency:.3f},\n"
            f'        provenance={{"data": "{note}"}},\n    ),'
        )


# ------------------------------------------------------------------ validation
def validate_ops() -> None:
    print("## 1. Single ops at full GPU (NeuSight; fit on even rows, tested on odd rows)\n")
    print("| GPU | op | n | median abs err | mean abs err | p90 abs err | median signed |")
    print("|---|---|---|---|---|---|---|")
    for g in ("a100", "h100"):
        gpu = get_gpu(g)
        test = [s for s in cal.neusight_ops(g)[1::2] if s.seconds >= MIN_OP_SECONDS]
        err = op_errors(test, analytic.params_for(gpu), gpu)
        ops = np.array([s.op if s.op in ("bmm", "linear") else s.work.op_class for s in test])
        groups = [("bmm",), ("linear",), ("elementwise",), ("reduction",)]
        for group in groups:
            mask = np.isin(ops, group)
            if mask.any():
                e = err[mask]
                print(
                    f"| {g} | {'+'.join(group)} | {mask.sum()} | {np.median(np.abs(e)):.1%} | "
                    f"{np.mean(np.abs(e)):.1%} | {np.quantile(np.abs(e), 0.9):.1%} | {np.median(e):+.1%} |"
                )
    print()


def validate_scaling() -> None:
    print("## 2. A100 per-kernel scaling from 108 SMs down (MPS data, test models; time-weighted abs error)\n")
    params = analytic.params_for(A100)
    print("| model | kernels | SMs | analytic (weighted) | analytic (median) | naive N/n (weighted) | pass total err |")
    print("|---|---|---|---|---|---|---|")
    for model in SCALING_TEST:
        samples = cal.mps_kernels(model)
        meas, pred, naive, w = scaling_predictions(samples, params)
        batches = np.array([s.batch for s in samples])
        for j, n in enumerate(MEASURED_SMS[:-1]):
            e, en = pred[:, j] / meas[:, j] - 1, naive[:, j] / meas[:, j] - 1
            totals = [pred[batches == b, j].sum() / meas[batches == b, j].sum() - 1 for b in np.unique(batches)]
            worst = max(totals, key=abs)
            print(
                f"| {model} | {len(samples)} | {n} | {weighted_abs(e, w[:, j]):.1%} | {np.median(np.abs(e)):.1%} | "
                f"{weighted_abs(en, w[:, j]):.1%} | worst batch {worst:+.1%} |"
            )
    print()


LAYOUT_KERNELS = ("nchwToNhwc", "nhwcToNchw")
"""cuDNN's layout transforms around its NHWC tensor-core convolutions: launches of the
measured eager runs that neither the TVM plan nor the eager operator list contains."""


def eager_profile(app: str, batch: int):
    """The analytic A100 profile of the app's eager operator list (one launch per ATen op)."""
    from bless.build.compiler.train_trace import descriptor_launches, trace_forward
    from bless.build.plan import Plan
    from bless.build.predicted import predict_profile
    from bless.build.zoo import find

    launches = descriptor_launches(trace_forward(find(app)[0], batch, seed=0))
    plan = Plan(
        app=app,
        gpu="a100",
        arch="sm_80",
        batch=batch,
        images=(),
        buffers=(),
        launches=launches,
        path=Path(f"<eager {app}>"),
        descriptor_only=True,
    )
    return predict_profile(plan, "a100", precision="tf32")


def validate_whole_models(plan_dir: Path | None) -> None:
    from bless.build.plan import load_plan, plan_path
    from bless.build.predicted import predict_profile
    from bless.profiles.catalog import load_app

    print("## 3. Whole model on the A100: predicted (TVM build plan) vs measured (profiles/a100)\n")
    print("Measured: the compute kernels of profiles/a100/<app>.json (cuDNN/cuBLAS, Nsight Compute times) + 3 us;")
    print("host<->device copies excluded (a plan has none). Predicted: sum of the plan's kernels + 3 us;")
    print(
        "both interpolated between profile levels at 22/44/88 SMs. tf32: matmul-class kernels on tensor cores as the measured ones ran, fp32: CUDA cores."
    )
    print("eager tf32: the same analytic model on the app's eager operator list (one launch per ATen op, traced on the")
    print(
        "CPU at the measured batch), the granularity the measured profile has; layout ms: the measured time in cuDNN's"
    )
    print("NCHW<->NHWC transforms, which neither predicted list contains.\n")
    print(
        "| app | kernels (plan / eager / measured) | SMs | measured ms | layout ms | predicted tf32 ms | error "
        "| predicted fp32 ms | error | eager tf32 ms | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for app in WHOLE_MODEL_APPS:
        path = (plan_dir / "a100" / app / "plan.json") if plan_dir else plan_path(app, "a100")
        if not path.is_file():
            print(f"| {app} | no build plan at {path}: run `bless apps build {app} --gpu a100` | | | | | | | | | |")
            continue
        plan = load_plan(path)
        measured = load_app(app, "a100")
        predicted = {x: predict_profile(plan, "a100", precision=x) for x in ("tf32", "fp32")}
        predicted["eager"] = eager_profile(app, measured.batch)
        compute = ~measured.memcpy_mask()
        layout = np.array([any(k in d.name for k in LAYOUT_KERNELS) for d in measured.kernels])

        def at(n: int, mask: np.ndarray, measured=measured) -> float:
            return float(
                np.interp(1 / n, 1 / np.array(measured.level_sms[::-1]), measured.t[::-1][:, mask].sum(axis=1))
            )

        for n in MEASURED_SMS:
            m = at(n, compute) + 3e-6
            p = {x: v.t_at_sms(n).sum() + 3e-6 for x, v in predicted.items()}
            cells = " | ".join(f"{p[x] * 1e3:.2f} | {p[x] / m - 1:+.1%}" for x in ("tf32", "fp32", "eager"))
            print(
                f"| {app} | {len(plan.launches)} / {predicted['eager'].n_kernels} / {int(compute.sum())} | {n} | "
                f"{m * 1e3:.2f} | {at(n, layout) * 1e3:.2f} | {cells} |"
            )
    print()


def show_calibration_passes(plan_dir: Path | None) -> None:
    print("## 4. The TF32 fit's own data (train, not a test): resnet152 and vgg16 batch 8 passes\n")
    print("| model | SMs | measured ms | predicted tf32 ms | error |")
    print("|---|---|---|---|---|")
    from bless.build.predicted import predict_profile

    for (model, batch), plan in calibration_plans(plan_dir).items():
        predicted = predict_profile(plan, "a100", precision="tf32")
        for n, t in cal.mps_pass_seconds(model, batch).items():
            p = predicted.t_at_sms(n).sum()
            print(f"| {model} | {n} | {t * 1e3:.2f} | {p * 1e3:.2f} | {p / t - 1:+.1%} |")
    print()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="refit the constants and print the FITTED block")
    ap.add_argument(
        "--plans",
        type=Path,
        default=None,
        help="build cache 'builds' directory holding a100/<app>/plan.json (default: $BLESS_CACHE)",
    )
    args = ap.parse_args(argv)
    if args.fit:
        fit(args)
        return 0
    validate_ops()
    validate_scaling()
    validate_whole_models(args.plans)
    show_calibration_passes(args.plans)
    return 0


if __name__ == "__main__":
    sys.exit(main())
