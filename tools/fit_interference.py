"""Fit the simulated GPU's DRAM interference coefficient to co-location runs measured on a GPU.

The coefficient (``[interference] bandwidth`` in ``bless/hw/<gpu>.toml``) stretches a running
kernel by ``1 + bandwidth x`` the DRAM bandwidth its neighbours demand.  Where two apps run on
disjoint SMs (a static split: GSLICE that never re-sizes, or GSLICE itself), the memory
system is all they share, so these runs measure the coefficient with little else in the way.
This script re-runs every such cell of the given GPU sessions on the simulator, once per
candidate coefficient, and prints each candidate's error against the GPU: per app, the mean
|GPU - simulator| of its mean latency over its ISO target, and the signed mean (the bias).

    python tools/fit_interference.py                     # the H200 sessions in tools/gpu_check_results
    python tools/fit_interference.py --values 0.75 1.5   # other candidates

A session is a sweep file and the ``apps.csv`` its GPU run wrote (rows keyed by the sweep's
run index and the app's slot); only the runs of the named policies are re-run.
"""

from __future__ import annotations

import argparse
import csv
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tools" / "gpu_check_results"
PROFILES = RESULTS / "2026-11-26-h200" / "profiles"
"""The profiles measured on the H200, which every one of these runs used."""


@dataclass(frozen=True)
class Session:
    """One GPU run to re-run on the simulator: its sweep, what the GPU wrote, the runs to keep."""

    sweep: str
    apps_csv: str
    policies: tuple[str, ...]
    set_policy: object = None
    """A policy every run takes (the sweep left it to the command line), or None."""


STATIC = {"name": "gslice", "period": 1000}
"""GSLICE whose controller never re-sizes: a static split on disjoint SMs."""

SESSIONS = (
    Session("2026-11-26-h200/pairs_A/sweep.yaml", "2026-11-26-h200/pairs_A/gpu_static/apps.csv", ("*",), STATIC),
    Session("2026-11-27-h200-3/pairs_policies.yaml", "2026-11-27-h200-3/pairs_policies_gpu.csv", ("gslice",)),
    Session("2026-11-27-h200-3/pairs_policies.yaml", "2026-11-27-h200-4/pp_apps.csv", ("gslice",)),
    Session("2026-11-27-h200-4/bert_base_pairs.yaml", "2026-11-27-h200-4/bb_apps.csv", ("gslice",)),
)
"""The H200 sessions' static splits and GSLICE runs (their READMEs say what ran)."""


def cells(session: Session) -> list[tuple[dict, list[float]]]:
    """Each kept run's simulator config and the GPU's mean over ISO per app slot."""
    from bless.harness.sweep import parse_sweep

    text = (RESULTS / session.sweep).read_text()
    text = text.replace("tools/gpu_check_results/", f"{RESULTS}/").replace("PROFILES/", f"{PROFILES}/")
    sweep = parse_sweep(yaml.safe_load(text))
    gpu: dict[int, dict[int, float]] = {}
    with open(RESULTS / session.apps_csv) as f:
        for row in csv.DictReader(f):
            if "*" in session.policies or row.get("policy") in session.policies:
                gpu.setdefault(int(row["run"]), {})[int(row["slot"])] = float(row["mean_ms"]) / float(row["iso_ms"])
    out = []
    for index, (_, raw) in enumerate(sweep.runs()):
        if index in gpu:
            raw["backend"] = "sim"
            if session.set_policy is not None:
                raw["policy"] = session.set_policy
            out.append((raw, [gpu[index][s] for s in sorted(gpu[index])]))
    return out


def simulate(job: tuple[float, dict]) -> list[float]:
    """Each app's mean over its ISO target on the simulator with the coefficient ``bandwidth``."""
    from bless.harness.config import config_from_dict
    from bless.harness.run import run_config
    from bless.hw.interference import InterferenceModel

    bandwidth, raw = job
    # Every reader of the constant (the simulated GPU, and the policies that price with it) asks
    # for_gpu; for this run it answers the candidate.
    stored = InterferenceModel.__dict__["for_gpu"]
    InterferenceModel.for_gpu = classmethod(lambda cls, gpu: cls(bandwidth=bandwidth))  # type: ignore[method-assign,assignment]
    try:
        result = run_config(config_from_dict(raw))
    finally:
        InterferenceModel.for_gpu = stored  # type: ignore[method-assign]
    return [a.mean / a.iso_latency for a in result.apps]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--values", type=float, nargs="+", default=[0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--worst", type=int, default=6, help="app means to list with the largest error at the best value")
    args = ap.parse_args(argv)
    data = [(s, raw, gpu) for s in SESSIONS for raw, gpu in cells(s)]
    n_apps = sum(len(g) for _, _, g in data)
    print(f"{len(data)} cells, {n_apps} app means, from {len(SESSIONS)} GPU runs\n")
    print(
        "| bandwidth | mean abs err | bias (sim - GPU) | worst err | " + " | ".join(s.apps_csv for s in SESSIONS) + " |"
    )
    print("|---|---|---|---|" + "---|" * len(SESSIONS))
    best: tuple[float, float, list] = (np.inf, np.nan, [])
    with ProcessPoolExecutor(args.jobs) as pool:
        for b in args.values:
            sims = list(pool.map(simulate, [(b, raw) for _, raw, _ in data]))
            errs = [(s, sv - gv) for (s, _, g), sim in zip(data, sims) for sv, gv in zip(sim, g)]
            e = np.array([d for _, d in errs])
            per = [np.mean([abs(d) for s, d in errs if s is sess]) for sess in SESSIONS]
            print(
                f"| {b:g} | {np.mean(np.abs(e)):.4f} | {np.mean(e):+.4f} | {np.max(np.abs(e)):.3f} | "
                + " | ".join(f"{p:.4f}" for p in per)
                + " |",
                flush=True,
            )
            if np.mean(np.abs(e)) < best[0]:
                best = (float(np.mean(np.abs(e))), b, list(zip(data, sims)))
    print(f"\nThe largest errors at {best[1]:g} (GPU / simulator, mean over ISO):")
    rows = [
        (abs(sv - gv), gv, sv, app["app"].split("/")[-1], [a["app"].split("/")[-1] for a in raw["apps"]], s.apps_csv)
        for (s, raw, g), sim in best[2]
        for app, sv, gv in zip(raw["apps"], sim, g)
    ]
    for _, gv, sv, app, pair, where in sorted(rows, reverse=True)[: args.worst]:
        print(f"- {app} in {' + '.join(pair)} ({where}): {gv:.3f} / {sv:.3f}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
