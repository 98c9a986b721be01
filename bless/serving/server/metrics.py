"""Prometheus metrics of one server, on their own HTTP port.

Names carry the ``bless_`` prefix, durations are in seconds, per-app series
have an ``app`` label.  Each server has its own registry (several servers can
run in one process, e.g. in tests).  ``bless/serving/server/README.md`` maps them to
Triton's ``nv_inference_*`` metrics.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from bless.serving.server.stats import OUTCOMES

LATENCY_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SQUAD_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1)


@dataclass(frozen=True)
class GpuSample:
    """The device's state as the serving loop last saw it."""

    utilisation: float = math.nan
    sm_seconds: float = 0.0
    memory_used_bytes: int = 0
    memory_bytes: int = 0
    sm_count: int = 0


class _GpuCollector(Collector):
    """Reads the latest :class:`GpuSample` at scrape time."""

    def __init__(self, sample: Callable[[], GpuSample]) -> None:
        self._sample = sample

    def collect(self) -> Iterator:
        s = self._sample()
        yield GaugeMetricFamily(
            "bless_gpu_utilisation_ratio",
            "Share of SM-time busy since the server started (simulated GPU: from the model)",
            value=s.utilisation,
        )
        yield CounterMetricFamily(
            "bless_gpu_sm_seconds", "Busy SM-seconds (rate()/sm_count is utilisation)", value=s.sm_seconds
        )
        yield GaugeMetricFamily(
            "bless_gpu_memory_used_bytes", "Device memory held by apps and their contexts", value=s.memory_used_bytes
        )
        yield GaugeMetricFamily("bless_gpu_memory_total_bytes", "Device memory", value=s.memory_bytes)
        yield GaugeMetricFamily("bless_gpu_sm_count", "SMs of the GPU", value=s.sm_count)


@dataclass(frozen=True)
class AppMetrics:
    """One app's labelled series, resolved once (label lookups are slow on the hot path)."""

    requests: dict[str, Counter]
    duration: Histogram
    queue: Histogram
    compute: Histogram
    active: Gauge
    running: Gauge
    quota: Gauge

    def outcome(self, status: str, latency: float, queue: float, compute: float) -> None:
        self.requests[status].inc()
        if status == "succeeded":
            self.duration.observe(latency)
            self.queue.observe(queue)
            self.compute.observe(compute)


class ServerMetrics:
    """Every metric the server exports."""

    def __init__(self, gpu_sample: Callable[[], GpuSample]) -> None:
        r = self.registry = CollectorRegistry()
        self.request_duration = Histogram(
            "bless_request_duration_seconds",
            "Request latency: arrival at the scheduler to the end of its last kernel (successful requests)",
            ["app"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_duration = Histogram(
            "bless_request_queue_duration_seconds",
            "Arrival to the start of the request's first kernel",
            ["app"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.compute_duration = Histogram(
            "bless_request_compute_duration_seconds",
            "Start of the first kernel to the end of the last",
            ["app"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "bless_requests",
            "Inference requests by outcome (succeeded, failed, rejected, cancelled, aborted)",
            ["app", "status"],
            registry=r,
        )
        self.active = Gauge("bless_active_requests", "Requests queued or running", ["app"], registry=r)
        self.running = Gauge("bless_running_requests", "Requests with kernels launched", ["app"], registry=r)
        self.quota = Gauge("bless_app_quota_ratio", "SM quota of the app (fraction of the GPU)", ["app"], registry=r)
        self.squads = Counter("bless_squads", "Kernel squads launched, by configuration", ["config"], registry=r)
        self.squad_duration = Histogram(
            "bless_squad_duration_seconds",
            "Squad duration on the device: first kernel start to last kernel end",
            buckets=SQUAD_BUCKETS,
            registry=r,
        )
        self.kernels = Counter("bless_kernels", "Kernels launched", registry=r)
        r.register(_GpuCollector(gpu_sample))
        self._apps: dict[str, AppMetrics] = {}

    def squads_run(self, squads: list[tuple[float, float, bool]], kernels: int) -> None:
        for duration, _estimate, restricted in squads:
            self.squads.labels("split" if restricted else "unrestricted").inc()
            self.squad_duration.observe(duration)
        if kernels:
            self.kernels.inc(kernels)

    def app(self, app: str) -> AppMetrics:
        """The series of one app (created when the app is registered)."""
        return self._apps[app]

    def app_added(self, app: str, quota: float) -> None:
        m = self._apps[app] = AppMetrics(
            requests={status: self.requests.labels(app, status) for status in OUTCOMES},
            duration=self.request_duration.labels(app),
            queue=self.queue_duration.labels(app),
            compute=self.compute_duration.labels(app),
            active=self.active.labels(app),
            running=self.running.labels(app),
            quota=self.quota.labels(app),
        )
        m.quota.set(quota)
        m.active.set(0)
        m.running.set(0)

    def app_removed(self, app: str) -> None:
        """Stop exporting the app's gauges (its counters and histograms stay, as Prometheus
        expects; late updates to the unexported gauges are harmless)."""
        for gauge in (self.quota, self.active, self.running):
            with contextlib.suppress(KeyError):
                gauge.remove(app)

    def serve(self, host: str, port: int) -> MetricsHttpServer:
        """Start the HTTP endpoint in a thread; ``.server_port`` is the bound port."""
        httpd = make_server(host, port, make_wsgi_app(self.registry), MetricsHttpServer, handler_class=_QuietHandler)
        threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="bless-metrics", daemon=True
        ).start()
        return httpd


class MetricsHttpServer(ThreadingMixIn, WSGIServer):
    """Threaded WSGI server; polls for shutdown every 50 ms (the default 0.5 s slows every stop)."""

    daemon_threads = True

    def __init__(self, address, handler, *args, **kwargs) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler, *args, **kwargs)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        """Scrapes are not worth a log line each."""
