"""``bless run CONFIG.yaml``: one co-location run on the simulated GPU (or a real one)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bless.cli import make_console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run apps with quotas and loads under a policy; print and save the results")
    p.add_argument("config", type=Path, help="run config (YAML); see bless/harness/config.py for the fields")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set policy=temporal --set apps.0.quota=0.7 (repeatable)",
    )
    p.add_argument("--out", type=Path, default=None, help="results directory (default results/<name>)")
    p.add_argument("--no-plot", action="store_true", help="skip the latency chart")
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write a timeline of every kernel, squad and host phase "
        "(Chrome trace-event JSON: open in ui.perfetto.dev or chrome://tracing)",
    )
    p.set_defaults(func=run)


def apply_override(raw: dict, assignment: str) -> None:
    """``a.b.0.c=value`` into a nested dict/list; the value is parsed as YAML."""
    import yaml

    from bless.harness.config import ConfigError

    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE")
    parts = key.split(".")
    node: Any = raw
    for depth, part in enumerate(parts):
        where = ".".join(parts[: depth + 1])
        last = depth == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"--set {key}: {where!r} needs an index below {len(node)}, got {part!r}")
            index: int | str = int(part)
        elif isinstance(node, dict):
            index = part
        else:
            parent = ".".join(parts[:depth])
            raise ConfigError(
                f"--set {key}: {parent!r} is {node!r}, not a mapping; set {parent} itself "
                f"(e.g. --set '{parent}={{name: {node}, {part}: ...}}')"
            )
        if last:
            node[index] = yaml.safe_load(value)
        else:
            node = node[index] if isinstance(node, list) else node.setdefault(index, {})


def run(args: argparse.Namespace) -> int:
    import yaml
    from rich.progress import Progress

    from bless.harness.config import ConfigError, config_from_dict
    from bless.harness.report import print_result, write_result
    from bless.harness.run import run_config

    try:
        raw = yaml.safe_load(args.config.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{args.config}: no such config file") from None
    for assignment in args.set:
        apply_override(raw, assignment)
    cfg = config_from_dict(raw)
    console = make_console()
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"{cfg.name}: {cfg.policy}", total=1.0)
        result = run_config(cfg, progress=lambda f: bar.update(task, completed=f), trace=args.trace is not None)
    print_result(result, title=f"{cfg.name}: {cfg.policy} on {cfg.gpu} ({cfg.backend})", console=console)
    out = args.out or Path("results") / cfg.name
    paths = write_result(result, out, cfg.raw, plot=not args.no_plot)
    console.print(f"results: {', '.join(str(p) for p in paths)}")
    if args.trace is not None:
        console.print(f"timeline: {result.trace.write(args.trace)} (open in ui.perfetto.dev or chrome://tracing)")
    return 0
