"""Which of bless's modules the installed build runs compiled.

Deadline pacing's step runs on the host before every launch, and the simulated GPU's
engine runs every replay; a standard wheel (``pip install .``) compiles their modules
with mypyc from the same typed source (``hatch_build.py`` builds the list below), an
editable install (``make test``) runs them as Python.  Benchmarks, the server's banner
and tests ask which one they run.  This module imports nothing of bless's, so the build
hook reads it by path.
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES

NATIVE_MODULES = (
    "bless.core.deadline_pacing",
    "bless.core.paced_request",
    "bless.core.lifecycle",
    "bless.sim.engine",
)
"""What mypyc compiles: the per-step scheduling code, the request and app classes it reads at
every step (compiled, a field is a struct read, not a dictionary lookup: with 8 apps that
took deadline pacing's own code, pricing aside, from 22-24 to 14-15 us a step), and the simulated
GPU's event engine, pure Python over lists and plain classes.  Not the policy classes: the
registry reads their parameters from their signatures, which compiled classes do not
expose; not the determiner, whose kernel walk numba compiles already; not the simulated
backend, which tests subclass and patch."""


def is_compiled(module: str) -> bool:
    """Whether ``module`` was imported from a C extension."""
    path = getattr(importlib.import_module(module), "__file__", None) or ""
    return path.endswith(tuple(EXTENSION_SUFFIXES))


def compiled_modules() -> tuple[str, ...]:
    """The native modules this process runs compiled."""
    return tuple(m for m in NATIVE_MODULES if is_compiled(m))


def describe() -> str:
    """Whether the scheduler step and the simulator run compiled, for a benchmark's output and
    the server's banner."""
    done = compiled_modules()
    if len(done) == len(NATIVE_MODULES):
        return "scheduler step and simulator compiled (mypyc)"
    if not done:
        return "scheduler step and simulator interpreted (an editable install; `pip install .` compiles them)"
    return f"scheduler step and simulator partly compiled ({', '.join(done)}; a mixed install)"
