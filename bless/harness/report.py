"""Presenting results: terminal tables, JSON/CSV files and the latency chart."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from bless.harness.results import RunResult


def _clean(v: Any) -> Any:
    """JSON-safe scalars (numpy types, NaN as null)."""
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if math.isnan(f) else round(f, 6)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def result_dict(result: RunResult, config: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "config": config or {},
        "summary": {k: _clean(v) for k, v in result.summary().items()},
        "apps": [{k: _clean(v) for k, v in a.summary().items()} for a in result.apps],
        "notes": list(result.notes),
    }


def print_result(result: RunResult, title: str = "", console=None) -> None:
    """Per-app latencies next to the ISO targets the quotas promise."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=(title or f"{result.policy.get('policy')} on {result.gpu}") + " (latency in ms)")
    for col in ("app", "quota", "load", "done", "mean", "p50", "p99", "ISO", "solo", "<= ISO", "served / due (/s)"):
        table.add_column(col, justify="left" if col in ("app", "load") else "right", no_wrap=col == "app")
    for a in result.apps:
        ok = a.completed and a.mean <= a.iso_latency
        # An open loop's service against what its quota alone serves those arrivals (AppResult.due_rate).
        service = "-" if math.isnan(a.due_rate) else f"{a.served_rate:.1f} / {a.due_rate:.1f}"
        if a.served_rate < a.due_rate * 0.99:
            service = f"[red]{service}[/]"
        table.add_row(
            a.app,
            f"{a.quota:.0%}",
            a.load,
            str(a.completed),
            f"{a.mean * 1e3:.2f}",
            f"{a.percentile(50) * 1e3:.2f}",
            f"{a.percentile(99) * 1e3:.2f}",
            f"{a.iso_latency * 1e3:.2f}",
            f"{a.solo_latency * 1e3:.2f}",
            "[green]yes[/]" if ok else "[red]no[/]",
            service,
        )
    console.print(table)
    s = result.summary()
    line = (
        f"latency deviation {s['latency_deviation_ms']:.3f} ms, GPU utilisation {s['utilisation']:.1%}, "
        f"{s['kernels']} kernels"
    )
    if s["squads"]:
        line += f", {s['squads']} squads (mean {s['squad_mean_us']:.0f} us, {s['restricted_share']:.0%} restricted)"
    line += f"; simulated {result.device_seconds:.2f} s in {result.wall_seconds:.2f} s wall"
    console.print(line)
    for note in result.notes:
        console.print(f"[yellow]{note}[/]")


def write_result(result: RunResult, out: Path, config: dict[str, Any] | None = None, plot: bool = True) -> list[Path]:
    """``result.json``, ``apps.csv`` and ``latency.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    data = result_dict(result, config)
    paths = [out / "result.json", out / "apps.csv"]
    paths[0].write_text(json.dumps(data, indent=2) + "\n")
    with paths[1].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(data["apps"][0]))
        writer.writeheader()
        writer.writerows(data["apps"])
    if plot:
        paths.append(plot_result(result, out / "latency.png"))
    return paths


def plot_result(result: RunResult, path: Path) -> Path:
    """Mean latency per app against its ISO target; for two apps also the paper's
    latency chart (app 1 vs app 2 mean latency, the ISO region shaded)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = result.apps
    pair = len(apps) == 2
    fig, axes = plt.subplots(1, 2 if pair else 1, figsize=(10 if pair else 6, 4), squeeze=False)
    ax = axes[0][0]
    x = np.arange(len(apps))
    ax.bar(x - 0.2, [a.mean * 1e3 for a in apps], 0.4, label=f"{result.policy.get('policy')} mean")
    ax.bar(x + 0.2, [a.iso_latency * 1e3 for a in apps], 0.4, label="ISO target T[quota]", alpha=0.6)
    ax.set_xticks(x, [f"{a.app}\n{a.quota:.0%}" for a in apps])
    ax.set_ylabel("latency (ms)")
    ax.legend()
    if pair:
        ax = axes[0][1]
        a, b = apps
        ax.add_patch(plt.Rectangle((0, 0), a.iso_latency * 1e3, b.iso_latency * 1e3, alpha=0.2, label="ISO region"))
        ax.plot([a.mean * 1e3], [b.mean * 1e3], "o", label=result.policy.get("policy"))
        ax.set_xlabel(f"{a.app} mean latency (ms)")
        ax.set_ylabel(f"{b.app} mean latency (ms)")
        ax.set_xlim(0, max(a.iso_latency, a.mean) * 1.3e3)
        ax.set_ylim(0, max(b.iso_latency, b.mean) * 1.3e3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
