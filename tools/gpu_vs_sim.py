"""The same runs on the GPU and on the simulator, side by side: each app's mean over its ISO target.

    python tools/gpu_vs_sim.py DIR [DIR ...]

Each DIR is a ``bless sweep`` results folder whose grid has ``backend: [cuda, sim]``
(``tools/gpu_pairs.yaml``, run by ``tools/gpu_session.sh``), or one backend's half
of such a grid: rows of every folder are matched on the policy, the apps and the
slot.  A sweep stopped early is read from its ``runs.partial.jsonl``.  Prints a
Markdown table and, per policy, the mean |GPU - simulator| of the ratio.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bless.harness.sweep import PARTIAL  # noqa: E402


def app_rows(folder: Path) -> list[dict]:
    """The per-app rows of one sweep folder, finished or stopped early, each with its run's policy."""
    table = folder / "apps.csv"
    if table.exists():
        with table.open() as f:
            apps = list(csv.DictReader(f))
        with (folder / "runs.csv").open() as f:
            runs = {r["run"]: r for r in csv.DictReader(f)}
    elif (folder / PARTIAL).exists():
        done = [json.loads(line) for line in (folder / PARTIAL).read_text().splitlines()]
        apps = [app for d in done for app in d["apps"]]
        runs = {str(d["run"]): d["row"] for d in done}
    else:
        raise SystemExit(f"{folder}: no apps.csv or {PARTIAL}: not a sweep results folder")
    return [{**app, "policy": policy_of(runs[str(app["run"])])} for app in apps]


def policy_of(run: dict) -> str:
    """The run's policy, with the period of a GSLICE controller (a period longer than the run: a static split)."""
    period = run.get("period_s")
    return f"{run['policy']} (period {float(period):g} s)" if period not in (None, "") else str(run["policy"])


def pair_of(row: dict) -> str:
    apps = sorted(k for k in row if k.startswith("apps.") and k.endswith(".app"))
    return " + ".join(Path(str(row[k])).stem for k in apps)


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args(argv)
    cells: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    names: dict[tuple[str, str, str], str] = {}
    for folder in args.folders:
        for row in app_rows(folder):
            key = (policy_of(row), pair_of(row), str(row["slot"]))
            cells[key][row["backend"]] = float(row["mean_ms"]) / float(row["iso_ms"])
            names[key] = row["app"]
    print("| policy | pair | app | GPU / ISO target | simulator / ISO target |")
    print("|---|---|---|---|---|")
    gaps: dict[str, list[float]] = defaultdict(list)
    for key in sorted(cells):
        got = cells[key]
        gpu, sim = got.get("cuda"), got.get("sim")
        print(f"| {key[0]} | {key[1]} | {names[key]} | {_ratio(gpu)} | {_ratio(sim)} |")
        if gpu is not None and sim is not None:
            gaps[key[0]].append(abs(gpu - sim))
    print()
    for policy, g in sorted(gaps.items()):
        print(f"{policy}: mean |GPU - simulator| {sum(g) / len(g):.3f} over {len(g)} apps, worst {max(g):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
