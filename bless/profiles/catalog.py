"""Finding app profiles by name: ``resnet50`` on ``a100`` -> ``profiles/a100/resnet50.json``.

Search order: each directory in ``$BLESS_PROFILE_PATH`` (``os.pathsep``
separated), ``./profiles``, then the profiles shipped with bless.  A name that
ends in ``.json`` or contains a path separator is read as a file path.
"""

from __future__ import annotations

import os
from pathlib import Path

from bless.hw.gpus import get_gpu
from bless.profiles.format import Profile, load_profile
from bless.shared_data import shipped_dirs

_SHIPPED = shipped_dirs("profiles")


def profile_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("BLESS_PROFILE_PATH", "").split(os.pathsep) if p]
    dirs.append(Path.cwd() / "profiles")
    dirs.extend(_SHIPPED)
    seen: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [s.resolve() for s in seen]:
            seen.append(d)
    return seen


def _is_path(app: str) -> bool:
    return app.endswith(".json") or os.sep in app or "/" in app


def list_apps(gpu: str) -> list[str]:
    """Names of every app with a profile for ``gpu``."""
    g = get_gpu(gpu).name
    names = {p.stem for d in profile_dirs() for p in (d / g).glob("*.json")}
    return sorted(names)


def find_profile(app: str, gpu: str) -> Path:
    """Path of the profile of ``app`` on ``gpu``, or a ValueError listing what exists."""
    if _is_path(app):
        p = Path(app)
        if not p.is_file():
            where = "" if p.is_absolute() else f" (a relative path is read from the current directory, {Path.cwd()})"
            raise ValueError(f"profile file {app!r} does not exist{where}; give its path from there or an absolute one")
        return p
    g = get_gpu(gpu).name
    for d in profile_dirs():
        p = d / g / f"{app}.json"
        if p.is_file():
            return p
    known = list_apps(g)
    hint = (
        f"known apps on {g}: {', '.join(known)}"
        if known
        else f"no profiles for {g} found in {', '.join(map(str, profile_dirs())) or 'any profile directory'}"
    )
    raise ValueError(f"unknown app {app!r} for GPU {g}; {hint}; or give a path to a profile .json")


def load_app(app: str, gpu: str) -> Profile:
    """Load the profile of ``app`` on ``gpu`` (by name or path)."""
    profile = load_profile(find_profile(app, gpu))
    want = get_gpu(gpu).name
    if profile.gpu != want:
        raise ValueError(f"profile {app!r} is for GPU {profile.gpu}, not {want}")
    return profile
