"""The configuration determiner: search space, estimators, optimality, and the
estimates against squads run on the simulated GPU."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scripts import load_script

from bless.core.determiner import (
    RATIO_CHOICES,
    Determiner,
    SquadConfig,
    _greedy_split,
    all_splits,
)
from bless.core.lifecycle import AppState, Request
from bless.core.manager import KernelManager
from bless.core.scheduler import Squad, SquadEntry, build_squad
from bless.hw.gpus import A100, H100, get_gpu
from bless.profiles.catalog import load_app
from bless.profiles.synthetic import synthetic_profile
from bless.sim.backend import SimBackend


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_split_space_is_c_n_minus_1_k_minus_1(k):
    splits = all_splits(k)
    assert len(splits) == math.comb(17, k - 1)
    assert (splits.sum(axis=1) == 18).all() and (splits >= 1).all()
    assert len({tuple(s) for s in splits}) == len(splits)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 5), st.integers(0, 2**31 - 1))
def test_greedy_split_is_optimal_over_the_whole_space(k, seed):
    rng = np.random.default_rng(seed)
    # Non-increasing per-level times, plateaus included.
    steps = rng.choice([0.0, 0.0, 1.0, 3.0], size=(k, 18)) * rng.uniform(0.5, 2, size=(k, 1))
    sums = 100.0 - np.cumsum(steps, axis=1)
    best = min(max(sums[j, n - 1] for j, n in enumerate(split)) for split in all_splits(k))
    parts = _greedy_split(sums, 18, 17)
    assert parts.sum() == 18 and parts.min() >= 1
    assert max(sums[j, p - 1] for j, p in enumerate(parts)) == pytest.approx(best)
    # With a cap on partitions per request, optimal over the capped space.
    capped = [s for s in all_splits(k) if s.max() <= 8] if k >= 3 else []
    if capped:
        best_capped = min(max(sums[j, n - 1] for j, n in enumerate(split)) for split in capped)
        parts = _greedy_split(sums, 18, 8)
        assert parts.max() <= 8
        assert max(sums[j, p - 1] for j, p in enumerate(parts)) == pytest.approx(best_capped)


def squad_of(*profiles, counts=None):
    entries = []
    for i, p in enumerate(profiles):
        app = AppState(i, p.app, p, 1 / len(profiles))
        n = counts[i] if counts else p.n_kernels
        entries.append(SquadEntry(Request(i, app, 0.0), 0, n))
    order = tuple(j for j, e in enumerate(entries) for _ in range(e.count))
    return Squad(tuple(entries), order)


def test_lone_request_runs_unrestricted():
    p = synthetic_profile("a", n_kernels=30, seed=1)
    cfg = Determiner(A100).decide(squad_of(p))
    assert not cfg.restricted
    assert cfg.estimate == pytest.approx(p.t[-1].sum())


def test_interference_free_estimate_is_the_slowest_request():
    a = synthetic_profile("a", n_kernels=30, seed=1)
    b = synthetic_profile("b", n_kernels=20, seed=2)
    d = Determiner(A100)
    sq = squad_of(a, b)
    assert d.estimate_split_free(sq, (12, 6)) == pytest.approx(max(a.t[11].sum(), b.t[5].sum()))
    parts, est = d.best_split(sq)
    assert sum(parts) == 18
    assert est == pytest.approx(min(d.estimate_split_free(sq, tuple(s)) for s in all_splits(2)))
    # Without interference the walk of a strict split is the same: each request alone on its SMs.
    quiet = Determiner(A100, interference=0.0)
    assert quiet.estimate_split(sq, (12, 6)) == pytest.approx(max(a.t[11].sum(), b.t[5].sum()))
    # With it, co-running kernels only get slower.
    assert d.estimate_split(sq, (12, 6)) > quiet.estimate_split(sq, (12, 6))


def test_a_window_is_priced_beside_its_neighbours_kernels_over_its_whole_length():
    """Deadline pacing's windows: a neighbour's request runs on past its own window, so how
    many kernels that window holds does not change the price of the others' (it did when the
    walk let the neighbour stop: the rest of the window ran alone, and restricted windows ran
    6-15 % longer than priced); alone on its SMs a window is its kernels' times."""
    a = load_app("bert", "a100")
    b = load_app("vgg11", "a100")
    d = Determiner(A100)
    short, long_ = (d.window_durations([(a, 0, 200, 54), (b, 0, n, None)], math.inf) for n in (1, 20))
    assert short[0] == pytest.approx(long_[0])
    quiet = Determiner(A100, interference=0.0)
    alone = quiet.window_durations([(a, 0, 200, 54)], math.inf)[0]
    assert alone == pytest.approx(a.t_at_sms(54)[:200].sum(), rel=1e-6)
    # Stopped at a horizon, the rest of a window ends at the pace kept so far.
    assert quiet.window_durations([(a, 0, 200, 54)], 0.5 * alone)[0] == pytest.approx(alone, rel=1e-6)
    slowed = d.window_durations([(a, 0, 200, 54), (b, 0, 20, None)], 0.5 * long_[0])[0]
    assert slowed > long_[0]  # at the pace beside VGG11, whose request the full walk sees end


def test_levels_are_priced_at_the_sms_the_contexts_have():
    """H100 green contexts: level 7 is 48 SMs (the profile's level 7 is 52); the estimate reads 48."""
    p = load_app("resnet50", "h100")
    q = load_app("bert", "h100")
    sq = squad_of(p, q, counts=[30, 30])
    assert H100.sms_for_level(7, "green") == 48 and p.level_sms[6] == 52
    green = Determiner(H100, mechanism="green")
    mps = Determiner(H100, mechanism="mps")
    want = max(p.t_at_sms(48)[:30].sum(), q.t_at_sms(H100.sms_for_level(11, "green"))[:30].sum())
    assert green.estimate_split_free(sq, (7, 11)) == pytest.approx(want)
    assert mps.estimate_split_free(sq, (7, 11)) == pytest.approx(max(p.t[6, :30].sum(), q.t[10, :30].sum()))
    with pytest.raises(ValueError, match="unknown SM restriction mechanism"):
        Determiner(H100, mechanism="mig")
    with pytest.raises(ValueError, match="profile .* is for a100"):
        green.tables(synthetic_profile("a", n_kernels=5, seed=1))


def test_narrow_kernels_that_fit_the_gpu_together_overlap_completely():
    """Without interference the squad takes its longest request."""
    a = synthetic_profile("a", n_kernels=10, seed=1)
    b = synthetic_profile("b", n_kernels=10, seed=2)
    import dataclasses

    narrow = lambda p: dataclasses.replace(
        p,
        kernels=tuple(dataclasses.replace(k, max_sm_share=0.25) for k in p.kernels),
        t=np.tile(p.t[-1], (18, 1)),
        T=np.tile(p.T[-1], 18),
    )
    a, b = narrow(a), narrow(b)
    est = Determiner(A100, interference=0.0).estimate_nsp(squad_of(a, b))
    assert est == pytest.approx(max(a.t[-1].sum(), b.t[-1].sum()))
    # The DRAM traffic of the other request stretches each kernel.
    assert Determiner(A100).estimate_nsp(squad_of(a, b)) > est * 1.01


def test_unrestricted_full_gpu_kernels_take_about_their_sum():
    a = synthetic_profile("a", n_kernels=10, seed=1)
    b = synthetic_profile("b", n_kernels=10, seed=2)
    d = Determiner(A100)
    est = d.estimate_nsp(squad_of(a, b))
    assert max(a.t[-1].sum(), b.t[-1].sum()) <= est <= (a.t[-1].sum() + b.t[-1].sum()) * 1.5


def test_memcpy_shares_the_copy_engine_and_overlaps_kernels():
    p = synthetic_profile("a", n_kernels=10, seed=1, memcpy_first=True)
    q = synthetic_profile("b", n_kernels=10, seed=2, memcpy_first=True)
    d = Determiner(A100)
    sq = squad_of(p, q, counts=[1, 1])
    assert d.estimate_nsp(sq) == pytest.approx(p.t[-1, 0] + q.t[-1, 0])
    # A copy beside the other request's kernels: the longer of the two.
    copy = SquadEntry(Request(0, AppState(0, "a", p, 0.5), 0.0), 0, 1)
    kernels = SquadEntry(Request(1, AppState(1, "b", q, 0.5), 0.0), 1, 3)
    both = d.estimate_nsp(Squad((copy, kernels), (0, 1, 1, 1)))
    assert both == pytest.approx(max(p.t[-1, 0], q.t[-1, 1:4].sum()))


def test_modes_force_a_kind():
    a = synthetic_profile("a", n_kernels=30, seed=1)
    b = synthetic_profile("b", n_kernels=30, seed=2)
    assert Determiner(A100, "nsp").decide(squad_of(a, b)).kind == "nsp"
    assert not Determiner(A100, "nsp").decide(squad_of(a, b)).restricted
    assert Determiner(A100, "sp").decide(squad_of(a, b)).restricted
    seq = Determiner(A100, "seq").decide(squad_of(a, b))
    assert seq.kind == "seq" and not seq.restricted and seq.restricted_count(30) == 0
    assert seq.estimate == pytest.approx(a.t[-1].sum() + b.t[-1].sum() + Determiner(A100).barrier)
    for mode in ("sp", "seq"):
        assert Determiner(A100, mode).decide(squad_of(a)).kind == "nsp"  # a lone request runs unrestricted
    with pytest.raises(ValueError, match="determiner mode"):
        Determiner(A100, "magic")


def test_auto_keeps_the_fastest_estimate_of_the_three_kinds():
    a = synthetic_profile("a", n_kernels=30, seed=1)
    b = synthetic_profile("b", n_kernels=30, seed=2)
    for barrier in (0.0, 20e-6, 1.0):
        det = Determiner(A100, barrier=barrier, switch_cost=50e-6)
        cfg = det.decide(squad_of(a, b))
        assert cfg.estimate == min(cfg.nsp_estimate, cfg.sp_estimate, cfg.seq_estimate)
        assert cfg.nsp_estimate == pytest.approx(det.estimate_nsp(squad_of(a, b)))
        assert cfg.seq_estimate == pytest.approx(det.estimate_seq(squad_of(a, b)))
        parts, _ = det.best_split(squad_of(a, b))
        assert cfg.sp_estimate == pytest.approx(det.estimate_semi_sp(squad_of(a, b), parts, 0.5))


def test_seq_is_picked_when_co_running_costs_more_than_the_barrier():
    """DRAM-bound kernels that each fill 60 % of the GPU: side by side they slow each other down
    (the second also runs on the SMs the first leaves), one after the other they do not.  The
    simulator agrees that SEQ is the faster."""
    import dataclasses

    def heavy(p):
        kernels = tuple(dataclasses.replace(k, max_sm_share=0.6, dram_util=0.8) for k in p.kernels)
        return dataclasses.replace(p, kernels=kernels)

    a, b = heavy(synthetic_profile("a", n_kernels=30, seed=1)), heavy(synthetic_profile("b", n_kernels=30, seed=2))
    backend = SimBackend(A100)
    det = Determiner(A100, switch_cost=backend.host.context_switch)
    cfg = det.decide(squad_of(a, b))
    assert cfg.kind == "seq" and cfg.seq_estimate < cfg.nsp_estimate < cfg.sp_estimate
    assert Determiner(A100, barrier=1e-3).decide(squad_of(a, b)).kind == "nsp"
    ea = _experiment()
    manager = KernelManager(backend)
    squad = squad_of(a, b)
    for e in squad.entries:
        manager.deploy(e.request.app, [None, *(A100.sms_for_level(n) for n in range(1, 18))])
    measured = {kind: ea.measure(manager, ea.decisions(squad, (kind,), A100, "mps")) for kind in ("seq", "nsp")}
    assert measured["seq"] < measured["nsp"]
    assert measured["seq"] == pytest.approx(cfg.seq_estimate, rel=0.01)
    assert measured["nsp"] == pytest.approx(cfg.nsp_estimate, rel=0.01)


def test_entry_switch_delays_only_requests_that_change_context():
    a = synthetic_profile("a", n_kernels=30, seed=1)
    b = synthetic_profile("b", n_kernels=30, seed=2)
    det = Determiner(A100, mode="nsp", switch_cost=50e-6, barrier=20e-6)
    sq = squad_of(a, b)
    fresh = det.decide(sq).estimate
    assert det.decide(sq, [None, None]).estimate == pytest.approx(fresh)
    # Both requests come from restricted contexts: each starts 30 us late.
    assert det.decide(sq, [54, 54]).estimate == pytest.approx(fresh + 30e-6, rel=1e-6)


def test_squad_config_kinds_and_the_older_forms():
    cfg = SquadConfig("split", (9, 9), 1.0, 2.0, 1.0, 0.5)
    assert cfg.restricted and cfg.kind == "split" and cfg.restricted_count(10) == 5 and math.isnan(cfg.seq_estimate)
    assert SquadConfig(True, (9, 9), 0.0, 0.0, 0.0).kind == "split"
    assert SquadConfig(False, (), 0.0, 0.0, 0.0).kind == "nsp"
    old = SquadConfig(restricted=True, partitions=(), estimate=1.0, nsp_estimate=1.0, sp_estimate=1.0)
    assert old.restricted and old.estimate == 1.0
    assert not SquadConfig("seq", (), 1.0, 2.0, 3.0, 1.0, 1.0).restricted
    with pytest.raises(ValueError, match="kind"):
        SquadConfig("both", (), 0.0, 0.0, 0.0)


def test_semi_sp_estimate_spans_nsp_and_strict_split():
    """Ratio 0 runs everything unrestricted, ratio 1 is the strict split; between, no faster than the parts allow."""
    a, b = synthetic_profile("a", n_kernels=40, seed=3), synthetic_profile("b", n_kernels=40, seed=4)
    det = Determiner(A100)
    squad = squad_of(a, b, counts=[25, 25])
    parts, split = det.best_split(squad)
    assert det.estimate_semi_sp(squad, parts, 0.0) == pytest.approx(det.estimate_nsp(squad))
    assert det.estimate_semi_sp(squad, parts, 1.0) == pytest.approx(det.estimate_split(squad, parts))
    assert Determiner(A100, interference=0.0).estimate_semi_sp(squad, parts, 1.0) == pytest.approx(split)
    half = det.estimate_semi_sp(squad, parts, 0.5)
    assert half >= max(det.tables(p).level_sums(0, 13)[n - 1] for p, n in zip((a, b), parts)) - 1e-12


def test_semi_sp_remainder_starts_after_its_own_prefix():
    """A request's unrestricted remainder waits for its own prefix, whatever the other request does."""
    import dataclasses

    a = synthetic_profile("a", n_kernels=20, mean_us=50, seed=7)
    b = synthetic_profile("b", n_kernels=20, mean_us=50, seed=8)
    # b's kernels are 20x longer: b's prefix ends long after a's.
    b = dataclasses.replace(b, t=b.t * 20, T=b.T * 20)
    det = Determiner(A100, interference=0.0, switch_cost=50e-6)
    squad = squad_of(a, b, counts=[20, 20])
    parts = (9, 9)
    est = det.estimate_semi_sp(squad, parts, 0.5)
    prefix_b = det.tables(b).level_sums(0, 10)[parts[1] - 1]
    rest_b = b.t[-1, 10:20].sum()
    assert est >= prefix_b + 50e-6 + rest_b - 1e-12


def test_adaptive_split_ratio_keeps_the_fastest_priced_choice():
    a, b = synthetic_profile("a", n_kernels=40, seed=5), synthetic_profile("b", n_kernels=40, seed=6)
    squad = squad_of(a, b, counts=[25, 25])
    cfg = Determiner(A100, mode="sp", split_ratio=None).decide(squad)
    assert cfg.restricted and cfg.split_ratio in RATIO_CHOICES
    fixed = [Determiner(A100, mode="sp", split_ratio=c).decide(squad).estimate for c in RATIO_CHOICES]
    assert cfg.estimate == pytest.approx(min(fixed))


# ---------------------------------------------------------------- against the simulator
def _experiment():
    return load_script("experiments/estimator_accuracy.py")


@pytest.mark.parametrize(
    "gpu_name, mechanism, pairs",
    [
        ("a100", "mps", (("vgg11", "vgg11"), ("vgg11", "resnet50"))),
        # Measured H100 profiles carry every kernel's launch configuration: co-resident blocks.
        ("h100", "green", (("bert", "bert"), ("bert", "resnet50"))),
    ],
)
def test_estimates_match_squads_run_on_the_simulator(gpu_name, mechanism, pairs):
    """Each configuration kind, estimated and run (noise on) on random squads of pairs:
    mean error <= 2 %, each squad <= 5 %.  Semi-SP is the hard case: a request's remainder
    starts only after its own prefix, and SMs held by the other's prefix or remainder
    (whichever started first) are not free."""
    ea = _experiment()
    gpu = get_gpu(gpu_name)
    backend = SimBackend(gpu, noise_sigma=0.02, seed=3, mechanism=mechanism)
    manager = KernelManager(backend)
    det = Determiner(gpu, switch_cost=backend.host.context_switch, mechanism=mechanism)
    limits = [None, *dict.fromkeys(gpu.sms_for_level(n, mechanism) for n in range(1, 18))]
    rng = np.random.default_rng(3)
    errors: dict[str, list[float]] = {k: [] for k in ea.KINDS}
    for pair in pairs:
        states = [AppState(i, f"{name}#{i}", load_app(name, gpu_name), 0.5) for i, name in enumerate(pair)]
        for s in states:
            manager.deploy(s, limits)
        done = 0
        for rid in itertools.count(0, 2):
            reqs = [Request(rid + i, s, 0.02 - float(rng.uniform(0.5e-3, 15e-3))) for i, s in enumerate(states)]
            for r in reqs:
                r.scheduled = int(rng.integers(0, r.n_kernels - 1))
            squad = build_squad(reqs, 0.02, 50)
            if len(squad.entries) < 2:
                continue
            parts, _ = det.best_split(squad)
            for key in [
                ("nsp",),
                ("seq",),
                ("split", parts),
                ("split", (6, 12)),
                *(("semi_sp", parts, c) for c in RATIO_CHOICES if c < 1),
            ]:
                measured = ea.measure(manager, ea.decisions(squad, key, gpu, mechanism))
                errors[key[0]].append(abs(ea.estimate(det, squad, key) / measured - 1))
            done += 1
            if done == 6:
                break
        for s in states:
            manager.undeploy(s)
    for kind, errs in errors.items():
        assert errs, kind
        assert np.mean(errs) <= 0.02, (kind, np.mean(errs))
        assert max(errs) <= 0.05, (kind, max(errs))


def test_each_app_is_priced_at_the_sms_its_own_contexts_were_granted():
    """H100 green contexts: the split's remainder joins the second app's groups, so at level 9
    the first app holds 64 SMs and the second 68; the determiner prices each at its own, and a
    strict split's estimate matches the simulated squad."""
    ea = _experiment()
    backend = SimBackend(H100, mechanism="green")
    manager = KernelManager(backend)
    limits = [None, *dict.fromkeys(H100.sms_for_level(n, "green") for n in range(1, 18))]
    states = [AppState(i, f"{name}#{i}", load_app(name, "h100"), 0.5) for i, name in enumerate(("vgg11", "vgg11"))]
    for s in states:
        manager.deploy(s, limits)
    det = Determiner(H100, switch_cost=backend.host.context_switch, mechanism="green")
    assert det.app_level_sms(states[0])[8] == 64 and det.app_level_sms(states[1])[8] == 68
    assert det.app_level_sms(AppState(2, "undeployed", states[0].profile, 0.5))[8] == 64  # the table
    squad = Squad(
        tuple(SquadEntry(Request(i, s, 0.0), 0, s.profile.n_kernels) for i, s in enumerate(states)),
        tuple(j for j, s in enumerate(states) for _ in range(s.profile.n_kernels)),
    )
    free = det.estimate_split_free(squad, (9, 9))
    assert free == pytest.approx(states[0].profile.t_at_sms(64).sum())  # the slower, on 64 SMs
    measured = ea.measure(manager, ea.decisions(squad, ("split", (9, 9)), H100, "green"))
    assert det.estimate_split(squad, (9, 9)) == pytest.approx(measured, rel=0.01)
    manager.undeploy(states[1])
    assert states[1].granted_sms == {} and det.app_level_sms(states[1])[8] == 64
