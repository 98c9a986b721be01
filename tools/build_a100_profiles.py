#!/usr/bin/env python3
"""Build the A100 ground-truth profiles of the BLESS apps from the shared measurements.

    .venv/bin/python tools/build_a100_profiles.py                  # the ten shipped profiles
    .venv/bin/python tools/build_a100_profiles.py --app resnet101  # one app (inference + training)
    .venv/bin/python tools/build_a100_profiles.py --model densenet121 --batch 8 --out /tmp/p
                                                                   # any model/batch of the A100 data

Reads ``../shared/data/calibration`` in place (or ``$BLESS_SHARED_DATA``) and is
deterministic.  How each profile is derived: ``profiles/README.md`` and each
file's ``provenance``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bless.profiles.groundtruth import apps

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "profiles" / "a100"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    ap.add_argument(
        "--app",
        choices=sorted(apps.RECIPES),
        action="append",
        help="build only these apps (repeatable); default all five, inference and training",
    )
    ap.add_argument("--model", help="build a profile of any model in the A100 data instead (needs --batch)")
    ap.add_argument("--batch", type=int, help="batch for --model (or to override an --app's chosen batch)")
    ap.add_argument("--training", action="store_true", help="with --model: a training iteration, not inference")
    args = ap.parse_args(argv)

    twins = apps.default_twins()
    if args.model:
        if args.batch is None:
            ap.error("--model needs --batch")
        if args.training:
            profile = apps.build_training(args.model, args.batch, twins)
        else:
            profile, _ = apps.build_inference(args.model, args.batch, twins)
        path = profile.save(args.out / f"{profile.app}.json")
        _report([(profile, path)])
        return 0

    built = []
    for app in args.app or list(apps.RECIPES):
        profile, _ = apps.build_inference(app, args.batch, twins)
        built.append((profile, profile.save(args.out / f"{app}.json")))
        train = apps.build_training(app, None, twins)
        built.append((train, train.save(args.out / f"{app}_train.json")))
    _report(built)
    return 0


def _report(built) -> None:
    print(
        f"{'profile':18s} {'batch':>5s} {'kernels':>7s} {'T[100%] ms':>10s} {'paper ms':>8s} {'diff':>7s} "
        f"{'T[50%] ms':>9s} {'T[6 SMs] ms':>11s}  file"
    )
    for p, path in built:
        paper = apps.PAPER_SOLO_MS.get(p.app) if p.kind == "inference" else None
        diff = f"{100 * (p.T[-1] * 1e3 / paper - 1):+.1f} %" if paper else ""
        print(
            f"{p.app:18s} {p.batch:5d} {p.n_kernels:7d} {p.T[-1] * 1e3:10.2f} {paper or '':>8} {diff:>7s} "
            f"{p.T[8] * 1e3:9.2f} {p.T[0] * 1e3:11.1f}  {path}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
