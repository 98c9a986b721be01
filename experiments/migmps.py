"""MIG only, MPS only (GSLICE), MIG + MPS and BLESS on the same batches of jobs.

    .venv/bin/python experiments/migmps.py      # regenerate results/migmps/ (runs.csv, table.md)

Reads ``migmps.yaml``: batches of catalog apps at equal quotas, each under every
load, run by every policy on the simulated A100.  Per run and app it records the
throughput, the mean latency, the app's ISO latency (the ``iso`` policy at its
quota, same load) and its throughput alone on the full GPU (``iso`` at quota 1,
same load), and reports per batch, load and policy:

* **weighted speedup**: sum over apps of throughput / throughput alone on the
  full GPU (the usual definition, which the MIG + MPS planner maximises);
* **fairness**: the smallest of those ratios (the planner's floor, alpha);
* **latency / ISO**: mean over apps of mean latency over the ISO run's.

A policy that cannot host a batch (MIG: more slices than fit) is ``n/s`` with
its reason in ``runs.csv``.  Deterministic: the config fixes the seed and noise is 0.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from bless.harness.config import config_from_dict, read_yaml
from bless.harness.run import run_config
from bless.harness.sweep import label

HERE = Path(__file__).resolve().parent
FIELDS = ("batch", "load", "policy", "app", "throughput", "alone_throughput", "mean_ms", "iso_ms", "plan", "error")


def run(spec: dict, apps: list[str], load, policy, quota: float | None = None):
    """One run of ``apps`` under ``policy`` (``quota`` None: equal shares)."""
    q = quota if quota is not None else 1 / len(apps)
    cfg = {k: spec[k] for k in ("gpu", "duration", "warmup", "seed", "noise")}
    cfg |= {"policy": policy, "apps": [{"app": a, "quota": q, "load": load} for a in apps]}
    return run_config(config_from_dict(cfg))


def measure(spec: dict) -> list[dict]:
    rows = []
    alone: dict[tuple[str, str], float] = {}
    for batch, apps in spec["batches"].items():
        for load_name, load in spec["loads"].items():
            for a in apps:  # the reference: the app alone on the full GPU, same load
                if (a, load_name) not in alone:
                    alone[a, load_name] = run(spec, [a], load, "iso", 1.0).apps[0].throughput
            iso = run(spec, apps, load, "iso").apps
            for policy in spec["policies"]:
                name = label(policy)
                try:
                    result = run(spec, apps, load, policy)
                except ValueError as e:  # MigUnsupported, PlanInfeasible, ConfigError
                    failed = {"batch": batch, "load": load_name, "policy": name, "error": str(e)}
                    rows.append({k: failed.get(k, "") for k in FIELDS})
                    continue
                for a, i in zip(result.apps, iso):
                    rows.append(
                        {
                            "batch": batch,
                            "load": load_name,
                            "policy": name,
                            "app": a.app,
                            "throughput": round(a.throughput, 3),
                            "alone_throughput": round(alone[a.app.split("#")[0], load_name], 3),
                            "mean_ms": round(a.mean * 1e3, 3),
                            "iso_ms": round(i.mean * 1e3, 3),
                            "plan": result.policy.get("slices", ""),
                            "error": "",
                        }
                    )
    return rows


def table(rows: list[dict], policies: list[str]) -> str:
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        cells.setdefault((r["batch"], r["load"]), {})
    out = [
        "| batch | load | " + " | ".join(f"{p}: WS / fair / lat÷ISO" for p in policies) + " |",
        "|---|---|" + "---|" * len(policies),
    ]
    for batch, load in cells:
        line = []
        for p in policies:
            mine = [r for r in rows if (r["batch"], r["load"], r["policy"]) == (batch, load, p)]
            if not mine or mine[0]["error"]:
                line.append("n/s")
                continue
            rp = [float(r["throughput"]) / float(r["alone_throughput"]) for r in mine]
            lat = sum(float(r["mean_ms"]) / float(r["iso_ms"]) for r in mine) / len(mine)
            line.append(f"{sum(rp):.2f} / {min(rp):.2f} / {lat:.2f}")
        out.append(f"| {batch} | {load} | " + " | ".join(line) + " |")
    plans = sorted(
        {
            (r["batch"], r["load"], r["policy"], r["plan"])
            for r in rows
            if r["policy"].startswith("migmps") and r["plan"]
        }
    )
    out += ["", "MIG + MPS plans (profile@start slot[apps]):", ""]
    out += [f"* {b}, {ld}, {pol}: `{p}`" for b, ld, pol, p in plans]
    errors = sorted({(r["batch"], r["load"], r["policy"], r["error"]) for r in rows if r["error"]})
    if errors:
        out += ["", "Not supported:", ""]
        out += [f"* {b}, {ld}, {p}: {e}" for b, ld, p, e in errors]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=HERE / "migmps.yaml")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "migmps")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    spec = read_yaml(args.config)
    rows = measure(spec)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "runs.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    md = table(rows, [label(p) for p in spec["policies"]])
    (args.out / "table.md").write_text(md + "\n")
    print(md)
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
