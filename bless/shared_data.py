"""Where the shared real-world data lives (calibration measurements, traces), and the
folders of files bless ships (profiles, model definitions).

The project never copies the shared data; it reads it in place from
``../shared/data`` beside the repository root, or from ``$BLESS_SHARED_DATA``.
A missing file raises :class:`MissingDataError` naming the public dataset and
where to put it.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
"""The installed ``bless`` package."""
REPO_ROOT = PACKAGE.parent


def shipped_dirs(name: str) -> tuple[Path, Path]:
    """Where a folder bless ships (``profiles``, ``apps``) may be: a source checkout keeps it
    beside the package, a wheel carries it inside as ``_<name>`` (``pyproject.toml``,
    force-include)."""
    return REPO_ROOT / name, PACKAGE / f"_{name}"


class MissingDataError(FileNotFoundError):
    """A shared data file is not on this machine."""


def shared_data_dir() -> Path:
    """The shared data directory (it may not exist on a user's machine).

    ``$BLESS_SHARED_DATA`` if set; else ``../shared/data`` beside the source checkout the
    package runs from, or, for an installed wheel (whose package sits in ``site-packages``),
    beside the working directory, a checkout's root where its scripts run: the first of the
    two that exists, or the first where neither does (the error then names it)."""
    env = os.environ.get("BLESS_SHARED_DATA")
    if env:
        return Path(env)
    beside_source = (REPO_ROOT.parent / "shared" / "data").resolve()
    beside_cwd = (Path.cwd().parent / "shared" / "data").resolve()
    return next((d for d in (beside_source, beside_cwd) if d.is_dir()), beside_source)


def shared_file(relative: str, dataset: str) -> Path:
    """Path of ``relative`` inside the shared data, or a clear error.

    ``dataset`` names the public source so the user knows what to download.
    """
    folder = shared_data_dir()
    path = folder / relative
    if not path.exists():
        raise MissingDataError(
            f"{relative} not found under {folder}: download {dataset} and put it at {path} "
            f"(or set BLESS_SHARED_DATA to the directory that holds it)"
        )
    return path
