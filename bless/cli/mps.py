"""``bless mps start|stop|status``: a user-level MPS control daemon for SM-limited contexts."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mps", help="start, stop or query the MPS daemon the CUDA backend's MPS contexts need")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="state directory holding the pipe/ and log/ folders (default ~/.local/state/bless/mps)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from bless.cuda import mps
    from bless.cuda.driver import probe

    paths = mps.MpsPaths(args.dir.expanduser()) if args.dir else mps.MpsPaths.default()
    if args.action == "start":
        print(mps.start(paths, gpu_probe=probe).describe())
    elif args.action == "stop":
        print("MPS daemon stopped" if mps.stop(paths) else f"MPS daemon was not running ({paths.pipe})")
    else:
        state = mps.status(paths)
        print(state.describe())
        return 0 if state.running else 1
    return 0
