"""/metrics: names that pass Prometheus' lint rules, a reason for every failure, series
that go with their app, utilisation that reads idle when idle, end-to-end and
serving-overhead histograms."""

import re
import shutil
import subprocess
import time
import urllib.request

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import admin, infer_future, make_server, profile_dir, server, wait_for  # noqa: F401  (fixtures)

from bless.serving.api import oip

SNAKE_CASE = re.compile(r"[a-z][a-z0-9_]*")
UNIT_ABBREVIATIONS = {
    "s",
    "ms",
    "us",
    "ns",
    "sec",
    "secs",
    "min",
    "mins",
    "b",
    "kb",
    "mb",
    "gb",
    "kib",
    "mib",
    "gib",
    "pct",
}
"""Name parts promtool rejects as abbreviated units (its UnitAbbreviations list, in spirit)."""
NON_BASE_UNITS = {
    "milliseconds",
    "microseconds",
    "nanoseconds",
    "minutes",
    "hours",
    "days",
    "kilobytes",
    "megabytes",
    "gigabytes",
    "percent",
    "celsius",
}
TYPE_WORDS = {"counter", "gauge", "histogram", "summary", "untyped"}
RESERVED_SUFFIXES = ("_total", "_count", "_sum", "_bucket")
GENERATED = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}
"""The samples each metric type generates from its family name (OpenMetrics)."""


def exposition(server) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()


def families(server) -> dict:
    return {f.name: f for f in text_string_to_metric_families(exposition(server))}


def value(server, name: str, **labels) -> float:
    for family in text_string_to_metric_families(exposition(server)):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(f"{name}{labels}")


def series_count(server) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(exposition(server)))


def lint(server) -> list[str]:
    """promtool check metrics' rules (Help, MetricUnits, Counter, HistogramSummaryReserved,
    MetricTypeInName, ReservedChars, CamelCase, UnitAbbreviations) over the exposition."""
    problems = []
    text = exposition(server)
    helps = {m.group(1) for m in re.finditer(r"^# HELP (\S+) \S", text, re.M)}
    for f in text_string_to_metric_families(text):
        exported = f.name + ("_total" if f.type == "counter" else "")
        parts = exported.split("_")
        if f.name not in helps and exported not in helps:
            problems.append(f"{exported}: no help text")
        if not SNAKE_CASE.fullmatch(exported) or ":" in exported:
            problems.append(f"{exported}: not snake_case")
        if f.type != "counter" and f.name.endswith(RESERVED_SUFFIXES):
            problems.append(f"{f.name}: a {f.type} must not end in {RESERVED_SUFFIXES}")
        if TYPE_WORDS & set(parts):
            problems.append(f"{exported}: the metric type is in its name")
        if UNIT_ABBREVIATIONS & set(parts) or NON_BASE_UNITS & set(parts):
            problems.append(f"{exported}: use base units spelt out (seconds, bytes, ratio)")
        for s in f.samples:
            if not any(s.name == f.name + suffix for suffix in GENERATED.get(f.type, ("",))):
                problems.append(f"{s.name}: not a sample a {f.type} named {f.name} generates")
            for label in s.labels:
                if not SNAKE_CASE.fullmatch(label):
                    problems.append(f"{s.name}: label {label!r} is not snake_case")
                if label == "le" and f.type != "histogram":
                    problems.append(f"{s.name}: 'le' is reserved for histograms")
    if not re.search(r"^# TYPE \S+ counter$", text, re.M):
        problems.append("no counter at all: the lint saw nothing")
    return problems


def test_every_metric_passes_promtools_rules(server, admin):
    admin.register("a", "quick", "50%")
    admin.infer("a")
    assert lint(server) == []
    names = families(server)
    assert "bless_gpu_sms" in names and "bless_gpu_sm_count" not in names
    for name in ("bless_requests", "bless_request_duration_seconds", "bless_active_requests"):
        labels = {k for s in names[name].samples for k in s.labels}
        assert {"model", "version"} <= labels and "app" not in labels, name


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (.ci/run installs Debian's prometheus)"
)
def test_promtool_check_metrics_passes(server, admin):
    """Prometheus' own linter on the exposition after registrations, inferences and a failure."""
    admin.register("a", "quick", "50%")
    admin.register("b", "other", "20%", priority="best-effort")
    admin.infer("a")
    admin.infer("b")
    with pytest.raises(grpc.RpcError):
        admin.infer("a", inputs={"INPUT": np.zeros((1, 3), np.float32)})  # wrong shape: a counted failure
    text = exposition(server)
    assert 'reason="' in text
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_lint_catches_what_promtool_does(server, monkeypatch):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from bless.serving.server import metrics

    def bad(stats):
        yield GaugeMetricFamily("bless_gpu_sm_count", "SMs", value=108)
        yield GaugeMetricFamily("bless_latency_ms", "ms", value=1)
        yield CounterMetricFamily("bless_fooBar", "camel", value=1)

    monkeypatch.setattr(metrics, "_gpu_families", bad)
    problems = "\n".join(lint(server))
    assert "bless_gpu_sm_count: a gauge must not end" in problems
    assert "bless_latency_ms: use base units" in problems
    assert "bless_fooBar_total: not snake_case" in problems


def test_validation_failures_are_counted_with_a_reason(server, admin):
    admin.register("a", "quick", "50%")
    bad = oip.ModelInferRequest(model_name="a", raw_input_contents=[b"\0" * 10])
    bad.inputs.add(name="INPUT", datatype="FP32", shape=[1, 16])
    with pytest.raises(grpc.RpcError):
        admin.model_infer(bad)
    rejected = dict(model="a", version="1", status="rejected")
    assert value(server, "bless_requests_total", **rejected, reason="invalid_argument") == 1
    assert value(server, "bless_requests_total", **rejected, reason="resource_exhausted") == 0
    s = admin.stats("a").apps[0]
    assert (s.received, s.rejected) == (1, 1)


def test_series_go_with_their_app(server, admin):
    admin.register("keep", "quick", "50%")
    admin.register("a", "other", "10%")
    admin.infer("a")
    admin.unregister("a")
    before = series_count(server)
    for i in range(30):
        admin.register(f"a{i}", "other", "10%")
        admin.infer(f"a{i}")
        admin.unregister(f"a{i}")
    assert series_count(server) == before
    assert 'model="a' not in exposition(server)


def test_utilisation_is_a_recent_rate_that_reads_zero_when_idle(server, admin):
    admin.register("s", "slow", "100%")
    futures = [infer_future(server.address, "s") for _ in range(4)]
    wait_for(lambda: value(server, "bless_gpu_utilisation_ratio") > 0, what="utilisation while busy")
    for f in futures:
        f.result(timeout=10)
    time.sleep(1.3)  # the utilisation window (1 s) and a sample period
    assert value(server, "bless_gpu_utilisation_ratio") == 0
    assert value(server, "bless_gpu_sm_seconds_total") > 0


def test_end_to_end_duration_and_the_serving_stacks_share(server, admin):
    admin.register("a", "quick", "50%")
    for _ in range(5):
        admin.infer("a")
    model = dict(model="a", version="1")
    count = value(server, "bless_request_duration_seconds_count", **model)
    assert count == value(server, "bless_request_overhead_seconds_count", **model) == 5
    total = value(server, "bless_request_duration_seconds_sum", **model)
    compute = value(server, "bless_request_compute_duration_seconds_sum", **model)
    overhead = value(server, "bless_request_overhead_seconds_sum", **model)
    assert overhead == pytest.approx(total - compute, rel=1e-6)
    assert total >= value(server, "bless_request_scheduler_latency_seconds_sum", **model) > compute > 0
