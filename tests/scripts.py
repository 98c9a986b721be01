"""Loading the repository's scripts (tools/, experiments/) into tests as modules, an
experiment small enough for a fast test to run, and a reader for the tables they print."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The script at ``relative`` (to the repository root) as a module named by its file.

    It is registered in ``sys.modules`` before it runs: a script's dataclasses look their
    module up there while they are created.
    """
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


TINY_SWEEP = {
    "name": "tiny",
    "base": {
        "gpu": "a100",
        "duration": 0.4,
        "warmup": 0.1,
        "seed": 0,
        "noise": 0.0,
        "apps": [
            {"app": "resnet50", "quota": 0.5, "load": "poisson:40"},
            {"app": "bert", "quota": 0.5, "load": "poisson:20"},
        ],
    },
    "grid": {"policy": ["bless", "unbound", "iso"], "apps.1.load": ["poisson:20", "B"]},
}
"""An experiment of two cells (``apps.1.load``) under three policies, 0.4 s each."""


def with_tiny_experiment(relative: str, here: Path) -> ModuleType:
    """The experiment script at ``relative`` reading its experiments from ``here``, which holds
    :data:`TINY_SWEEP` as ``tiny.yaml``."""
    (here / "tiny.yaml").write_text(yaml.safe_dump(TINY_SWEEP))
    module = load_script(relative)
    module.HERE = here
    return module


def markdown_rows(text: str) -> dict[str, list[str]]:
    """The rows of the markdown tables in ``text``: first cell -> the other cells."""
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("|")]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows if not r[0].startswith("---")}
