"""Runtime properties the paper promises: nothing lost or reordered, every
request completes, a lone request gets the whole GPU, quotas are honoured."""

from collections import defaultdict

import numpy as np
import pytest
from conftest import MEASURED_H100, RecordingBackend

from bless.core.lifecycle import AppState
from bless.harness.config import config_from_dict
from bless.harness.loads import ClosedLoop, Poisson, parse_load
from bless.harness.replay import Replay
from bless.harness.run import run_config
from bless.policies.bless import DECISION_COST, BlessPolicy
from bless.policies.gslice import GslicePolicy
from bless.policies.unbound import UnboundPolicy
from bless.profiles.catalog import load_app
from bless.profiles.format import load_profile
from bless.profiles.synthetic import synthetic_profile


def run(policy, profiles, loads, quotas=None, duration=0.3, seed=0, gpu="a100", **backend_kw):
    backend = RecordingBackend(gpu, seed=seed, **backend_kw)
    quotas = quotas or [1 / len(profiles)] * len(profiles)
    apps = [AppState(i, f"{p.app}{i}", p, q) for i, (p, q) in enumerate(zip(profiles, quotas))]
    result = Replay(backend, policy, apps, loads, duration=duration, warmup=0.0, seed=seed).run()
    return backend, result


@pytest.mark.parametrize(
    "policy",
    [
        BlessPolicy,
        lambda: BlessPolicy(pacing="paper"),
        lambda: BlessPolicy(pacing="paper", split_ratio=1.0),
        UnboundPolicy,
    ],
)
def test_no_kernel_lost_duplicated_or_reordered_and_every_request_completes(policy):
    profiles = [synthetic_profile(f"p{i}", n_kernels=30 + 10 * i, mean_us=20, seed=i) for i in range(3)]
    loads = [Poisson(300.0), Poisson(200.0), ClosedLoop(0.3)]
    backend, result = run(policy(), profiles, loads, duration=0.2, noise_sigma=0.05)
    _assert_every_kernel_once_in_order(backend, result)


def test_an_apps_requests_never_run_at_once_when_its_partition_is_resized():
    """GSLICE re-sizes an app's partition while its requests queue: its next request is launched
    into the new partition's stream while the one before still runs in the old one's."""
    profiles = [synthetic_profile(f"p{i}", n_kernels=30 + 10 * i, mean_us=20, seed=i) for i in range(2)]
    loads = [Poisson(3000.0), ClosedLoop(0.3)]
    backend, result = run(GslicePolicy(period=0.01), profiles, loads, quotas=[0.5, 0.5], noise_sigma=0.05)
    assert len({launch.stream for req, _, launch in backend.log if req.app.index == 0}) > 1, "never re-sized"
    _assert_every_kernel_once_in_order(backend, result)


def _assert_every_kernel_once_in_order(backend, result):
    per_request = defaultdict(list)
    for req, k, launch in backend.log:
        per_request[req].append((k, launch))
    assert per_request, "nothing ran"
    for req, launches in per_request.items():
        ks = [k for k, _ in launches]
        assert ks == list(range(req.n_kernels)), f"request {req.rid}: kernels {ks}"
        for (_, prev), (_, nxt) in zip(launches, launches[1:]):
            assert nxt.start >= prev.end - 1e-12, "a request's kernels overlapped"
        assert req.done and req.end == launches[-1][1].end
    submitted = sum(a.submitted for a in result.apps)
    assert submitted == sum(a.completed for a in result.apps) == len(per_request)
    # An app's requests share its buffers: one runs only once its app's previous one has ended.
    by_app = defaultdict(list)
    for req, launches in per_request.items():
        by_app[req.app.index].append((req.arrival, req.rid, launches[0][1].start, launches[-1][1].end))
    for spans in by_app.values():
        spans.sort()
        for (*_, end), (*_, start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-12, "two requests of one app ran at once"


def test_no_kernel_lost_or_reordered_on_green_contexts_with_low_priority_blocks():
    """The H100's green contexts with profiles measured there (every kernel's launch
    configuration, so low-priority blocks hold SMs and deadline pacing yields to tails, holds
    the top back and lends coarse contexts): BERT-base's closed loop beside VGG11 overloaded and
    NASNet's closed loop, each request's kernels once, in order, one at a time."""
    profiles = [load_profile(MEASURED_H100 / f"{name}.json") for name in ("bert_base", "vgg11", "nasnet")]
    loads = [ClosedLoop(1 / 3), Poisson(5 / profiles[1].T[-1]), ClosedLoop(0.0)]
    backend, result = run(BlessPolicy(), profiles, loads, duration=0.4, gpu="h100", mechanism="green", noise_sigma=0.02)
    assert any(launch.stream.low_priority for _, _, launch in backend.log), "no low-priority launch: not exercised"
    _assert_every_kernel_once_in_order(backend, result)


def test_lone_request_streams_unrestricted_at_its_full_gpu_time():
    """Deadline pacing: alone, a request is the earliest deadline, runs unrestricted and
    streams its windows with no barrier -- its full-GPU time plus the first decision and
    launch (every later window is decided while the one before it runs)."""
    prof = synthetic_profile("solo", n_kernels=120, mean_us=30, seed=4)
    policy = BlessPolicy()
    backend, result = run(policy, [prof], [ClosedLoop(1.0)], quotas=[0.3], duration=0.1)
    assert all(launch.stream.context.sm_limit is None for _, _, launch in backend.log)
    host = DECISION_COST["deadline"].per_launch + backend.host.launch  # one launch decided, then one kernel launched
    assert result.apps[0].mean == pytest.approx(prof.T[-1] + host, rel=0.005)
    assert result.apps[0].mean < result.apps[0].iso_latency


def test_lone_request_runs_unrestricted_on_the_whole_gpu():
    prof = synthetic_profile("solo", n_kernels=120, mean_us=30, seed=4)
    backend, result = run(BlessPolicy(pacing="paper"), [prof], [ClosedLoop(1.0)], quotas=[0.3], duration=0.1)
    assert all(launch.stream.context.sm_limit is None for _, _, launch in backend.log)
    # Alone, a request takes its full-GPU time plus the host's costs: per squad a sync and a
    # first launch, and the first squad's scheduling decision; every later squad is decided
    # while the one before it runs.
    squads = -(-prof.n_kernels // 50)
    host = squads * (backend.host.sync + backend.host.launch) + 50 * DECISION_COST["paper"].per_kernel
    assert result.apps[0].mean == pytest.approx(prof.T[-1] + host, rel=0.02)
    _, serial = run(BlessPolicy(pacing="paper", ahead=False), [prof], [ClosedLoop(1.0)], quotas=[0.3], duration=0.1)
    hidden = (prof.n_kernels - 50) * DECISION_COST["paper"].per_kernel
    assert serial.apps[0].mean - result.apps[0].mean == pytest.approx(hidden, rel=1e-6)


def test_deterministic_for_a_seed():
    profiles = [synthetic_profile(f"p{i}", n_kernels=40, mean_us=25, seed=i) for i in range(2)]
    a = run(BlessPolicy(), profiles, [parse_load("B"), parse_load("A")], seed=3, noise_sigma=0.03)[1]
    b = run(BlessPolicy(), profiles, [parse_load("B"), parse_load("A")], seed=3, noise_sigma=0.03)[1]
    assert [x.latencies.tolist() for x in a.apps] == [x.latencies.tolist() for x in b.apps]


def test_quota_shapes_the_share_of_kernels_in_squads():
    """A 70/30 pair of the same app: the 70 % app gets more kernels per squad
    while both are active and finishes its requests faster."""
    prof = synthetic_profile("x", n_kernels=200, mean_us=20, seed=5)
    _backend, result = run(
        BlessPolicy(pacing="paper"), [prof, prof], [parse_load("A"), parse_load("A")], quotas=[0.7, 0.3]
    )
    big, small = result.apps
    assert big.mean < small.mean
    assert big.mean <= big.iso_latency and small.mean <= small.iso_latency


def test_pacing_pulls_two_identical_closed_loops_into_lockstep():
    """While two identical requests overlap, pacing keeps their progress ratios
    equal, so the later one finishes with the lower latency: the stagger between
    the closed loops shrinks by about T[100%] / L per cycle
    (``experiments/lockstep.py`` derives it)."""
    cfg = config_from_dict(
        {
            "gpu": "a100",
            "duration": 0.5,
            "warmup": 0.0,
            "seed": 0,
            "noise": 0.02,
            "policy": {"name": "bless", "pacing": "paper"},
            "apps": [{"app": "resnet50", "quota": 0.5, "load": "B"}, {"app": "resnet50", "quota": 0.5, "load": "B"}],
        }
    )
    a, b = run_config(cfg).apps
    assert np.all(np.diff(a.arrivals) > 0) and len(a.arrivals) == len(a.latencies)
    n = min(len(a.arrivals), len(b.arrivals))
    gaps = np.abs(b.arrivals[:n] - a.arrivals[:n])
    assert gaps[0] > 0.2 * a.iso_latency, "the loads should start apart for this test to mean anything"
    ratios = [y / x for x, y in zip(gaps, gaps[1:]) if x > 0.05 * a.iso_latency]
    assert len(ratios) >= 3
    predicted = a.solo_latency / np.mean([a.latencies[0], b.latencies[0]])
    assert np.median(ratios) == pytest.approx(predicted, abs=0.05)
    assert gaps[-1] < 0.02 * a.iso_latency


def test_failed_requests_are_counted_and_kept_out_of_the_latencies():
    """A request whose kernel faults is reported failed, not served: its (meaningless) latency is not
    in the statistics, and the app's other requests and its neighbour are unaffected."""
    profiles = [synthetic_profile(f"f{i}", n_kernels=20, mean_us=30, seed=i) for i in range(2)]
    backend = RecordingBackend("a100", seed=0)
    apps = [AppState(i, f"f{i}", p, 0.5) for i, p in enumerate(profiles)]
    replay = Replay(backend, BlessPolicy(), apps, [ClosedLoop(0.0), ClosedLoop(0.0)], duration=0.05, seed=0)
    backend.inject_fault(apps[0].handle, kernel=5, count=2)
    result = replay.run()
    hit, neighbour = result.apps
    assert hit.failed == 2
    assert hit.completed == hit.submitted - 2 > 0
    assert np.isfinite(hit.latencies).all() and len(hit.latencies) == hit.completed
    assert neighbour.failed == 0 and neighbour.completed == neighbour.submitted
    assert hit.summary()["failed"] == 2


def test_tables_piped_to_a_file_are_not_cut(tmp_path, capsys):
    """Output that is not a terminal (a pipe, a CI log) gets every digit of every cell:
    rich alone would assume 80 columns and print the ISO target as ``13.…``."""
    from bless.cli import main

    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "gpu: a100\nduration: 0.2\napps:\n"
        "  - {app: resnet50, quota: 50%, load: B}\n  - {app: bert, quota: 50%, load: B}\n"
    )
    assert main(["run", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert "13.17" in out  # resnet50's ISO target at 50 % on the A100, whole


def test_set_overrides_name_the_key_instead_of_crashing(tmp_path, capsys):
    """``--set policy.x=1`` on a config whose policy is a plain name is a one-line error."""
    from bless.cli import main

    cfg = tmp_path / "run.yaml"
    cfg.write_text("gpu: a100\nduration: 0.05\npolicy: bless\napps:\n  - {app: resnet50, quota: 50%, load: B}\n")
    assert main(["run", str(cfg), "--set", "policy.window=0.002"]) == 2
    err = capsys.readouterr().err
    assert "'policy' is 'bless', not a mapping" in err and "Traceback" not in err
    assert main(["run", str(cfg), "--set", "apps.3.quota=20%"]) == 2
    assert "needs an index below 1" in capsys.readouterr().err


def test_an_open_loop_is_due_what_its_iso_run_of_the_same_arrivals_serves():
    """``served_rate`` against ``due_rate``: alone at its quota an app is served exactly its due
    (at 2x its share, its quota's throughput); beside a neighbour's loop in a static split the
    interference costs it throughput, and the measure shows it.  A closed loop has no due."""
    rate = 2 / load_app("bert", "a100").latency_at_quota(0.5)
    raw = {
        "gpu": "a100",
        "duration": 1.0,
        "warmup": 0.25,
        "seed": 0,
        "noise": 0.0,
        "apps": [
            {"app": "resnet50", "quota": 0.5, "load": "B"},
            {"app": "bert", "quota": 0.5, "load": {"type": "poisson", "rate": rate}},
        ],
    }
    loop, bert = run_config(config_from_dict({**raw, "policy": "iso"})).apps
    assert np.isnan(loop.due_rate) and loop.served_rate > 0
    assert bert.served_rate == pytest.approx(bert.due_rate, rel=0.01)
    assert bert.due_rate == pytest.approx(rate / 2, rel=0.05)  # saturated: its quota's throughput
    _, shared = run_config(config_from_dict({**raw, "policy": "gslice"})).apps
    assert shared.served_rate < 0.99 * shared.due_rate
