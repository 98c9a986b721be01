"""``bless profile APP --gpu a100 --backend sim``: the offline profiler."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="time every kernel of an app at the 18 SM levels and write its profile")
    p.add_argument("apps", nargs="+", metavar="APP", help="app name (see `bless apps list`) or a profile .json")
    p.add_argument("--gpu", default="a100", help="GPU model (default a100)")
    p.add_argument("--backend", default="sim", help="backend to profile on: sim (default) or cuda")
    p.add_argument(
        "--mechanism", default=None, choices=("mps", "green"),
        help="SM restriction mechanism (default: the backend's; mps on sim, green contexts on cuda when the driver has them)",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed runs per level (median kept)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per level")
    p.add_argument("--out", type=Path, default=Path("results/profiles"), help="output directory (GPU subfolder added)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from bless.backend import create_backend
    from bless.catalog import load_app
    from bless.profiler import profile_app

    console = Console()
    chosen = {} if args.mechanism is None else {"mechanism": args.mechanism}
    backend = create_backend(args.backend, gpu=args.gpu, **chosen)
    mechanism = backend.mechanism
    for name in args.apps:
        app = load_app(name, args.gpu)
        profile, report = profile_app(
            backend, app, repeats=args.repeats, warmup=args.warmup, mechanism=mechanism
        )
        path = profile.save(args.out / profile.gpu / f"{profile.app}.json")
        console.print(
            f"[bold]{profile.app}[/]: {profile.n_kernels} kernels x 18 levels x "
            f"{args.warmup + args.repeats} runs = {report.kernel_runs} kernel runs; "
            f"T[100%] = {profile.T[-1] * 1e3:.2f} ms, T[1/18] = {profile.T[0] * 1e3:.2f} ms; "
            f"profiling cost {report.wall_seconds:.2f} s wall ({report.device_seconds:.2f} s device) -> {path}"
        )
    return 0
