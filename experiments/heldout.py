"""BLESS on models the project does not ship: do its promises hold beyond the five apps?

Builds inference profiles of five models of the A100 data that no shipped app uses
(``bless.profiles.groundtruth``, the same derivation as ``profiles/a100``; written to
a temporary directory, never committed) and runs Fig. 13's symmetric pairs and three
heterogeneous pairs (uneven quotas, different models) under closed loops A/B/C, with
deterministic and exponential think times, for BLESS and the baselines.  Reports each
policy's mean latency and, per cell, the worst app's mean over its ISO target.

    python experiments/heldout.py > experiments/results/heldout.md    # ~3 min on 2 cores

Needs the shared measurements (``../shared/data/calibration`` or ``$BLESS_SHARED_DATA``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from bless.harness.config import config_from_dict
from bless.harness.results import OVER_ISO
from bless.harness.run import run_config
from bless.profiles.groundtruth import apps as groundtruth

MODELS = {"mobilenet": 32, "resnet152": 8, "vgg19": 8, "densenet121": 8, "inception": 16}
"""Model of the A100 data -> batch: about 7-13 ms alone on the whole GPU, like the shipped apps."""
MIXED = (
    ("mobilenet", "7/18", "resnet152", "11/18"),
    ("vgg19", "1/2", "densenet121", "1/2"),
    ("inception", "1/3", "vgg19", "2/3"),
)
POLICIES = ("bless", "gslice", "unbound", "temporal", "reef", "iso")
INTERVALS = {"A": 1 / 3, "B": 2 / 3, "C": 1.0}


def build_profiles(out: Path) -> dict[str, str]:
    """Each model's profile saved under ``out``; model -> path."""
    twins = groundtruth.default_twins()
    paths = {}
    for model, batch in MODELS.items():
        profile, _ = groundtruth.build_inference(model, batch, twins)
        paths[model] = str(profile.save(out / f"{model}.json"))
    return paths


def cells(paths: dict[str, str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Named app groups: (model path, quota) per app."""
    out = [(f"{m} pair", [(paths[m], "1/2")] * 2) for m in MODELS]
    out += [(f"{a} {qa} + {b} {qb}", [(paths[a], qa), (paths[b], qb)]) for a, qa, b, qb in MIXED]
    return out


def run(apps: list[tuple[str, str]], load: str, think: str, policy: str) -> tuple[float, list[float]]:
    """Mean latency over the apps (ms) and each app's mean over its ISO target."""
    spec = {"type": "closed", "interval": INTERVALS[load], "think": think}
    result = run_config(
        config_from_dict(
            {
                "gpu": "a100",
                "duration": 4,
                "warmup": 0.5,
                "seed": 0,
                "noise": 0.02,
                "policy": policy,
                "apps": [{"app": path, "quota": quota, "load": spec} for path, quota in apps],
            }
        )
    )
    return float(np.mean([a.mean for a in result.apps])) * 1e3, [a.over_iso for a in result.apps]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        named = cells(build_profiles(Path(tmp)))
        jobs = [
            (name, apps, load, think, policy)
            for think in ("fixed", "exponential")
            for name, apps in named
            for load in INTERVALS
            for policy in POLICIES
        ]
        with ProcessPoolExecutor(2) as pool:
            results = list(pool.map(run, *zip(*[(a, load, think, p) for _, a, load, think, p in jobs])))
    by = {(name, load, think, policy): r for (name, _, load, think, policy), r in zip(jobs, results)}
    for think in ("fixed", "exponential"):
        print(f"\n## Think times {think}: mean latency (ms) / worst app's mean over its ISO target\n")
        print("| cell | " + " | ".join(POLICIES) + " |")
        print("|---|" + "---|" * len(POLICIES))
        for name, _ in named:
            for load in INTERVALS:
                row = [by[name, load, think, p] for p in POLICIES]
                print(f"| {name} {load} | " + " | ".join(f"{m:.2f} / {max(r):.3f}" for m, r in row) + " |")
        means = {p: np.mean([by[n, ld, think, p][0] for n, _ in named for ld in INTERVALS]) for p in POLICIES}
        print("| **mean** | " + " | ".join(f"{means[p]:.2f}" for p in POLICIES) + " |")
        over = [
            f"{n} {ld} ({max(by[n, ld, think, 'bless'][1]):.3f})"
            for n, _ in named
            for ld in INTERVALS
            if max(by[n, ld, think, "bless"][1]) > OVER_ISO
        ]
        ahead = ", ".join(f"{p} {100 * (1 - means['bless'] / means[p]):+.1f} %" for p in POLICIES[1:])
        print(f"\nBLESS's mean below each policy's: {ahead}.")
        print(f"Cells where a BLESS app is over ISO by more than 1 %: {', '.join(over) or 'none'}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
