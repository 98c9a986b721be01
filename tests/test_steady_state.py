"""bless.core.steady_state: the sharing cycle deadline pacing runs saturated apps in."""

from __future__ import annotations

import numpy as np
import pytest

from bless.core.steady_state import RequestCurve, SharingCycle, group_rates, sharing_cycle
from bless.hw.gpus import get_gpu
from bless.hw.interference import InterferenceModel
from bless.profiles.catalog import load_app

GPU = get_gpu("a100")
UNIT = GPU.sm_count // 18
FOUR = ("resnet50", "bert", "vgg11", "resnet101")


def curves(models, quotas):
    return [RequestCurve.of(load_app(m, GPU.name), q, GPU) for m, q in zip(models, quotas)]


def cycle_of(models, quotas, model=None, period=0.1, shortest=0.002):
    cs = curves(models, quotas)
    sms = [round(q * GPU.sm_count) for q in quotas]
    model = model or InterferenceModel.for_gpu(GPU.name)
    return cs, sms, sharing_cycle(cs, sms, GPU.sm_count, model, UNIT, period, shortest)


@pytest.mark.parametrize(
    "models, quotas",
    [(FOUR, [0.25] * 4), (("vgg11", "nasnet", "bert"), [1 / 6, 1 / 3, 1 / 2]), (("resnet50", "bert"), [0.5, 0.5])],
)
def test_a_cycle_divides_a_turn_among_ways_that_crowd_no_app_more_than_the_static_split(models, quotas):
    """Its parts add up to a turn, each kept way at least the shortest, every way fits the GPU
    in whole partition levels, and in none is an app stretched more than at its quota beside
    all the others (the interference estimate is trusted only to lower a slowdown)."""
    cs, sms, cycle = cycle_of(models, quotas)
    model = InterferenceModel.for_gpu(GPU.name)
    split = group_rates(cs, np.array([sms]), model)[1][0]
    assert sum(cycle.fractions) == pytest.approx(1.0)
    assert all(f * cycle.period >= 0.002 for f in cycle.fractions)
    for shares in cycle.shares:
        running = [i for i, s in enumerate(shares) if s]
        assert running and sum(shares) <= GPU.sm_count and all(s % UNIT == 0 for s in shares)
        stretch = group_rates([cs[i] for i in running], np.array([[shares[i] for i in running]]), model)[1][0]
        assert np.all(stretch <= split[running] + 1e-9)


def test_without_interference_a_cycle_serves_every_app_at_least_its_quota():
    """With the interference term at 0 the static split at whole-level quotas is one of the ways
    and serves every app exactly its quota's throughput, so the best division serves the worst
    at least that."""
    _, _, cycle = cycle_of(("vgg11", "nasnet", "bert"), [1 / 6, 1 / 3, 1 / 2], InterferenceModel(bandwidth=0.0))
    assert cycle.served >= 1.0 - 1e-6


def test_four_apps_at_a_quarter_run_the_dram_heaviest_alone_for_part_of_each_turn():
    """ResNet50, BERT, VGG11 and ResNet-101 at a quarter each: the model's best serves the worst
    app more than the split at the quotas (which crowds every app beside VGG11's DRAM traffic)
    by running VGG11 alone on the whole GPU part of the time."""
    cs, sms, cycle = cycle_of(FOUR, [0.25] * 4)
    rates = group_rates(cs, np.array([sms]), InterferenceModel.for_gpu(GPU.name))[0][0]
    split = min(r * c.iso for r, c in zip(rates, cs))
    assert cycle.served > split + 0.02
    assert (0, 0, GPU.sm_count, 0) in cycle.shares


def test_a_step_woken_at_a_ways_end_gets_the_next_way_and_a_later_end():
    """Turns start at multiples of the period and the ways follow in order; at a way's end (the
    time a step is woken for, rounded or not) the next is in force, so pacing is never woken
    again at the same instant."""
    cycle = SharingCycle(((1, 0), (0, 1), (1, 1)), (0.5, 0.3, 0.2), 0.1, 1.0)
    assert cycle.at(0.0) == ((1, 0), pytest.approx(0.05))
    now = 3.7
    for _ in range(30):
        ends = cycle.at(now)[1]
        assert ends > now + 1e-6
        for jitter in (-1e-12, 0.0, 1e-12):
            assert cycle.at(ends + jitter)[1] > ends + 1e-6
        now = ends
    assert SharingCycle(((2, 3),), (1.0,), 0.1, 1.0).at(5.0) == ((2, 3), np.inf)
