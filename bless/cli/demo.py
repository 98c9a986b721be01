"""``bless demo``: ResNet50 and BERT sharing a simulated A100 at 50/50, workload B."""

from __future__ import annotations

import argparse

from bless.cli import make_console
from bless.hw.gpus import DEFAULT_GPU

DEMO = {
    "name": "demo-resnet50-bert",
    "gpu": DEFAULT_GPU,
    "policy": "bless",
    "duration": 5.0,
    "warmup": 0.5,
    "seed": 0,
    "apps": [
        {"app": "resnet50", "quota": 0.5, "load": "B"},
        {"app": "bert", "quota": 0.5, "load": "B"},
    ],
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="two apps (ResNet50 + BERT) at 50/50 on a simulated A100 under BLESS")
    p.add_argument("--duration", type=float, default=DEMO["duration"], help="seconds of simulated traffic")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    from bless.harness.config import config_from_dict
    from bless.harness.report import print_result
    from bless.harness.run import run_config

    console = make_console()
    cfg = config_from_dict({**DEMO, "duration": args.duration})
    console.print(
        "[bold]bless demo[/]: ResNet50 and BERT share a simulated A100 with quotas 50/50 under a closed-loop "
        "load (workload B: next request 2/3 x solo latency after the previous answer)."
    )
    result = run_config(cfg)
    print_result(result, title="BLESS vs the ISO targets its quotas promise", console=console)
    return 0
