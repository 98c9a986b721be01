"""``bless profile APP --gpu a100 --backend sim``: the offline profiler.

An APP with no profile for the GPU that is a model (an app of ``apps/`` or a
user's ``.py`` file, :mod:`bless.build.zoo`) is built into a launch plan first (with
``--train``, the descriptor-only plan of one training iteration), and
the analytic model's prediction of that plan (:mod:`bless.build.predicted`) is the
kernel list and, on the simulated GPU, the ground truth; the profile written then
keeps the provenance "predicted".
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bless.cli import make_console
from bless.hw.gpus import DEFAULT_GPU


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="time every kernel of an app at the 18 SM levels and write its profile")
    p.add_argument(
        "apps",
        nargs="+",
        metavar="APP",
        help="app name (see `bless apps list`), a profile .json, or a model .py file (built and predicted when no profile exists)",
    )
    p.add_argument("--gpu", default=DEFAULT_GPU, help=f"GPU model (default {DEFAULT_GPU})")
    p.add_argument("--backend", default="sim", help="backend to profile on: sim (default) or cuda")
    p.add_argument(
        "--mechanism",
        default=None,
        choices=("mps", "green"),
        help="SM restriction mechanism (default: the backend's; mps on sim, green contexts on cuda when the driver has them)",
    )
    p.add_argument(
        "--train",
        action="store_true",
        help="profile one training iteration (APP_train) instead of inference; a model is traced into a training plan",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed runs per level (median kept)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per level")
    p.add_argument("--out", type=Path, default=Path("results/profiles"), help="output directory (GPU subfolder added)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    from bless.backend.interface import create_backend
    from bless.build.profiler import profile_app

    console = make_console()
    chosen = {} if args.mechanism is None else {"mechanism": args.mechanism}
    backend = create_backend(args.backend, gpu=args.gpu, **chosen)
    mechanism = backend.mechanism
    apps = [
        app for name in args.apps for app in _profiles_or_predictions(name, args.gpu, mechanism, console, args.train)
    ]
    for app in apps:
        profile, report = profile_app(backend, app, repeats=args.repeats, warmup=args.warmup, mechanism=mechanism)
        if app.provenance.method == "predicted" and backend.name == "sim":
            profile = _keep_predicted(profile, app, report)
        path = profile.save(args.out / profile.gpu / f"{profile.app}.json")
        console.print(
            f"[bold]{profile.app}[/]: {profile.n_kernels} kernels x 18 levels x "
            f"{args.warmup + args.repeats} runs = {report.kernel_runs} kernel runs; "
            f"T[100%] = {profile.T[-1] * 1e3:.2f} ms, T[1/18] = {profile.T[0] * 1e3:.2f} ms; "
            f"profiling cost {report.wall_seconds:.2f} s wall ({report.device_seconds:.2f} s device) -> {path}"
        )
    return 0


def _profiles_or_predictions(name: str, gpu: str, mechanism: str, console, train: bool = False) -> list:
    """The app's profile for ``gpu``; else, for a model, the predicted profiles of its build plans."""
    from bless.build.zoo import find, is_defined
    from bless.profiles.catalog import load_app

    model = train and is_defined(name)  # otherwise asked only when no profile exists (it imports the models)
    try:
        profile = load_app(f"{name}_train" if model else name, gpu)
    except ValueError as missing:
        if not (model or is_defined(name)):
            raise missing from None
    else:
        if train and profile.kind != "training":
            raise ValueError(f"--train: {name} is an {profile.kind} profile; give a training profile or a model")
        return [profile]
    from bless.build.compiler import build_app
    from bless.build.predicted import predict_profile

    out = []
    for app in find(name):
        result = build_app(app, gpu, train=train)
        how = "cached build" if result.cached else f"built in {result.seconds:.1f} s"
        console.print(
            f"{result.plan.app}: no {gpu} profile; {how} ({len(result.plan.launches)} launches), predicting its kernels"
        )
        out.append(predict_profile(result.plan, gpu, mechanism=mechanism))
    return out


def _keep_predicted(profile, predicted, report):
    """A sim profile of a predicted ground truth is still a prediction: say so, and how it was checked."""
    from dataclasses import replace

    details = dict(predicted.provenance.details)
    details["simulated_check"] = {
        "tool": profile.provenance.tool,
        "source": profile.provenance.source,
        "kernel_runs": report.kernel_runs,
        "wall_seconds": round(report.wall_seconds, 4),
    }
    return replace(profile, provenance=replace(predicted.provenance, details=details))
