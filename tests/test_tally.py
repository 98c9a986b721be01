"""Priority classes and Tally: best-effort kernels yield to latency-critical ones within the bound."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bless.backend.interface import KernelTransform
from bless.core.lifecycle import AppState
from bless.harness.config import ConfigError, config_from_dict
from bless.harness.run import run_config
from bless.hw.gpus import get_gpu
from bless.policies.tally import KernelShape, TallyCosts, TallyPolicy, choose_transform
from bless.profiles.synthetic import synthetic_profile
from bless.sim.engine import Engine
from bless.sim.kernels import SimKernel

A100 = get_gpu("a100")
COSTS = TallyCosts.for_gpu(A100)
SMS = A100.sm_count


def sim_kernel(name: str, solo: float, max_sms: int, dram: float = 0.0) -> SimKernel:
    """A kernel that takes ``solo`` seconds on ``max_sms`` SMs or more, proportionally longer on fewer."""
    curve = [math.inf] + [solo * max_sms / min(n, max_sms) for n in range(1, SMS + 1)]
    return SimKernel(name, False, max_sms, max_sms, curve, dram * solo)


def chunk_time(t: KernelTransform, solo: float) -> float:
    """Longest a transformed kernel runs before it can yield: one chunk."""
    return solo / t.chunks + t.chunk_cost


# ------------------------------------------------------------------ the choice


def test_a_kernel_shorter_than_the_bound_runs_as_is():
    assert choose_transform(KernelShape(20e-6, 10_000, SMS * 8), COSTS, 31.6e-6) == KernelTransform("none", 1)


def test_a_many_wave_kernel_is_transformed_to_yield_within_the_bound_at_least_cost():
    shape = KernelShape(400e-6, 40 * SMS * 8, SMS * 8)  # 40 waves of 10 us
    t = choose_transform(shape, COSTS, 31.6e-6)
    assert t.mechanism in ("slice", "preempt")
    assert chunk_time(t, shape.solo) <= 31.6e-6
    # preemption costs 40 flag checks (20 us); slices of 2 waves cost 20 launches (60 us): preempt
    assert t == KernelTransform("preempt", 40, COSTS.flag_check, COSTS.resume)


def test_a_kernel_whose_block_outlasts_the_bound_yields_as_soon_as_it_can():
    shape = KernelShape(300e-6, 2 * SMS, SMS)  # 2 waves of 150 us
    t = choose_transform(shape, COSTS, 31.6e-6)
    assert chunk_time(t, shape.solo) == pytest.approx(150e-6 + min(COSTS.flag_check, COSTS.slice_launch))


def test_slicing_wins_when_flag_checks_cost_more_than_a_few_launches():
    costs = TallyCosts(31.6e-6, slice_launch=1e-6, flag_check=5e-6, resume=3e-6, unknown_waves=3)
    shape = KernelShape(200e-6, 20 * SMS, SMS)  # 20 waves of 10 us
    t = choose_transform(shape, costs, 31.6e-6)
    assert t.mechanism == "slice" and t.chunks == 10  # slices of 2 waves + 1 us: 21 us each
    assert chunk_time(t, shape.solo) == pytest.approx(21e-6)


# ------------------------------------------------------------------ the engine's gate


@st.composite
def workloads(draw):
    bound = draw(st.sampled_from([15e-6, 31.6e-6, 100e-6]))
    be = []
    for i in range(draw(st.integers(1, 6))):
        solo = draw(st.floats(5e-6, 2e-3))
        per_wave = SMS * draw(st.sampled_from([1, 2, 4, 8]))
        blocks = draw(st.integers(1, 200)) * per_wave // draw(st.integers(1, 4)) + 1
        max_sms = draw(st.sampled_from([SMS, SMS, SMS // 2, 8]))
        shape = KernelShape(solo, blocks, per_wave)
        be.append((sim_kernel(f"be{i}", solo, max_sms, draw(st.floats(0, 0.9))), choose_transform(shape, COSTS, bound)))
    lc = []
    t = 0.0
    for i in range(draw(st.integers(1, 12))):
        t += draw(st.floats(0, 1e-3))
        solo = draw(st.floats(1e-6, 300e-6))
        lc.append((t, sim_kernel(f"lc{i}", solo, draw(st.sampled_from([SMS, 54, 4])), draw(st.floats(0, 0.9)))))
    return bound, be, lc


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_a_latency_critical_kernel_never_waits_longer_than_the_bound_behind_best_effort_work(work):
    """Wait = start (first SMs) - ready (issued, its stream free).  The bound covers the modelled
    per-chunk costs (a slice's launch, a wave's flag check); noise is off.  A best-effort kernel
    none of whose transformations yields within the bound bounds the wait by its own chunk."""
    bound, be, lc = work
    eng = Engine(SMS)
    lc_stream = eng.create_stream(eng.create_context(None, "lc"))
    be_stream = eng.create_stream(eng.create_context(None, "be", best_effort=True))
    be_runs = [eng.launch(be_stream, k, 0.0, transform=t) for k, t in be]
    lc_runs = [eng.launch(lc_stream, k, issue) for issue, k in lc]
    eng.run()
    limit = max([bound] + [chunk_time(t, k.solo[-1]) for k, t in be])
    for r in lc_runs:
        assert r.start is not None and r.ready is not None
        assert r.start - r.ready <= limit + 1e-9, (r.kernel.name, r.start - r.ready, limit)
    # Best-effort work all completes, each kernel at least its solo time plus its chunks' cost.
    for r, (k, t) in zip(be_runs, be):
        assert r.end is not None and r.remaining == 0.0
        assert r.end - r.start >= k.solo[-1] + t.chunks * t.chunk_cost - 1e-9


def test_best_effort_kernels_run_one_at_a_time_and_only_in_latency_critical_gaps():
    eng = Engine(SMS)
    lc_stream = eng.create_stream(eng.create_context(None, "lc"))
    be = [eng.create_stream(eng.create_context(None, f"be{i}", best_effort=True)) for i in range(2)]
    slice4 = KernelTransform("slice", 4, 0.0)
    a = eng.launch(be[0], sim_kernel("a", 100e-6, SMS), 0.0, transform=slice4)
    b = eng.launch(be[1], sim_kernel("b", 100e-6, SMS), 0.0, transform=slice4)
    lc = eng.launch(lc_stream, sim_kernel("lc", 50e-6, SMS), 30e-6)
    eng.run()
    # a starts first (b waits: one best-effort kernel at a time); the LC kernel is ready at 30 us,
    # in a's second 25 us slice, so it starts at 50 us; a resumes at 100 us, then b runs.
    assert lc.start == pytest.approx(50e-6) and lc.end == pytest.approx(100e-6)
    assert a.yields == 1 and a.end == pytest.approx(150e-6)
    assert b.start == pytest.approx(150e-6) and b.end == pytest.approx(250e-6)


def test_a_preempted_kernel_pays_its_relaunch_before_it_resumes():
    eng = Engine(SMS)
    lc_stream = eng.create_stream(eng.create_context(None, "lc"))
    be_stream = eng.create_stream(eng.create_context(None, "be", best_effort=True))
    t = KernelTransform("preempt", 10, 1e-6, 5e-6)
    be = eng.launch(be_stream, sim_kernel("be", 100e-6, SMS), 0.0, transform=t)
    lc = eng.launch(lc_stream, sim_kernel("lc", 20e-6, SMS), 15e-6)
    eng.run()
    assert lc.start == pytest.approx(22e-6)  # two 11 us waves
    assert be.end == pytest.approx(42e-6 + 5e-6 + 8 * 11e-6)


def test_a_transform_outside_a_best_effort_context_is_refused():
    eng = Engine(SMS)
    s = eng.create_stream(eng.create_context(None))
    with pytest.raises(ValueError, match="best-effort context"):
        eng.launch(s, sim_kernel("k", 1e-5, SMS), 0.0, transform=KernelTransform("slice", 2))


# ------------------------------------------------------------------ priority classes


def test_priority_is_validated_in_the_run_config_and_the_app_state():
    base = {"apps": [{"app": "resnet50", "quota": 0.5, "load": "B"}]}
    assert config_from_dict(base).apps[0].priority == "latency-critical"
    base["apps"][0]["priority"] = "best-effort"
    assert config_from_dict(base).apps[0].priority == "best-effort"
    base["apps"][0]["priority"] = "low"
    with pytest.raises(ConfigError, match=r"apps\[0\]\.priority: expected latency-critical or best-effort"):
        config_from_dict(base)
    with pytest.raises(ValueError, match="priority of app 'x' must be one of"):
        AppState(0, "x", synthetic_profile("x", n_kernels=3), 0.5, priority="low")


def test_tally_needs_a_positive_bound():
    with pytest.raises(ValueError, match="wait_bound must be a positive number"):
        TallyPolicy(wait_bound=0)
    with pytest.raises(ValueError, match="wait_bound must be a positive number"):
        TallyPolicy(wait_bound=True)  # YAML's true is not one second


def test_tally_keeps_the_latency_critical_app_near_its_solo_latency():
    """resnet50 (latency-critical, Poisson at 1/4 of its solo throughput) beside resnet50_train
    (best-effort, closed loop): the inference mean stays within 15 % of solo while training
    still makes progress."""
    cfg = {
        "policy": "tally",
        "duration": 1.2,
        "warmup": 0.2,
        "apps": [
            {"app": "resnet50", "quota": 0.5, "load": {"type": "poisson", "rate": 30}},
            {
                "app": "resnet50_train",
                "quota": 0.5,
                "load": {"type": "closed", "interval": 0},
                "priority": "best-effort",
            },
        ],
    }
    result = run_config(config_from_dict(cfg))
    lc, be = result.apps
    assert lc.latencies.mean() <= 1.15 * lc.solo_latency
    assert len(be.latencies) >= 5
