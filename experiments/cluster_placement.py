"""Placement policies on a 4-GPU cluster: 12 catalog apps on real traces, per app and per policy.

    .venv/bin/python experiments/cluster_placement.py            # regenerate results/cluster_placement/
    .venv/bin/python experiments/cluster_placement.py --jobs 4   # the same numbers, in parallel

Reads ``cluster_placement.yaml`` (the apps, quotas, trace loads and SLOs), places
the apps in order with first-fit, best-fit-memory and colocation (the cluster
controller's pure policies, :mod:`bless.cluster.placement`; colocation predicts
pairs on the simulated GPU), replays every GPU in virtual time on the simulated
A100 serving with BLESS, and every app once alone under ISO on the same
arrivals (:mod:`bless.cluster.replay`; the same as
``bless cluster replay experiments/cluster_placement.yaml --compare --out ...``).
Deterministic for the config's seed: re-running rewrites the same files
(the png's bytes aside).  No Ray, no GPU.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bless.cluster.placement import POLICIES
from bless.cluster.replay import load_cluster_config, replay_cluster, write_results

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=HERE / "cluster_placement.yaml")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "cluster_placement")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (results do not depend on it)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    cfg = load_cluster_config(args.config)
    results = replay_cluster(cfg, list(POLICIES), workers=args.jobs)
    for path in write_results(results, args.out, f"{cfg.name}: {len(cfg.apps)} apps on {cfg.gpus} simulated A100s"):
        print(f"wrote {path}")
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
