"""Per-GPU constants as data, each with where it came from.

One TOML file per GPU model (``bless/hw/<gpu>.toml``, named after
:attr:`bless.hw.gpus.GpuSpec.name`) holds the numbers the models assume but no
datasheet gives: host costs, device memory per context, GSLICE's thresholds
and the interference constants.  Every value is a table that names its
provenance, so a reader can tell a measured or cited number from a guess::

    [host]
    launch = { value = 3, unit = "us", source = "tools/gpu_check.py on an A100, 2026-12-01" }
    sync = { value = 20, unit = "us", assumption = "why this number" }

Exactly one of ``source`` (where the number comes from) or ``assumption``
(why this number, when nothing backs it) is required; the loader refuses a
value with neither or both, naming the file and the key.  ``unit`` is
optional (dimensionless when absent); values are converted to seconds and
bytes on load.

Sections (all required):

* ``[host]``: :class:`bless.backend.interface.HostCosts` fields (``HostCosts.for_gpu``);
* ``[context_memory]``: device memory one context costs, per SM restriction
  mechanism (``GpuSpec.context_bytes``); on a real GPU the CUDA backend's
  measurement overrides it (``CudaBackend.context_bytes``);
* ``[gslice]``: defaults of :class:`bless.policies.gslice.GslicePolicy`;
* ``[tally]``: :class:`bless.policies.tally.TallyCosts` (kernel slicing and preemption);
* ``[interference]``: constants of the DRAM interference model, any names.

This module reads files only; each consumer turns its section into its own
type (:meth:`GpuConstants.build`), so a section's keys are defined once, by
that type.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from bless.documents import is_number

T = TypeVar("T")

SECTIONS = ("host", "context_memory", "gslice", "tally", "interference")
"""Sections every GPU file has (in this order in the files)."""

UNITS: dict[str, tuple[int, int]] = {
    "1": (1, 1),
    "s": (1, 1),
    "us": (1, 10**6),
    "B": (1, 1),
    "MiB": (1 << 20, 1),
}
"""Unit -> (multiplier, divisor) to seconds or bytes.  Exact integers, so ``3 us``
loads as the same double as the literal ``3e-6`` (one correctly rounded division)."""

ENTRY_KEYS = frozenset({"value", "unit", "source", "assumption"})


class GpuDataError(ValueError):
    """A GPU data file is missing, malformed or lacks a value's provenance."""


@dataclass(frozen=True)
class Sourced:
    """One value as the file states it, with its provenance (for reports)."""

    value: float
    """In seconds, bytes or dimensionless (the unit converted)."""
    written: str
    """The value as written in the file, e.g. ``3 us``."""
    source: str | None
    assumption: str | None

    @property
    def provenance(self) -> str:
        return f"source: {self.source}" if self.source is not None else f"assumption: {self.assumption}"


@dataclass(frozen=True)
class GpuConstants:
    """The constants of one GPU model, read from its data file."""

    gpu: str
    path: str
    """Where they were read from (named in every error)."""
    host: Mapping[str, float]
    """Host costs in seconds, by :class:`~bless.backend.interface.HostCosts` field."""
    context_memory: Mapping[str, int]
    """Bytes of device memory one context costs, by SM restriction mechanism."""
    gslice: Mapping[str, float]
    """GSLICE's controller thresholds, by :class:`~bless.policies.gslice.GslicePolicy` parameter."""
    tally: Mapping[str, float]
    """Tally's transformation costs and wait bound, by :class:`~bless.policies.tally.TallyCosts` field."""
    interference: Mapping[str, float]
    """Interference-model constants, by name (open: new names need no code here)."""
    sources: Mapping[str, Sourced]
    """Every value by ``section.key``, with its provenance."""

    def build(self, section: str, cls: type[T]) -> T:
        """``cls`` (a dataclass) from ``section``, whose keys must be exactly its fields."""
        values: Mapping[str, float] = getattr(self, section)
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        missing, unknown = sorted(fields - values.keys()), sorted(values.keys() - fields)
        if missing or unknown:
            raise GpuDataError(
                f"{self.path} [{section}]: missing {', '.join(missing) or 'none'}, unknown {', '.join(unknown) or 'none'}; "
                f"{cls.__name__} needs exactly: {', '.join(sorted(fields))}"
            )
        try:
            return cls(**values)
        except ValueError as e:  # the type's own checks, e.g. a threshold out of range
            raise GpuDataError(f"{self.path} [{section}]: {e}") from None


def data_dir() -> Path:
    """The directory of the shipped GPU data files."""
    return Path(str(files(__package__)))


DATA_PATH = "BLESS_GPU_DATA_PATH"
"""Environment variable: directories (``os.pathsep`` separated) whose ``<gpu>.toml`` files stand
in for the shipped ones, first found wins.  A what-if study (a context switch of 5 us, the
interference term off: ``experiments/bound_gap.py``) runs on the same code with other data,
each value still naming its source or assumption."""


def data_files() -> dict[str, Path]:
    """Every GPU data file in use, by GPU name: ``$BLESS_GPU_DATA_PATH``'s before the shipped ones."""
    dirs = [Path(p) for p in os.environ.get(DATA_PATH, "").split(os.pathsep) if p]
    files_by_gpu: dict[str, Path] = {}
    for d in [*dirs, data_dir()]:
        for path in sorted(d.glob("*.toml")):
            files_by_gpu.setdefault(path.stem, path)
    return files_by_gpu


@functools.cache
def gpu_constants(gpu: str) -> GpuConstants:
    """The constants of GPU model ``gpu`` (``GpuSpec.name``), read once per process."""
    path = data_files().get(gpu)
    if path is None:
        raise GpuDataError(
            f"no GPU data file for {gpu!r} in {data_dir()} or ${DATA_PATH}; known: {', '.join(data_files()) or 'none'}. "
            f"Add {gpu}.toml with the sections {', '.join(SECTIONS)} (copy a100.toml and give each value its source)"
        )
    return load(path)


def load(path: Path) -> GpuConstants:
    """Read and check one GPU data file (uncached; :func:`gpu_constants` caches)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise GpuDataError(f"{path}: not valid TOML: {e}") from None
    extra = sorted(doc.keys() - set(SECTIONS))
    missing = [s for s in SECTIONS if s not in doc]
    if extra or missing:
        raise GpuDataError(
            f"{path}: sections must be exactly {', '.join(SECTIONS)}"
            + (f"; missing [{'], ['.join(missing)}]" if missing else "")
            + (f"; unknown [{'], ['.join(extra)}]" if extra else "")
        )
    sections: dict[str, dict[str, float]] = {}
    sources: dict[str, Sourced] = {}
    for section in SECTIONS:
        if not isinstance(doc[section], dict):
            raise GpuDataError(f"{path}: {section} must be a table ([{section}]), got {doc[section]!r}")
        sections[section] = {}
        for key, entry in doc[section].items():
            where = f"{path}: {section}.{key}"
            sourced = _entry(where, entry)
            sections[section][key] = sourced.value
            sources[f"{section}.{key}"] = sourced
    memory = {}
    for mechanism, nbytes in sections["context_memory"].items():
        if nbytes != int(nbytes) or nbytes < 0:
            raise GpuDataError(f"{path}: context_memory.{mechanism} must be a whole number of bytes >= 0, got {nbytes}")
        memory[mechanism] = int(nbytes)
    frozen = {name: MappingProxyType(values) for name, values in sections.items()}
    return GpuConstants(
        gpu=path.stem,
        path=str(path),
        host=frozen["host"],
        context_memory=MappingProxyType(memory),
        gslice=frozen["gslice"],
        tally=frozen["tally"],
        interference=frozen["interference"],
        sources=MappingProxyType(sources),
    )


def _entry(where: str, entry: Any) -> Sourced:
    """One ``{ value, unit, source | assumption }`` table, checked and converted."""
    fix = 'write it as { value = ..., unit = "...", source = "where it comes from" } or assumption = "why this number"'
    if not isinstance(entry, dict):
        raise GpuDataError(f"{where} is a bare {type(entry).__name__}; {fix}")
    unknown = sorted(entry.keys() - ENTRY_KEYS)
    if unknown:
        raise GpuDataError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(ENTRY_KEYS))}")
    value = entry.get("value")
    if not is_number(value) or not math.isfinite(value):
        raise GpuDataError(f"{where}: value must be a finite number, got {value!r}; {fix}")
    given = [k for k in ("source", "assumption") if k in entry]
    if len(given) != 1:
        what = "neither 'source' nor 'assumption'" if not given else "both 'source' and 'assumption'"
        raise GpuDataError(
            f'{where} has {what}; give exactly one: source = "where the number comes from" '
            f'or assumption = "why this number"'
        )
    text = entry[given[0]]
    if not isinstance(text, str) or not text.strip():
        raise GpuDataError(f"{where}: {given[0]} must be a non-empty string, got {text!r}")
    unit = entry.get("unit", "1")
    if unit not in UNITS:
        raise GpuDataError(f"{where}: unknown unit {unit!r}; use one of: {', '.join(UNITS)}")
    mul, div = UNITS[unit]
    return Sourced(
        value=value * mul / div,
        written=f"{value:g} {unit}" if unit != "1" else f"{value:g}",
        source=entry.get("source"),
        assumption=entry.get("assumption"),
    )
