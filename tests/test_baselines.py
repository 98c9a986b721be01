"""Baseline policies: each does what it models, on the same simulated GPU as BLESS."""

import dataclasses
from collections import defaultdict

import numpy as np
import pytest
from conftest import RecordingBackend

from bless.backend.interface import LAUNCH_QUEUE
from bless.core.lifecycle import AppState
from bless.core.policy import POLICIES
from bless.harness.config import config_from_dict
from bless.harness.loads import ClosedLoop, Poisson
from bless.harness.replay import Replay
from bless.harness.run import run_config
from bless.hw.gpus import A100
from bless.policies.common import STREAM_BUDGET
from bless.policies.gslice import GslicePolicy
from bless.policies.iso import IsoPolicy
from bless.policies.mig import (
    MigPolicy,
    MigUnsupported,
    mig_profile,
    mig_slice_gpu,
    place,
)
from bless.policies.reef import ReefPolicy
from bless.policies.temporal import TemporalPolicy
from bless.policies.zico import ZicoPolicy, forward_share
from bless.profiles.synthetic import synthetic_profile
from bless.sim.engine import Engine
from bless.sim.kernels import SimKernel


def simulate(policy, profiles, loads, quotas, duration=0.2, seed=0, **backend_kw):
    backend = RecordingBackend("a100", seed=seed, **backend_kw)
    apps = [AppState(i, f"{p.app}{i}", p, q) for i, (p, q) in enumerate(zip(profiles, quotas))]
    result = Replay(backend, policy, apps, loads, duration=duration, warmup=0.0, seed=seed).run()
    return backend, result


def config(policy, apps, duration=0.3, noise=0.0):
    return config_from_dict({"policy": policy, "duration": duration, "warmup": 0.05, "noise": noise, "apps": apps})


@pytest.mark.parametrize("name", ["temporal", "gslice", "reef", "unbound"])
def test_every_baseline_completes_every_request_in_order(name):
    profiles = [synthetic_profile(f"p{i}", n_kernels=30 + 10 * i, mean_us=20, seed=i) for i in range(3)]
    loads = [Poisson(300.0), Poisson(200.0), ClosedLoop(0.3)]
    backend, result = simulate(POLICIES.create(name), profiles, loads, [0.5, 0.25, 0.25], noise_sigma=0.05)
    per_request = defaultdict(list)
    for req, k, _ in backend.log:
        per_request[req].append(k)
    for req, ks in per_request.items():
        assert ks == list(range(req.n_kernels))
        assert req.done
    assert sum(a.submitted for a in result.apps) == sum(a.completed for a in result.apps) == len(per_request)


@pytest.mark.parametrize("name", ["iso", "gslice", "reef", "unbound", "tally"])
@pytest.mark.parametrize("n_kernels", [40, STREAM_BUDGET // 2 + 1])
def test_an_overloaded_app_keeps_its_backlog_off_the_gpu(name, n_kernels):
    """Far beyond its share, an app's backlog waits on the host: at most two of its requests are
    launched and unfinished at once, one where two would overfill a stream's launch queue (a whole
    backlog in the stream would block the host's launches for every app on a real GPU), and every
    request still completes in order."""
    profiles = [synthetic_profile(f"p{i}", n_kernels=n_kernels, mean_us=30, seed=i) for i in range(2)]
    backend = RecordingBackend("a100", seed=0)
    apps = [AppState(i, f"p{i}", p, 0.5) for i, p in enumerate(profiles)]
    most = defaultdict(int)
    launch = backend.launch

    def counting(stream, app, kernel, **kwargs):
        req = kwargs.get("tag")
        if kernel == 0:
            unfinished = {r for r, k, _ in backend.log if k == 0 and r.app is req.app and r.end is None}
            most[req.app.index] = max(most[req.app.index], len(unfinished) + 1)
        return launch(stream, app, kernel, **kwargs)

    backend.launch = counting
    loads = [Poisson(20000.0 * 40 / n_kernels), ClosedLoop(0.3)]
    result = Replay(backend, POLICIES.create(name), apps, loads, duration=0.05, warmup=0.0, seed=0).run()
    assert most[0] == (2 if 2 * n_kernels <= STREAM_BUDGET else 1)
    assert result.apps[0].submitted == result.apps[0].completed > 10
    order = [r.rid for r, k, _ in backend.log if k == 0 and r.app.index == 0]
    assert order == sorted(order)


@pytest.mark.parametrize("name", ["iso", "gslice", "unbound", "tally", "zico"])
def test_a_request_longer_than_the_launch_queue_streams_through_it(name, stream_depth):
    """A training iteration of 2.5x the launch queue's kernels: launched in chunks, no stream
    ever holds LAUNCH_QUEUE kernels (the host never blocks), none lost or reordered."""
    kind = "training" if name == "zico" else "inference"
    long = dataclasses.replace(synthetic_profile("long", n_kernels=5 * LAUNCH_QUEUE // 2, mean_us=5, seed=3), kind=kind)
    short = dataclasses.replace(synthetic_profile("short", n_kernels=30, mean_us=40, seed=4), kind=kind)
    backend = RecordingBackend("a100", seed=0)
    apps = [AppState(0, "long", long, 0.5), AppState(1, "short", short, 0.5)]
    loads = [ClosedLoop(0.0), ClosedLoop(0.0)]
    result = Replay(backend, POLICIES.create(name), apps, loads, duration=0.08, warmup=0.0, seed=0).run()
    assert stream_depth.most <= STREAM_BUDGET < LAUNCH_QUEUE
    assert result.apps[0].completed >= 2 and result.apps[1].completed >= 2
    per_request = defaultdict(list)
    for req, k, _ in backend.log:
        per_request[req].append(k)
    assert all(ks == list(range(len(ks))) for ks in per_request.values())


def test_iso_meets_the_quota_latency_without_noise():
    # 1/2 and 1/3 of 108 SMs are whole TPCs: no rounding, so ISO is T[quota] plus launch costs.
    result = run_config(
        config("iso", [{"app": "resnet50", "quota": 0.5, "load": "C"}, {"app": "bert", "quota": "1/3", "load": "B"}])
    )
    for app in result.apps:
        assert app.completed > 5
        assert app.mean == pytest.approx(app.iso_latency, rel=0.005)


def test_iso_restricts_each_app_to_its_quota_sms():
    policy = IsoPolicy()
    apps = [AppState(0, "a", synthetic_profile("a", seed=1), 0.25)]
    policy.setup(apps, A100)
    assert policy.context_limits(apps[0], A100) == [A100.round_sms(27)]


def test_mig_rejects_a_quota_it_cannot_express():
    cfg = config("mig", [{"app": "resnet50", "quota": 0.5, "load": "C"}, {"app": "bert", "quota": 0.5, "load": "C"}])
    with pytest.raises(MigUnsupported, match="50.0%.*rounding"):
        run_config(cfg)


def test_mig_exact_slices_and_recorded_rounding():
    cfg = config(
        "mig", [{"app": "resnet50", "quota": "4/7", "load": "C"}, {"app": "bert", "quota": "3/7", "load": "C"}]
    )
    result = run_config(cfg)
    assert result.policy["slices"] == "4g.20gb+3g.20gb"
    cfg = config(
        {"name": "mig", "rounding": "nearest"},
        [{"app": "resnet50", "quota": 0.5, "load": "C"}, {"app": "resnet50", "quota": 0.5, "load": "C"}],
    )
    result = run_config(cfg)
    assert result.policy == {"policy": "mig", "rounding": "nearest", "slices": "3g.20gb+3g.20gb"}
    # A 3g slice has 42 SMs, fewer than the quota's 54: slower than ISO.
    assert all(a.mean > a.iso_latency * 1.05 for a in result.apps)


def test_mig_placements_and_instance_limits():
    by = {p.name: p for p in A100.mig_profiles}
    assert place([by["3g.20gb"], by["3g.20gb"]], 8) is not None
    assert place([by["4g.20gb"], by["3g.20gb"]], 8) is not None
    assert place([by["2g.10gb"]] * 3 + [by["1g.5gb"]], 8) is not None
    assert place([by["4g.20gb"], by["4g.20gb"]], 8) is None
    assert place([by["1g.5gb"]] * 8, 8) is None  # at most seven instances
    policy = MigPolicy(rounding="nearest")
    with pytest.raises(MigUnsupported, match="no valid placement"):
        policy.check([0.55, 0.55], A100)
    assert mig_profile(0.1, A100, "nearest").name == "1g.5gb"
    with pytest.raises(MigUnsupported):
        mig_profile(0.1, A100, "down")


def test_mig_slice_has_its_share_of_memory_and_bandwidth():
    gpu = mig_slice_gpu(A100, next(p for p in A100.mig_profiles if p.name == "2g.10gb"))
    assert gpu.memory_bytes == A100.memory_bytes // 4
    assert gpu.bandwidth_share == pytest.approx(0.25)
    assert gpu.sm_count == A100.sm_count and A100.bandwidth_share == 1.0


def test_bandwidth_share_stretches_a_memory_bound_kernel_alone():
    solo = [float("inf")] + [1e-3] * 108
    kernel = SimKernel("k", False, 108, 108, solo, dram_seconds=0.8e-3)  # 80 % of peak bandwidth
    times = {}
    for share in (1.0, 0.5, 0.25):
        eng = Engine(108, bandwidth_share=share)
        run = eng.launch(eng.create_stream(eng.create_context(None)), kernel, 0.0)
        eng.run()
        times[share] = run.duration
    assert times[1.0] == pytest.approx(1e-3)
    assert times[0.5] == pytest.approx(1.6e-3)  # bandwidth bound: 0.8 / 0.5 of its time
    assert times[0.25] == pytest.approx(3.2e-3)


def test_temporal_gives_time_in_proportion_to_quota():
    prof = synthetic_profile("t", n_kernels=60, mean_us=40, seed=3)
    loads = [ClosedLoop(0.0), ClosedLoop(0.0)]  # both always have work
    backend, _result = simulate(TemporalPolicy(slice=1e-3), [prof, prof], loads, [1 / 3, 2 / 3], duration=0.5)
    busy = defaultdict(float)
    for req, _, run in backend.log:
        busy[req.app.index] += run.end - run.start
    assert busy[1] / busy[0] == pytest.approx(2.0, rel=0.1)
    # One app at a time: kernels of different apps never overlap.
    runs = sorted(((run.start, run.end, req.app.index) for req, _, run in backend.log))
    for (_s0, e0, a0), (s1, _e1, a1) in zip(runs, runs[1:]):
        if a0 != a1:
            assert s1 >= e0 - 1e-12


def test_temporal_pays_the_switch_cost_between_apps():
    prof = synthetic_profile("t", n_kernels=40, mean_us=40, seed=3)
    loads = [ClosedLoop(0.0), ClosedLoop(0.0)]
    results = {}
    for cost in (0.0, 200e-6):
        _, res = simulate(TemporalPolicy(slice=1e-3, switch_cost=cost), [prof, prof], loads, [0.5, 0.5], duration=0.3)
        results[cost] = sum(a.completed for a in res.apps)
    assert results[200e-6] < results[0.0] * 0.95


def test_gslice_starts_at_the_quotas_and_moves_sms_to_the_loaded_app():
    heavy = synthetic_profile("h", n_kernels=50, mean_us=40, seed=1)
    light = synthetic_profile("l", n_kernels=50, mean_us=40, seed=2)
    policy = GslicePolicy(period=0.05)
    # The first app is saturated (closed loop with no think time); the second rarely sends.
    backend, _result = simulate(policy, [heavy, light], [ClosedLoop(0.0), Poisson(20.0)], [0.5, 0.5], duration=0.6)
    first = [run for req, _, run in backend.log if req.app.index == 0]
    assert first[0].stream.context.sm_limit == 54
    assert policy.resizes > 0
    assert first[-1].stream.context.sm_limit > 54
    static = GslicePolicy(adaptive=False)
    backend, _ = simulate(static, [heavy, light], [ClosedLoop(0.0), Poisson(20.0)], [0.5, 0.5], duration=0.3)
    assert {run.stream.context.sm_limit for _, _, run in backend.log} == {54}


def test_reef_runs_the_realtime_app_unrestricted_and_best_effort_in_the_rest():
    profiles = [synthetic_profile(f"r{i}", n_kernels=30, mean_us=30, seed=i) for i in range(3)]
    policy = ReefPolicy(realtime="r11")
    backend, _ = simulate(policy, profiles, [Poisson(200.0)] * 3, [0.25, 0.5, 0.25], duration=0.2)
    limits = defaultdict(set)
    for req, _, run in backend.log:
        limits[req.app.index].add(run.stream.context.sm_limit)
    assert limits[1] == {None}
    assert limits[0] == limits[2] == {108 - 54}
    assert ReefPolicy().describe()["realtime"] is None
    # By default the real-time app is the latency-critical one, whatever its quota.
    apps = [AppState(0, "big", profiles[0], 0.6, priority="best-effort"), AppState(1, "small", profiles[1], 0.3)]
    default = ReefPolicy()
    default.setup(apps, A100)
    assert default.describe()["realtime"] == "small"
    with pytest.raises(ValueError, match="no app"):
        ReefPolicy(realtime="nope").setup([AppState(0, "a", profiles[0], 0.5)], A100)


def test_zico_staggers_forward_passes_and_rejects_inference_apps():
    from bless.profiles.catalog import load_app

    a, b = load_app("resnet50_train", "a100"), load_app("vgg11_train", "a100")
    assert 0.2 < forward_share(AppState(0, "a", a, 0.5)) < 0.6
    backend, result = simulate(ZicoPolicy(), [a, b], [ClosedLoop(0.0), ClosedLoop(0.0)], [0.5, 0.5], duration=0.4)
    assert all(app.completed >= 3 for app in result.apps)
    first = {}
    for req, k, run in backend.log:
        if k == 0:
            first.setdefault(req.app.index, run.start)
    # Both jobs are ready at once; the second starts when the first has passed its forward pass.
    late, early = max(first.values()), min(first.values())
    assert late - early > 0.5 * forward_share(AppState(0, "a", a, 0.5)) * a.T[-1]
    with pytest.raises(ValueError, match="training"):
        ZicoPolicy().setup([AppState(0, "r", load_app("resnet50", "a100"), 0.5)], A100)


def test_wake_only_decisions_do_not_stall_the_runtime():
    # TEMPORAL returns "wake me after the switch" with nothing launched; the run still ends cleanly.
    prof = synthetic_profile("w", n_kernels=20, mean_us=50, seed=9)
    _, result = simulate(TemporalPolicy(switch_cost=1e-3), [prof, prof], [Poisson(400.0)] * 2, [0.5, 0.5], duration=0.1)
    assert all(a.completed == a.submitted for a in result.apps)
    assert np.isfinite([a.mean for a in result.apps]).all()
