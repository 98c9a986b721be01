"""The latency lower bound (bless/harness/bound.py): no policy beats it, it is tight for a lone app, bad input is named."""

import numpy as np
import pytest

from bless.cli import main
from bless.harness.bound import (
    BoundError,
    Frontier,
    bound_for_config,
    closed_loop_bound,
    latency_bounds,
    mean_busy_time_bound,
    one_at_a_time_bound,
    request_frontier,
)
from bless.harness.config import ConfigError, config_from_dict
from bless.harness.fcfs import fcfs_completions
from bless.harness.run import run_config
from bless.profiles.catalog import load_app

POLICIES = ("bless", "unbound", "gslice", "iso", "temporal")
CONFIGS = {
    "resnet50 pair, B": [
        {"app": "resnet50", "quota": 0.5, "load": "B"},
        {"app": "resnet50", "quota": 0.5, "load": "B"},
    ],
    # Heavy for the fluid GPU (95 % of its capacity): the joint mean-busy-time bound binds.
    "resnet50 pair, Poisson": [
        {"app": "resnet50", "quota": 0.5, "load": "poisson:90"},
        {"app": "resnet50", "quota": 0.5, "load": "poisson:90"},
    ],
    # Workload A for three apps needs more than the GPU at their floors: the capacity constraint binds.
    "three apps, A": [
        {"app": "resnet50", "quota": "1/3", "load": "A"},
        {"app": "bert", "quota": "1/3", "load": "A"},
        {"app": "vgg11", "quota": "1/3", "load": "A"},
    ],
    # BERT scales poorly (T[50 %] / T[100 %] = 1.37): at its floor a request occupies 1.7x its least work.
    "bert pair, A": [
        {"app": "bert", "quota": 0.5, "load": "A"},
        {"app": "bert", "quota": 0.5, "load": "A"},
    ],
    "mixed quotas, A": [
        {"app": "bert", "quota": 0.6, "load": "A"},
        {"app": "resnet50", "quota": 0.1, "load": "A"},
        {"app": "resnet101", "quota": 0.3, "load": "A"},
    ],
    "closed and open": [
        {"app": "resnet101", "quota": 0.6, "load": "A"},
        {"app": "vgg11", "quota": 0.4, "load": "poisson:40"},
    ],
    # BERT's arrivals beyond what it can serve even alone on the whole GPU (74 a second): its
    # queue grows under every policy at least as fast as under one server at its floor.
    "overloaded beside a closed loop": [
        {"app": "resnet50", "quota": 0.5, "load": "B"},
        {"app": "bert", "quota": 0.5, "load": "poisson:100"},
    ],
    # Four clients of one app, which serves one request at a time: at least 4 x its floor less the think.
    "four clients": [
        {"app": "resnet50", "quota": 0.5, "load": {"type": "closed", "interval": 0.5, "clients": 4}},
        {"app": "bert", "quota": 0.5, "load": "C"},
    ],
}


# The measured H100 profiles carry every kernel's launch configuration, so their kernels
# share SMs on the simulated GPU (and hold fewer SM-seconds in the bound).
H100_CONFIGS = {
    "bert pair, A, H100": [
        {"app": "bert", "quota": 0.5, "load": "A"},
        {"app": "bert", "quota": 0.5, "load": "A"},
    ],
    "bert beside resnet50, Poisson, H100": [
        {"app": "bert", "quota": 0.5, "load": "poisson:40"},
        {"app": "resnet50", "quota": 0.5, "load": "poisson:120"},
    ],
}
CASES = {**{n: ("a100", a) for n, a in CONFIGS.items()}, **{n: ("h100", a) for n, a in H100_CONFIGS.items()}}


def config(policy, apps, gpu="a100"):
    return config_from_dict(
        {
            "gpu": gpu,
            "mechanism": "green" if gpu == "h100" else "mps",
            "policy": policy,
            "duration": 1.0,
            "warmup": 0.1,
            "noise": 0.0,
            "seed": 0,
            "apps": apps,
        }
    )


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", CASES)
def test_no_policy_beats_the_bound(name, policy):
    gpu, apps = CASES[name]
    cfg = config(policy, apps, gpu)
    bound = bound_for_config(cfg)
    result = run_config(cfg)
    per_app, mean = bound.ratios(result)
    assert min(per_app) >= 1.0, (per_app, [a.bound for a in bound.apps], [a.mean for a in result.apps])
    assert mean >= 1.0
    # Open loops: the bound saw exactly the requests the run measured.
    for b, a in zip(bound.apps, result.apps):
        if b.requests is not None:
            assert b.requests == a.completed
            assert b.bound == pytest.approx(one_at_a_time_bound(np.sort(a.arrivals), b.floor))


def test_no_bound_for_apps_the_policy_cannot_place():
    apps = [{"app": "resnet50", "quota": 0.125, "load": "B"}] * 8
    with pytest.raises(BoundError, match="^policy: MIG cannot host"):
        bound_for_config(config_from_dict({"policy": {"name": "mig", "rounding": "nearest"}, "apps": apps}))


def test_the_bound_reads_the_runs_arrivals_when_apps_share_a_slice():
    """MIG + MPS replays each slice's apps together, seeded by the slice's first app: the bound
    binds every app's Poisson arrivals as that run does, so it counts the requests the run measured."""
    apps = [
        {"app": a, "quota": 0.1, "load": {"type": "poisson", "rate": 40 + 5 * i}}
        for i, a in enumerate(["resnet50", "bert", "resnet101"] * 3)
    ]
    cfg = config_from_dict({"policy": {"name": "migmps", "alpha": 0.05}, "duration": 0.5, "warmup": 0.05, "apps": apps})
    run = run_config(cfg)
    assert "+" in run.policy["slices"]  # some apps share a slice
    assert [b.requests for b in bound_for_config(cfg).apps] == [len(a.latencies) for a in run.apps]


@pytest.mark.parametrize("name", ["resnet50 pair, Poisson", "three apps, A"])
def test_the_joint_bound_is_above_the_per_app_bounds_under_heavy_load(name):
    bound = bound_for_config(config("bless", CONFIGS[name]))
    assert bound.mean > 1.5 * np.mean([a.bound for a in bound.apps])


def test_a_lone_app_in_a_closed_loop_is_bounded_by_its_solo_latency_tightly():
    cfg = config("unbound", [{"app": "resnet50", "quota": 1.0, "load": "B"}])
    bound = bound_for_config(cfg)
    (app,) = bound.apps
    solo = load_app("resnet50", "a100").T[-1]
    assert app.bound == bound.mean == app.floor
    assert app.floor <= solo and app.floor == pytest.approx(solo, rel=1e-3)
    measured = run_config(cfg).apps[0].mean
    assert app.bound <= measured <= 1.01 * app.bound


def test_fcfs_completions_serve_one_at_a_time_in_arrival_order():
    # Idle until 0.0, a queue of three from 1.0 (the third waits behind two), idle again at 9.
    done = fcfs_completions(np.array([0.0, 1.0, 1.5, 1.5, 9.0]), size=1.0)
    assert done == pytest.approx([1.0, 2.0, 3.0, 4.0, 10.0])
    assert len(fcfs_completions(np.zeros(0), size=1.0)) == 0
    with pytest.raises(ValueError, match="^size: "):
        fcfs_completions(np.array([0.0]), size=-1.0)
    with pytest.raises(ValueError, match="^arrivals: "):
        fcfs_completions(np.array([1.0, 0.5]), size=1.0)


def test_one_request_at_a_time_is_the_floor_when_sparse_and_a_queue_when_dense():
    sparse = np.arange(10) * 1.0
    assert one_at_a_time_bound(sparse, floor=0.3) == pytest.approx(0.3)
    burst = np.zeros(4)  # served one after the other: done at 0.5, 1, 1.5, 2
    assert one_at_a_time_bound(burst, floor=0.5) == pytest.approx(1.25)
    assert np.isnan(one_at_a_time_bound(np.zeros(0), floor=0.5))


def test_mean_busy_time_bound_by_hand():
    rng = np.random.default_rng(1)
    r = np.sort(rng.uniform(0.0, 1.0, 200))
    # One app: equal sizes, equal weights: the bound is FCFS's mean flow time.
    assert mean_busy_time_bound([r], [0.004]) == pytest.approx(one_at_a_time_bound(r, 0.004))
    # A (size 2, at 0) is preempted by B (size 1, at 0.5): B flows 1; A busy on [0, 0.5] and [1.5, 3],
    # mean busy time 1.75, bound 1.75 + 1 - 0 = 2.75.
    assert mean_busy_time_bound([np.array([0.0]), np.array([0.5])], [2.0, 1.0]) == pytest.approx(3.75)


def envelope(points: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Least work of a mix of ``points`` (rows (duration, work)) lasting at most ``at``: the lower-left hull, by brute force."""
    d, w = points[:, 0], points[:, 1]
    out = []
    for x in at:
        best = w[d <= x].min(initial=np.inf)  # one point, slowed down
        lo, hi = (d[:, None] <= x) & (d[None, :] > x), d[None, :] - d[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            chord = w[:, None] + (w[None, :] - w[:, None]) * (x - d[:, None]) / hi
        out.append(min(best, chord[lo].min(initial=np.inf)))
    return np.array(out)


@pytest.mark.parametrize("seed", range(5))
def test_frontier_is_the_envelope_of_every_allocation_choice(seed):
    rng = np.random.default_rng(seed)
    sms, kernels = 6, 3
    solo = np.minimum.accumulate(rng.uniform(0.5, 3.0, (sms, kernels)), axis=0)
    held = np.minimum(rng.integers(0, sms + 1, kernels)[None, :], np.arange(1, sms + 1)[:, None])
    frontier = request_frontier(solo, held)
    choices = np.array(np.meshgrid(*[np.arange(sms)] * kernels, indexing="ij")).reshape(kernels, -1).T
    k = np.arange(kernels)
    points = np.array([(solo[c, k].sum(), (held * solo)[c, k].sum()) for c in choices])
    for duration, work in points:  # no choice needs less than g of its duration
        assert frontier(duration) <= work + 1e-12
    at = np.concatenate([frontier.durations, rng.uniform(frontier.floor, 1.2 * points[:, 0].max(), 50)])
    np.testing.assert_allclose(frontier(at), envelope(points, at), rtol=1e-12, atol=1e-12)
    assert frontier.floor == pytest.approx(solo.min(axis=0).sum())
    assert frontier.work == pytest.approx((held * solo).min(axis=0).sum())
    assert frontier(frontier.floor * 0.99) == np.inf


def test_frontier_of_a_copy_is_its_duration_alone():
    solo = np.array([[2.0, 1.0], [1.5, 1.0]])  # a kernel (1 SM: 2 s, 2 SMs: 1.5 s), then a 1 s copy
    frontier = request_frontier(solo, np.array([[1.0, 0.0], [2.0, 0.0]]))
    np.testing.assert_allclose(frontier.durations, [2.5, 3.0])
    np.testing.assert_allclose(frontier.works, [3.0, 2.0])
    assert frontier(2.75) == pytest.approx(2.5)
    assert frontier(10.0) == frontier.work == 2.0


def test_frontiers_of_the_apps_are_fast_and_cost_more_work_at_full_speed():
    from bless.harness.bound import profile_frontier
    from bless.hw.gpus import get_gpu

    gpu = get_gpu("a100")
    bert = profile_frontier(load_app("bert", "a100"), gpu)
    assert bert.works[0] > 1.5 * bert.work  # poorly scaling: running at full speed costs SM-seconds
    assert np.all(np.diff(bert.durations) > 0) and np.all(np.diff(bert.works) <= 1e-12)
    slopes = np.diff(bert.works) / np.diff(bert.durations)
    assert np.all(np.diff(slopes) >= -1e-9 * np.abs(slopes[:-1]))  # convex


def random_frontier(rng, floor):
    """A convex, non-increasing frontier from ``floor`` with a few pieces."""
    steps = rng.uniform(0.001, 0.01, 4)
    drops = np.sort(-rng.uniform(0.0, 60.0, 4)) * steps  # slopes increasing: convex
    works = rng.uniform(0.3, 0.8) - drops.sum() + np.concatenate([[0.0], np.cumsum(drops)])
    return Frontier(durations=floor + np.concatenate([[0.0], np.cumsum(steps)]), works=works)


def test_closed_loop_bound_meets_the_capacity_and_nothing_feasible_is_lower():
    rng = np.random.default_rng(0)
    floors = np.array([0.008, 0.0135, 0.010])
    frontiers = [random_frontier(rng, f) for f in floors]
    for f in frontiers:  # the helper made what the bound needs
        assert np.all(np.diff(f.works) <= 0) and np.all(np.diff(np.diff(f.works) / np.diff(f.durations)) >= 0)
    clients = [1, 2, 1]
    latencies, total = closed_loop_bound(frontiers, floors * 10, clients, 108)
    np.testing.assert_allclose(latencies, floors)  # light: the floors
    assert total == pytest.approx(floors.sum())

    thinks = floors / 3

    def used(lat):
        return sum(c * f(x) / (108 * (x + z)) for f, c, x, z in zip(frontiers, clients, lat, thinks))

    latencies, total = closed_loop_bound(frontiers, thinks, clients, 108)
    assert np.all(latencies >= floors)
    assert used(latencies) == pytest.approx(1.0) and used(latencies) <= 1.0
    assert total <= latencies.sum() <= total * (1 + 1e-9)
    for _ in range(3000):
        trial = floors + rng.uniform(0.0, 0.03, 3)
        if used(trial) <= 1.0:
            assert trial.sum() >= total


def test_a_frontier_cut_at_a_duration_keeps_its_values_from_there():
    g = Frontier(durations=np.array([1.0, 2.0, 4.0]), works=np.array([10.0, 6.0, 5.0]))
    assert g.from_duration(0.5) is g
    cut = g.from_duration(3.0)
    assert cut.floor == 3.0 and cut.work == 5.0
    at = np.array([3.0, 3.5, 4.0, 9.0])
    assert cut(at) == pytest.approx(g(at))
    assert np.isinf(cut(2.5))
    assert g.from_duration(6.0)(np.array([6.0, 7.0])) == pytest.approx([5.0, 5.0])


def test_several_clients_of_one_app_wait_for_each_other():
    """Four clients of an app that serves one request at a time complete at most one request per
    floor: their mean latency is at least four floors less the think time."""
    cfg = config("bless", CONFIGS["four clients"])
    (loop, _), profile = bound_for_config(cfg).apps, load_app("resnet50", "a100")
    assert loop.bound == pytest.approx(4 * loop.floor - 0.5 * float(profile.T[-1]), rel=1e-6)


def test_closed_loop_bound_with_a_flat_frontier_is_the_throughput_bound():
    flat = Frontier(durations=np.array([0.01]), works=np.array([0.54]))  # 5 ms of the whole GPU
    for clients, think in [(1, 0.0), (4, 0.002), (10, 0.01)]:
        _, total = closed_loop_bound([flat], [think], [clients], 108)
        assert total == pytest.approx(max(0.01, clients * 0.005 - think), rel=1e-9)


def test_bad_input_names_the_field(tmp_path, capsys):
    with pytest.raises(ConfigError, match="^apps: "):
        config_from_dict({"apps": []})
    with pytest.raises(BoundError, match="^apps: "):
        latency_bounds([], [], 108)
    with pytest.raises(BoundError, match="^arrivals: "):
        one_at_a_time_bound(np.array([1.0, 0.5]), floor=0.1)
    with pytest.raises(BoundError, match="^held: "):
        request_frontier(np.ones((4, 2)), np.ones((4, 3)))
    with pytest.raises(BoundError, match="^thinks >= 0"):
        closed_loop_bound([Frontier(np.array([1.0]), np.array([1.0]))], [-1.0], [1], 108)
    path = tmp_path / "empty.yaml"
    path.write_text("apps: []\n")
    assert main(["bound", str(path)]) == 2
    assert "bless bound: error: apps: " in capsys.readouterr().err


def test_cli_prints_the_bound(tmp_path, capsys):
    path = tmp_path / "pair.yaml"
    path.write_text(
        "name: pair\nduration: 1\napps:\n  - {app: resnet50, quota: 0.5, load: B}\n"
        "  - {app: resnet50, quota: 0.5, load: B}\n"
    )
    assert main(["bound", str(path), "--set", "apps.1.load=poisson:50"]) == 0
    out = capsys.readouterr().out
    assert "mean over apps" in out and "poisson 50/s" in out and "8.245" in out
