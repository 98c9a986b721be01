"""The configuration determiner: search space, estimators, optimality."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bless.determiner import Determiner, _greedy_split, all_splits
from bless.gpu import A100
from bless.requests import AppState, Request
from bless.scheduler import Squad, SquadEntry
from bless.synthetic import synthetic_profile


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
    assert d.estimate_split(sq, (12, 6)) == pytest.approx(max(a.t[11].sum(), b.t[5].sum()))
    parts, est = d.best_split(sq)
    assert sum(parts) == 18
    assert est == pytest.approx(min(d.estimate_split(sq, tuple(s)) for s in all_splits(2)))


def test_workload_equivalence_of_narrow_kernels_is_the_longest_request():
    """Kernels that together fit the GPU overlap completely."""
    a = synthetic_profile("a", n_kernels=10, seed=1)
    b = synthetic_profile("b", n_kernels=10, seed=2)
    import dataclasses

    narrow = lambda p: dataclasses.replace(  # noqa: E731
        p, kernels=tuple(dataclasses.replace(k, max_sm_share=0.25) for k in p.kernels),
        t=np.tile(p.t[-1], (18, 1)), T=np.tile(p.T[-1], 18),
    )
    a, b = narrow(a), narrow(b)
    est = Determiner(A100).estimate_nsp(squad_of(a, b))
    assert est == pytest.approx(max(a.t[-1].sum(), b.t[-1].sum()))


def test_workload_equivalence_of_full_gpu_kernels_approaches_their_sum():
    a = synthetic_profile("a", n_kernels=10, seed=1)
    b = synthetic_profile("b", n_kernels=10, seed=2)
    d = Determiner(A100)
    est = d.estimate_nsp(squad_of(a, b))
    assert max(a.t[-1].sum(), b.t[-1].sum()) <= est <= (a.t[-1].sum() + b.t[-1].sum()) * 1.5


def test_memcpy_adds_serially():
    p = synthetic_profile("a", n_kernels=10, seed=1, memcpy_first=True)
    q = synthetic_profile("b", n_kernels=10, seed=2, memcpy_first=True)
    d = Determiner(A100)
    sq = squad_of(p, q, counts=[1, 1])
    assert d.estimate_nsp(sq) == pytest.approx(p.t[-1, 0] + q.t[-1, 0])


def test_modes_force_a_kind():
    a = synthetic_profile("a", n_kernels=30, seed=1)
    b = synthetic_profile("b", n_kernels=30, seed=2)
    assert not Determiner(A100, "nsp").decide(squad_of(a, b)).restricted
    assert Determiner(A100, "sp").decide(squad_of(a, b)).restricted
    with pytest.raises(ValueError, match="determiner mode"):
        Determiner(A100, "magic")


def test_semi_sp_estimate_spans_nsp_and_strict_split():
    """Ratio 0 runs everything unrestricted, ratio 1 is the strict split; between, no faster than the parts allow."""
    a, b = synthetic_profile("a", n_kernels=40, seed=3), synthetic_profile("b", n_kernels=40, seed=4)
    det = Determiner(A100)
    squad = squad_of(a, b, counts=[25, 25])
    parts, split = det.best_split(squad)
    assert det.estimate_semi_sp(squad, parts, 0.0) == pytest.approx(det.estimate_nsp(squad))
    assert det.estimate_semi_sp(squad, parts, 1.0) == pytest.approx(split)
    half = det.estimate_semi_sp(squad, parts, 0.5)
    assert half >= max(det.tables(p).level_sums(0, 13)[n - 1] for p, n in zip((a, b), parts)) - 1e-12


def test_adaptive_split_ratio_keeps_the_fastest_priced_choice():
    from bless.determiner import RATIO_CHOICES

    a, b = synthetic_profile("a", n_kernels=40, seed=5), synthetic_profile("b", n_kernels=40, seed=6)
    squad = squad_of(a, b, counts=[25, 25])
    cfg = Determiner(A100, mode="sp", split_ratio=None).decide(squad)
    assert cfg.restricted and cfg.split_ratio in RATIO_CHOICES
    fixed = [Determiner(A100, mode="sp", split_ratio=c).decide(squad).estimate for c in RATIO_CHOICES]
    assert cfg.estimate == pytest.approx(min(fixed))
