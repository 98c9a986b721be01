"""Cluster placement (bless/cluster/placement.py) and the controller over in-process agents: no Ray."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bless.cluster.agent import AgentConfig, GpuAgent
from bless.cluster.controller import STATE_FILE, Controller, LocalAgents
from bless.cluster.placement import POLICIES, GpuState, PlacedApp, check, place, with_app
from bless.policies.bless import MEMORY_HEADROOM
from bless.profiles.catalog import load_app
from bless.serving.server.errors import FailedPrecondition, InvalidArgument, NotFound

NAMES = ("resnet50", "bert", "vgg11", "resnet101")
PROFILES = {n: load_app(n, "a100") for n in NAMES}


def app(name: str, profile: str, quota: float) -> PlacedApp:
    return PlacedApp(name, PROFILES[profile], quota)


def empty(n: int) -> list[GpuState]:
    return [GpuState(f"gpu-{i}", "a100") for i in range(n)]


def constant(score_of: dict[str, float]):
    """An estimator: each resident's predicted sum with any newcomer, by resident name."""
    return lambda new, residents: [score_of[r.name] for r in residents]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from([0.1, 0.2, 0.3, 0.5, 0.7])), min_size=1, max_size=14),
    st.sampled_from(POLICIES[:2]),
    st.integers(1, 3),
)
def test_placement_never_overcommits_quota_or_memory(requests, policy, n):
    gpus = empty(n)
    for i, (profile, quota) in enumerate(requests):
        a = app(f"a{i}", profile, quota)
        p = place(a, gpus, policy)
        if p.gpu_id is None:
            assert len(p.rejected) == n and "no GPU can take" in p.why
            continue
        k = next(j for j, g in enumerate(gpus) if g.gpu_id == p.gpu_id)
        gpus[k] = with_app(gpus[k], a)
        for g in gpus:
            assert g.quota_used <= 1 + 1e-9
            assert g.memory_used_bytes <= g.usable_bytes
    assert all(g.memory_used_bytes <= g.capacity_bytes * MEMORY_HEADROOM for g in gpus)


def test_infeasible_gpus_are_named_with_the_admission_reason():
    gpus = empty(2)
    gpus[0] = with_app(gpus[0], app("big", "bert", 0.8))
    p = place(app("r", "resnet50", 0.5), gpus, "first-fit")
    assert p.gpu_id == "gpu-1"
    assert "quotas would add up to 130%" in p.rejected["gpu-0"] and "gpu-0" in p.why
    full = [with_app(g, app(f"x{i}", "bert", 0.8)) for i, g in enumerate(empty(2))]
    none = place(app("r", "resnet50", 0.5), full, "best-fit-memory")
    assert none.gpu_id is None and set(none.rejected) == {"gpu-0", "gpu-1"}


def test_memory_rule_counts_the_contexts():
    small = GpuState("gpu-0", "a100", memory_bytes=int(PROFILES["bert"].memory_bytes * 1.5))
    fit = check(app("b", "bert", 0.5), small)
    assert not fit.feasible and "GPU memory exhausted" in fit.admission.reason


def test_first_fit_takes_the_first_feasible_gpu_in_order():
    gpus = empty(3)
    gpus[0] = with_app(gpus[0], app("x", "resnet50", 0.7))
    p = place(app("r", "resnet50", 0.5), gpus, "first-fit")
    assert p.gpu_id == "gpu-1" and p.why.startswith("first-fit: gpu-1")


def test_best_fit_memory_takes_the_gpu_left_with_least_free_memory():
    gpus = empty(3)
    gpus[1] = with_app(gpus[1], app("x", "bert", 0.3))  # bert holds the most memory
    gpus[2] = with_app(gpus[2], app("y", "resnet50", 0.3))
    p = place(app("r", "resnet50", 0.3), gpus, "best-fit-memory")
    assert p.gpu_id == "gpu-1"
    assert p.scores["gpu-1"] == min(p.scores.values()) and "least free memory" in p.why


def test_colocation_takes_the_highest_predicted_sum_and_scores_a_gpu_by_its_worst_pair():
    gpus = empty(3)
    gpus[0] = with_app(with_app(gpus[0], app("a", "resnet50", 0.3)), app("b", "bert", 0.3))
    gpus[1] = with_app(gpus[1], app("c", "resnet50", 0.3))
    gpus[2] = with_app(gpus[2], app("d", "vgg11", 0.3))
    est = constant({"a": 1.6, "b": 1.0, "c": 1.3, "d": 1.2})
    p = place(app("r", "resnet50", 0.3), gpus, "colocation", estimator=est)
    assert p.gpu_id == "gpu-1" and p.scores == {"gpu-0": 1.0, "gpu-1": 1.3, "gpu-2": 1.2}
    assert "1.30" in p.why and "'c'" in p.why
    # an empty GPU: nobody slows down, it wins
    p = place(app("r", "resnet50", 0.3), [*gpus, GpuState("gpu-3", "a100")], "colocation", estimator=est)
    assert p.gpu_id == "gpu-3"


def test_colocation_on_the_simulator_prefers_the_better_measured_pair():
    gpus = empty(2)
    gpus[0] = with_app(gpus[0], app("a", "bert", 0.3))
    gpus[1] = with_app(gpus[1], app("b", "resnet50", 0.3))
    p = place(app("r", "resnet50", 0.3), gpus, "colocation")
    assert p.estimator == "simulator" and p.gpu_id == max(p.scores, key=p.scores.get)
    assert all(0.5 < s < 2.0 for s in p.scores.values())


@pytest.fixture
def two_agents(tmp_path):
    agents = {f"gpu-{i}": GpuAgent(AgentConfig(f"gpu-{i}", tmp_path / f"gpu-{i}", warm_up=False)) for i in range(2)}
    yield agents
    for a in agents.values():
        a.close()


def test_controller_places_serves_persists_and_refuses_overcommit(tmp_path, two_agents):
    c = Controller(tmp_path / "ctl", LocalAgents(two_agents))
    assert c.register("r", "resnet50", "60%")["gpu"] == "gpu-0"
    assert c.register("b", "bert", "60%")["gpu"] == "gpu-1"
    with pytest.raises(FailedPrecondition, match="no GPU can take 'v'"):
        c.register("v", "vgg11", "50%")
    assert c.register("v", "vgg11", "40%", dry_run=True)["gpu"] == "gpu-0"
    assert "v" not in c.placements
    out = c.infer("r")
    assert out["gpu"] == "gpu-0" and out["latency"] > 0
    status = {g["gpu_id"]: g for g in c.status()}
    assert [(a["name"], a["quota"]) for a in status["gpu-0"]["apps"]] == [("r", 0.6)]
    assert status["gpu-0"]["apps"][0]["succeeded"] == 1
    saved = json.loads((tmp_path / "ctl" / STATE_FILE).read_text())
    assert saved["apps"]["b"]["gpu"] == "gpu-1" and "first-fit" in saved["apps"]["b"]["placement"]["why"]
    assert Controller(tmp_path / "ctl", LocalAgents(two_agents)).gpu_of("b") == "gpu-1"  # reloaded
    c.unregister("r")
    assert c.register("v", "vgg11", "50%")["gpu"] == "gpu-0"


def test_set_quota_is_checked_stored_and_kept_by_a_restart_and_a_failover(tmp_path, two_agents):
    c = Controller(tmp_path / "ctl", LocalAgents(two_agents))
    assert c.register("r", "resnet50", "60%")["gpu"] == "gpu-0"
    assert c.register("s", "resnet50", "30%")["gpu"] == "gpu-0"
    with pytest.raises(FailedPrecondition, match=r"quota: 80% for 'r' would put gpu-0 at 110%.*at most 70%"):
        c.set_quota("r", "80%")
    with pytest.raises(InvalidArgument, match="quota"):
        c.set_quota("r", "lots")
    with pytest.raises(NotFound, match="no app 'x'"):
        c.set_quota("x", "10%")
    assert c.placements["r"]["spec"]["quota"] == pytest.approx(0.6)  # refusals change nothing
    assert c.set_quota("r", "50%")["spec"]["quota"] == pytest.approx(0.5)
    assert two_agents["gpu-0"].specs()["r"]["quota"] == pytest.approx(0.5)  # applied on the agent
    saved = json.loads((tmp_path / "ctl" / STATE_FILE).read_text())
    assert saved["apps"]["r"]["spec"]["quota"] == pytest.approx(0.5)  # and stored
    # a controller restarted while the agent ran another quota (stored, not yet applied) applies its own
    two_agents["gpu-0"].set_quota("r", 0.4)
    again = Controller(tmp_path / "ctl", LocalAgents(two_agents))
    again.reconcile()
    assert two_agents["gpu-0"].specs()["r"]["quota"] == pytest.approx(0.5)
    # a failover re-places the app with the quota it has now, not the one it was registered with
    c.agent_down("gpu-0", "killed in a test")
    assert c.placements["r"]["gpu"] == "gpu-1" and c.placements["s"]["gpu"] == "gpu-1"
    assert two_agents["gpu-1"].specs()["r"]["quota"] == pytest.approx(0.5)


def test_with_no_live_gpu_register_is_refused_and_quotas_keep_their_floor(tmp_path, two_agents):
    """Every GPU down: a registration is refused with the reason (not an internal error), and
    an app waiting for a GPU cannot be given a quota below what any GPU could host."""
    c = Controller(tmp_path / "ctl", LocalAgents(two_agents))
    c.register("r", "resnet50", "40%")
    c.agent_down("gpu-0", "killed in a test")
    c.agent_down("gpu-1", "killed in a test")
    assert "r" in c.unplaced
    with pytest.raises(FailedPrecondition, match="no live GPU to place app 'n'.*gpu-0, gpu-1"):
        c.register("n", "resnet50", "30%")
    with pytest.raises(InvalidArgument, match="below the GPU's smallest partition"):
        c.set_quota("r", "0.1%")
    assert c.set_quota("r", "20%")["spec"]["quota"] == pytest.approx(0.2)
