"""``bless sweep SWEEP.yaml``: many runs from one base config, in parallel, to CSV and plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from bless.cli import make_console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="run a grid of configs (policies, quotas, loads, seeds...) in parallel; CSV, summary, plot"
    )
    p.add_argument("sweep", type=Path, help="sweep file (YAML); see bless/harness/sweep.py for the fields")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the base config for every run, e.g. --set duration=2 (repeatable)",
    )
    p.add_argument("--out", type=Path, default=None, help="results directory (default results/<name>)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per CPU core)")
    p.add_argument("--dry-run", action="store_true", help="list the runs without running them")
    p.add_argument("--no-plot", action="store_true", help="skip the plot")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Table

    from bless.harness.config import ConfigError
    from bless.harness.sweep import label, load_sweep, parse_sweep, run_sweep

    console = make_console()
    sweep = load_sweep(args.sweep)
    if args.set:
        raw = yaml.safe_load(args.sweep.read_text())
        raw.setdefault("set", {})
        for assignment in args.set:
            key, sep, value = assignment.partition("=")
            if not sep or not key:
                raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE")
            raw["set"][key] = yaml.safe_load(value)
        sweep = parse_sweep(raw, args.sweep)
    if args.dry_run:
        for i, (values, _) in enumerate(sweep.runs()):
            console.print(f"{i:4d}  " + "  ".join(f"{k}={label(v)}" for k, v in values.items()))
        console.print(f"{len(sweep)} runs")
        return 0
    out = args.out or Path("results") / sweep.name
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(f"{sweep.name}: {len(sweep)} runs", total=len(sweep))
        result = run_sweep(
            sweep, out, args.jobs, lambda done, total: bar.update(task, completed=done), plot=not args.no_plot
        )
    table = Table(title=f"{sweep.name}: means per combination")
    metrics = ("mean_latency_ms", "iso_mean_ms", "latency_deviation_ms", "slo_violation_rate")
    keys = [k for k in result.summary[0] if k not in metrics and k not in ("runs", "utilisation", "squad_mean_us")]
    for col in (*keys, *metrics):
        table.add_column(col.replace("_ms", " (ms)").replace("_", " "), justify="left" if col in keys else "right")
    for r in result.summary:
        table.add_row(*(str(r.get(k, "")) for k in keys), *("" if r.get(m) is None else f"{r[m]:.3g}" for m in metrics))
    console.print(table)
    for r in result.errors[:5]:
        console.print(f"[red]run {r['run']} failed[/]: {r['error']}")
    if len(result.errors) > 5:
        console.print(f"[red]... and {len(result.errors) - 5} more failed runs[/] (see runs.csv)")
    console.print(
        f"{len(result.rows)} runs in {result.wall_seconds:.1f} s; results: " + ", ".join(str(p) for p in result.paths)
    )
    if result.failures:
        # A MIG run whose quotas MIG cannot host is a result; any other error is not.
        console.print(
            f"[red]{len(result.failures)} of {len(result.rows)} runs failed[/]: their rows in runs.csv say why"
        )
        return 1
    return 0
