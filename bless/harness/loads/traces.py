"""Request arrivals from real traces (or a bursty synthetic process) for one app.

Readers take the public formats as published:

* **Azure Functions 2021** (per invocation: ``app,func,end_timestamp,duration``
  in seconds; arrival = end - duration), Zhang et al., SOSP'21;
* **Azure Functions 2019** (per-minute invocation counts per function:
  ``HashOwner,HashApp,HashFunction,Trigger,<minute>,...``), Shahrad et al., ATC'20;
* **Twitter** (per-second record counts separated by white space, plain or in a
  ``.tbz2`` archive), Archive Team Twitter Stream Grab;
* **Azure LLM inference 2023** (per request: ``TIMESTAMP,ContextTokens,GeneratedTokens``),
  Patel et al., Splitwise, ISCA'24.

Every trace becomes one count series (per-invocation traces are counted in
``bucket``-second bins), then: pick a function (``function``: busiest-first
rank in the window, a hash prefix, or ``all``), take a window (``start``,
``length`` in trace seconds; for Twitter, zero runs longer than ``drop_gaps``
seconds are archive outages and are cut out), compress time (``speedup`` trace
seconds per run second, or ``duration`` run seconds for the whole window),
scale to a target mean rate (``rate`` in requests/s, or ``load`` as a multiple
of 1 / the app's solo latency), and draw seeded Poisson arrivals inside each
bucket at the bucket's rate (Clockwork, OSDI'20 and the Tally artifact do the
same).  ``trace: mmpp`` is a two-state Markov-modulated Poisson process for
when no trace is at hand.

Files are read in place from ``../shared/data/traces`` (see
:mod:`bless.shared_data`); a missing one raises an error naming the public dataset.
Config form: ``load: {type: trace, trace: twitter, start: 3600, length: 600,
duration: 10, load: 0.3}``.
"""

from __future__ import annotations

import csv
import functools
import math
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bless.documents import is_number
from bless.harness.loads.kinds import Arrivals
from bless.shared_data import shared_file

AZURE_ATTRIBUTION = (
    "Contains data derived from the Microsoft Azure Public Dataset (https://github.com/Azure/AzurePublicDataset), "
    "licensed under CC BY 4.0 (https://creativecommons.org/licenses/by/4.0/). Changes: subset of rows or "
    "functions, time window, time compression and rate scaling."
)
"""Attribution to ship with anything derived from the Azure traces (CC BY 4.0)."""


@dataclass(frozen=True)
class CountTrace:
    """Arrival counts per ``bucket`` seconds, one series per function (stream)."""

    bucket: float
    series: dict[str, np.ndarray]
    """Function id -> counts per bucket (all series have the same length)."""


@dataclass(frozen=True)
class TraceSource:
    """A public trace this project knows how to read."""

    relative: str
    """Path under the shared data directory."""
    dataset: str
    """The public dataset, named in errors when the file is missing."""
    reader: Callable[[Path, float], CountTrace]
    bucket: float = 1.0
    """Default bucket for per-request traces (seconds)."""
    drop_gaps: float | None = None
    """Default: cut out zero runs longer than this (outages of the recording)."""
    azure: bool = False


# ------------------------------------------------------------------ readers
def _bin(times: dict[str, np.ndarray], bucket: float) -> CountTrace:
    t0 = min(float(t.min()) for t in times.values() if len(t))
    t1 = max(float(t.max()) for t in times.values() if len(t))
    n = int((t1 - t0) // bucket) + 1
    series = {
        k: np.bincount(((t - t0) // bucket).astype(np.int64), minlength=n)[:n].astype(float) for k, t in times.items()
    }
    return CountTrace(bucket, series)


def read_azure2021(path: Path, bucket: float = 1.0) -> CountTrace:
    """Azure Functions 2021 per-invocation CSV -> counts per function."""
    per_func: dict[str, list[float]] = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"func", "end_timestamp", "duration"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: not an Azure 2021 invocation trace (missing columns {sorted(missing)})")
        for row in reader:
            arrival = float(row["end_timestamp"]) - float(row["duration"])
            per_func.setdefault(row["func"], []).append(arrival)
    if not per_func:
        raise ValueError(f"{path}: no invocations")
    return _bin({k: np.array(v) for k, v in per_func.items()}, bucket)


def read_azure2019(path: Path, bucket: float = 60.0) -> CountTrace:
    """Azure Functions 2019 per-minute counts CSV (minute columns) -> counts per function."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        if header[:4] != ["HashOwner", "HashApp", "HashFunction", "Trigger"]:
            raise ValueError(f"{path}: not an Azure 2019 invocation-count trace (header {header[:4]})")
        series = {row[2]: np.array(row[4:], dtype=float) for row in reader}
    return CountTrace(60.0, series)


def read_twitter(path: Path, bucket: float = 1.0) -> CountTrace:
    """Per-second counts separated by white space; ``.tbz2``: the one text file in the archive."""
    if path.suffix in (".tbz2", ".bz2") or path.name.endswith(".tar.bz2"):
        with tarfile.open(path, "r:bz2") as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            if member is None:
                raise ValueError(f"{path}: the archive holds no file")
            text = tar.extractfile(member).read()
    else:
        text = path.read_bytes()
    counts = np.array(text.split(), dtype=float)
    if not len(counts):
        raise ValueError(f"{path}: no counts")
    return CountTrace(1.0, {"twitter": counts})


def read_azure_llm(path: Path, bucket: float = 1.0) -> CountTrace:
    """Azure LLM inference 2023 CSV (one row per request) -> counts of all requests."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if "TIMESTAMP" not in (reader.fieldnames or ()):
            raise ValueError(f"{path}: not an Azure LLM inference trace (no TIMESTAMP column)")
        stamps = np.array([row["TIMESTAMP"].replace(" ", "T") for row in reader], dtype="datetime64[ns]")
    seconds = (stamps - stamps.min()).astype(np.int64) / 1e9
    return _bin({"requests": seconds}, bucket)


TRACES: dict[str, TraceSource] = {
    "azure2021": TraceSource(
        "traces/azure2021/azure2021_head998.csv",
        "the Azure Functions Invocation Trace 2021 (Azure Public Dataset, "
        "AzureFunctionsInvocationTraceForTwoWeeksJan2021; its first 998 rows as vendored by vhive-serverless/invitro)",
        read_azure2021,
        azure=True,
    ),
    "azure2019": TraceSource(
        "traces/azure2019/invitro500_invocations_min480-959.csv",
        "the Azure Functions Trace 2019 (Azure Public Dataset, Shahrad et al. ATC'20; the 500-function sample "
        "of vhive-serverless/invitro, minutes 480-959)",
        read_azure2019,
        bucket=60.0,
        azure=True,
    ),
    "twitter": TraceSource(
        "traces/twitter2021_08/workload.tbz2",
        "the Archive Team Twitter Stream Grab of August 2021 as per-second counts "
        "(reconfigurable-ml-pipeline/web-service-datasets, workload.tbz2)",
        read_twitter,
        drop_gaps=60.0,
    ),
    "twitter_day1": TraceSource(
        "traces/twitter2021_08/rps_first86400s.txt",
        "the first day (86,400 s) of the Archive Team Twitter Stream Grab of August 2021 as per-second counts "
        "(reconfigurable-ml-pipeline/web-service-datasets)",
        read_twitter,
        drop_gaps=60.0,
    ),
    "azure_llm_code": TraceSource(
        "traces/azure_llm2023/AzureLLMInferenceTrace_code.csv",
        "the Azure LLM Inference Trace 2023, code (Azure Public Dataset, Patel et al. Splitwise ISCA'24)",
        read_azure_llm,
        azure=True,
    ),
    "azure_llm_conv": TraceSource(
        "traces/azure_llm2023/AzureLLMInferenceTrace_conv.csv",
        "the Azure LLM Inference Trace 2023, conversation (Azure Public Dataset, Patel et al. Splitwise ISCA'24)",
        read_azure_llm,
        azure=True,
    ),
}

FORMATS = {
    "azure2021": read_azure2021,
    "azure2019": read_azure2019,
    "twitter": read_twitter,
    "azure_llm": read_azure_llm,
}
"""Readers by format name, for ``path:`` traces outside the shared data."""


@functools.lru_cache(maxsize=16)
def _read(path: str, format: str, bucket: float) -> CountTrace:
    return FORMATS[format](Path(path), bucket)


def read_trace(name: str, bucket: float | None = None) -> CountTrace:
    """A known trace by name, read from the shared data (cached per process)."""
    src = _source(name)
    path = shared_file(src.relative, src.dataset)
    fmt = next(k for k, v in FORMATS.items() if v is src.reader)
    return _read(str(path), fmt, bucket or src.bucket)


def _source(name: str) -> TraceSource:
    try:
        return TRACES[name]
    except KeyError:
        raise ValueError(
            f"trace: unknown trace {name!r}; use one of {', '.join(TRACES)}, mmpp, or path + format"
        ) from None


# ------------------------------------------------------------------ shaping
def select(trace: CountTrace, function: int | str, start: float, length: float | None) -> tuple[np.ndarray, str]:
    """The counts of one function (or ``all``) inside the window [start, start + length) trace seconds."""
    n = len(next(iter(trace.series.values())))
    first = int(start // trace.bucket)
    last = n if length is None else min(n, first + max(1, math.ceil(length / trace.bucket)))
    if not 0 <= first < n:
        raise ValueError(f"trace start: {start} s is outside the trace (0 to {n * trace.bucket:g} s)")
    window = {k: v[first:last] for k, v in trace.series.items()}
    if function == "all":
        return sum(window.values()), "all functions"
    if isinstance(function, bool) or not isinstance(function, (int, str)):
        raise ValueError(
            f"trace function: expected a rank (0 = busiest), a function id prefix or 'all', got {function!r}"
        )
    if isinstance(function, int):
        ranked = sorted(window, key=lambda k: (-float(window[k].sum()), k))
        if not 0 <= function < len(ranked):
            raise ValueError(f"trace function: rank {function} out of range; the trace has {len(ranked)} functions")
        key = ranked[function]
        return window[key], f"function #{function} ({key[:8]})"
    matches = [k for k in window if k.startswith(function)]
    if len(matches) != 1:
        raise ValueError(f"trace function: {function!r} matches {len(matches)} functions; give a unique id prefix")
    return window[matches[0]], f"function {matches[0][:8]}"


def cut_gaps(counts: np.ndarray, bucket: float, longest: float | None) -> np.ndarray:
    """Cut out zero runs longer than ``longest`` seconds (recording outages, not idle time)."""
    if longest is None or not len(counts):
        return counts
    zero = counts == 0
    keep = np.ones(len(counts), dtype=bool)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], zero.astype(np.int8), [0]))))
    for a, b in zip(edges[::2], edges[1::2]):
        if (b - a) * bucket > longest:
            keep[a:b] = False
    return counts[keep]


def poisson_in_buckets(expected: np.ndarray, bucket: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (run seconds): a Poisson number per bucket, uniform inside it."""
    n = rng.poisson(expected)
    starts = np.repeat(np.arange(len(expected)) * bucket, n)
    return np.sort(starts + rng.uniform(0.0, bucket, size=len(starts)))


@dataclass(eq=False)
class TraceArrivals(Arrivals):
    """Arrivals drawn at bind time from expected counts per bucket (a piecewise-constant rate).

    ``load`` (if set) rescales the counts so that the mean rate is ``load``
    requests per solo latency of the app; ``seed`` (if set) fixes the draw
    independently of the run's seed.
    """

    expected: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bucket: float = 1.0
    load: float | None = None
    seed: int | None = None

    def bind(self, solo_latency: float, rng: np.random.Generator) -> None:
        expected = self.expected
        if self.load is not None:
            total = float(expected.sum())
            if total <= 0:
                raise ValueError(f"{self.label}: the window has no arrivals to scale")
            expected = expected * (self.load / solo_latency) * (len(expected) * self.bucket) / total
        draw = np.random.default_rng(self.seed) if self.seed is not None else rng
        self.times = tuple(poisson_in_buckets(expected, self.bucket, draw).tolist())
        super().bind(solo_latency, rng)

    @property
    def mean_rate(self) -> float | None:
        """Mean arrivals per run second the counts promise (None: relative to the app)."""
        if self.load is not None:
            return None
        return float(self.expected.sum()) / (len(self.expected) * self.bucket)


def mmpp_expected(
    rates: tuple[float, ...], dwell: tuple[float, ...], duration: float, bucket: float, rng: np.random.Generator
) -> np.ndarray:
    """Expected arrivals per bucket of a Markov-modulated Poisson process.

    The chain cycles through its states (a two-state chain alternates); it
    stays in state ``s`` an exponential time of mean ``dwell[s]`` and sends at
    relative rate ``rates[s]``.  Normalised so the long-run mean rate is 1.
    """
    mean = sum(r * d for r, d in zip(rates, dwell)) / sum(dwell)
    n = math.ceil(duration / bucket)
    out = np.zeros(n)
    t, s = 0.0, int(rng.integers(len(rates)))
    while t < duration:
        end = min(t + float(rng.exponential(dwell[s])), duration)
        a, b = t / bucket, end / bucket
        i = int(a)
        while i < b and i < n:
            overlap = min(b, i + 1) - max(a, i)
            out[i] += overlap * bucket * rates[s] / mean
            i += 1
        t, s = end, (s + 1) % len(rates)
    return out


# ------------------------------------------------------------------ entry point
def trace_load(
    trace: str | None = None,
    *,
    path: str | None = None,
    format: str | None = None,
    function: int | str = 0,
    start: float = 0.0,
    length: float | None = None,
    bucket: float | None = None,
    drop_gaps: float | str | None = "default",
    speedup: float | None = None,
    duration: float | None = None,
    rate: float | None = None,
    load: float | None = None,
    seed: int | None = None,
    rates: tuple[float, ...] | list[float] = (0.5, 4.0),
    dwell: tuple[float, ...] | list[float] = (0.4, 0.1),
) -> TraceArrivals:
    """The ``{type: trace, ...}`` load: see the module docstring for the parameters."""
    if rate is not None and load is not None:
        raise ValueError("trace: give rate (requests/s) or load (x 1/solo latency), not both")
    for name, v in (("rate", rate), ("load", load), ("speedup", speedup), ("duration", duration)):
        if v is not None and (not is_number(v) or not v > 0):
            raise ValueError(f"trace {name}: expected a positive number, got {v!r}")
    if speedup is not None and duration is not None:
        raise ValueError("trace: give speedup (trace seconds per run second) or duration (run seconds), not both")
    if trace == "mmpp":
        return _mmpp_load(rates, dwell, duration, bucket, rate, load, seed)
    if (trace is None) == (path is None):
        raise ValueError(f"trace: name a known trace ({', '.join(TRACES)}, mmpp) or give path + format, not both")
    if path is not None:
        if format not in FORMATS:
            raise ValueError(f"trace format: expected one of {', '.join(FORMATS)} for path {path!r}, got {format!r}")
        if not Path(path).is_file():
            raise ValueError(f"trace path: no such file {path!r}")
        source = TraceSource(path, path, FORMATS[format])
        data = _read(str(Path(path).resolve()), format, bucket or source.bucket)
        label = Path(path).name
    else:
        source = _source(trace)
        data = read_trace(trace, bucket)
        label = trace
    counts, picked = select(data, function, float(start), length)
    gaps = source.drop_gaps if drop_gaps == "default" else drop_gaps
    counts = cut_gaps(counts, data.bucket, gaps)
    if not counts.sum() > 0:
        raise ValueError(f"trace {label}: no arrivals of {picked} in the window starting at {start} s")
    window = len(counts) * data.bucket
    factor = window / duration if duration is not None else (speedup or 1.0)
    run_bucket = data.bucket / factor
    expected = counts.astype(float)
    if rate is not None:
        expected = expected * rate / (expected.sum() / (len(expected) * run_bucket))
    desc = f"{label} {picked} x{factor:.3g}" + (" (Azure Public Dataset, CC BY 4.0)" if source.azure else "")
    return TraceArrivals((), desc, expected=expected, bucket=run_bucket, load=load, seed=seed)


def _mmpp_load(rates, dwell, duration, bucket, rate, load, seed) -> MmppArrivals:
    rates, dwell = tuple(float(r) for r in rates), tuple(float(d) for d in dwell)
    if len(rates) < 2 or len(rates) != len(dwell) or min(rates) < 0 or min(dwell) <= 0 or not max(rates) > 0:
        raise ValueError(
            f"trace mmpp: rates (relative, >= 0) and dwell (mean seconds, > 0) need one entry per state, "
            f"at least two states; got rates={list(rates)}, dwell={list(dwell)}"
        )
    if duration is None:
        raise ValueError("trace mmpp: give duration (run seconds to generate)")
    if rate is None and load is None:
        raise ValueError("trace mmpp: give rate (requests/s) or load (x 1/solo latency)")
    desc = f"mmpp rates {list(rates)} dwell {list(dwell)} s"
    return MmppArrivals(
        (),
        desc,
        bucket=bucket or min(dwell) / 10,
        load=load,
        seed=seed,
        rates=rates,
        dwell=dwell,
        duration=duration,
        rate=rate,
    )


@dataclass(eq=False)
class MmppArrivals(TraceArrivals):
    """A Markov-modulated Poisson process: the state path is drawn at bind time, like the arrivals."""

    rates: tuple[float, ...] = (0.5, 4.0)
    dwell: tuple[float, ...] = (0.4, 0.1)
    duration: float = 1.0
    rate: float | None = None

    def bind(self, solo_latency: float, rng: np.random.Generator) -> None:
        draw = np.random.default_rng(self.seed) if self.seed is not None else rng
        self.expected = mmpp_expected(self.rates, self.dwell, self.duration, self.bucket, draw) * (self.rate or 1.0)
        super().bind(solo_latency, draw)
