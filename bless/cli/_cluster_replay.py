"""``bless cluster replay CONFIG.yaml``: place many apps on the cluster's GPUs, replay their loads, per GPU and per app.

Runs in virtual time on simulated GPUs, without Ray (:mod:`bless.cluster.replay`):
the placement is the controller's pure policy, each GPU is one replay.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bless.cli import UserError, make_console

PLACEMENTS = ("first-fit", "best-fit-memory", "colocation")
"""bless.cluster.placement.POLICIES, named here so that building the parser imports nothing heavy
(a test checks they agree)."""


def add_replay(csub: argparse._SubParsersAction) -> None:
    """``replay`` under ``bless cluster``."""
    p = csub.add_parser(
        "replay",
        help="place a config's apps on N simulated GPUs and replay their loads in virtual time (no Ray)",
        description=__doc__,
    )
    p.add_argument("config", type=Path, help="cluster replay config (YAML): gpus, policy, serving, apps with loads")
    p.add_argument(
        "--policy",
        action="append",
        choices=PLACEMENTS,
        default=None,
        help="placement policy (repeat to compare; default: the config's)",
    )
    p.add_argument("--compare", action="store_true", help="compare every placement policy")
    p.add_argument("--out", type=Path, default=None, help="write apps.csv, gpus.csv, summary.csv, table.md, a plot")
    p.add_argument("--jobs", type=int, default=1, help="worker processes for the per-GPU replays")
    p.add_argument("--no-iso", action="store_true", help="skip each app's ISO reference run")
    p.add_argument("--no-plot", action="store_true", help="with --out: no png")
    live = p.add_argument_group("live: against a running cluster's front end (`bless cluster up --grpc-port`)")
    live.add_argument(
        "--address",
        default=None,
        help="HOST:PORT of the front end: register the apps there (the cluster places them by its own policy) "
        "and replay the loads in wall-clock time instead of the virtual-time replay",
    )
    live.add_argument("--token", default=None, help="admin token (default: the cluster state directory's admin-token)")
    live.add_argument("--no-register", action="store_true", help="the apps are registered already")
    p.set_defaults(func=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    from rich.table import Table

    from bless.cluster.placement import POLICIES
    from bless.cluster.replay import load_cluster_config, replay_cluster, write_results

    if args.jobs < 1:
        raise UserError(f"--jobs: at least 1, got {args.jobs}")
    cfg = load_cluster_config(args.config)
    if args.address is not None:
        return _run_live(cfg, args)
    policies = list(POLICIES) if args.compare else (args.policy or [cfg.policy])
    results = replay_cluster(cfg, policies, workers=args.jobs, iso=not args.no_iso)

    def ms(x: float) -> str:
        return "-" if not math.isfinite(x) else f"{x:.2f}"

    def ratio(x: float) -> str:
        return "-" if not math.isfinite(x) else f"{x:.2f}"

    console = make_console(120)
    for r in results:
        table = Table(title=f"{cfg.name}: placement {r.placement.policy}, {r.placement.gpus_used} of {cfg.gpus} GPUs")
        for col in ("GPU", "app", "quota", "requests", "mean ms", "p99 ms", "ISO run ms", "/ ISO", "SLO viol."):
            table.add_column(col)
        for a in r.app_rows():
            viol = a["slo_violation_rate"]
            table.add_row(
                a["gpu"],
                a["app"],
                "-" if not math.isfinite(a["quota"]) else f"{a['quota']:.0%}",
                str(a["requests"]),
                ms(a["mean_ms"]),
                ms(a["p99_ms"]),
                ms(a["iso_mean_ms"]),
                ratio(a["vs_iso"]),
                "-" if not math.isfinite(viol) else f"{viol:.0%}",
            )
        console.print(table)
        for name, why in r.placement.unplaced.items():
            console.print(f"[red]not placed[/red] {name}: {why}")
    summary = Table(title=f"{cfg.name}: per placement policy")
    for col in ("placement", "GPUs used", "unplaced", "mean ms", "mean / ISO", "worst / ISO", "SLO violations"):
        summary.add_column(col)
    for r in results:
        s = r.summary()
        viol = s["slo_violation_rate"]
        summary.add_row(
            s["policy"],
            f"{s['gpus_used']} of {s['gpus']}",
            str(s["unplaced"]),
            ms(s["mean_latency_ms"]),
            ratio(s["mean_vs_iso"]),
            ratio(s["max_vs_iso"]),
            "-" if not math.isfinite(viol) else f"{viol:.1%}",
        )
    console.print(summary)
    if args.out is not None:
        for path in write_results(results, args.out, cfg.name, plot=not args.no_plot):
            print(f"wrote {path}")
    return 0


def _run_live(cfg, args: argparse.Namespace) -> int:
    from rich.table import Table

    from bless.cluster.replay import replay_live
    from bless.serving.server.config import default_state_dir

    token = args.token
    if token is None and not args.no_register:
        path = default_state_dir() / "cluster" / "admin-token"
        try:
            token = path.read_text().strip()
        except FileNotFoundError:
            raise UserError(f"no admin token in {path}: give --token (or --no-register)") from None
    live = replay_live(cfg, args.address, token=token, register=not args.no_register)
    table = Table(title=f"{cfg.name}: live on {args.address}, {len(set(live.placements.values()))} GPUs used")
    for col in ("GPU", "app", "quota", "sent", "ok", "mean ms", "p99 ms", "ISO target ms", "errors"):
        table.add_column(col)
    for r in live.rows:
        table.add_row(
            r["gpu"],
            r["app"],
            f"{r['quota']:.0%}",
            str(r["sent"]),
            str(r["ok"]),
            f"{r['mean_ms']:.2f}",
            f"{r.get('p99_ms', math.nan):.2f}",
            f"{r['iso_ms']:.2f}",
            ", ".join(f"{k} {v}" for k, v in r.get("errors", {}).items()) or "-",
        )
    console = make_console(120)
    console.print(table)
    for name, why in live.rejected.items():
        console.print(f"[red]not admitted[/red] {name}: {why}")
    return 0
