"""The ``bless`` command line.

Each sub-command lives in its own module under :mod:`bless.cli` with a
``register(subparsers)`` function; this module discovers and wires them, so a
new command is a new module.  Command modules import heavy dependencies only
inside their handlers, which keeps ``bless --help`` fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


PIPE_WIDTH = 200
"""Columns of output that goes to a pipe, a file or a CI log rather than a terminal.

rich would assume 80 and cut table cells to fit (``13.…``); a reader of a
log has no terminal to fit, so tables get room for every digit instead."""


class UserError(Exception):
    """A mistake in what the user asked for; printed without a traceback."""


class StopSignals:
    """SIGTERM and SIGINT as a flag that a long-running command's main loop polls.

    The handler only records the signal.  Python runs a handler in the main thread
    between two bytecodes, possibly while that thread holds a lock, so a handler that
    takes one can deadlock: ``Event.set`` takes its condition's lock, which the main
    thread holds for a moment in every ``Event.wait`` on the same event (``bless serve``
    once hung on SIGTERM so, and kept its ports)."""

    POLL = 0.05
    """Seconds between two looks at the flag while :meth:`wait` sleeps."""

    def __init__(self) -> None:
        self.received: int | None = None
        """The signal that came first (None: none yet)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._record)

    def _record(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum

    def wait(self, timeout: float) -> bool:
        """Sleep until a signal comes or ``timeout`` seconds pass; whether one came."""
        end = time.monotonic() + timeout
        while self.received is None and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, self.POLL))
        return self.received is not None


def make_console(min_width: int = 0) -> Console:
    """Where a command prints: the terminal at its width (at least ``min_width``),
    anything else at :data:`PIPE_WIDTH`."""
    from rich.console import Console

    out = Console()
    width = max(out.width if out.is_terminal else PIPE_WIDTH, min_width)
    return out if width == out.width else Console(width=width)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bless", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue  # __main__
        importlib.import_module(f"{__name__}.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from bless.backend.interface import (
        BackendError,  # no GPU, no driver, out of memory: a message, not a traceback
    )

    try:
        return int(args.func(args) or 0)
    except (UserError, ValueError, FileNotFoundError, BackendError) as e:
        print(f"bless {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
