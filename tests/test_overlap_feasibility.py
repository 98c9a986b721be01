"""experiments/overlap_feasibility.py: its linear program against the schedules it must contain."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from scripts import load_script

from bless.hw.gpus import get_gpu
from bless.hw.interference import InterferenceModel
from bless.profiles.catalog import find_profile
from bless.profiles.format import load_profile

GPU = get_gpu("a100")
PAIRS = [("resnet50", 0.5, "resnet50", 0.5), ("bert", 0.5, "vgg11", 0.5), ("nasnet", 1 / 3, "resnet101", 2 / 3)]


@pytest.fixture(scope="module")
def fluid():
    module = load_script("experiments/overlap_feasibility.py")
    yield module
    del sys.modules[module.__name__]


def curves(fluid, *apps):
    """The fluid model's view of one request of each ``(model, quota)``."""
    return [fluid.RequestCurve.of(load_profile(find_profile(m, GPU.name)), q, GPU) for m, q in apps]


def model(bandwidth):
    return InterferenceModel(bandwidth=bandwidth)


def quota_sms(quotas):
    return [GPU.round_sms(q * GPU.sm_count) for q in quotas]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}+{p[2]}")
def test_without_interference_the_quota_split_meets_both_isos(fluid, pair):
    cs = curves(fluid, pair[:2], pair[2:])
    none = model(0.0)
    assert fluid.quota_split(cs, quota_sms(pair[1::2]), none) <= 1.0 + 1e-3
    assert fluid.least_ratio(cs, GPU.sm_count, none) <= 1.0 + 1e-3


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}+{p[2]}")
def test_the_best_schedule_is_no_worse_than_the_ones_it_contains_and_interference_only_hurts(fluid, pair):
    cs = curves(fluid, pair[:2], pair[2:])
    n = GPU.sm_count
    c = 0.75
    best = fluid.least_ratio(cs, n, model(c))
    split = fluid.quota_split(cs, quota_sms(pair[1::2]), model(c))
    assert best <= min(fluid.one_after_other(cs, n), split) + 1e-3
    assert fluid.least_ratio(cs, n, model(0.0)) <= best + 1e-3
    assert best <= fluid.least_ratio(cs, n, model(2 * c)) + 1e-3


def test_a_group_of_three_contains_one_after_the_other_and_its_quota_split(fluid):
    apps = [("bert", 1 / 3), ("vgg11", 1 / 3), ("resnet50", 1 / 3)]
    cs = curves(fluid, *apps)
    unit = GPU.sm_count // 6  # thirds of the GPU and their halves: the quota split is one of the points
    best = fluid.least_ratio(cs, GPU.sm_count, model(0.75), unit)
    split = fluid.quota_split(cs, [GPU.sm_count // 3] * 3, model(0.75))
    assert best <= min(fluid.one_after_other(cs, GPU.sm_count), split) + 1e-3
    assert fluid.least_ratio(cs, GPU.sm_count, model(0.0), unit) <= min(best, 1.0) + 1e-3


def test_allocations_give_every_member_some_sms_and_never_more_than_the_gpu(fluid):
    ways = fluid.allocations(3, 6)
    assert len(ways) == 20  # C(6, 3)
    assert (ways >= 1).all() and (ways.sum(axis=1) <= 6).all()
    assert len({tuple(w) for w in ways}) == len(ways)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}+{p[2]}")
def test_closed_loops_without_interference_fit_at_iso_and_interference_and_shorter_thinks_only_hurt(fluid, pair):
    cs = curves(fluid, pair[:2], pair[2:])
    thinks = [c.seconds[GPU.sm_count] / 3 for c in cs]  # workload A
    none = fluid.rate_points(cs, GPU.sm_count, model(0.0))
    # The quota split alone serves each app at 1 / ISO, more than 1 / (ISO + think) needs.
    assert fluid.closed_loop_ratio(none, cs, thinks) < 1.0
    calibrated = fluid.closed_loop_ratio(fluid.rate_points(cs, GPU.sm_count, model(0.75)), cs, thinks)
    assert fluid.closed_loop_ratio(none, cs, thinks) <= calibrated + 1e-3
    harder = fluid.rate_points(cs, GPU.sm_count, model(1.5))
    assert calibrated <= fluid.closed_loop_ratio(harder, cs, thinks) + 1e-3
    assert calibrated <= fluid.closed_loop_ratio(harder, cs, [0.0, 0.0]) + 1e-3


def test_column_generation_finds_the_linear_programs_optimum(fluid):
    from scipy.optimize import linprog

    cs = curves(fluid, ("bert", 0.3), ("vgg11", 0.2), ("resnet101", 0.5))
    points = fluid.rate_points(cs, GPU.sm_count, model(0.75), GPU.sm_count // 18)
    need = [1 / (c.iso * 1.1) for c in cs]
    full = linprog(np.ones(len(points)), A_ub=-points.T, b_ub=-np.array(need), bounds=(0, None), method="highs")
    assert fluid.time_needed(points, need) == pytest.approx(full.fun, rel=1e-6)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}+{p[2]}")
def test_a_saturated_neighbour_gets_its_quota_without_interference_and_interference_or_a_tighter_victim_only_hurt(
    fluid, pair
):
    victim, neighbour = curves(fluid, pair[:2], pair[2:])
    think = victim.seconds[GPU.sm_count] * 2 / 3  # workload B
    service = {
        c: fluid.neighbour_service(
            fluid.rate_points([victim, neighbour], GPU.sm_count, model(c)), victim, neighbour, think
        )
        for c in (0.0, 0.75)
    }
    # Without interference the quota split is one of the ways: the victim done at ISO, the
    # neighbour at its quota's rate meanwhile and at least that alone while the client thinks.
    assert service[0.0] >= 1.0 - 1e-6
    assert service[0.75] <= service[0.0] + 1e-9
    tighter = fluid.RequestCurve(victim.seconds, victim.dram_seconds, 0.9 * victim.iso)
    points = fluid.rate_points([tighter, neighbour], GPU.sm_count, model(0.75))
    assert fluid.neighbour_service(points, tighter, neighbour, think) <= service[0.75] + 1e-9


def test_a_victim_that_cannot_be_done_in_time_is_refused_by_name(fluid):
    victim, neighbour = curves(fluid, ("bert", 0.5), ("vgg11", 0.5))
    impossible = fluid.RequestCurve(victim.seconds, victim.dram_seconds, 0.5 * victim.seconds[GPU.sm_count])
    points = fluid.rate_points([impossible, neighbour], GPU.sm_count, model(0.75))
    with pytest.raises(ValueError, match="victim"):
        fluid.neighbour_service(points, impossible, neighbour, 0.01)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}+{p[2]}")
def test_an_open_loop_at_its_quotas_rate_beside_a_closed_one_fits_without_interference_and_more_only_hurts(fluid, pair):
    closed, open_ = curves(fluid, pair[:2], pair[2:])
    cs = [closed, open_]
    think = [closed.seconds[GPU.sm_count] / 3, None]  # workload A beside Poisson arrivals
    none = fluid.rate_points(cs, GPU.sm_count, model(0.0))
    # The quota split serves the open loop at 1 / ISO and the closed one faster than its ISO cycle.
    at_quota = fluid.closed_loop_ratio(none, cs, think, served=[0.0, 1.0])
    assert at_quota <= 1.0 + 1e-3
    assert at_quota <= fluid.closed_loop_ratio(none, cs, think, served=[0.0, 1.2]) + 1e-3
    calibrated = fluid.rate_points(cs, GPU.sm_count, model(0.75))
    assert at_quota <= fluid.closed_loop_ratio(calibrated, cs, think, served=[0.0, 1.0]) + 1e-3
    # An open loop asking for more than the whole GPU leaves no lam that fits.
    whole = open_.iso / open_.seconds[GPU.sm_count]
    assert fluid.closed_loop_ratio(none, cs, think, served=[0.0, 1.01 * whole]) == pytest.approx(4.0, abs=1e-3)
