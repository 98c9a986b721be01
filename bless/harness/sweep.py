"""Sweeps: one base run config, many variations of it, run in parallel.

A sweep file (YAML)::

    name: fig13
    base: pair.yaml            # a run config file (relative to this file), a sweep file (its
                               # base), or an inline mapping
    set: {duration: 4}         # optional fixed overrides of the base
    grid:                      # cartesian product over these keys
      policy: [bless, unbound, {name: mig, rounding: nearest}]
      apps.*.load: [A, B, C]   # '*' sets the key in every list element
    zip:                       # each group varies its keys together (equal lengths)
      - apps.0.app: [vgg11, resnet50]
        apps.1.app: [vgg11, resnet50]

Keys are dotted paths into the run config (``apps.0.quota``, ``policy``,
``squad_size``, ``seed``...).  A relative profile path (``apps.0.app``) is read from
the current directory, unlike ``base``; a sweep checks every run's apps before it
starts any.  Every combination is one run; each run is
deterministic for its config (seed included), so a sweep is too, whatever the
number of worker processes (only the wall-time columns vary).  Results:
``runs.csv`` (one row per run: the swept values, the run summary and per-app
columns), ``apps.csv`` (one row per app per run), ``summary.csv`` (means over
seeds when ``seed`` is swept) and ``sweep.png``.  A run that fails (e.g. a
quota MIG cannot express) gets a row with its ``error`` and no metrics.
While a sweep runs, each finished run is appended to ``runs.partial.jsonl``
(its row and its app rows, one JSON object per line), so a sweep stopped
early (a time limit, a GPU taken back) keeps every run it finished; the file
is removed once the tables are written.
"""

from __future__ import annotations

import copy
import csv
import itertools
import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bless.documents import load_document
from bless.harness.config import ConfigError, RunConfig, config_from_dict
from bless.policies.mig import MigUnsupported

PARTIAL = "runs.partial.jsonl"
"""Finished runs of a sweep still running (or stopped before its tables were written)."""

WALL_COLUMNS = ("wall_s", "kernels_per_wall_s")
"""Columns that measure the host, not the simulated GPU (they vary between machines)."""


@dataclass(frozen=True)
class Sweep:
    name: str
    base: dict[str, Any]
    dimensions: tuple[tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]], ...]
    """Per dimension: its keys and, per step, one value per key."""
    source: Path | None = None

    @property
    def keys(self) -> list[str]:
        return [k for keys, _ in self.dimensions for k in keys]

    def runs(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """(swept values by key, full run config) for every combination, in grid order."""
        steps = [[dict(zip(keys, values)) for values in rows] for keys, rows in self.dimensions]
        for combo in itertools.product(*steps):
            values: dict[str, Any] = {}
            for part in combo:
                values.update(part)
            raw = copy.deepcopy(self.base)
            for key, value in values.items():
                set_path(raw, key, copy.deepcopy(value))
            yield values, raw

    def configs_without(self, key: str) -> list[dict[str, Any]]:
        """The distinct run configs with top-level ``key`` left out, in grid order of their first
        run: the cells the sweep repeats for each value of ``key`` (its policies, say), for a
        study that runs them under values of its own."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for _, raw in self.runs():
            raw.pop(key, None)
            text = json.dumps(raw, sort_keys=True, default=str)
            if text not in seen:
                seen.add(text)
                out.append(raw)
        return out

    def __len__(self) -> int:
        return math.prod(len(rows) for _, rows in self.dimensions)


@dataclass
class SweepResult:
    rows: list[dict[str, Any]]
    app_rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    paths: list[Path] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("error")]

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The errors that are failures: not a MIG run whose quotas MIG cannot host, which is
        a result (that policy has no cell there), but anything else (a missing trace, say)."""
        return [r for r in self.errors if not r["error"].startswith(f"{MigUnsupported.__name__}:")]


# ------------------------------------------------------------------ parsing
def set_path(raw: Any, dotted: str, value: Any) -> None:
    """Set ``a.b.0.c`` (``*`` = every element of a list) in nested dicts and lists."""
    parts = dotted.split(".")
    _set(raw, parts, value, dotted)


def _set(node: Any, parts: list[str], value: Any, dotted: str) -> None:
    head, rest = parts[0], parts[1:]
    if isinstance(node, list):
        if head == "*":
            targets = range(len(node))
        else:
            try:
                targets = [int(head)]
                node[targets[0]]
            except (ValueError, IndexError):
                raise ConfigError(f"{dotted}: {head!r} is not an index of a list of {len(node)}") from None
        for i in targets:
            if rest:
                _set(node[i], rest, value, dotted)
            else:
                node[i] = copy.deepcopy(value)
        return
    if not isinstance(node, dict):
        raise ConfigError(f"{dotted}: cannot set {head!r} inside {node!r}")
    if not rest:
        node[head] = value
        return
    if head not in node or node[head] is None:
        node[head] = {}
    _set(node[head], rest, value, dotted)


def label(value: Any) -> str:
    """A short, stable text for a swept value (CSV cells, plot labels)."""
    if isinstance(value, dict) and "name" in value:
        params = ",".join(f"{k}={label(v)}" for k, v in value.items() if k != "name")
        return f"{value['name']}({params})" if params else str(value["name"])
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def parse_sweep(raw: Any, source: Path | None = None) -> Sweep:
    """Validate a sweep mapping; errors name the field."""
    if not isinstance(raw, dict):
        raise ConfigError("the sweep must be a mapping with base and grid (and/or zip)")
    unknown = sorted(set(raw) - {"name", "base", "set", "grid", "zip", "description"})
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown sweep key; use name, base, set, grid, zip, description")
    base = raw.get("base")
    if isinstance(base, str):
        path = (source.parent if source else Path.cwd()) / base
        try:
            base = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"base: no such run config {path}") from None
        if isinstance(base, dict) and "base" in base:
            base = parse_sweep(base, path).base  # another sweep: share its base config
    if not isinstance(base, dict):
        raise ConfigError("base: expected a run config mapping or the path of a run config file")
    base = copy.deepcopy(base)
    fixed = raw.get("set") or {}
    if not isinstance(fixed, dict):
        raise ConfigError("set: expected a mapping of dotted keys to values")
    for key, value in fixed.items():
        set_path(base, str(key), value)
    dims: list[tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]] = []
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError("grid: expected a mapping of dotted keys to lists of values")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key}: expected a non-empty list of values")
        dims.append(((str(key),), tuple((v,) for v in values)))
    zips = raw.get("zip") or []
    if isinstance(zips, dict):
        zips = [zips]
    if not isinstance(zips, list):
        raise ConfigError("zip: expected a list of groups, each a mapping of dotted keys to equal-length lists")
    for g, group in enumerate(zips):
        if not isinstance(group, dict) or not group:
            raise ConfigError(f"zip[{g}]: expected a mapping of dotted keys to equal-length lists")
        lengths = {k: len(v) if isinstance(v, list) else -1 for k, v in group.items()}
        if min(lengths.values()) < 1 or len(set(lengths.values())) != 1:
            raise ConfigError(f"zip[{g}]: every key needs a non-empty list of the same length, got {lengths}")
        keys = tuple(str(k) for k in group)
        dims.append((keys, tuple(zip(*group.values()))))
    seen: set[str] = set()
    for keys, _ in dims:
        for k in keys:
            if k in seen:
                raise ConfigError(f"{k}: swept twice (in grid and zip, or in two zip groups)")
            seen.add(k)
    name = str(raw.get("name") or (source.stem if source else "sweep"))
    sweep = Sweep(name, base, tuple(dims), source)
    for values, cfg in itertools.islice(sweep.runs(), 1):
        _validate(cfg, values)
    return sweep


def load_sweep(path: str | Path) -> Sweep:
    path = Path(path)
    return load_document(path, lambda raw: parse_sweep(raw, path), ConfigError, "sweep", syntax="yaml")


def _validate(cfg: dict[str, Any], values: dict[str, Any]) -> None:
    try:
        config_from_dict(cfg)
    except ConfigError as e:
        raise ConfigError(f"run {label(values)}: {e}") from None


def check_apps(runs: Iterable[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """A ConfigError naming the first of ``runs`` (swept values, run config) and field whose app
    has no profile: a sweep started where its relative profile paths do not resolve would
    otherwise fail every run one by one."""
    from bless.profiles.catalog import find_profile

    checked: set[tuple[str, str]] = set()
    for values, cfg in runs:
        gpu = str(cfg.get("gpu", RunConfig.gpu))
        for i, app in enumerate(cfg.get("apps") or []):
            name = app.get("app") if isinstance(app, dict) else None
            if not isinstance(name, str) or (name, gpu) in checked:
                continue
            checked.add((name, gpu))
            try:
                find_profile(name, gpu)
            except ValueError as e:
                raise ConfigError(f"run {label(values)}: apps.{i}.app: {e}") from None


# ------------------------------------------------------------------ running
def run_one(job: tuple[int, dict[str, Any], dict[str, Any]]) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """Run one configuration; returns its index, its row and its per-app rows."""
    from bless.harness.report import _clean
    from bless.harness.run import run_config

    index, values, raw = job
    row: dict[str, Any] = {"run": index, **{k: label(v) for k, v in values.items()}}
    try:
        result = run_config(config_from_dict(raw))
    except Exception as e:  # one failed run must not stop the sweep; its row says why
        row["error"] = f"{type(e).__name__}: {e}"
        return index, row, []
    # The swept labels stay authoritative (e.g. policy 'bless(pacing=False)', not the policy's own name).
    row.update({k: _clean(v) for k, v in result.summary().items() if k not in row})
    slo = [a.slo_violation_rate for a in result.apps if a.slo is not None and a.completed]
    row["slo_violation_rate"] = _clean(sum(slo) / len(slo)) if slo else None
    row["iso_mean_ms"] = _clean(sum(a.iso_latency for a in result.apps) / len(result.apps) * 1e3)
    app_rows = []
    for i, app in enumerate(result.apps):
        s = {k: _clean(v) for k, v in app.summary().items()}
        for key in (
            "app",
            "mean_ms",
            "p99_ms",
            "iso_ms",
            "deviation_ms",
            "throughput_rps",
            "served_rps",
            "due_rps",
            "slo_violation_rate",
        ):
            row[f"app{i}.{key}"] = s[key]
        app_rows.append({"run": index, **{k: label(v) for k, v in values.items()}, "slot": i, **s})
    return index, row, app_rows


def run_sweep(
    sweep: Sweep,
    out: Path | None = None,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    plot: bool = True,
) -> SweepResult:
    """Run every combination (``jobs`` worker processes; 1 runs in this process) and write the
    results.  Every app of every run must name a profile that exists (:func:`check_apps`)."""
    work = [(i, values, raw) for i, (values, raw) in enumerate(sweep.runs())]
    check_apps((values, raw) for _, values, raw in work)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(work)))
    t0 = time.perf_counter()
    done: dict[int, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    partial = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        partial = out / PARTIAL
        partial.write_text("")

    def record(result: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
        index, row, app_rows = result
        done[index] = (row, app_rows)
        if partial is not None:
            with partial.open("a") as f:
                f.write(json.dumps({"run": index, "row": row, "apps": app_rows}, default=str) + "\n")
        if progress:
            progress(len(done), len(work))

    if jobs == 1:
        for item in work:
            record(run_one(item))
    else:
        # spawn, not fork: a fork inherits whatever locks the parent's threads (torch, gRPC, BLAS)
        # held at that instant, and CI hung that way. Spawned workers re-import bless and load the
        # numba estimators from the on-disk cache. An executor (unlike multiprocessing.Pool) raises
        # BrokenProcessPool when a worker dies instead of waiting forever for its result.
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for future in as_completed([pool.submit(run_one, item) for item in work]):
                record(future.result())
    rows = [done[i][0] for i in range(len(work))]
    app_rows = [r for i in range(len(work)) for r in done[i][1]]
    result = SweepResult(rows, app_rows, summarise(rows, sweep.keys), wall_seconds=time.perf_counter() - t0)
    if out is not None:
        result.paths = write_results(result, out, sweep, plot)
        if partial is not None:
            partial.unlink(missing_ok=True)
    return result


SUMMARY_METRICS = (
    "mean_latency_ms",
    "iso_mean_ms",
    "latency_deviation_ms",
    "slo_violation_rate",
    "utilisation",
    "squad_mean_us",
)


def summarise(rows: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """Means of the main metrics per combination of the swept keys other than ``seed``."""
    group_keys = [k for k in keys if k != "seed"]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in group_keys), []).append(r)
    out = []
    for key, members in groups.items():
        ok = [m for m in members if not m.get("error")]
        entry: dict[str, Any] = dict(zip(group_keys, key))
        entry["runs"] = len(ok)
        if len(ok) < len(members):
            entry["error"] = members[0].get("error") if not ok else f"{len(members) - len(ok)} runs failed"
        for metric in SUMMARY_METRICS:
            vals = [m[metric] for m in ok if isinstance(m.get(metric), (int, float))]
            entry[metric] = round(sum(vals) / len(vals), 6) if vals else None
        out.append(entry)
    return out


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    columns: list[str] = []
    for r in rows:
        columns.extend(k for k in r if k not in columns)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_results(result: SweepResult, out: Path, sweep: Sweep, plot: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        _write_csv(out / "runs.csv", result.rows),
        _write_csv(out / "summary.csv", result.summary),
    ]
    if result.app_rows:
        paths.append(_write_csv(out / "apps.csv", result.app_rows))
    meta = {
        "name": sweep.name,
        "source": str(sweep.source) if sweep.source else None,
        "runs": len(result.rows),
        "keys": sweep.keys,
        "base": sweep.base,
    }
    (out / "sweep.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    paths.append(out / "sweep.json")
    if plot and any(not r.get("error") for r in result.rows):
        paths.append(plot_summary(result.summary, sweep.keys, out / "sweep.png", sweep.name))
    return paths


def plot_summary(summary: list[dict[str, Any]], keys: list[str], path: Path, title: str) -> Path:
    """Mean latency and latency deviation per combination; bars grouped by policy when it is swept."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = [k for k in keys if k != "seed"]
    series_key = "policy" if "policy" in keys else None
    other = [k for k in keys if k != series_key]
    xs = list(dict.fromkeys(" ".join(str(r.get(k)) for k in other) or "all" for r in summary))
    series = list(dict.fromkeys(r.get(series_key) for r in summary)) if series_key else [None]
    fig, axes = plt.subplots(2, 1, figsize=(max(6, 0.5 * len(xs) * len(series) + 2), 7), squeeze=False)
    width = 0.8 / len(series)
    for ax, metric, ylabel in (
        (axes[0][0], "mean_latency_ms", "mean latency (ms)"),
        (axes[1][0], "latency_deviation_ms", "latency deviation (ms)"),
    ):
        for j, s in enumerate(series):
            ys = []
            for x in xs:
                match = [
                    r
                    for r in summary
                    if (series_key is None or r.get(series_key) == s)
                    and (" ".join(str(r.get(k)) for k in other) or "all") == x
                ]
                v = match[0].get(metric) if match else None
                ys.append(np.nan if v is None else v)
            ax.bar(np.arange(len(xs)) + (j - (len(series) - 1) / 2) * width, ys, width, label=s)
        ax.set_xticks(np.arange(len(xs)), xs, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel(ylabel)
    if series_key:
        axes[0][0].legend(fontsize=7, ncol=min(len(series), 4))
    axes[0][0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
