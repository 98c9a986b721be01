"""MIG + MPS: the planner's layouts are ones the A100 accepts, its rules hold, and the policy runs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bless.core.policy import POLICIES
from bless.harness.config import config_from_dict
from bless.harness.run import run_config
from bless.hw.gpus import A100
from bless.hw.mig import fits, layouts
from bless.policies.mig import place
from bless.policies.migmps.planner import MAX_PER_CHUNK, PlanInfeasible, PlanInputs, plan

PROFILES = [p.name for p in A100.mig_profiles]


@st.composite
def planner_inputs(draw):
    """Random tables of what the planner may choose from: rp per allowed set, heavy apps, pressures."""
    n = draw(st.integers(1, 9))
    heavy = tuple(draw(st.booleans()) for _ in range(n))
    rp = st.floats(0.0, 1.0)
    sets = {}
    for p in PROFILES:
        for i in range(n):
            if draw(st.integers(0, 9)) > 0:  # a few apps do not fit a slice
                sets[(i,), p] = (draw(rp),)
            for j in range(i + 1, n):
                if draw(st.booleans()):  # ANTT >= 1 or memory: not allowed
                    sets[(i, j), p] = (draw(rp), draw(rp))
    pressure = {(i, p): draw(st.floats(0.0, 0.5)) for i in range(n) for p in PROFILES}
    other = draw(st.sampled_from([0.0, -0.05]))
    return PlanInputs(tuple(f"a{i}" for i in range(n)), heavy, sets, pressure, other)


@settings(max_examples=60, deadline=None)
@given(planner_inputs(), st.floats(0.0, 0.3))
def test_every_plan_is_an_a100_layout_with_each_app_once_and_at_most_two_per_chunk(inputs, alpha):
    try:
        result = plan(inputs, A100, alpha)
    except PlanInfeasible as e:
        assert "migmps" in str(e)
        return
    profiles = [c.profile for c in result.chunks]
    assert place(profiles, A100.mig_memory_slices) is not None
    assert sum(p.compute_slices for p in profiles) <= 7
    assert fits(profiles, A100) == [c.start for c in result.chunks]  # the starts are a valid placement
    placed = sorted(i for c in result.chunks for i in c.apps)
    assert placed == list(range(len(inputs.apps)))
    for c in result.chunks:
        assert 1 <= len(c.apps) <= MAX_PER_CHUNK
        assert (c.apps, c.profile.name) in inputs.sets  # ANTT / memory filter honoured
        if len(c.apps) == 2:
            assert not any(inputs.heavy[i] for i in c.apps)
    assert result.fairness >= alpha - 1e-12


def test_layouts_are_exactly_the_placeable_multisets():
    assert [len(layouts(A100, c)) for c in range(1, 8)] == [5, 9, 9, 7, 4, 2, 1]
    assert not layouts(A100, 8)  # at most seven instances
    names = {"+".join(p.name for p in lay) for lay in layouts(A100, 2)}
    assert "3g.20gb+4g.20gb" in names and "4g.20gb+4g.20gb" not in names


def table(n, rp=0.3, pair_rp=0.2):
    sets = {((i,), p): (rp,) for i in range(n) for p in PROFILES}
    sets |= {((i, j), p): (pair_rp, pair_rp) for i in range(n) for j in range(i + 1, n) for p in PROFILES}
    return sets


def test_more_apps_than_slices_pairs_them_and_a_heavy_app_stays_alone():
    heavy = (True,) + (False,) * 8
    pressure = {(i, p): 0.0 for i in range(9) for p in PROFILES}
    inputs = PlanInputs(tuple(f"a{i}" for i in range(9)), heavy, table(9), pressure)
    result = plan(inputs, A100, 0.1)
    assert len(result.chunks) <= 7
    assert any(len(c.apps) == 2 for c in result.chunks)
    assert next(c for c in result.chunks if 0 in c.apps).apps == (0,)


def test_infeasible_floor_and_unplaceable_apps_say_what_to_change():
    pressure = {(i, p): 0.0 for i in range(3) for p in PROFILES}
    inputs = PlanInputs(("a", "b", "c"), (False,) * 3, table(3, rp=0.05), pressure)
    with pytest.raises(PlanInfeasible, match="worst app gets 0.050: set alpha to at most that"):
        plan(inputs, A100, 0.2)
    no_pairs = {k: v for k, v in table(9).items() if len(k[0]) == 1}
    many = PlanInputs(tuple(f"a{i}" for i in range(9)), (False,) * 9, no_pairs, {})
    with pytest.raises(PlanInfeasible, match="no layout"):
        plan(many, A100, 0.0)
    lonely = {k: v for k, v in table(2).items() if k[0] != (1,)}
    with pytest.raises(PlanInfeasible, match=r"app 1 \('b'\) fits no MIG slice"):
        plan(PlanInputs(("a", "b"), (False, False), lonely, pressure), A100, 0.0)
    with pytest.raises(ValueError, match="alpha must be in"):
        POLICIES.create("migmps", alpha=1.5)


def test_migmps_runs_a_batch_each_chunk_on_its_slice():
    apps = [
        {"app": a, "quota": 0.25, "load": {"type": "closed", "interval": 0}}
        for a in ("resnet50", "bert", "resnet50", "vgg11")
    ]
    result = run_config(config_from_dict({"policy": "migmps", "duration": 0.2, "warmup": 0.02, "apps": apps}))
    assert [a.app for a in result.apps] == ["resnet50", "bert", "resnet50#2", "vgg11"]  # config order
    assert all(a.completed > 0 for a in result.apps)
    desc = result.policy
    assert desc["policy"] == "migmps" and desc["predicted_fairness"] >= 0.1 and desc["model_rmse"] < 0.1
    assert (
        "vgg11]" in desc["slices"] and "+vgg11]" not in desc["slices"] and "[vgg11+" not in desc["slices"]
    )  # heavy: alone
