"""Where does a fresh GPU machine's first run lose 3.4 s?  Every slow host call and every kernel kept.

    python first_run_diag.py BACKEND OUT RUNS    (from the repository's root, BLESS_CACHE set, first thing on a machine)

Runs ``experiments/isolation_pairs.py``'s ResNet50-twins cell at 5x RUNS times in one process (the
first with its timeline recorded, the second without the replay loop's frozen heap), and times
every collector pass longer than 1 ms and every CUDA driver call the backend makes (through
``Driver.call``/``Driver.done`` and the launch path's bound ``cuLaunchKernel``/``cuEventRecord``).
Per run it writes OUT/diag_<i>.json: the phases (backend creation, deploys, contexts), every
host call slower than 2 ms with its time on the run's clock, the first 40 kernels' placement,
start and end, kernels longer than 20 ms, host spans longer than 20 ms, and each app's request
ends in 0.25 s bins.  A host call that takes the seconds says the host waited (a load, a JIT, a
context); kernels that start on time and end seconds later say the device was slow.
"""

import contextlib
import gc
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, ".")
import experiments.isolation_pairs as ip
from bless.backend.trace_events import Trace
from bless.cuda import backend as cuda_backend
from bless.cuda import driver as cuda_driver
from bless.harness import replay
from bless.harness.config import config_from_dict
from bless.harness.run import run_config

PROFILES = Path("tools/gpu_check_results/2026-11-26-h200/profiles")
SLOW = 2e-3

log: list[dict] = []
calls: Counter = Counter()
phases: list[dict] = []
collections: list[dict] = []
_gc_start: list[float] = []


def on_gc(phase: str, info: dict) -> None:
    """Every collector pass longer than 1 ms: when, how long, which generation."""
    if phase == "start":
        _gc_start[:] = [time.perf_counter()]
    elif _gc_start and time.perf_counter() - _gc_start[0] > 1e-3:
        collections.append(
            {"generation": info["generation"], "at": _gc_start[0], "s": time.perf_counter() - _gc_start[0]}
        )


def timed(name, fn):
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            d = time.perf_counter() - t
            calls[name] += 1
            if d > SLOW:
                log.append({"call": name, "at": t, "s": round(d, 6)})

    return wrapper


def patch() -> None:
    call, done = cuda_driver.Driver.call, cuda_driver.Driver.done
    cuda_driver.Driver.call = lambda self, name, *a: timed(name, call)(self, name, *a)
    cuda_driver.Driver.done = lambda self, name, *a: timed(name, done)(self, name, *a)
    init = cuda_backend.CudaBackend.__init__

    def init_timed(self, *a, **k):
        t = time.perf_counter()
        init(self, *a, **k)
        phases.append({"phase": "backend", "at": t, "s": time.perf_counter() - t})
        self._launch_kernel = timed("cuLaunchKernel", self._launch_kernel)
        self._record = timed("cuEventRecord", self._record)
        self._wait_event = timed("cuStreamWaitEvent", self._wait_event)

    cuda_backend.CudaBackend.__init__ = init_timed
    for method in ("deploy", "create_context", "create_stream", "close"):
        orig = getattr(cuda_backend.CudaBackend, method)

        def phase(self, *a, _orig=orig, _m=method, **k):
            t = time.perf_counter()
            try:
                return _orig(self, *a, **k)
            finally:
                phases.append({"phase": _m, "at": t, "s": time.perf_counter() - t, "origin": self._t0})

        setattr(cuda_backend.CudaBackend, method, phase)


def main(backend: str, out: Path, runs: int) -> None:
    t_import = time.perf_counter()
    patch()
    gc.callbacks.append(on_gc)
    frozen = replay.frozen_heap
    bench = ip.Bench("h100", backend, "green", PROFILES)
    rate = 5 * ip.share(bench, "resnet50")
    apps = [
        {"app": bench.app("resnet50"), "quota": 0.5, "load": "B"},
        {"app": bench.app("resnet50"), "quota": 0.5, "load": {"type": "poisson", "rate": rate}},
    ]
    for i in range(runs):
        log.clear()
        calls.clear()
        phases.clear()
        collections.clear()
        # Run 1 without the loop's frozen heap (bless/core/heap.py), to compare with run 2; the
        # first run alone keeps a timeline, whose records would add collector passes of their own.
        replay.frozen_heap = contextlib.nullcontext if i == 1 else frozen
        traced = i == 0
        t = time.perf_counter()
        result = run_config(config_from_dict({**bench.base(), "policy": "bless", "apps": apps}), trace=traced)
        wall = time.perf_counter() - t
        origin = next((p["origin"] for p in phases if "origin" in p), t)

        def rel(x: float, origin: float = origin) -> float:
            """A host time on the backend's clock (0 at its creation), as the trace's times are."""
            return round(x - origin, 6)

        tr = result.trace or Trace()
        kernels = sorted(tr.kernels, key=lambda k: k.start)
        record = {
            "run": i,
            "wall_s": wall,
            "since_process_start_s": t - t_import,
            "phases": [{**p, "at": rel(p["at"])} for p in phases if p["s"] > SLOW or p["phase"] == "backend"],
            "phase_totals": {m: sum(p["s"] for p in phases if p["phase"] == m) for m in {p["phase"] for p in phases}},
            "slow_calls": [{**c, "at": rel(c["at"])} for c in log],
            "call_counts": dict(calls),
            "frozen_heap": i != 1,
            "traced": traced,
            "gc_passes_over_1ms": [{**c, "at": rel(c["at"])} for c in collections],
            "first_kernels": [
                [k.app, k.request, k.kernel, k.name[:40], k.placement.context, round(k.start, 6), round(k.end, 6)]
                for k in kernels[:40]
            ],
            "long_kernels": [
                [k.app, k.request, k.kernel, k.name[:40], k.placement.context, round(k.start, 6), round(k.end, 6)]
                for k in kernels
                if k.end - k.start > 0.02
            ][:60],
            "long_host_spans": [
                [s.name, round(s.start, 6), round(s.end, 6)] for s in tr.host if s.end - s.start > 0.02
            ][:60],
            "long_gaps": [[s.name, round(s.start, 6), round(s.end, 6)] for s in tr.gaps if s.end - s.start > 0.02][:60],
        }
        for role, app in zip(("victim", "neighbour"), result.apps, strict=True):
            arrivals, latencies = np.asarray(app.arrivals, float), np.asarray(app.latencies, float)
            ends = arrivals + latencies
            ok = np.isfinite(ends)
            record[role] = {
                "n": len(arrivals),
                "mean_ms": float(latencies[ok].mean() * 1e3) if ok.any() else None,
                "first_arrival": float(arrivals.min()) if len(arrivals) else None,
                "first_end": float(ends[ok].min()) if ok.any() else None,
                "ends_hist_0.25s": np.histogram(ends[ok], bins=np.arange(0, 6.01, 0.25))[0].tolist(),
            }
        summary = {k: record[k] for k in ("run", "wall_s", "phase_totals", "frozen_heap")}
        summary["gc_passes"] = sorted(record["gc_passes_over_1ms"], key=lambda c: -c["s"])[:6]
        summary["slowest_calls"] = sorted(record["slow_calls"], key=lambda c: -c["s"])[:8]
        summary["first_ends"] = {
            r: (record[r]["first_arrival"], record[r]["first_end"]) for r in ("victim", "neighbour")
        }
        summary["long_kernels"] = record["long_kernels"][:5]
        print(json.dumps(summary), flush=True)
        (out / f"diag_{i}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
