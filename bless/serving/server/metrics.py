"""Prometheus metrics of one server, on their own HTTP port.

A view of the server's measurements (:class:`~bless.serving.server.stats.ServerStats`),
read at scrape time: the serving loop records each event once, in the store,
and GetStats and ``/metrics`` both read it.  Names carry the ``bless_`` prefix
and follow Prometheus' naming rules (what ``promtool check metrics`` lints:
counters end in ``_total``, nothing else does, base units in the name);
per-app series have the labels ``model`` and ``version``, as Triton's
``nv_inference_*`` metrics do, and go when the app is unregistered.  Each
server has its own registry (several servers can run in one process, e.g. in
tests).  ``bless/serving/server/README.md`` maps them to Triton's metrics.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from bless.serving.server.jobs import MODEL_VERSION
from bless.serving.server.stats import AppSeries, Buckets, ServerStats, SquadSeries

APP_LABELS = ["model", "version"]

REQUEST_HISTOGRAMS: tuple[tuple[str, str, Callable[[AppSeries], Buckets]], ...] = (
    (
        "bless_request_duration_seconds",
        "End to end in the server: the inference RPC's arrival to its response built (successful requests)",
        lambda a: a.duration,
    ),
    (
        "bless_request_overhead_seconds",
        "The serving stack's share: end to end minus the GPU compute time (successful requests)",
        lambda a: a.overhead,
    ),
    (
        "bless_request_scheduler_latency_seconds",
        "Arrival at the scheduler to the end of the request's last kernel (the latency bless run reports)",
        lambda a: a.latency,
    ),
    ("bless_request_queue_duration_seconds", "Arrival to the start of the request's first kernel", lambda a: a.queue),
    ("bless_request_compute_duration_seconds", "Start of the first kernel to the end of the last", lambda a: a.compute),
)
APP_GAUGES: tuple[tuple[str, str, Callable[[AppSeries], float]], ...] = (
    ("bless_active_requests", "Requests queued or running", lambda a: a.pending),
    ("bless_running_requests", "Requests with kernels launched", lambda a: a.running),
    ("bless_app_quota_ratio", "SM quota of the app (fraction of the GPU)", lambda a: a.quota),
    (
        "bless_app_behind_quota_requests",
        "Requests the app alone at its quota would have finished by now (each in its ISO latency, one at a "
        "time, in arrival order) that it has not: 0 while it gets its quota's throughput",
        lambda a: a.behind_quota,
    ),
)


def _histogram(
    name: str, documentation: str, labelnames: list[str], rows: Iterable[tuple[list[str], Buckets, float]]
) -> HistogramMetricFamily:
    """A histogram family from ``(label values, buckets, created)`` rows, with the ``_created``
    sample a prometheus_client Histogram exports."""
    family = HistogramMetricFamily(name, documentation, labels=labelnames)
    for labels, buckets, created in rows:
        family.add_metric(
            labels, [(floatToGoString(b), n) for b, n in zip(buckets.bounds, buckets.counts)], buckets.sum
        )
        family.samples.append(Sample(f"{name}_created", dict(zip(labelnames, labels)), created))
    return family


def _app_families(apps: list[AppSeries]) -> Iterator[Metric]:
    """Per registered app: request histograms, outcome counters and gauges."""
    for name, documentation, buckets in REQUEST_HISTOGRAMS:
        yield _histogram(
            name, documentation, APP_LABELS, (([a.name, MODEL_VERSION], buckets(a), a.created) for a in apps)
        )
    requests = CounterMetricFamily(
        "bless_requests",
        "Inference requests by outcome (succeeded, failed, rejected, cancelled, aborted) and reason "
        "(the status code answered, lower case; kernel_fault for a faulted kernel)",
        labels=[*APP_LABELS, "status", "reason"],
    )
    for a in apps:
        for (status, reason), count in sorted(a.requests.items()):
            requests.add_metric([a.name, MODEL_VERSION, status, reason], count, created=a.created)
    yield requests
    for name, documentation, value in APP_GAUGES:
        gauge = GaugeMetricFamily(name, documentation, labels=APP_LABELS)
        for a in apps:
            gauge.add_metric([a.name, MODEL_VERSION], value(a))
        yield gauge


def _squad_families(squads: SquadSeries) -> Iterator[Metric]:
    counter = CounterMetricFamily("bless_squads", "Kernel squads launched, by configuration", labels=["config"])
    for config, (count, created) in squads.configs.items():
        counter.add_metric([config], count, created=created)
    yield counter
    yield _histogram(
        "bless_squad_duration_seconds",
        "Squad duration on the device: first kernel start to last kernel end",
        [],
        [([], squads.durations, squads.created)],
    )
    yield CounterMetricFamily("bless_kernels", "Kernels launched", value=squads.kernels, created=squads.created)


def _gpu_families(stats: ServerStats) -> Iterator[Metric]:
    s = stats.gpu
    yield GaugeMetricFamily(
        "bless_gpu_utilisation_ratio",
        "Share of SM-time busy over the last second (simulated GPU: from the model)",
        value=stats.recent_utilisation,
    )
    yield CounterMetricFamily(
        "bless_gpu_sm_seconds", "Busy SM-seconds (rate() / bless_gpu_sms is the utilisation)", value=s.sm_seconds
    )
    yield GaugeMetricFamily(
        "bless_gpu_memory_used_bytes", "Device memory held by apps and their contexts", value=s.memory_used_bytes
    )
    yield GaugeMetricFamily("bless_gpu_memory_total_bytes", "Device memory", value=s.memory_bytes)
    yield GaugeMetricFamily("bless_gpu_sms", "Streaming multiprocessors (SMs) of the GPU", value=s.sm_count)


class StatsCollector(Collector):
    """Every metric of the server, read from the store at scrape time."""

    def __init__(self, stats: ServerStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        yield from _app_families([a.series() for a in self._stats.apps()])
        yield from _squad_families(self._stats.squads.series())
        yield from _gpu_families(self._stats)


class ServerMetrics:
    """The metrics endpoint of one server."""

    def __init__(self, stats: ServerStats) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StatsCollector(stats))

    def serve(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> MetricsHttpServer:
        """Start the HTTP endpoint in a thread (HTTPS with ``ssl_context``); ``.server_port`` is the bound port."""
        httpd = make_server(host, port, make_wsgi_app(self.registry), MetricsHttpServer, handler_class=_QuietHandler)
        if ssl_context is not None:
            # The handshake runs on the first read, in the request's thread, so a slow
            # client cannot stall the accepting one.
            httpd.socket = ssl_context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
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
