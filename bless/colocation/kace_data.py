"""Colocation data sets as plain CSV: per-workload features (F) and measured pairs (P).

F has a ``workload`` column and any number of numeric feature columns; a
column whose name ends in ``%`` or ``_pct`` is a percentage (a pair's value
is the mean of its two workloads', other columns are summed).

P has ``workload1,workload2,throughput1,throughput2``: the throughput of each
workload while the two co-run.  A pair may appear in either order; pairs that
could not run together (out of memory) are simply absent.  Throughputs are
raw (divided here by F's solo-throughput column) or already relative to solo.

Every reading error names the file, the row (1 = the header line) and the
column, and says how to fix it.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

WORKLOAD = "workload"
PAIR_COLUMNS = ("workload1", "workload2", "throughput1", "throughput2")
SOLO_THROUGHPUT = "solo_throughput"
"""The F column that holds each workload's throughput when it runs alone."""


class DataError(ValueError):
    """A colocation CSV is malformed; the message names file, row and column."""


def is_percentage(column: str) -> bool:
    """Percentages are averaged over a pair, everything else is summed (KACE)."""
    return column.endswith("%") or column.endswith("_pct")


@dataclass(frozen=True, eq=False)
class FeatureTable:
    """One row of numeric features per workload."""

    workloads: tuple[str, ...]
    columns: tuple[str, ...]
    values: np.ndarray
    """Shape (workloads, columns)."""
    source: str = "features"

    def __post_init__(self) -> None:
        self.values.setflags(write=False)

    def index(self, workload: str) -> int:
        try:
            return self.workloads.index(workload)
        except ValueError:
            raise DataError(
                f"{self.source}: unknown workload {workload!r}; known: {', '.join(self.workloads)}"
            ) from None

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.columns.index(name)]

    def percentage_mask(self) -> np.ndarray:
        return np.array([is_percentage(c) for c in self.columns], dtype=bool)

    def subset(self, columns: tuple[str, ...]) -> FeatureTable:
        """The same workloads with only ``columns`` (in that order)."""
        missing = [c for c in columns if c not in self.columns]
        if missing:
            raise DataError(
                f"{self.source}: missing feature column(s) {', '.join(missing)}; "
                f"the model was trained with {', '.join(columns)}"
            )
        idx = [self.columns.index(c) for c in columns]
        return FeatureTable(self.workloads, columns, self.values[:, idx].copy(), self.source)


@dataclass(frozen=True)
class PairMeasurement:
    """Two workloads co-running: each one's throughput (raw or relative to solo)."""

    workload1: str
    workload2: str
    throughput1: float
    throughput2: float

    @property
    def key(self) -> frozenset[str]:
        return frozenset((self.workload1, self.workload2))

    def involves(self, workload: str) -> bool:
        return workload in (self.workload1, self.workload2)

    def partner_of(self, workload: str) -> str:
        return self.workload2 if self.workload1 == workload else self.workload1


@dataclass(frozen=True, eq=False)
class ColocationData:
    """Features and measured pairs, with each pair's throughput sum relative to solo."""

    features: FeatureTable
    pairs: tuple[PairMeasurement, ...]
    throughput_sums: np.ndarray
    """Per pair: throughput1/solo1 + throughput2/solo2 (KACE's prediction target)."""
    relative_to_solo: bool = False
    """True when F had no solo throughputs and P's values were assumed relative to solo."""

    def __post_init__(self) -> None:
        self.throughput_sums.setflags(write=False)


# ------------------------------------------------------------------ reading
def read_features(path: str | Path) -> FeatureTable:
    """Read and validate F (see module docstring)."""
    path = Path(path)
    header, rows = _read_csv(path, "features")
    if WORKLOAD not in header:
        raise DataError(f"{path}: row 1: no {WORKLOAD!r} column; the header must name it (found: {', '.join(header)})")
    columns = tuple(c for c in header if c != WORKLOAD)
    if not columns:
        raise DataError(f"{path}: row 1: no feature columns besides {WORKLOAD!r}; add numeric columns")
    _check_unique_header(path, header)
    workloads: list[str] = []
    first_row: dict[str, int] = {}
    values = np.empty((len(rows), len(columns)))
    for i, (line, record) in enumerate(rows):
        name = record[WORKLOAD].strip()
        if not name:
            raise DataError(f"{path}: row {line}, column {WORKLOAD!r}: empty workload name")
        if name in first_row:
            raise DataError(
                f"{path}: row {line}, column {WORKLOAD!r}: workload {name!r} already on row {first_row[name]}; "
                "give each workload one row"
            )
        first_row[name] = line
        workloads.append(name)
        for j, col in enumerate(columns):
            values[i, j] = _number(path, line, col, record[col])
    return FeatureTable(tuple(workloads), columns, values, str(path))


def read_pairs(path: str | Path, features: FeatureTable) -> tuple[PairMeasurement, ...]:
    """Read and validate P against the workloads of F."""
    path = Path(path)
    header, rows = _read_csv(path, "pairs")
    missing = [c for c in PAIR_COLUMNS if c not in header]
    if missing:
        raise DataError(f"{path}: row 1: missing column(s) {', '.join(missing)}; P needs {','.join(PAIR_COLUMNS)}")
    known = set(features.workloads)
    seen: dict[frozenset[str], int] = {}
    pairs = []
    for line, record in rows:
        names = []
        for col in ("workload1", "workload2"):
            name = record[col].strip()
            if name not in known:
                raise DataError(
                    f"{path}: row {line}, column {col!r}: workload {name!r} is not in {features.source} "
                    f"(known: {', '.join(features.workloads)})"
                )
            names.append(name)
        t1, t2 = (_number(path, line, col, record[col]) for col in ("throughput1", "throughput2"))
        for col, t in (("throughput1", t1), ("throughput2", t2)):
            if t < 0:
                raise DataError(f"{path}: row {line}, column {col!r}: throughput {t} is negative")
        pair = PairMeasurement(names[0], names[1], t1, t2)
        if pair.key in seen:
            raise DataError(
                f"{path}: row {line}: pair {names[0]}+{names[1]} already measured on row {seen[pair.key]} "
                "(either order counts as the same pair); keep one row per pair"
            )
        seen[pair.key] = line
        pairs.append(pair)
    return tuple(pairs)


def load(features_path: str | Path, pairs_path: str | Path, *, normalised: bool = False) -> ColocationData:
    """Read F and P; relate throughputs to solo when F has each workload's solo throughput.

    Without a ``solo_throughput`` column (or with ``normalised``) P's
    throughputs are taken as already relative to solo, as KACE's own data set
    records them, and summed as given.
    """
    features = read_features(features_path)
    pairs = read_pairs(pairs_path, features)
    if not pairs:
        raise DataError(f"{pairs_path}: no pairs; measure some co-running pairs first")
    if normalised or SOLO_THROUGHPUT not in features.columns:
        sums = np.array([p.throughput1 + p.throughput2 for p in pairs])
        return ColocationData(features, pairs, sums, relative_to_solo=not normalised)
    solo = features.column(SOLO_THROUGHPUT)
    for name, value in zip(features.workloads, solo):
        if not value > 0:
            raise DataError(
                f"{features.source}: workload {name!r}, column {SOLO_THROUGHPUT!r}: "
                f"solo throughput must be positive, got {value}"
            )
    sums = np.array(
        [
            p.throughput1 / solo[features.index(p.workload1)] + p.throughput2 / solo[features.index(p.workload2)]
            for p in pairs
        ]
    )
    return ColocationData(features, pairs, sums)


# ------------------------------------------------------------------ writing
def write_features(path: str | Path, table: FeatureTable) -> Path:
    path = Path(path)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([WORKLOAD, *table.columns])
        for name, row in zip(table.workloads, table.values):
            w.writerow([name, *(_fmt(v) for v in row)])
    return path


def write_pairs(path: str | Path, pairs: tuple[PairMeasurement, ...]) -> Path:
    path = Path(path)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(PAIR_COLUMNS)
        for p in pairs:
            w.writerow([p.workload1, p.workload2, _fmt(p.throughput1), _fmt(p.throughput2)])
    return path


def _fmt(v: float) -> str:
    return f"{v:.6g}"


# ------------------------------------------------------------------ helpers
def _read_csv(path: Path, what: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DataError(f"{path}: no such {what} file") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a text CSV file") from None
    reader = csv.reader(text.splitlines())
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise DataError(f"{path}: empty file; expected a header row") from None
    rows = []
    for record in reader:
        line = reader.line_num
        if not record or all(not c.strip() for c in record):
            continue
        if len(record) != len(header):
            raise DataError(f"{path}: row {line}: {len(record)} fields, the header has {len(header)}")
        rows.append((line, dict(zip(header, record))))
    return header, rows


def _check_unique_header(path: Path, header: list[str]) -> None:
    seen = set()
    for h in header:
        if h in seen:
            raise DataError(f"{path}: row 1: column {h!r} appears twice")
        seen.add(h)


def _number(path: Path, line: int, column: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise DataError(f"{path}: row {line}, column {column!r}: {text.strip()!r} is not a number") from None
    if not math.isfinite(v):
        raise DataError(f"{path}: row {line}, column {column!r}: {text.strip()!r} is not a finite number")
    return v
