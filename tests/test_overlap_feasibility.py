"""experiments/overlap_feasibility.py: its linear program against the schedules it must contain."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bless.hw.gpus import get_gpu
from bless.profiles.catalog import find_profile
from bless.profiles.format import load_profile

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "overlap_feasibility.py"
GPU = get_gpu("a100")
PAIRS = [("resnet50", 0.5, "resnet50", 0.5), ("bert", 0.5, "vgg11", 0.5), ("nasnet", 1 / 3, "resnet101", 2 / 3)]


@pytest.fixture(scope="module")
def fluid():
    spec = importlib.util.spec_from_file_location("overlap_feasibility", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def curves(fluid, a, qa, b, qb):
    """The fluid model's view of one request of each app of a pair."""
    return tuple(fluid.RequestCurve.of(load_profile(find_profile(m, GPU.name)), q, GPU) for m, q in ((a, qa), (b, qb)))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}+{p[2]}")
def test_without_interference_the_quota_split_meets_both_isos(fluid, pair):
    a, b = curves(fluid, *pair)
    n = GPU.sm_count
    assert fluid.quota_split(a, b, GPU.round_sms(pair[1] * n), GPU.round_sms(pair[3] * n), 0.0) <= 1.0 + 1e-3
    assert fluid.least_ratio(a, b, n, 0.0) <= 1.0 + 1e-3


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}+{p[2]}")
def test_the_best_schedule_is_no_worse_than_the_ones_it_contains_and_interference_only_hurts(fluid, pair):
    a, b = curves(fluid, *pair)
    n = GPU.sm_count
    c = 0.75
    best = fluid.least_ratio(a, b, n, c)
    split = fluid.quota_split(a, b, GPU.round_sms(pair[1] * n), GPU.round_sms(pair[3] * n), c)
    assert best <= min(fluid.one_after_other(a, b, n), split) + 1e-3
    assert fluid.least_ratio(a, b, n, 0.0) <= best + 1e-3
    assert best <= fluid.least_ratio(a, b, n, 2 * c) + 1e-3
