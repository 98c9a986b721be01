"""Priority classes: latency-critical inference beside best-effort training, per policy.

    .venv/bin/python experiments/priority.py             # regenerate results/priority/ (about 2 min on 2 cores)
    .venv/bin/python experiments/paper.py priority       # the same, from the experiments' driver

Reads ``priority.yaml``: every inference x training pair, the inference app
latency-critical under Poisson arrivals at ``load`` of its solo throughput,
the training job best-effort in a closed loop, under each policy; and each app
alone on the whole GPU (UNBOUND, quota 1) under the same arrivals.  Writes
``runs.csv`` (one row per pair and policy) and ``table.md`` (the P99 overhead
of the latency-critical app over its solo P99 and the best-effort throughput
over its solo throughput, per pair and on average, beside Tally's figures).
Deterministic for the config's seed.  No GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bless.harness.config import config_from_dict, read_yaml
from bless.harness.run import run_config
from bless.profiles.catalog import load_app

HERE = Path(__file__).resolve().parent

POLICY_NAMES = {"tally": "Tally", "bless": "BLESS", "reef": "REEF+", "unbound": "UNBOUND", "temporal": "TEMPORAL"}
PAPER_P99_OVERHEAD = {"Tally": 7.2, "UNBOUND": 345.0, "TEMPORAL": 252.3, "REEF+": 195.5}
"""Average P99 overhead (%) of the high-priority job over 36 inference x training pairs at 50 % load on an
A100 (Tally, Zhao et al., ASPLOS'25, abstract and §6): Tally; MPS (our UNBOUND); time slicing (our TEMPORAL);
MPS with priorities, the nearest to our REEF+ (REEF+ bounds best-effort SMs, MPS priorities order launches).
TGS: 188.9 %, no counterpart here.  The paper gives no best-effort figure per system, only that Tally keeps
over 80 % of TGS's system throughput."""


def policy_label(policy: Any) -> str:
    name = policy if isinstance(policy, str) else policy["name"]
    return POLICY_NAMES.get(name, name)


def configs(spec: dict) -> tuple[list[dict], list[dict]]:
    """The pair runs (one per pair and policy) and the solo runs (one per app)."""
    common = {k: spec[k] for k in ("gpu", "duration", "warmup", "seed", "noise")}
    lc_load = {}
    for app in spec["inference"]:
        solo = float(load_app(app, spec["gpu"]).T[-1])
        lc_load[app] = {"type": "poisson", "rate": round(spec["load"] / solo, 3)}
    be_load = {"type": "closed", "interval": 0}
    q_lc, q_be = spec["quotas"]
    pairs, solos = [], []
    for lc in spec["inference"]:
        solos.append(
            {**common, "name": lc, "policy": "unbound", "apps": [{"app": lc, "quota": 1, "load": lc_load[lc]}]}
        )
    for be in spec["training"]:
        solos.append({**common, "name": be, "policy": "unbound", "apps": [{"app": be, "quota": 1, "load": be_load}]})
    for lc in spec["inference"]:
        for be in spec["training"]:
            for policy in spec["policies"]:
                apps = [
                    {"app": lc, "quota": q_lc, "load": lc_load[lc]},
                    {"app": be, "quota": q_be, "load": be_load, "priority": "best-effort"},
                ]
                pairs.append({**common, "name": f"{lc}+{be}", "policy": policy, "apps": apps})
    return pairs, solos


def run_one(raw: dict) -> dict:
    result = run_config(config_from_dict(raw))
    out = {"name": raw["name"], "policy": policy_label(raw["policy"]), "wall_s": round(result.wall_seconds, 2)}
    for i, a in enumerate(result.apps):
        out[f"app{i}.p99_ms"] = a.percentile(99) * 1e3
        out[f"app{i}.mean_ms"] = a.mean * 1e3
        out[f"app{i}.throughput_rps"] = a.throughput
    out.update({k: v for k, v in result.policy.items() if k in ("sliced", "preempted")})
    return out


def table(rows: list[dict], solo: dict[str, dict], policies: list[str]) -> str:
    for r in rows:
        lc, be = r["name"].split("+")
        r["lc_p99_overhead_pct"] = 100 * (r["app0.p99_ms"] / solo[lc]["app0.p99_ms"] - 1)
        r["be_throughput_share"] = r["app1.throughput_rps"] / solo[be]["app0.throughput_rps"]
    pairs = list(dict.fromkeys(r["name"] for r in rows))
    by = {(r["name"], r["policy"]): r for r in rows}

    def grid(metric: str, fmt: str) -> list[str]:
        lines = ["| pair | " + " | ".join(policies) + " |", "|---|" + "---|" * len(policies)]
        for p in [*pairs, "**mean**"]:
            vals = [
                np.mean([by[(q, pol)][metric] for q in pairs]) if p == "**mean**" else by[(p, pol)][metric]
                for pol in policies
            ]
            lines.append(f"| {p} | " + " | ".join(format(v, fmt) for v in vals) + " |")
        return lines

    paper = " | ".join(f"{PAPER_P99_OVERHEAD[p]:.1f}" if p in PAPER_P99_OVERHEAD else "" for p in policies)
    out = [
        "Latency-critical P99 overhead over its solo P99 (%), per pair and on average; "
        "the paper's averages (Tally, ASPLOS'25; TEMPORAL = time slicing, UNBOUND = MPS, REEF+ ~ MPS with priorities):\n",
        *grid("lc_p99_overhead_pct", ".1f"),
        f"| **paper** | {paper} |",
        "\nBest-effort throughput over its solo throughput (iterations/s alone on the GPU):\n",
        *grid("be_throughput_share", ".2f"),
        "\nSolo references (each app alone on the whole GPU, same arrivals):\n",
        "| app | P99 (ms) | mean (ms) | throughput (/s) |",
        "|---|---|---|---|",
        *(
            f"| {a} | {s['app0.p99_ms']:.2f} | {s['app0.mean_ms']:.2f} | {s['app0.throughput_rps']:.1f} |"
            for a, s in solo.items()
        ),
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=HERE / "priority.yaml")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "priority")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (results do not depend on it)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    spec = read_yaml(args.config)
    pairs, solos = configs(spec)
    with ProcessPoolExecutor(args.jobs) as pool:
        solo_rows = list(pool.map(run_one, solos))
        rows = list(pool.map(run_one, pairs))
    solo = {r["name"]: r for r in solo_rows}
    md = table(rows, solo, list(dict.fromkeys(r["policy"] for r in rows)))
    args.out.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with (args.out / "runs.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(
            {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in r.items()} for r in rows
        )
    (args.out / "solo.json").write_text(json.dumps(solo, indent=1, sort_keys=True) + "\n")
    (args.out / "table.md").write_text(md + "\n")
    print(md)
    print(f"\n{len(rows) + len(solo_rows)} runs in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
