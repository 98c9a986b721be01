"""Drive a running server with loads over gRPC and measure what clients see.

Each app gets a :class:`~bless.harness.loads.Load` (closed loops A/B/C, Poisson,
trace arrivals -- anything :func:`~bless.harness.loads.parse_load` accepts), seeded
like ``bless run`` seeds them, so a replay and a virtual-time run of one
config see the same arrival process.  Open loops send at their arrival times
without waiting for answers (many requests in flight, one asyncio task each);
closed loops send the next request ``interval`` after the previous answer.
Every request ends as OK or with its gRPC status code; none is dropped
silently (``CLIENT_OVERLOAD`` when more than ``max_in_flight`` are pending).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from bless.harness.loads import Load
from bless.serving.api import ADMIN_SERVICE, OIP_SERVICE, admin, methods, oip
from bless.serving.client.client import infer_request, sample_inputs


@dataclass(frozen=True)
class AppLoad:
    app: str
    load: Load
    requests: int | None = None
    """Stop after this many requests (None: only the duration limits them)."""


@dataclass(frozen=True)
class Sample:
    app: str
    sent: float
    """Seconds since the replay started."""
    latency: float
    """End to end, as the client saw it."""
    status: str
    """``OK`` or the gRPC status code name."""
    server_latency: float = math.nan
    """Arrival at the server's scheduler to the end of the last kernel."""
    queue: float = math.nan
    compute: float = math.nan
    sync_wait: float = math.nan
    """End of the last kernel until the server's host noticed (rest of the squad)."""


@dataclass
class ReplayResult:
    samples: list[Sample] = field(default_factory=list)
    wall_seconds: float = 0.0

    def apps(self) -> list[str]:
        return list(dict.fromkeys(s.app for s in self.samples))

    def summary(self) -> list[dict[str, Any]]:
        """Per app: counts by status, client latency percentiles (ms), overhead, throughput."""
        rows = []
        for app in self.apps():
            mine = [s for s in self.samples if s.app == app]
            ok = [s for s in mine if s.status == "OK"]
            lat = np.array([s.latency for s in ok])
            over = np.array([s.latency - s.server_latency - s.sync_wait for s in ok])
            wait = np.array([s.sync_wait for s in ok])
            pct = lambda a, q: float(np.percentile(a, q)) * 1e3 if len(a) else math.nan
            rows.append(
                {
                    "app": app,
                    "sent": len(mine),
                    "ok": len(ok),
                    "errors": dict(Counter(s.status for s in mine if s.status != "OK")),
                    "mean_ms": float(lat.mean()) * 1e3 if len(lat) else math.nan,
                    "p50_ms": pct(lat, 50),
                    "p90_ms": pct(lat, 90),
                    "p99_ms": pct(lat, 99),
                    "server_mean_ms": float(np.mean([s.server_latency for s in ok])) * 1e3 if ok else math.nan,
                    "sync_wait_mean_ms": float(wait.mean()) * 1e3 if len(wait) else math.nan,
                    "overhead_p50_ms": pct(over, 50),
                    "overhead_p99_ms": pct(over, 99),
                    "throughput_rps": len(ok) / self.wall_seconds if self.wall_seconds > 0 else math.nan,
                }
            )
        return rows


class _Driver:
    """One replay: shared channel, per-app request templates, the sample log."""

    def __init__(self, channel: grpc.aio.Channel, timeout: float, max_in_flight: int) -> None:
        m = methods(OIP_SERVICE)["ModelInfer"]
        self._infer = channel.unary_unary(
            m.path, request_serializer=m.request.SerializeToString, response_deserializer=m.response.FromString
        )
        self.timeout = timeout
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.requests: dict[str, Any] = {}
        self.result = ReplayResult()
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.tasks: set[asyncio.Task] = set()

    def now(self) -> float:
        return self.loop.time() - self.t0

    async def sleep_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            await asyncio.sleep(delay)

    async def one(self, app: str) -> None:
        sent = self.now()
        if self.in_flight >= self.max_in_flight:
            self.result.samples.append(Sample(app, sent, 0.0, "CLIENT_OVERLOAD"))
            return
        self.in_flight += 1
        try:
            response = await self._infer(self.requests[app], timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            self.result.samples.append(Sample(app, sent, self.now() - sent, e.code().name))
        else:
            p = response.parameters
            self.result.samples.append(
                Sample(
                    app,
                    sent,
                    self.now() - sent,
                    "OK",
                    p["bless_latency_seconds"].double_param,
                    p["bless_queue_seconds"].double_param,
                    p["bless_compute_seconds"].double_param,
                    p["bless_sync_wait_seconds"].double_param,
                )
            )
        finally:
            self.in_flight -= 1

    def spawn(self, app: str) -> None:
        task = asyncio.ensure_future(self.one(app))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def closed_client(self, spec: AppLoad, first: float, duration: float, counter: list[int]) -> None:
        await self.sleep_until(first)
        while self.now() < duration and (spec.requests is None or counter[0] < spec.requests):
            counter[0] += 1
            await self.one(spec.app)
            nxt = spec.load.after_completion(self.now())
            if nxt is None:
                return
            await self.sleep_until(nxt)

    async def open_loop(self, spec: AppLoad, duration: float) -> None:
        for sent, t in enumerate(_arrivals(spec.load)):
            if t >= duration or (spec.requests is not None and sent >= spec.requests):
                return
            await self.sleep_until(t)
            self.spawn(spec.app)


def _arrivals(load: Load) -> Iterator[float]:
    """An open loop's arrival times (those known up front first)."""
    yield from load.initial()
    yield from load.open_arrivals()


async def replay_async(
    address: str,
    loads: list[AppLoad],
    duration: float = math.inf,
    *,
    seed: int = 0,
    timeout: float = 60.0,
    max_in_flight: int = 10_000,
    credentials: grpc.ChannelCredentials | None = None,
) -> ReplayResult:
    """Run ``loads`` against the server at ``address`` for ``duration`` seconds (or their request counts);
    ``credentials`` (e.g. :func:`~bless.serving.client.tls.channel_credentials`) for a server with TLS."""
    if duration == math.inf and any(spec.requests is None for spec in loads):
        raise ValueError("give a duration or a request count for every app, or the replay never ends")
    channel = (
        grpc.aio.insecure_channel(address) if credentials is None else grpc.aio.secure_channel(address, credentials)
    )
    async with channel:
        meta_call = methods(OIP_SERVICE)["ModelMetadata"]
        get_meta = channel.unary_unary(
            meta_call.path,
            request_serializer=meta_call.request.SerializeToString,
            response_deserializer=meta_call.response.FromString,
        )
        list_call = methods(ADMIN_SERVICE)["ListApps"]
        list_apps = channel.unary_unary(
            list_call.path,
            request_serializer=list_call.request.SerializeToString,
            response_deserializer=list_call.response.FromString,
        )
        solo = {
            a.name: a.solo_latency_seconds for a in (await list_apps(admin.ListAppsRequest(), timeout=timeout)).apps
        }
        driver = _Driver(channel, timeout, max_in_flight)
        rng = np.random.default_rng(seed)  # seeded per app as bless run does (bless.harness.replay.Replay)
        for i, spec in enumerate(loads):
            if spec.app not in solo:
                raise ValueError(
                    f"app {spec.app!r} is not registered on {address} (registered: {', '.join(solo) or 'none'})"
                )
            meta = await get_meta(oip.ModelMetadataRequest(name=spec.app), timeout=timeout)
            driver.requests[spec.app] = infer_request(spec.app, meta, sample_inputs(meta, seed + i))
            spec.load.bind(solo[spec.app], np.random.default_rng(rng.integers(2**63)))
        driver.t0 = driver.loop.time()
        started = time.perf_counter()
        runners = []
        for spec in loads:
            if spec.load.closed:
                counter = [0]
                runners += [driver.closed_client(spec, t, duration, counter) for t in spec.load.initial()]
            else:
                runners.append(driver.open_loop(spec, duration))
        await asyncio.gather(*runners)
        while driver.tasks:
            await asyncio.gather(*list(driver.tasks))
        driver.result.wall_seconds = time.perf_counter() - started
        return driver.result


def replay(address: str, loads: list[AppLoad], duration: float = math.inf, **kwargs: Any) -> ReplayResult:
    """Blocking :func:`replay_async`."""
    return asyncio.run(replay_async(address, loads, duration, **kwargs))
