"""``bless policies``: the sharing policies a run can name, and their parameters."""

from __future__ import annotations

import argparse

from bless.cli import make_console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("policies", help="list the sharing policies and their parameters")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import inspect

    from rich.table import Table

    from bless.core.policy import POLICIES

    table = Table(title="policies (config: policy: {name: NAME, PARAM: VALUE})")
    for col in ("name", "what it is", "parameters (default)"):
        table.add_column(col)
    for name in POLICIES.names():
        factory = POLICIES.get(name)
        doc = (inspect.getdoc(factory) or "").split("\n\n")[0].replace("\n", " ")
        params = [
            f"{p.name}={p.default!r}" if p.default is not inspect.Parameter.empty else p.name
            for p in inspect.signature(factory).parameters.values()
            if p.name != "mechanism"
        ]
        table.add_row(name, doc, ", ".join(params) or "-")
    make_console().print(table)
    return 0
