"""``bless bound CONFIG.yaml``: the mean latency no scheduler can beat for a run's apps and arrivals."""

from __future__ import annotations

import argparse
from pathlib import Path

from bless.cli import make_console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bound",
        help="lower bound on each app's mean latency for a run config (no policy can beat it); see bless/harness/bound.py",
    )
    p.add_argument("config", type=Path, help="run config (YAML), as for bless run")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, as for bless run (repeatable)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from bless.cli.run import apply_override
    from bless.harness.bound import bound_for_config
    from bless.harness.config import config_from_dict, read_yaml

    raw = read_yaml(args.config)
    for assignment in args.set:
        apply_override(raw, assignment)
    cfg = config_from_dict(raw)
    result = bound_for_config(cfg)
    table = Table(title=f"{cfg.name}: lower bound on the mean latency (ms), {result.gpu}, {result.sm_count} SMs")
    for col in ("app", "quota", "load", "reqs", "fastest", "ISO", "bound"):
        table.add_column(col, justify="left" if col in ("app", "load") else "right", no_wrap=col == "app")
    for a in result.apps:
        table.add_row(
            a.app,
            f"{a.quota:.0%}",
            a.load,
            "closed" if a.requests is None else str(a.requests),
            f"{a.floor * 1e3:.3f}",
            f"{a.iso_latency * 1e3:.3f}",
            f"{a.bound * 1e3:.3f}",
        )
    iso_mean = sum(a.iso_latency for a in result.apps) / len(result.apps)
    table.add_section()
    table.add_row("mean over apps", "", "", "", "", f"{iso_mean * 1e3:.3f}", f"{result.mean * 1e3:.3f}")
    console = make_console()
    console.print(table)
    console.print(
        f"reqs: measured requests of an open loop ({cfg.warmup:g}-{cfg.duration:g} s, arrivals as the "
        f"{cfg.policy} run draws them); fastest: alone on the whole GPU, no host costs; ISO: T\\[quota]; "
        "bound: no policy's mean is lower (each app serves one request at a time; the mean over apps counts the "
        "GPU's capacity)"
    )
    return 0
