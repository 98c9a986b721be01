"""Fit and validate the analytic model's compiled-kernel constants on profiles measured on a GPU.

    .venv/bin/python tools/validate_compiled.py          # leave-one-app-out table (~2 min)
    .venv/bin/python tools/validate_compiled.py --fit    # fit on every app, print the constants

Data: profiles of this repository's TVM build plans measured with ``bless profile APP
--gpu h100 --backend cuda`` (every kernel at the 18 green-context levels), by default
``tools/gpu_check_results/2026-11-26-h200/profiles``: six apps, 1712 kernels, measured
on an NVIDIA H200.  The H200 is a GH100 with the H100's SMs and clocks but HBM3e at
4.8 TB/s (NVIDIA H200 Tensor Core GPU datasheet, 2024), so the model is evaluated on
the H100 spec with that bandwidth; the fitted constants then hold for the H100 with
its own.

Two constants are fitted, the rest of ``FITTED['h100']`` is kept:
``compiled_matmul_efficiency`` (TVM's default FP32 schedules against the FP32 peak)
and ``wave_us`` (the least time one round of resident blocks takes).  The loss is
the time-weighted mean |log(predicted / measured)| over every kernel at every level,
so a kernel counts as much as it weighs in the app's latency.  Leave-one-app-out:
each app's error comes from constants fitted on the other five.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bless.hw.gpus import H100  # noqa: E402
from bless.profiles.catalog import load_profile  # noqa: E402
from bless.profiles.predict import analytic  # noqa: E402

DEFAULT_PROFILES = ROOT / "tools" / "gpu_check_results" / "2026-11-26-h200" / "profiles"
H200_BANDWIDTH = 4.8e12
"""HBM3e bandwidth of the H200 (NVIDIA H200 Tensor Core GPU datasheet, 2024): the GPU the profiles were measured on."""
MEASURED_ON = replace(H100, dram_bandwidth=H200_BANDWIDTH)


@dataclass(frozen=True)
class MeasuredApp:
    name: str
    works: list[analytic.KernelWork]
    level_sms: np.ndarray
    t: np.ndarray
    """Measured seconds, (levels, kernels)."""


def load_apps(folder: Path) -> list[MeasuredApp]:
    apps = []
    for path in sorted(folder.glob("*.json")):
        p = load_profile(path)
        works = [
            analytic.KernelWork(
                name=k.name,
                grid=tuple(k.grid),
                block=tuple(k.block),
                flops=k.flops or 0.0,
                dram_bytes=k.dram_bytes or 0.0,
                registers=k.registers,
                shared_mem=k.shared_mem or 0,
                compiled=True,
            )
            for k in p.kernels
        ]
        apps.append(MeasuredApp(p.app, works, np.asarray(p.level_sms), np.asarray(p.t)))
    if not apps:
        raise SystemExit(f"no measured profiles in {folder}")
    return apps


def predict(app: MeasuredApp, params: analytic.AnalyticParams) -> np.ndarray:
    return np.array([[analytic.duration(w, MEASURED_ON, int(n), params) for w in app.works] for n in app.level_sms])


def kernel_error(apps: list[MeasuredApp], params: analytic.AnalyticParams) -> float:
    """Time-weighted mean |log(predicted / measured)| over every kernel at every level."""
    num = den = 0.0
    for app in apps:
        err = np.abs(np.log(predict(app, params) / app.t))
        num += float((err * app.t).sum())
        den += float(app.t.sum())
    return num / den


def app_errors(app: MeasuredApp, params: analytic.AnalyticParams) -> tuple[float, float]:
    """(kernel error as :func:`kernel_error`, mean |log| of the request time T over the levels)."""
    pred = predict(app, params)
    kernels = float((np.abs(np.log(pred / app.t)) * app.t).sum() / app.t.sum())
    whole = float(np.mean(np.abs(np.log(pred.sum(axis=1) / app.t.sum(axis=1)))))
    return kernels, whole


def with_constants(base: analytic.AnalyticParams, x: np.ndarray) -> analytic.AnalyticParams:
    return replace(base, compiled_matmul_efficiency=float(np.exp(x[0])), wave_us=float(np.exp(x[1])))


def fit(apps: list[MeasuredApp], base: analytic.AnalyticParams) -> analytic.AnalyticParams:
    start = np.log([0.25, 1.0])
    result = minimize(
        lambda x: kernel_error(apps, with_constants(base, x)),
        start,
        method="Nelder-Mead",
        options={"xatol": 1e-3, "fatol": 1e-5, "maxiter": 200},
    )
    return with_constants(base, result.x)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", type=Path, default=DEFAULT_PROFILES, help="folder of measured H100-plan profiles")
    ap.add_argument("--fit", action="store_true", help="fit on every app and print the constants")
    args = ap.parse_args(argv)
    apps = load_apps(args.profiles)
    base = analytic.FITTED["h100"]
    library = replace(base, compiled_matmul_efficiency=0.0, wave_us=0.0)
    if args.fit:
        fitted = fit(apps, base)
        print(
            f"compiled_matmul_efficiency={fitted.compiled_matmul_efficiency:.3f}, wave_us={fitted.wave_us:.3f}: "
            f"time-weighted mean |log err| {kernel_error(apps, fitted):.3f} "
            f"(library constants: {kernel_error(apps, library):.3f}) over {sum(len(a.works) for a in apps)} kernels"
        )
        return 0
    print(
        f"{'held-out app':<12} {'kernels, library':>17} {'kernels, fitted':>16} {'T, library':>11} {'T, fitted':>10}  constants"
    )
    for held in apps:
        fitted = fit([a for a in apps if a is not held], base)
        lk, lt = app_errors(held, library)
        fk, ft = app_errors(held, fitted)
        print(
            f"{held.name:<12} {lk:>17.3f} {fk:>16.3f} {lt:>11.3f} {ft:>10.3f}  "
            f"eff {fitted.compiled_matmul_efficiency:.3f}, wave {fitted.wave_us:.3f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
