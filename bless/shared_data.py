"""Where the shared real-world data lives (calibration measurements, traces).

The project never copies these files; it reads them in place from
``../shared/data`` beside the repository root, or from ``$BLESS_SHARED_DATA``.
A missing file raises :class:`MissingDataError` naming the public dataset and
where to put it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


class MissingDataError(FileNotFoundError):
    """A shared data file is not on this machine."""


def shared_data_dir() -> Path:
    """The shared data directory (it may not exist on a user's machine)."""
    env = os.environ.get("BLESS_SHARED_DATA")
    if env:
        return Path(env)
    return (REPO_ROOT.parent / "shared" / "data").resolve()


def shared_file(relative: str, dataset: str) -> Path:
    """Path of ``relative`` inside the shared data, or a clear error.

    ``dataset`` names the public source so the user knows what to download.
    """
    path = shared_data_dir() / relative
    if not path.exists():
        raise MissingDataError(
            f"{relative} not found under {shared_data_dir()}: download {dataset} and put it at {path} "
            f"(or set BLESS_SHARED_DATA to the directory that holds it)"
        )
    return path
