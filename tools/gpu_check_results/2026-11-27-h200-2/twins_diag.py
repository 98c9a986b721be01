"""The ResNet50-twins isolation cell at 5x, every request kept: when did each end?

    python twins_diag.py BACKEND OUT RUNS    (from the repository's root, BLESS_CACHE set on a GPU)

Runs ``experiments/isolation_pairs.py``'s cell RUNS times in one process and writes each run's
arrivals and latencies to OUT/twins_<i>.json, printing per app the requests, how many did not
finish, their mean latency and their ends in half-second bins.
"""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, ".")
import experiments.isolation_pairs as ip
from bless.harness.config import config_from_dict
from bless.harness.run import run_config

PROFILES = Path("tools/gpu_check_results/2026-11-26-h200/profiles")


def main(backend: str, out: Path, runs: int) -> None:
    bench = ip.Bench("h100", backend, "green", PROFILES)
    rate = 5 * ip.share(bench, "resnet50")
    apps = [
        {"app": bench.app("resnet50"), "quota": 0.5, "load": "B"},
        {"app": bench.app("resnet50"), "quota": 0.5, "load": {"type": "poisson", "rate": rate}},
    ]
    for i in range(runs):
        result = run_config(config_from_dict({**bench.base(), "policy": "bless", "apps": apps}))
        record = {}
        for role, app in zip(("victim", "neighbour"), result.apps, strict=True):
            arrivals, latencies = np.asarray(app.arrivals, float), np.asarray(app.latencies, float)
            ends = arrivals + latencies
            done = np.isfinite(ends)
            record[role] = {
                "n": len(arrivals),
                "unfinished": int((~done).sum()),
                "mean_ms": float(latencies[done].mean() * 1e3) if done.any() else None,
                "ends_hist_0.5s": np.histogram(ends[done], bins=np.arange(0, 14.01, 0.5))[0].tolist(),
                "max_end": float(ends[done].max()) if done.any() else None,
                "arrivals": arrivals.round(5).tolist(),
                "latencies": latencies.round(6).tolist(),
            }
        print(
            i, {role: {k: v for k, v in r.items() if k not in ("arrivals", "latencies")} for role, r in record.items()}
        )
        (out / f"twins_{i}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
