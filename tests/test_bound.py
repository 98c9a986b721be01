"""The latency lower bound (bless/harness/bound.py): no policy beats it, it is tight for a lone app, bad input is named."""

import numpy as np
import pytest

from bless.cli import main
from bless.harness.bound import (
    BoundError,
    bound_for_config,
    closed_latencies,
    fcfs_floor_bound,
    latency_bounds,
    mean_busy_time_bound,
    request_demand,
)
from bless.harness.config import ConfigError, config_from_dict
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
    "closed and open": [
        {"app": "resnet101", "quota": 0.6, "load": "A"},
        {"app": "vgg11", "quota": 0.4, "load": "poisson:40"},
    ],
}


def config(policy, apps):
    return config_from_dict({"policy": policy, "duration": 1.0, "warmup": 0.1, "noise": 0.0, "seed": 0, "apps": apps})


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", CONFIGS)
def test_no_policy_beats_the_bound(name, policy):
    cfg = config(policy, CONFIGS[name])
    bound = bound_for_config(cfg)
    result = run_config(cfg)
    per_app, mean = bound.ratios(result)
    assert min(per_app) >= 1.0, (per_app, [a.bound for a in bound.apps], [a.mean for a in result.apps])
    assert mean >= 1.0
    # Open loops: the bound saw exactly the requests the run measured.
    for b, a in zip(bound.apps, result.apps):
        if b.requests is not None:
            assert b.requests == a.completed
            assert b.bound == pytest.approx(fcfs_floor_bound(np.sort(a.arrivals), b.floor, b.work / bound.sm_count))


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


def test_fcfs_floor_bound_is_the_floor_when_sparse_and_queueing_when_dense():
    sparse = np.arange(10) * 1.0
    assert fcfs_floor_bound(sparse, floor=0.3, size=0.2) == pytest.approx(0.3)
    burst = np.zeros(4)  # FCFS flow times 1, 2, 3, 4
    assert fcfs_floor_bound(burst, floor=0.5, size=1.0) == pytest.approx(2.5)
    assert np.isnan(fcfs_floor_bound(np.zeros(0), floor=0.5, size=1.0))


def test_mean_busy_time_bound_by_hand():
    rng = np.random.default_rng(1)
    r = np.sort(rng.uniform(0.0, 1.0, 200))
    # One app: equal sizes, equal weights: the bound is FCFS's mean flow time.
    assert mean_busy_time_bound([r], [0.004]) == pytest.approx(fcfs_floor_bound(r, 0.0, 0.004))
    # A (size 2, at 0) is preempted by B (size 1, at 0.5): B flows 1; A busy on [0, 0.5] and [1.5, 3],
    # mean busy time 1.75, bound 1.75 + 1 - 0 = 2.75.
    assert mean_busy_time_bound([np.array([0.0]), np.array([0.5])], [2.0, 1.0]) == pytest.approx(3.75)


def test_closed_latencies_meet_the_capacity_and_nothing_feasible_is_lower():
    floors = np.array([0.008, 0.0135, 0.010])
    sizes = np.array([0.0053, 0.0075, 0.0085])
    thinks = floors / 3
    clients = np.ones(3)
    np.testing.assert_allclose(closed_latencies(floors, sizes, floors * 10, clients), floors)  # light: floors
    best = closed_latencies(floors, sizes, thinks, clients)
    assert np.all(best >= floors)
    assert np.sum(sizes / (best + thinks)) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        trial = floors + rng.uniform(0.0, 0.03, 3)
        if np.sum(sizes / (trial + thinks)) <= 1.0:
            assert trial.sum() >= best.sum() - 1e-12


def test_bad_input_names_the_field(tmp_path, capsys):
    with pytest.raises(ConfigError, match="^apps: "):
        config_from_dict({"apps": []})
    with pytest.raises(BoundError, match="^apps: "):
        latency_bounds([], [], 108)
    with pytest.raises(BoundError, match="^arrivals: "):
        fcfs_floor_bound(np.array([1.0, 0.5]), floor=0.1, size=0.1)
    with pytest.raises(BoundError, match="^held: "):
        request_demand(np.ones((4, 2)), np.ones((4, 3)))
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
