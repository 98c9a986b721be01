"""``bless apps``: list the defined apps and build their CUDA kernels for a GPU."""

from __future__ import annotations

import argparse

from bless.cli import make_console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("apps", help="list apps (torch models) and build their CUDA kernels and launch plans")
    apps_sub = p.add_subparsers(dest="apps_command", required=True, metavar="ACTION")
    ls = apps_sub.add_parser("list", help="defined apps, their batch, and whether each GPU has a build")
    ls.set_defaults(func=run_list)
    b = apps_sub.add_parser("build", help="compile an app with TVM into PTX and a launch plan (no GPU needed)")
    b.add_argument("app", metavar="MODEL|FILE.py", help="app name (see `bless apps list`) or a .py file defining APPS")
    b.add_argument("--gpu", required=True, help="GPU model to compile for (h100: sm_90, a100: sm_80)")
    b.add_argument(
        "--train",
        action="store_true",
        help="one training iteration (forward, backward, SGD update) instead of inference: a descriptor-only plan",
    )
    b.add_argument("--out", help="directory for plan.json and the PTX (default: the build cache)")
    b.add_argument("--force", action="store_true", help="rebuild even when the cache holds a matching build")
    b.set_defaults(func=run_build)


def run_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    from bless.build.compiler import cached_plan_path
    from bless.build.zoo import available
    from bless.hw.gpus import GPUS

    table = Table(title="apps")
    for col in ("app", "batch", "train batch", *(f"built {g}" for g in GPUS), "defined in", "description"):
        table.add_column(col)
    for name, app in sorted(available().items()):
        built = ["yes" if cached_plan_path(app, g).is_file() else "-" for g in GPUS]
        table.add_row(name, str(app.batch), str(app.training_batch), *built, str(app.source), app.description)
    make_console().print(table)
    return 0


def run_build(args: argparse.Namespace) -> int:
    from bless.build.compiler import build_app
    from bless.build.zoo import find
    from bless.cli import UserError
    from bless.hw.gpus import GPUS

    if args.gpu not in GPUS:
        raise UserError(f"--gpu: unknown GPU {args.gpu!r}; use one of {', '.join(GPUS)}")
    apps = find(args.app)
    if args.out and len(apps) > 1:
        raise UserError(f"--out: {args.app} defines {len(apps)} apps; give --out only when building one app")
    for app in apps:
        result = build_app(app, args.gpu, train=args.train, out=args.out, force=args.force)
        plan = result.plan
        how = "cached build" if result.cached else "built"
        if plan.descriptor_only:
            how += " (descriptor-only: traced on the CPU, no PTX; predictable, not launchable)"
        gflop = sum(k.flops or 0.0 for k in plan.launches) / 1e9
        print(
            f"{plan.app} ({plan.gpu}, {plan.arch}, batch {plan.batch}): {how} in {result.seconds:.1f} s, "
            f"{len(plan.launches)} kernel launches, {len({k.kernel for k in plan.launches})} distinct kernels, {gflop:.1f} GFLOP, "
            f"{plan.memory_bytes / 2**20:.0f} MiB of buffers; written to {plan.path}"
        )
        for warning in result.warnings:
            print(f"  warning: {warning}")
    return 0
