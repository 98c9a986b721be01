"""Admission rules as pure functions: quotas, memory with per-context cost, kernel granularity."""

import pytest

from bless.core.lifecycle import AppState
from bless.hw.gpus import get_gpu
from bless.profiles.synthetic import synthetic_profile
from bless.serving.server.admission import (
    AdmissionLimits,
    AppDemand,
    MemoryBudget,
    admit,
    contexts_per_app,
)

GIB = 2**30


def demand(name, quota=0.5, memory=GIB, longest=100e-6, mean=50e-6, target=10e-3):
    return AppDemand(name, quota, memory, longest, mean, target)


def budget(used=0, contexts=18):
    return MemoryBudget(capacity_bytes=40 * GIB, used_bytes=used, context_bytes=300 * 2**20, contexts=contexts)


def test_a_first_app_that_fits_is_accepted():
    assert admit(demand("a"), [], budget(), squad_size=50).accepted


def test_quotas_over_100_percent_are_rejected_with_what_is_left():
    answer = admit(demand("c", quota=0.4), [demand("a", 0.5), demand("b", 0.3)], budget(), squad_size=50)
    assert not answer.accepted
    assert "120%" in answer.reason and "at most 20% is left" in answer.reason


def test_memory_counts_every_context_the_app_will_get():
    # 33 GiB held; the app needs 1 GiB + 18 contexts x 300 MiB = 6.3 GiB > 38 - 33 GiB usable.
    answer = admit(demand("a", memory=GIB), [], budget(used=33 * GIB, contexts=18), squad_size=50)
    assert not answer.accepted and "memory exhausted" in answer.reason and "18 contexts" in answer.reason
    # Without the contexts it would have fitted.
    assert admit(demand("a", memory=GIB), [], budget(used=33 * GIB, contexts=1), squad_size=50).accepted


def test_a_quota_change_skips_the_memory_rule():
    assert admit(demand("a", memory=100 * GIB), [], None, squad_size=50).accepted


def test_a_kernel_longer_than_a_quarter_of_another_apps_target_is_rejected():
    long = demand("long", longest=4e-3, mean=1e-3, target=100e-3)
    short = demand("short", longest=200e-6, mean=100e-6, target=10e-3)
    answer = admit(long, [short], budget(), squad_size=50)
    assert not answer.accepted
    assert "too long" in answer.reason and "'long'" in answer.reason and "40%" in answer.reason
    # A looser limit admits it.
    assert admit(long, [short], budget(), 50, AdmissionLimits(long_kernel_share=0.5)).accepted


def test_kernels_far_shorter_than_the_others_are_rejected_relative_to_the_squad_size():
    tiny = demand("tiny", longest=10e-6, mean=2e-6, target=1.0)
    big = demand("big", longest=200e-6, mean=100e-6, target=1.0)
    answer = admit(tiny, [big], budget(), squad_size=50)  # 50x apart, limit 25x
    assert not answer.accepted and "too short" in answer.reason and "50x" in answer.reason
    assert admit(tiny, [big], budget(), squad_size=200).accepted  # limit 100x


def test_every_failed_rule_is_reported():
    answer = admit(demand("a", quota=0.9, memory=39 * GIB), [demand("b", 0.5)], budget(), squad_size=50)
    assert "quotas" in answer.reason and "memory" in answer.reason


def test_demand_of_an_app_uses_its_whole_gpu_kernels_and_its_target():
    prof = synthetic_profile("x", n_kernels=20, mean_us=100, seed=3)
    d = AppDemand.of(AppState(0, "x", prof, 0.5))
    assert d.longest_kernel == pytest.approx(prof.t[-1].max()) and d.mean_kernel == pytest.approx(prof.t[-1].mean())
    assert d.target == pytest.approx(prof.latency_at_quota(0.5))
    assert AppDemand.of(AppState(0, "x", prof, 0.5, slo=0.1)).target == 0.1


def test_contexts_per_app_is_one_unrestricted_plus_one_per_level():
    a100 = get_gpu("a100")
    assert contexts_per_app(a100, 17, "mps") == 18
    assert contexts_per_app(a100, 3, "mps") == 4


def test_limits_are_validated():
    with pytest.raises(ValueError, match="long_kernel_share"):
        AdmissionLimits(long_kernel_share=0)
    with pytest.raises(ValueError, match="max_kernel_ratio"):
        AdmissionLimits(max_kernel_ratio=0.5)
