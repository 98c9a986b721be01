"""`bless serve` as its own process under load: 8 concurrent OIP clients and 10,000
requests with none lost; two 50/50 apps at workload B agree with `bless run`; SIGTERM
shuts down cleanly.  Prints the server overhead per request and the throughput."""

from __future__ import annotations

import re
import urllib.request

import pytest

from bless.harness.config import config_from_dict
from bless.harness.loads import parse_load
from bless.harness.run import run_config
from bless.profiles.synthetic import synthetic_profile
from bless.serving.client import AppLoad, BlessClient, replay
from bless.serving.client.loadtest import ServeProcess, hammer, percentiles


@pytest.fixture
def serve(tmp_path, monkeypatch):
    profiles = tmp_path / "profiles" / "a100"
    monkeypatch.setenv("BLESS_PROFILE_PATH", str(profiles.parent))
    synthetic_profile("tiny", n_kernels=8, mean_us=25, seed=7).save(profiles / "tiny.json")
    synthetic_profile("cmpa", n_kernels=40, mean_us=400, seed=11).save(profiles / "cmpa.json")
    synthetic_profile("cmpb", n_kernels=60, mean_us=280, seed=12).save(profiles / "cmpb.json")
    server = ServeProcess(tmp_path / "state", profiles.parent, "--shutdown-grace", "5")
    yield server
    server.kill()


@pytest.mark.slow
def test_8_clients_10000_requests_none_lost(serve):
    clients, total = 8, 10_000
    apps = [f"tiny{i}" for i in range(4)]
    with BlessClient(serve.address, token=serve.token) as admin:
        for app in apps:
            admin.register(app, "tiny", "25%")
    load = hammer(serve.address, apps, clients, total)
    with BlessClient(serve.address) as c:
        stats = c.stats()
    assert sum(a.received for a in stats.apps) == total  # none lost on the way in
    assert sum(a.succeeded for a in stats.apps) == len(load.end_to_end)
    assert sum(a.queued + a.running for a in stats.apps) == 0
    assert not load.errors, f"errors: {load.errors[:5]}"
    print(f"\nload: {clients} clients, {total} requests in {load.wall:.1f} s = {load.throughput:.0f} req/s")
    print(f"end to end: {percentiles(load.end_to_end)}; GPU time: {percentiles(load.compute)}")
    print(f"overhead (end to end minus GPU time): {percentiles(load.overhead)}; stack: {percentiles(load.stack)}")
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
        total = float(re.search(rf'bless_request_duration_seconds_sum{{app="{app}"}} (\S+)', metrics).group(1))
        count = float(re.search(rf'bless_request_duration_seconds_count{{app="{app}"}} (\S+)', metrics).group(1))
        print(
            f"\n{app}: bless run {mean * 1e3:.2f} ms, server GetStats {served * 1e3:.2f} ms, "
            f"metrics {total / count * 1e3:.2f} ms over {stats[app].succeeded} requests"
        )
        assert served == pytest.approx(mean, rel=0.15)
        assert total / count == pytest.approx(mean, rel=0.15)
    assert serve.terminate() == 0
    serve.wait_for_line("shutting down", timeout=1)
