"""``bless gpus``: the GPU models and their 18 partition levels."""

from __future__ import annotations

import argparse

from bless.cli import make_console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gpus", help="list GPU models and the SMs of each partition level")
    p.add_argument("--mechanism", default="mps", choices=("mps", "green"), help="SM restriction mechanism")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from bless.hw.gpus import GPUS

    table = Table(title=f"GPU models ({args.mechanism} SM granularity)")
    for col in ("gpu", "SMs", "DRAM GB/s", "memory GiB", "levels 1..18 (SMs)"):
        table.add_column(col)
    for g in GPUS.values():
        table.add_row(
            f"{g.name} ({g.full_name})",
            str(g.sm_count),
            f"{g.dram_bandwidth / 1e9:.0f}",
            f"{g.memory_bytes / 2**30:.0f}",
            " ".join(map(str, g.level_sms(args.mechanism))),
        )
    make_console().print(table)
    return 0
