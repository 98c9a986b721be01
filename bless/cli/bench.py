"""``bless bench sim|overhead``: benchmarks that print numbers."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from bless.cli import make_console
from bless.hw.gpus import DEFAULT_GPU

if TYPE_CHECKING:
    from rich.table import Table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="simulator speed (sim) or scheduling overhead per kernel (overhead)")
    p.add_argument("what", choices=("sim", "overhead"))
    p.add_argument(
        "--apps",
        nargs="+",
        default=["resnet50", "bert", "vgg11", "resnet101"],
        help="profiles to use (cycled); synthetic apps if none is found",
    )
    p.add_argument("--gpu", default=DEFAULT_GPU)
    p.add_argument("--kernels", type=int, default=200_000, help="sim: kernels to simulate per configuration")
    p.add_argument("--squad-size", type=int, default=50, help="overhead: squad size S")
    p.add_argument("--squads", type=int, default=2000, help="overhead: squads to time per configuration")
    p.add_argument(
        "--replay",
        type=float,
        default=1.5,
        help="overhead: simulated seconds of the replay that times the whole policy step (default 1.5: "
        "the steady state; its first 0.3 s, where every app arrives at once, cost 5-10 %% less a kernel)",
    )
    p.set_defaults(func=run)


def _profiles(names: list[str], gpu: str):
    from bless.profiles.catalog import load_app
    from bless.profiles.synthetic import synthetic_profile

    profiles = []
    for name in names:
        try:
            profiles.append(load_app(name, gpu))
        except ValueError:
            continue
    if not profiles:
        profiles = [synthetic_profile(f"syn{i}", gpu=gpu, n_kernels=200, mean_us=40, seed=i) for i in range(4)]
    return profiles


def run(args: argparse.Namespace) -> int:

    from bless import native
    from bless.harness.bench import bench_overhead, bench_policy_step, bench_sim

    console = make_console()
    if not args.replay > 0:
        raise ValueError(f"--replay must be a positive number of simulated seconds, got {args.replay}")
    profiles = _profiles(args.apps, args.gpu)
    names = ", ".join(p.app for p in profiles)
    if args.what == "sim":
        rows = []
        for n in (1, 2, 8):
            r = bench_sim(profiles, n, args.kernels, args.gpu)
            rows.append(
                (n, r.kernels, f"{r.wall_seconds:.2f}", f"{r.kernels_per_second:,.0f}", f"{r.simulated_seconds:.2f}")
            )
        columns = ("concurrent apps", "kernels", "wall s", "kernels / wall s", "simulated s")
        console.print(_table(f"simulated GPU speed ({names})", columns, rows))
        return 0
    rows = []
    for n in (2, 4, 8):
        r = bench_overhead(profiles, n, args.squad_size, args.squads)
        rows.append(
            (
                n,
                r.squads,
                f"{r.kernels / r.squads:.1f}",
                f"{r.schedule_us_per_kernel:.2f}",
                f"{r.search_us_per_kernel:.2f}",
                f"{r.us_per_kernel:.2f}",
            )
        )
    columns = ("active apps", "squads", "kernels/squad", "schedule us/kernel", "search us/kernel", "total us/kernel")
    console.print(_table(f"BLESS host overhead per scheduled kernel, S={args.squad_size} ({names})", columns, rows))
    rows = []
    for n in (2, 4, 8):
        for pacing in ("deadline", "paper"):
            r = bench_policy_step(profiles, n, pacing, duration=args.replay)
            kernels_per_step = r.kernels / max(r.steps, 1)
            rows.append(
                (
                    n,
                    pacing,
                    r.steps,
                    f"{kernels_per_step:.1f}",
                    f"{r.us_per_step:.1f}",
                    f"{r.us_per_kernel:.2f}",
                    f"{r.replay_us_per_kernel:.2f}",
                    f"{r.launches / max(r.steps, 1):.2f}",
                    f"{r.launch_p90_us:.1f}",
                )
            )
    columns = (
        "apps",
        "pacing",
        "steps",
        "kernels/step",
        "us/step",
        "us/kernel",
        "fastest replay us/kernel",
        "launches/step",
        "us/launch p90",
    )
    console.print(
        _table(
            f"the whole policy step per scheduled kernel, in a {args.replay:g} s replay (load A; {names})",
            columns,
            rows,
        )
    )
    console.print(native.describe())
    return 0


def _table(title: str, columns: tuple[str, ...], rows: list[tuple]) -> Table:
    """A right-aligned table of ``rows`` (cells printed with ``str``)."""
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*(str(c) for c in row))
    return table
