"""`bless serve` as its own process under load: 8 concurrent OIP clients and 10,000
requests with none lost; two 50/50 apps at workload B agree with `bless run`; SIGTERM
shuts down cleanly.  Prints the server overhead per request and the throughput."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton

from bless.harness.config import config_from_dict
from bless.harness.loads import parse_load
from bless.harness.run import run_config
from bless.profiles.synthetic import synthetic_profile
from bless.serving.client import AppLoad, BlessClient, replay
from bless.serving.server.server import state_token


class ServeProcess:
    """``bless serve`` on free ports in a child process."""

    def __init__(self, tmp: Path, profiles: Path) -> None:
        env = dict(os.environ, BLESS_PROFILE_PATH=str(profiles))
        self.state = tmp / "state"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bless.cli",
                "serve",
                "--grpc-port",
                "0",
                "--metrics-port",
                "0",
                "--state-dir",
                str(self.state),
                "--shutdown-grace",
                "5",
                "--log-level",
                "WARNING",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        banner = self.wait_for_line("bless serving on", timeout=60)
        self.address = re.search(r"serving on (\S+) ", banner).group(1)
        self.metrics_url = re.search(r"metrics (\S+);", banner).group(1)
        self.token = state_token(self.state)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for_line(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if text in line:
                return line
        raise AssertionError(f"bless serve did not print {text!r} (exit code {self.proc.poll()})")

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture
def serve(tmp_path, monkeypatch):
    profiles = tmp_path / "profiles" / "a100"
    monkeypatch.setenv("BLESS_PROFILE_PATH", str(profiles.parent))
    synthetic_profile("tiny", n_kernels=8, mean_us=25, seed=7).save(profiles / "tiny.json")
    synthetic_profile("cmpa", n_kernels=40, mean_us=400, seed=11).save(profiles / "cmpa.json")
    synthetic_profile("cmpb", n_kernels=60, mean_us=280, seed=12).save(profiles / "cmpb.json")
    server = ServeProcess(tmp_path, profiles.parent)
    yield server
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait()


def _percentiles(x: np.ndarray) -> str:
    return f"p50 {np.percentile(x, 50) * 1e3:.3f} ms, p99 {np.percentile(x, 99) * 1e3:.3f} ms"


@pytest.mark.slow
def test_8_clients_10000_requests_none_lost(serve):
    clients, total = 8, 10_000
    apps = [f"tiny{i}" for i in range(4)]
    with BlessClient(serve.address, token=serve.token) as admin:
        for app in apps:
            admin.register(app, "tiny", "25%")
    samples: list[tuple[str, float, float, float, float]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        app = apps[i % len(apps)]
        c = triton.InferenceServerClient(serve.address)
        x = triton.InferInput("INPUT", [1, 16], "FP32")
        x.set_data_from_numpy(np.full((1, 16), i, dtype=np.float32))
        for _ in range(total // clients):
            t0 = time.perf_counter()
            try:
                r = c.infer(app, [x])
            except triton.InferenceServerException as e:
                with lock:
                    errors.append(str(e.status()))
                continue
            e2e = time.perf_counter() - t0
            p = r.get_response().parameters
            with lock:
                samples.append(
                    (
                        app,
                        e2e,
                        p["bless_latency_seconds"].double_param,
                        p["bless_compute_seconds"].double_param,
                        p["bless_sync_wait_seconds"].double_param,
                    )
                )

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    wall = time.perf_counter() - start
    assert len(samples) + len(errors) == total  # every request answered, OK or with an explicit status
    with BlessClient(serve.address) as c:
        stats = c.stats()
    assert sum(a.received for a in stats.apps) == total  # none lost on the way in
    assert sum(a.succeeded for a in stats.apps) == len(samples)
    assert sum(a.queued + a.running for a in stats.apps) == 0
    assert not errors, f"errors: {errors[:5]}"

    e2e = np.array([s[1] for s in samples])
    server_side = np.array([s[2] + s[4] for s in samples])  # arrival to the host seeing the last kernel end
    compute = np.array([s[3] for s in samples])
    print(
        f"\nload: {clients} clients, {total} requests in {wall:.1f} s = {total / wall:.0f} req/s; "
        f"GPU utilisation {stats.gpu.utilisation:.1%}, {stats.gpu.squads} squads"
    )
    print(f"end to end: {_percentiles(e2e)}; simulated GPU time (compute): {_percentiles(compute)}")
    print(f"server overhead, end to end minus simulated GPU time: {_percentiles(e2e - compute)}")
    print(
        f"  of which gRPC + serving stack (minus queueing for the GPU and squad sync): {_percentiles(e2e - server_side)}"
    )
    assert serve.terminate() == 0


def test_two_apps_at_50_50_workload_b_agree_with_bless_run(serve):
    duration = 5.0
    cfg = config_from_dict(
        {
            "apps": [{"app": "cmpa", "quota": "50%", "load": "B"}, {"app": "cmpb", "quota": "50%", "load": "B"}],
            "duration": duration,
            "warmup": 0.0,
            "seed": 0,
        }
    )
    expected = {a.app: a.mean for a in run_config(cfg).apps}
    with BlessClient(serve.address, token=serve.token) as c:
        for spec in cfg.apps:
            c.register(spec.app, spec.app, spec.quota)
        result = replay(serve.address, [AppLoad(s.app, parse_load(s.load)) for s in cfg.apps], duration, seed=cfg.seed)
        stats = {a.name: a for a in c.stats().apps}
    metrics = urllib.request.urlopen(serve.metrics_url, timeout=5).read().decode()
    assert all(s.status == "OK" for s in result.samples)
    for app, mean in expected.items():
        served = stats[app].latency.mean_seconds
        labels = f'{{model="{app}",version="1"}}'
        total = float(re.search(rf"bless_request_scheduler_latency_seconds_sum{labels} (\S+)", metrics).group(1))
        count = float(re.search(rf"bless_request_scheduler_latency_seconds_count{labels} (\S+)", metrics).group(1))
        print(
            f"\n{app}: bless run {mean * 1e3:.2f} ms, server GetStats {served * 1e3:.2f} ms, "
            f"metrics {total / count * 1e3:.2f} ms over {stats[app].succeeded} requests"
        )
        assert served == pytest.approx(mean, rel=0.15)
        assert total / count == pytest.approx(mean, rel=0.15)
    assert serve.terminate() == 0
    serve.wait_for_line("shutting down", timeout=1)
