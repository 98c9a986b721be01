"""Timelines (``bless run --trace``): valid trace-event JSON, one event per kernel run, squads shown.

A trace viewer needs every event to carry ph/ts/pid/tid/name and the X
events of one thread to nest; these tests check both on the files the runs
write, and count kernel events against what the backend executed.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import yaml
from conftest import RecordingBackend

from bless.backend.trace_events import KernelRecord, Placement, SquadRecord, Trace
from bless.cli import main
from bless.core.lifecycle import AppState
from bless.harness.config import config_from_dict
from bless.harness.loads import parse_load
from bless.harness.replay import Replay
from bless.harness.run import run_config, trace_recorder
from bless.policies.bless import BlessPolicy
from bless.policies.unbound import UnboundPolicy
from bless.profiles.synthetic import synthetic_profile

CONFIG = {
    "name": "trace-test",
    "gpu": "a100",
    "duration": 0.03,
    "warmup": 0.0,
    "seed": 0,
    "noise": 0.02,
    "policy": "bless",
    "apps": [{"app": "resnet50", "quota": 0.5, "load": "B"}, {"app": "resnet50", "quota": 0.5, "load": "B"}],
}


def check_valid(doc: dict) -> list[dict]:
    """Assert ``doc`` is trace-event JSON a viewer accepts; return its X events."""
    assert set(doc) == {"traceEvents", "displayTimeUnit"}
    events = doc["traceEvents"]
    for e in events:
        assert {"ph", "ts", "pid", "tid", "name"} <= set(e), e
        assert e["ph"] in ("X", "M"), e
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 for e in spans)
    named = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    by_thread = defaultdict(list)
    for e in spans:
        assert (e["pid"], e["tid"]) in named, f"no thread_name for {e}"
        by_thread[e["pid"], e["tid"]].append(e)
    for thread in by_thread.values():
        thread.sort(key=lambda e: e["ts"])
        for a, b in zip(thread, thread[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6, f"{a} and {b} overlap on one track"
    return spans


def of(spans: list[dict], cat: str) -> list[dict]:
    return [e for e in spans if e["cat"] == cat]


def traced_run(policy, n_apps: int = 2, duration: float = 0.03):
    """A run on a recording simulated GPU with a timeline; returns (backend, result, X events)."""
    backend = RecordingBackend("a100", seed=0, noise_sigma=0.02)
    profiles = [synthetic_profile(f"p{i}", n_kernels=60 + 20 * i, mean_us=25, seed=i) for i in range(n_apps)]
    apps = [AppState(i, p.app, p, 1 / n_apps) for i, p in enumerate(profiles)]
    loads = [parse_load("B", p.app) for p in profiles]
    result = Replay(backend, policy, apps, loads, duration=duration, seed=0, trace=trace_recorder(backend)).run()
    return backend, result, check_valid(json.loads(json.dumps(result.trace.document())))


def test_cli_writes_a_valid_timeline_with_one_event_per_kernel_run(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    trace = tmp_path / "timeline.json"
    out = tmp_path / "results"
    assert main(["run", str(config), "--out", str(out), "--no-plot", "--trace", str(trace)]) == 0
    spans = check_valid(json.loads(trace.read_text()))
    summary = json.loads((out / "result.json").read_text())["summary"]
    assert len(of(spans, "kernel")) == summary["kernels"] > 0
    # Deadline pacing streams: every decision is on the timeline, none is a squad with a barrier.
    assert of(spans, "squad") and all(e["name"] == "decision" for e in of(spans, "squad"))
    assert summary["squads"] == 0
    paper = tmp_path / "paper.yaml"
    paper.write_text(yaml.safe_dump({**CONFIG, "policy": {"name": "bless", "pacing": "paper"}}))
    assert main(["run", str(paper), "--out", str(out), "--no-plot", "--trace", str(trace)]) == 0
    spans = check_valid(json.loads(trace.read_text()))
    summary = json.loads((out / "result.json").read_text())["summary"]
    assert len(of(spans, "kernel")) == summary["kernels"] > 0
    assert len(of(spans, "squad")) == summary["squads"] > 0


def test_kernel_events_are_the_kernels_the_backend_ran():
    backend, result, spans = traced_run(BlessPolicy(pacing="paper"))
    kernels = of(spans, "kernel")
    assert len(kernels) == len(backend.log) == backend.engine.stats.kernels_done == result.kernels
    launched = {(req.app.name, req.rid, k) for req, k, _ in backend.log}
    assert {(e["args"]["app"], e["args"]["request"], e["args"]["kernel"]) for e in kernels} == launched
    runs = {(req.rid, k): run for req, k, run in backend.log}
    for e in kernels:
        a = e["args"]
        run = runs[a["request"], a["kernel"]]
        assert e["name"] == run.kernel.name
        assert e["ts"] == pytest.approx(run.start * 1e6, abs=1e-3)
        assert e["dur"] == pytest.approx((run.end - run.start) * 1e6, abs=2e-3)
        assert a["context_sms"] == backend.granted_sms(run.stream.context) and a["sms"] == run.sms


def test_squads_span_their_kernels_and_gaps_separate_them():
    _, result, spans = traced_run(BlessPolicy(pacing="paper"))
    squads = sorted(of(spans, "squad"), key=lambda e: e["ts"])
    assert squads and all(e["name"] == "squad" for e in squads)
    assert len(squads) == len(result.squad_durations)
    assert sum(e["args"]["kernels"] for e in squads) == result.kernels
    assert [e["dur"] for e in squads] == pytest.approx(result.squad_durations * 1e6, abs=2e-3)
    kernels = of(spans, "kernel")
    assert min(e["ts"] for e in kernels) == squads[0]["ts"]
    gaps = of(spans, "gap")
    assert len(gaps) == len(squads) - 1
    for gap, (a, b) in zip(sorted(gaps, key=lambda e: e["ts"]), zip(squads, squads[1:])):
        assert gap["ts"] == pytest.approx(a["ts"] + a["dur"], abs=1e-3)
        assert gap["ts"] + gap["dur"] == pytest.approx(b["ts"], abs=1e-3)
    host = {e["name"] for e in of(spans, "host")}
    assert {"decide and launch", "synchronize"} <= host


def test_decisions_that_overlap_get_lanes_of_their_own():
    """UNBOUND does not wait for its launches: decisions overlap, and a viewer needs them on separate tracks."""
    _, result, spans = traced_run(UnboundPolicy())
    decisions = of(spans, "squad")
    assert decisions and all(e["name"] == "decision" for e in decisions)
    assert len({e["tid"] for e in decisions}) > 1  # check_valid already found no overlap within one
    assert len(of(spans, "kernel")) == result.kernels


def test_isolated_runs_merge_their_parts():
    result = run_config(config_from_dict({**CONFIG, "policy": "iso"}), trace=True)
    spans = check_valid(result.trace.document())
    assert len(of(spans, "kernel")) == result.kernels > 0


def test_no_timeline_unless_asked():
    assert run_config(config_from_dict(CONFIG)).trace is None


def test_records_write_a_file(tmp_path):
    trace = Trace(
        kernels=[KernelRecord("a", 1, 0, "gemm", Placement("green 64 SMs", 64), 1e-3, 2e-3, error="boom")],
        squads=[SquadRecord(0, 1e-3, 2e-3, kernels=1, apps=("a",), sync=True)],
    )
    path = trace.write(tmp_path / "sub" / "t.json")
    spans = check_valid(json.loads(path.read_text()))
    (kernel,) = of(spans, "kernel")
    assert (kernel["ts"], kernel["dur"]) == (1000.0, 1000.0)
    assert kernel["args"] == {
        "app": "a",
        "request": 1,
        "kernel": 0,
        "context": "green 64 SMs",
        "context_sms": 64,
        "error": "boom",
    }
    assert "estimate_us" not in of(spans, "squad")[0]["args"]  # nan is not JSON


# ------------------------------------------------------------------ the CUDA backend (fake driver)
def test_cuda_launches_write_the_same_format(tmp_path):
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed (pip install '.[cuda]')")
    from cuda_fake import FakeDevice, FakeDriver, timing_from, write_app

    from bless.cuda.backend import CudaBackend

    a = write_app(tmp_path / "a", synthetic_profile("a", gpu="h100", n_kernels=6, mean_us=300, seed=1))
    b = write_app(tmp_path / "b", synthetic_profile("b", gpu="h100", n_kernels=4, mean_us=400, seed=2))
    device = FakeDevice()
    timing_from(device, a, b)
    backend = CudaBackend("h100", driver_module=FakeDriver(device))
    apps = [AppState(0, "a", a, 0.5), AppState(1, "b", b, 0.5)]
    loads = [parse_load("A", "a"), parse_load("A", "b")]
    result = Replay(
        backend,
        BlessPolicy(mechanism="green", pacing="paper"),
        apps,
        loads,
        duration=0.05,
        seed=0,
        trace=trace_recorder(backend),
    ).run()
    granted = {backend.pool.primary.sm_count, *(c.sm_count for c in backend.pool.contexts)}
    backend.close()
    path = result.trace.write(tmp_path / "cuda.json")
    spans = check_valid(json.loads(path.read_text()))
    kernels = of(spans, "kernel")
    assert len(kernels) == result.kernels > 0
    assert {e["args"]["context_sms"] for e in kernels} <= granted
    profiles = {"a": a, "b": b}
    assert all(e["name"] == profiles[e["args"]["app"]].kernels[e["args"]["kernel"]].name for e in kernels)
    assert all("sms" not in e["args"] for e in kernels)  # CUDA events do not tell
    assert len(of(spans, "squad")) == len(result.squad_durations) > 0
