"""Reading a file a person wrote or a tool saved (a profile, a plan, a config, a sweep, a model).

Every reader says the same things the same way: which file is missing or
malformed, and which field of it is wrong, in the reader's own error type so
that the CLI prints one line instead of a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

import yaml

T = TypeVar("T")


def is_number(value: object) -> TypeGuard[float]:
    """A plain number (an int or a float, not a bool): what a numeric field must be.  YAML and
    JSON read ``true`` as a bool, which Python would otherwise take for 1."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integer(value: object) -> TypeGuard[int]:
    """A plain integer (not a bool, which YAML's and JSON's ``true`` would pass for 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def load_document(
    path: str | Path,
    parse: Callable[[Any], T],
    error: type[Exception],
    what: str,
    *,
    syntax: str = "json",
    parse_errors: tuple[type[Exception], ...] = (),
    missing_hint: str = "",
) -> T:
    """``parse`` of the document at ``path``, written in ``syntax`` (``"json"`` or ``"yaml"``).

    A missing file, a syntax error and a failure of ``parse`` (``error``, or any
    of ``parse_errors``) all raise ``error`` with the path in front; ``what``
    names the kind of file ("profile", "sweep") and ``missing_hint`` says how to
    make one.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file" + (f"; {missing_hint}" if missing_hint else "")) from None
    try:
        raw = yaml.safe_load(text) if syntax == "yaml" else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise error(f"{path}: not valid {syntax.upper()} ({e})") from None
    try:
        return parse(raw)
    except (error, *parse_errors) as e:
        raise error(f"{path}: {e}") from None
