"""The multi-task scheduler's squads."""

import pytest

from bless.core.lifecycle import AppState, Request
from bless.core.scheduler import build_squad
from bless.profiles.synthetic import synthetic_profile


def active(app: AppState, arrival: float = 0.0, rid: int = 1) -> Request:
    req = Request(rid, app, arrival)
    app.queue.append(req)
    app.activate()
    return req


def test_lone_request_fills_the_squad_and_stops_at_its_last_kernel():
    app = AppState(0, "a", synthetic_profile("a", n_kernels=70, seed=1), 0.5)
    req = active(app)
    sq = build_squad([req], now=1e-3, squad_size=50)
    assert [(e.start, e.count) for e in sq.entries] == [(0, 50)]
    req.scheduled = 50
    sq = build_squad([req], now=2e-3, squad_size=50)
    assert [(e.start, e.count) for e in sq.entries] == [(50, 20)] and sq.entries[0].completes_request


def test_squad_ends_right_after_a_request_completes():
    a = AppState(0, "a", synthetic_profile("a", n_kernels=40, seed=1), 0.5)
    b = AppState(1, "b", synthetic_profile("b", n_kernels=40, seed=2), 0.5)
    ra, rb = active(a, rid=1), active(b, rid=2)
    ra.scheduled = 38  # two kernels left
    sq = build_squad([ra, rb], now=5e-3, squad_size=50)
    last = sq.entries[[e.request for e in sq.entries].index(ra)]
    assert last.completes_request
    assert sq.entry_of_kernel[-1] == [e.request for e in sq.entries].index(ra)
    assert sq.size < 50


def test_larger_quota_gets_more_kernels_early():
    """A 70/30 pair: the 70 % app's isolated schedule is faster, so it gets
    more kernels of the first squads (the paper's Fig. 18)."""
    prof = synthetic_profile("x", n_kernels=200, seed=3)
    big = AppState(0, "big", prof, 0.7)
    small = AppState(1, "small", prof, 0.3)
    rb, rs = active(big, rid=1), active(small, rid=2)
    sq = build_squad([rb, rs], now=1e-3, squad_size=50)
    counts = {e.request.app.name: e.count for e in sq.entries}
    assert counts["big"] > counts["small"] > 0


def test_older_request_gets_priority():
    prof = synthetic_profile("x", n_kernels=200, seed=3)
    old = AppState(0, "old", prof, 0.5)
    new = AppState(1, "new", prof, 0.5)
    r_old, r_new = active(old, arrival=0.0, rid=1), active(new, arrival=4e-3, rid=2)
    r_old.scheduled = r_new.scheduled = 10
    sq = build_squad([r_old, r_new], now=5e-3, squad_size=50)
    counts = {e.request.app.name: e.count for e in sq.entries}
    assert counts["old"] > counts.get("new", 0)


def test_tight_slo_gets_priority():
    prof = synthetic_profile("x", n_kernels=200, seed=3)
    tight = AppState(0, "tight", prof, 0.5)
    loose = AppState(1, "loose", prof, 0.5)
    tight.slo, loose.slo = tight.iso_latency, 3 * loose.iso_latency
    rt, rl = active(tight, rid=1), active(loose, rid=2)
    rt.scheduled = rl.scheduled = 5
    counts = {e.request.app.name: e.count for e in build_squad([rt, rl], 1e-3, 50).entries}
    assert counts["tight"] > counts["loose"]


def test_round_robin_ablation_alternates():
    prof = synthetic_profile("x", n_kernels=200, seed=3)
    a, b = AppState(0, "a", prof, 0.7), AppState(1, "b", prof, 0.3)
    sq = build_squad([active(a, rid=1), active(b, rid=2)], 1e-3, 50, pacing=False)
    assert [e.count for e in sq.entries] == [25, 25]
    assert sq.entry_of_kernel[:4] == (0, 1, 0, 1)


def test_squad_size_must_be_positive():
    with pytest.raises(ValueError, match="squad_size"):
        build_squad([], 0.0, 0)
