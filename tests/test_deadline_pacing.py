"""Deadline pacing (BLESS's default): the quota's promise under any neighbour load,
newcomers served within a window, and the paper's lockstep broken."""

import numpy as np
import pytest
from conftest import MEASURED_H100

from bless.core.deadline_pacing import LEAD_CAP, LEAD_RESERVE, build_deadline_squad, caution_after, lead_after
from bless.core.executor import Executor
from bless.core.lifecycle import AppState, Request
from bless.core.paced_request import PacedRequest, PaceTable
from bless.core.policy import Decision, RequestLaunch
from bless.harness.bench import bench_policy_step
from bless.harness.config import config_from_dict
from bless.harness.run import run_config
from bless.hw.gpus import get_gpu
from bless.native import is_compiled
from bless.policies.bless import DECISION_COST, WINDOW, BlessPolicy, parse_pacing
from bless.policies.common import STREAM_BUDGET
from bless.profiles.catalog import load_app
from bless.profiles.synthetic import synthetic_profile
from bless.sim.backend import SimBackend


def group(apps, policy="bless", duration=2.0, warmup=0.5, seed=0, noise=0.02):
    """A simulated A100 run of ``apps``, each ``(model, quota, load)``."""
    spec = [{"app": a, "quota": q, "load": load} for a, q, load in apps]
    cfg = {"gpu": "a100", "duration": duration, "warmup": warmup, "seed": seed, "noise": noise, "policy": policy}
    return run_config(config_from_dict({**cfg, "apps": spec}))


def pair(neighbour_load, policy="bless", duration=1.5, apps=("resnet50", "bert"), warmup=0.3, seed=0):
    """``apps[0]``'s closed loop B beside ``apps[1]`` under ``neighbour_load``, at half the GPU each."""
    return group([(apps[0], 0.5, "B"), (apps[1], 0.5, neighbour_load)], policy, duration, warmup, seed)


def served_rate(app, duration: float, since: float = 0.0) -> float:
    """Requests of ``app`` completed per second between ``since`` and ``duration``, while
    requests arrive (a backlog drains after)."""
    ends = app.arrivals + app.latencies
    return float(np.sum((ends > since) & (ends <= duration))) / (duration - since)


def linear_table(gpu, unit: float = 1.0, contexts: tuple[int, ...] = (36, 54, 72)) -> PaceTable:
    """Contexts of ``contexts`` SMs for 40 kernels that scale linearly: ``unit`` seconds each
    on the whole GPU (108 SMs)."""
    per_kernel = [108 / n * unit for n in (*contexts, 108)]
    return PaceTable(contexts, gpu.sm_count, np.array([np.arange(41) * t for t in per_kernel]))


@pytest.mark.parametrize("load", ["poisson:20", "poisson:100", {"type": "closed", "interval": 0.0}])
def test_an_overloaded_neighbour_neither_starves_an_app_nor_is_starved(load):
    """ResNet50 at 50 % keeps (close to) its ISO latency whatever BERT at 50 % asks for,
    and BERT is served at least at its quota's rate when it asks for more.  The paper's
    rule let the same neighbour push ResNet50 to 619 ms (its queue counted as lag)."""
    r50, bert = pair(load, warmup=0.0).apps
    # The calibrated interference makes even a static split 2-7 % slower than ISO here.  BERT's
    # requests past their deadlines come after ResNet50's and cannot cap it below its own
    # deadline's need: within 1 % of ISO under Poisson overload.  Beside BERT's closed loop,
    # whose requests are on time and whose tails are at risk at its quota's pace, as well: a
    # top yields to a tail only where it can still keep its own deadline (1.021x ISO when it
    # always yielded; experiments/design_log.md, item 30).
    assert r50.mean <= 1.01 * r50.iso_latency
    assert r50.percentile(99) <= 1.15 * r50.iso_latency
    # Beside a busy ResNet50 its requests run at its quota stretched by the interference (~6 %).
    quota_rate = 1 / bert.iso_latency
    offered = 20.0 if load == "poisson:20" else quota_rate * 2
    assert served_rate(bert, 1.5) >= 0.9 * min(offered, quota_rate)


def beside_overloaded(victim, neighbour, times, seed=0):
    """``victim``'s closed loop B beside ``neighbour`` under Poisson arrivals at ``times`` its
    quota's throughput for 3 s: the victim's mean over its ISO latency once the neighbour's
    backlog has built up (requests arriving from 0.5 s on), the neighbour's result and its
    quota's throughput."""
    share = 1 / load_app(neighbour, "a100").latency_at_quota(0.5)
    load = {"type": "poisson", "rate": times * share}
    mine, theirs = pair(load, duration=3.0, apps=(victim, neighbour), warmup=0.0, seed=seed).apps
    return mine.latencies[mine.arrivals >= 0.5].mean() / mine.iso_latency, theirs, share


@pytest.mark.parametrize("times", [1, 5])
def test_bert_keeps_its_iso_latency_beside_an_overloaded_resnet101(times):
    """BERT scales worst of the apps we ship and suffers most from a neighbour's DRAM traffic:
    beside ResNet-101 at 1x and 5x its quota's throughput it was 2.9 % and 1.5 % over ISO while
    ResNet-101, on time in its own ISO queue, held the earlier deadlines and lent BERT only what
    BERT's expected stretch said it needed, and only once BERT had been late; then 1.010x at 1x
    while ResNet-101, taking the top as BERT's last kernels were still queued, ran its kernels
    unrestricted over them."""
    steady, resnet, share = beside_overloaded("bert", "resnet101", times)
    assert steady <= 1.0, steady
    assert served_rate(resnet, 3.0) >= 0.9 * share, served_rate(resnet, 3.0) / share


def test_an_overloaded_app_keeps_its_quota_s_rate_beside_a_closed_loop():
    """VGG11 at 5x its quota's throughput beside BERT's closed loop B: while a BERT request is
    in flight VGG11 runs capped, and kernels queued in its capped context stay there.  With 1.5
    windows of them queued it was served at 0.95x its quota's rate; at `CAPPED_BACKLOG_QUEUED`
    (0.5), 0.99x, with BERT still at ISO."""
    steady, vgg, share = beside_overloaded("bert", "vgg11", 5)
    assert steady <= 1.01, steady
    served = served_rate(vgg, 3.0, since=0.5)  # while both run, its backlog built up
    assert served >= 0.98 * share, served / share


@pytest.mark.parametrize("times", [1, 5])
def test_an_overloaded_app_lends_a_closed_loop_only_what_its_deadline_needs(times):
    """``isolation.yaml``'s cell: ResNet50's closed loop B beside BERT at 1x and 5x its quota's
    throughput.  ResNet50's deadline beside BERT's DRAM traffic needs 60 SMs, and BERT lends it
    6 of its 54; with a whole window to spare ResNet50 was capped at 66-72 SMs over the 48 BERT
    kept, ran at 0.936x ISO, and BERT was served 0.95 of its due (what the ISO run of the same
    arrivals does); with a quarter of one (``LENDER_MARGIN``) 0.985x and 0.978-0.985."""
    share = 1 / load_app("bert", "a100").latency_at_quota(0.5)
    load = {"type": "poisson", "rate": times * share}
    r50, bert = pair(load, duration=3.0, warmup=0.5).apps
    assert r50.mean <= 1.01 * r50.iso_latency, r50.mean / r50.iso_latency
    assert bert.served_rate >= 0.97 * bert.due_rate, bert.served_rate / bert.due_rate


def test_an_overloaded_app_alone_keeps_little_queued_ahead_of_its_neighbour_s_arrivals():
    """BERT's closed loop B beside BERT at 5x its quota's throughput: alone in the loop's think
    time the overloaded app kept 1.5-2.5 windows of kernels queued unrestricted, each loop
    request ran beside them for its first 1.75 ms, and its deadline then needed 72-78 SMs, which
    the overloaded app lent: it was served 0.898 of its due.  Keeping :data:`LONE_QUEUED`
    windows, as any request alone does, 0.912."""
    share = 1 / load_app("bert", "a100").latency_at_quota(0.5)
    load = {"type": "poisson", "rate": 5 * share}
    loop, overloaded = pair(load, duration=3.0, apps=("bert", "bert"), warmup=0.5).apps
    assert loop.mean <= loop.iso_latency, loop.mean / loop.iso_latency
    assert overloaded.served_rate >= 0.905 * overloaded.due_rate, overloaded.served_rate / overloaded.due_rate


@pytest.mark.parametrize("seed", [1, 2])
def test_bert_keeps_its_iso_latency_beside_an_overloaded_vgg11_at_any_seed(seed):
    """BERT's closed loop B beside VGG11 at 5x its quota's throughput: BERT's requests that fell
    too far behind to meet their deadlines even on the whole GPU took no SMs from VGG11 and ran
    on about their quota's, slowed by VGG11's DRAM traffic: 1.013x and 1.017x ISO at seeds 1
    and 2.  They now take all but half of VGG11's quota, and VGG11 keeps its quota's rate."""
    steady, vgg, share = beside_overloaded("bert", "vgg11", 5, seed)
    assert steady <= 0.99, steady
    served = served_rate(vgg, 3.0, since=0.5)
    assert served >= 0.95 * share, served / share


SYNTHETIC = {"wide": (120, 80.0, 11), "many": (300, 30.0, 12), "long": (60, 250.0, 13)}
"""Apps we do not ship: (kernels, mean kernel us, seed) of :func:`synthetic_profile`."""


@pytest.mark.parametrize("victim, neighbour", [("wide", "many"), ("many", "long"), ("long", "wide")])
def test_an_overloaded_neighbour_leaves_any_app_its_iso_latency(victim, neighbour, tmp_path, monkeypatch):
    """The same promise on synthetic apps: the neighbour at 5x its quota's throughput."""
    for name, (kernels, mean_us, seed) in SYNTHETIC.items():
        synthetic_profile(name, n_kernels=kernels, mean_us=mean_us, seed=seed).save(tmp_path / "a100" / f"{name}.json")
    monkeypatch.setenv("BLESS_PROFILE_PATH", str(tmp_path))
    apps = [{"app": victim, "quota": 0.5, "load": "B"}, {"app": neighbour, "quota": 0.5, "load": "B"}]
    config = {"gpu": "a100", "duration": 1.5, "warmup": 0.0, "seed": 0, "noise": 0.02, "policy": "bless", "apps": apps}
    share = 1 / load_app(neighbour, "a100").latency_at_quota(0.5)
    apps[1]["load"] = {"type": "poisson", "rate": 5 * share}
    mine, theirs = run_config(config_from_dict(config)).apps
    assert mine.mean <= mine.iso_latency
    assert served_rate(theirs, 1.5) >= 0.95 * share, served_rate(theirs, 1.5) / share


def test_the_paper_rule_lets_an_overloaded_neighbour_take_the_gpu():
    """The ablation keeps the old behaviour, so the difference stays measurable."""
    r50, _ = pair("poisson:100", policy={"name": "bless", "pacing": "paper"}, duration=1.0).apps
    assert r50.mean > 3 * r50.iso_latency


def test_newcomers_start_within_a_window_of_arriving():
    """A closed loop's request is a newcomer each time: its first kernel starts within
    one window (plus a launch and a context switch) of its arrival."""
    result = pair("B", apps=("resnet50", "resnet50"))
    for app in result.apps:
        assert app.queue_times.max() <= WINDOW + 100e-6


def test_an_arrival_with_the_earlier_deadline_does_not_wait_behind_a_lone_request_s_queue():
    """Fig. 16's biased pair: ResNet50 with 8/9 of the GPU at low load, VGG11 with 1/9 in a busy
    closed loop, alone on the GPU between ResNet50's requests.  The GPU gives SMs in launch
    order, so each ResNet50 arrival waits behind the kernels VGG11 queued while it was alone:
    at 1.5 windows queued ResNet50 was 1.029x ISO, at `LONE_QUEUED` (0.75) 0.94x."""
    apps = [{"app": "resnet50", "quota": "8/9", "load": "C"}, {"app": "vgg11", "quota": "1/9", "load": "A"}]
    config = {"gpu": "a100", "duration": 1.5, "warmup": 0.3, "seed": 0, "noise": 0.02, "policy": "bless", "apps": apps}
    resnet, vgg = run_config(config_from_dict(config)).apps
    assert resnet.mean <= resnet.iso_latency, resnet.mean / resnet.iso_latency
    assert vgg.mean <= vgg.iso_latency, vgg.mean / vgg.iso_latency


@pytest.mark.parametrize("seed", [0, 3])
def test_two_bert_clients_with_random_think_times_keep_iso_with_the_lone_request_yielding(seed):
    """Fig. 13's BERT pair at load A with exponential think times: most requests overlap the
    other client's, and a request that arrives while the other is alone waits behind the
    kernels that one had queued.  With ``lone_low_priority`` (opt-in) both apps are within the
    issue's 1 % of ISO (seeds 0 and 3: 1.004 / 1.000 and 0.998 / 1.001x; by default 1.011 /
    1.008 and 1.003 / 1.016x)."""
    load = {"type": "closed", "interval": 1 / 3, "think": "exponential"}
    policy = {"name": "bless", "lone_low_priority": True}
    config = {"gpu": "a100", "duration": 4, "warmup": 0.5, "seed": seed, "noise": 0.02, "policy": policy}
    result = run_config(config_from_dict({**config, "apps": [{"app": "bert", "quota": 0.5, "load": load}] * 2}))
    ratios = [a.mean / a.iso_latency for a in result.apps]
    assert max(ratios) <= 1.01, ratios


@pytest.mark.parametrize("model, seed", [("resnet50", 0), ("resnet50", 3), ("resnet101", 1), ("nasnet", 3)])
def test_identical_closed_loops_drift_apart_and_both_beat_iso(model, seed):
    """Two identical deterministic closed loops: the paper's rule pulls them into lockstep
    (experiments/lockstep.py), deadline pacing lets one finish early and both beat ISO.  At
    some seeds the loops started close enough that capping the top for its twin kept them a
    static split, in lockstep at 1.01-1.09x ISO (ResNet50 and NASNet at seed 3, ResNet-101 at
    seed 1 0.97x), until the cap was left off where it does not save the twin."""
    a, b = pair("B", apps=(model, model), seed=seed).apps
    assert a.mean < 0.9 * a.iso_latency and b.mean < 0.9 * b.iso_latency
    n = min(len(a.arrivals), len(b.arrivals))
    assert np.median(np.abs(a.arrivals[:n] - b.arrivals[:n])) > 1e-3


def test_pacing_names_and_errors():
    assert parse_pacing(True) == "paper" and parse_pacing(False) == "none"
    assert BlessPolicy().pacing == "deadline"
    with pytest.raises(ValueError, match="pacing must be one of deadline, paper, none"):
        BlessPolicy(pacing="edf")
    with pytest.raises(ValueError, match="window must be a positive number of seconds"):
        BlessPolicy(window=0)
    for bad in (-1.0, "1", True):
        with pytest.raises(ValueError, match="caution_gain must be a number >= 0"):
            BlessPolicy(caution_gain=bad)
    for name in ("lend", "wake_when_due"):
        with pytest.raises(ValueError, match=f"{name} must be true or false, got 'no'"):
            BlessPolicy(**{name: "no"})
    for name in ("decide_per_kernel", "decide_per_launch"):
        with pytest.raises(ValueError, match=f"{name} must be a number of seconds >= 0, got -1"):
            BlessPolicy(**{name: -1})


def test_a_deadline_pacing_decision_costs_the_host_per_launch_not_per_kernel():
    """A step's host time follows the requests it launches (``bless bench overhead``): a lone
    request's first window of 40 kernels and a pair's windows of 1 and 2 kernels cost one and
    two launches; the paper's squads stay charged per kernel."""
    gpu = get_gpu("a100")
    prof = synthetic_profile("cost", n_kernels=60, mean_us=25, seed=1)
    apps = [AppState(i, f"a{i}", prof, 0.5) for i in range(2)]
    reqs = [Request(i, a, 0.0) for i, a in enumerate(apps)]
    policy = BlessPolicy()
    policy.setup(apps, gpu)
    lone = Decision((RequestLaunch(reqs[0], 0, 40),))
    pair = Decision((RequestLaunch(reqs[0], 0, 1), RequestLaunch(reqs[1], 0, 2, 54)))
    per_launch = DECISION_COST["deadline"].per_launch
    assert policy.decision_cost(lone) == pytest.approx(per_launch)
    assert policy.decision_cost(pair) == pytest.approx(2 * per_launch)
    assert BlessPolicy(pacing="paper").decision_cost(lone) == pytest.approx(40 * DECISION_COST["paper"].per_kernel)
    free = BlessPolicy(decide_per_launch=0.0)
    assert free.decision_cost(pair) == 0.0 and free.describe()["decide_per_launch"] == 0.0


def test_a_late_latency_critical_request_still_goes_before_best_effort_work():
    """Past its deadline, a request goes behind those that can still meet theirs, never
    behind a best-effort request: the best-effort app only takes what is left."""
    gpu = get_gpu("a100")
    lc = AppState(0, "lc", synthetic_profile("lc", seed=1), 0.5)
    be = AppState(1, "be", synthetic_profile("be", seed=2), 0.5, priority="best-effort")
    policy = BlessPolicy()
    policy.setup([lc, be], gpu)
    for rid, app in enumerate((lc, be)):
        app.submit(Request(rid, app, 0.0))
    late = 10 * lc.iso_latency  # far past the latency-critical request's deadline
    decision = policy.step(late, [lc, be])
    first = decision.launches[0]
    assert first.request.app is lc and first.sm_limit is None  # the top, unrestricted
    assert all(p.request.app is lc for p in decision.launches)


def test_a_latency_critical_app_beside_a_best_effort_loop_keeps_near_its_solo_p99():
    """The priority experiment's pair: ResNet50 under Poisson arrivals at half its solo
    throughput beside ResNet50's training loop, best-effort, iterating back to back.  The
    best-effort app is owed no quota, so however long both have been busy the latency-critical
    top is never capped for it (``SATURATION_HOLD``): capped, its P99 was 78 % over its solo
    P99, against 5 % (``results/priority/table.md``)."""
    common = {"gpu": "a100", "duration": 2.0, "warmup": 0.5, "seed": 0, "noise": 0.02}
    rate = round(0.5 / float(load_app("resnet50", "a100").T[-1]), 3)
    lc = {"app": "resnet50", "quota": 0.5, "load": {"type": "poisson", "rate": rate}}
    be = {"app": "resnet50_train", "quota": 0.5, "load": {"type": "closed", "interval": 0}, "priority": "best-effort"}
    pair = run_config(config_from_dict({**common, "policy": "bless", "apps": [lc, be]})).apps[0]
    solo = run_config(config_from_dict({**common, "policy": "unbound", "apps": [{**lc, "quota": 1}]})).apps[0]
    assert pair.percentile(99) <= 1.15 * solo.percentile(99), pair.percentile(99) / solo.percentile(99)


def test_every_late_request_runs_where_the_quotas_contexts_add_up_to_more_than_the_gpu():
    """Seven quotas of 1/7 (15.4 SMs) fit the GPU, but their contexts, rounded up to the
    levels, take 7 x 18 = 126 of its 108 SMs.  Six requests past their deadlines beside an
    on-time top each still get a context of at least their quota's SMs (they were left with
    none, every step: the top ran alone and the six were starved for good)."""
    gpu = get_gpu("a100")
    table = linear_table(gpu, contexts=tuple(range(6, 108, 6)))
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 1 / 7) for i in range(7)]
    top = PacedRequest(Request(0, apps[0], 0.0), 1000.0, table, 108 / 7, 1.0)
    late = [PacedRequest(Request(i, apps[i], 0.0), -1.0, table, 108 / 7, 1.0) for i in range(1, 7)]
    launches = build_deadline_squad([top, *late], 0.0, 1.0).launches
    limits = {launch.request.rid: launch.sm_limit for launch in launches}
    assert set(limits) == set(range(7))
    assert all(limits[i] is not None and limits[i] >= 12 for i in range(1, 7))


def test_a_steps_kernels_leave_in_the_order_they_would_start_alone_and_none_is_lost():
    """Every kernel of a step's launches is in its launch order once, in the order the kernels
    would start alone in their contexts from now (ties: the earlier launch first), for requests
    whose kernels take uneven times and interleave."""
    gpu = get_gpu("a100")
    rng = np.random.default_rng(7)
    contexts = tuple(range(6, 108, 6))
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 1 / 7) for i in range(7)]
    paced = []
    for i, app in enumerate(apps):
        solo = rng.choice([0.05, 0.1, 0.2], size=40) * rng.uniform(0.5, 2.0)  # seconds on the whole GPU
        prefix = np.array([np.concatenate(([0.0], np.cumsum(solo * 108 / n))) for n in (*contexts, 108)])
        request = Request(i, app, 0.0)
        request.scheduled = int(rng.integers(0, 10))
        paced.append(PacedRequest(request, 1000.0 if i == 0 else -1.0, PaceTable(contexts, 108, prefix), 108 / 7, 1.0))
    step = build_deadline_squad(paced, 0.0, 1.0)
    assert len(step.launches) == 7
    starts = []
    for j, (launch, row) in enumerate(zip(step.launches, step.rows)):
        line = next(p for p in paced if p.request is launch.request).table.lines[row]
        first = launch.start
        starts += [(line[k] - line[first], j) for k in range(first, first + launch.count)]
    assert step.launch_of_kernel == tuple(j for _, j in sorted(starts))


def test_seven_closed_loops_at_a_seventh_each_all_make_progress():
    """The same end to end: seven closed loops with no think time at quotas of 1/7, where
    every app was served near its quota's latency before an on-time app took the GPU alone
    (VGG11 at 0.29x its ISO target, the others at 2.1-3.3x).  Now none is starved: each within
    the interference of a static split (GSLICE: 1.16-1.25x)."""
    apps = ["resnet50", "resnet50", "resnet101", "bert", "nasnet", "vgg11", "resnet101"]
    loop = {"type": "closed", "interval": 0}
    result = group([(a, 1 / 7, loop) for a in apps], duration=1.0, warmup=0.2, noise=0.0)
    ratios = [a.mean / a.iso_latency for a in result.apps]
    assert max(ratios) < 1.4 and min(ratios) > 0.9, ratios


def test_an_app_over_its_share_yields_the_top_and_lends_to_it():
    """An app over its share (requests queued behind its active one, and busy without a gap
    for ``SATURATION_HOLD`` of its latency targets) has its quota's throughput to claim, not
    the top: a neighbour within its share keeps the top even with the later deadline, and
    takes from it the SMs its deadline needs beyond its quota whether or not its own app has
    been late (with a window to spare only if it has: the margin cost the overloaded app its
    quota's rate where the top did not need it); the overloaded request runs at its quota when
    urgent.  A top that misses its deadline even on the whole GPU still takes SMs, each of which
    shortens its lateness: all but half the overloaded app's quota (``HOPELESS_KEEP``), and none
    from an app within its share (that lends only where it still meets its own deadline).  The
    overloaded app lends from whatever context its own deadline gave it, its quota's or larger.
    Requests queued behind a request of an app not yet busy that long are a burst: its
    requests keep their place in deadline order."""
    gpu = get_gpu("a100")
    table = linear_table(gpu, contexts=(18, 36, 54, 72, 90))
    over, calm = (AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 0.5) for i in range(2))

    def squad(calm_deadline, backlog, caution=None, head_quota=54.0, head_deadline=70.0, held=True):
        over.queue.clear()
        if backlog:
            over.submit(Request(9, over, 0.0))
        saturated = (over.index,) if held else ()
        # The overloaded app's request: 80 s at 54 SMs, deadline 70 s: it cannot wait.
        head = PacedRequest(Request(0, over, 0.0), head_deadline, table, head_quota, 1.0)
        # The neighbour's: 10 kernels left, slowed 1.2x: 24 s at its 54 SMs, 18 s at 72, 14.4 s
        # at 90, 12 s on the whole GPU.
        other = PacedRequest(Request(1, calm, 0.0), calm_deadline, table, 54.0, 1.2)
        other.request.scheduled = 30
        launches = build_deadline_squad([head, other], 0.0, 1.0, caution=caution, saturated=saturated).launches
        return {launch.request.rid: "bubbles" if launch.low_priority else launch.sm_limit for launch in launches}

    assert squad(90.0, backlog=True) == {0: 54, 1: None}  # behind the later deadline, at its quota
    # Within its share (busy for long, nothing queued): the top; the other waits.
    assert squad(90.0, backlog=False) == {0: None, 1: "bubbles"}
    assert squad(90.0, backlog=True, held=False) == {0: None, 1: "bubbles"}  # a burst: the top too
    assert squad(20.0, backlog=True) == {0: 36, 1: None}  # lends the 18 SMs the top's deadline needs
    assert squad(18.5, backlog=True) == {0: 36, 1: None}  # exactly: the top's app has not been late
    assert squad(20.0, backlog=False) == {0: 54, 1: None}  # an on-time app lends only to a late top
    assert squad(20.0, backlog=True, held=False) == {0: 54, 1: None}  # and so does a burst's
    assert squad(10.0, backlog=True) == {0: 36, 1: None}  # hopeless: 36 of the 90 context's, keeping half
    assert squad(10.0, backlog=False, caution={1: 1.0}) == {0: 54, 1: None}  # within its share: none
    # At a quota of 36 SMs with a deadline that needs 54 of the 54 the top's quota leaves, it
    # lends from there too: down to 18, the top's need taken from its quota's 36.
    assert squad(90.0, backlog=True, head_quota=36.0, head_deadline=85.0) == {0: 54, 1: None}
    assert squad(20.0, backlog=True, head_quota=36.0, head_deadline=85.0) == {0: 18, 1: None}


def test_apps_over_their_share_lend_each_other_nothing_and_a_saturated_top_keeps_to_its_quota():
    """Two apps with requests queued: once both have been busy without a gap for
    ``SATURATION_HOLD`` of their latency targets, both are over their share and each is owed
    its quota's throughput, so the top keeps to what the other's quota leaves, as a static
    split would.  Before that, a burst that may soon drain, the top runs unrestricted, and the
    one behind lends it only if that one's app is over its share and the top's is not (item 9's
    lending is for a top whose app is within its share)."""
    gpu = get_gpu("a100")
    table = linear_table(gpu, contexts=(18, 36, 54, 72, 90))
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 0.5) for i in range(2)]

    def squad(saturated=()):
        for app in apps:
            app.queue.clear()
            app.submit(Request(9 + app.index, app, 0.0))
        # The top's deadline needs 72 SMs, 18 beyond its quota's 54; the other's request cannot
        # wait a window either (80 s of kernels at its quota).
        top = PacedRequest(Request(0, apps[0], 0.0), 40.0 * 108 / 72 + 0.5, table, 54.0, 1.0)
        other = PacedRequest(Request(1, apps[1], 0.0), 79.5, table, 54.0, 1.0)
        launches = build_deadline_squad([top, other], 0.0, 1.0, saturated=saturated).launches
        return {launch.request.rid: launch.sm_limit for launch in launches}

    assert squad() == {0: None, 1: 54}  # two bursts: the other, on time, lends nothing
    assert squad(saturated=(1,)) == {0: None, 1: 36}  # the other over its share: it lends 18
    assert squad(saturated=(0,)) == {0: 36, 1: None}  # the first over its share: it yields the top, lends 18
    assert squad(saturated=(0, 1)) == {0: 54, 1: 54}  # both: a static split at the quotas


@pytest.mark.parametrize("think", [0.0, 0.1])
def test_saturating_closed_loops_are_served_as_a_static_split_serves_them(think):
    """ResNet50 and BERT at half the GPU each, two clients each, thinking nothing or a tenth of
    their solo latency (a client's round trip): both apps ask for more than their quota the
    whole run, each owed its quota's throughput.  BLESS served each 0.83 of it with no think
    time when each lent the other's request and the unrestricted top took SMs in launch order
    from the other's context, where GSLICE's static split serves 0.94 / 0.90; now each app's
    mean is within 3 % of GSLICE's (0.95 / 0.89 either way)."""
    saturating = {"type": "closed", "interval": think, "clients": 2}
    apps = [("resnet50", 0.5, saturating), ("bert", 0.5, saturating)]
    bless = group(apps, duration=3.0).apps
    gslice = group(apps, policy="gslice", duration=3.0).apps
    for ours, static in zip(bless, gslice):
        assert ours.mean <= 1.03 * static.mean, (ours.app, ours.mean / static.mean)


def test_the_top_yields_the_sms_to_the_last_kernels_of_a_request_served_before_it():
    """A request with all its kernels launched still needs SMs for those queued: a top served
    after it (its app over its share, or a later deadline) then runs in its unrestricted
    context's low-priority stream, on the SMs they leave (in an ordinary stream its kernels
    would take the SMs they wait for; at its quota it would lose the ones they leave); once
    they are done, or where they come after the top, it runs as any top.  A top of an app
    within its share yields only where it could wait for the tail's end and still finish
    on the whole GPU with a window to spare: its own deadline is a promise too."""
    gpu = get_gpu("a100")
    table = linear_table(gpu)
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 0.5) for i in range(2)]

    def squad(queued_until, backlog, tail_deadline=50.0, tail_backlog=False, drains=0.0, deadline=70.0):
        for app, over in ((apps[0], tail_backlog), (apps[1], backlog)):
            app.queue.clear()
            if over:
                app.submit(Request(9, app, 0.0))
        saturated = [app.index for app in apps if app.backlogged]  # over their share: busy for long
        done = PacedRequest(Request(0, apps[0], 0.0), tail_deadline, table, 54.0, 1.0)
        done.request.scheduled = 40  # all launched, the last expected to end at ``queued_until``
        done.busy_until = queued_until
        done.row = table.full  # unrestricted: 1 s a kernel, so ``queued_until`` kernels queued
        # 80 s at its quota's 54 SMs, 40 s on the whole GPU, deadline 70 s: it cannot wait a
        # window, but it can wait for the tail.  ``drains``: seconds each kernel of a neighbour
        # waits for the SMs its blocks fill in a low-priority stream.
        other = PacedRequest(Request(1, apps[1], 0.0), deadline, table, 54.0, 1.0, drains=drains)
        launch = build_deadline_squad([done, other], 0.0, 1.0, saturated=saturated)
        return [(e.request.rid, e.sm_limit, e.low_priority) for e in launch.launches]

    assert squad(3.0, backlog=True) == [(1, None, True)]  # over its share: on what the queued kernels leave
    assert squad(0.0, backlog=True) == [(1, None, False)]  # the earlier request has ended
    assert squad(3.0, backlog=False) == [(1, None, True)]  # a later deadline than the tail's
    assert squad(3.0, backlog=False, tail_deadline=90.0) == [(1, None, False)]  # an earlier one: as usual
    assert squad(3.0, backlog=False, tail_deadline=-1.0) == [(1, None, True)]  # a late tail, whatever its deadline
    assert squad(3.0, backlog=True, tail_backlog=True) == [(1, None, False)]  # the tail's app is over its share
    # 3 s for the tail, 40 s on the whole GPU and a window: a deadline at 44 s affords the wait,
    # one at 43.5 s does not, unless the top's app is over its share.
    assert squad(3.0, backlog=False, tail_deadline=40.0, deadline=44.0) == [(1, None, True)]
    assert squad(3.0, backlog=False, tail_deadline=40.0, deadline=43.5) == [(1, None, False)]
    assert squad(3.0, backlog=True, tail_deadline=40.0, deadline=43.5) == [(1, None, True)]
    # Blocks that hold the tail's 3 kernels back 1 s each still leave it on time; 20 s each would
    # not: the top waits for the tail (nothing launched; the tail's end wakes pacing), unless its
    # app is over its share.
    assert squad(3.0, backlog=False, drains=1.0) == [(1, None, True)]
    assert squad(3.0, backlog=False, drains=20.0) == []
    assert squad(3.0, backlog=True, drains=20.0) == [(1, None, True)]


@pytest.mark.parametrize("load", ["A", "B", {"type": "closed", "interval": 1 / 3, "think": "exponential"}])
def test_bert_base_and_vgg11_keep_their_iso_latency_on_green_contexts(load):
    """BERT-base's short requests beside VGG11's long ones, whose convolutions hold every SM of
    an H100 for 3-7 ms each, on green contexts (groups of 8 SMs: the halves are 64 and 68 SMs,
    ISO is priced at 66).  Two failures this pair showed: VGG11 spent its requests in a
    60-SM context beside BERT-base's top (1.08x ISO, on the GPU as on the simulator), and
    BERT-base's last kernels, all launched, waited behind a newly arrived VGG11 request's
    convolutions (1.23x at load B)."""
    r = run_config(
        config_from_dict(
            {
                "gpu": "h100",
                "mechanism": "green",
                "duration": 3,
                "warmup": 0.5,
                "seed": 0,
                "noise": 0.02,
                "apps": [
                    {"app": str(MEASURED_H100 / f"{name}.json"), "quota": 0.5, "load": load}
                    for name in ("bert_base", "vgg11")
                ],
            }
        )
    )
    ratios = [a.mean / a.iso_latency for a in r.apps]
    assert max(ratios) <= 1.01, ratios


def test_a_lone_request_runs_in_its_low_priority_stream_unless_its_app_is_over_its_share():
    """``lone_low_priority`` (opt-in): alone with kernels to launch, a request has every SM
    whatever its stream's priority; in the low-priority one an arrival's kernels take the SMs as
    its queued blocks drain, rather than waiting behind them.  An app over its share keeps its
    ordinary stream (what its quota promises it is throughput), and so does a request beside
    another."""
    gpu = get_gpu("a100")
    table = linear_table(gpu)
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 0.5) for i in range(2)]

    def squad(requests, backlog=False, lone_low_priority=True):  # the opt-in, unless said
        apps[0].queue.clear()
        if backlog:  # and busy for long: over its share
            apps[0].submit(Request(9, apps[0], 0.0))
        paced = [PacedRequest(Request(i, apps[i], 0.0), 60.0 + i, table, 54.0, 1.0) for i in range(requests)]
        saturated = (0,) if backlog else ()
        launches = build_deadline_squad(
            paced, 0.0, 1.0, lone_low_priority=lone_low_priority, saturated=saturated
        ).launches
        return [(e.request.rid, e.sm_limit, e.low_priority) for e in launches]

    assert squad(1) == [(0, None, True)]
    assert squad(1, lone_low_priority=False) == [(0, None, False)]  # the default
    assert squad(1, backlog=True) == [(0, None, False)]
    assert (0, None, False) in squad(2)  # the top beside a waiting request


def test_a_top_that_can_spare_an_arrival_its_time_lets_it_pass():
    """A top runs in its low-priority stream, so that an idle app's request arriving now with an
    earlier deadline is not queued behind its kernels, when it can spare that arrival its time:
    needing the whole GPU for longer than the arrival's latency target, with the slack at its
    quota for two such requests; for no longer, if it still meets its deadline (a window to
    spare) at its quota while one arrival runs and on the whole GPU after.  Over its share or
    not (its deadlines are its ISO queue's: with the slack it is ahead of its quota's
    throughput).  Otherwise, or with no such app, it keeps its ordinary stream."""
    gpu = get_gpu("a100")
    table = linear_table(gpu)  # 40 kernels of 1 s on the whole GPU; 80 s at the quota's 54 SMs
    app = AppState(0, "a0", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=0), 0.5)

    def top_low(deadline, arrivals, backlog=False):
        app.queue.clear()
        if backlog:  # and busy for long: over its share
            app.submit(Request(9, app, 0.0))
        paced = [PacedRequest(Request(0, app, 0.0), deadline, table, 54.0, 1.0)]
        saturated = (0,) if backlog else ()
        return build_deadline_squad(paced, 0.0, 1.0, arrivals=arrivals, saturated=saturated).launches[0].low_priority

    # Longer than the arrival's 20 s: 80 s at its quota, a window and the slack for two arrivals.
    assert top_low(121.5, [(50.0, 20.0)])
    assert not top_low(120.5, [(50.0, 20.0)])
    # No longer than 40 s: 40 s at its quota (20 kernels), then 20 s on the whole GPU, and a window.
    assert top_low(61.5, [(50.0, 40.0)])
    assert not top_low(60.5, [(50.0, 40.0)])
    # An arrival that would outlast it: it is done at its quota (80 s) first.
    assert top_low(81.5, [(50.0, 100.0)])
    assert not top_low(80.5, [(50.0, 100.0)])
    assert not top_low(200.0, [(250.0, 40.0)])  # the arrival's deadline is later: it would wait
    assert not top_low(200.0, [])  # no app idle
    assert top_low(61.5, [(50.0, 40.0)], backlog=True)  # ahead of its quota's throughput
    assert not top_low(60.5, [(50.0, 40.0)], backlog=True)


def test_a_large_quota_keeps_iso_beside_small_ones_running_ahead():
    """BERT at 15/18 of the GPU has 6 % between its ISO latency and its latency alone.  Beside
    ResNet-101 and VGG11 at 1/18 and 2/18, which run far ahead of their deadlines in BERT's
    think time, each of its requests waited behind the windows of kernels theirs kept queued
    (1.038x ISO); they let it pass now, and still run far below their own ISO latencies."""
    loop = {"type": "closed", "interval": 1 / 3}
    apps = [("bert", "15/18", loop), ("resnet101", "1/18", loop), ("vgg11", "2/18", loop)]

    def ratios(yield_to_arrivals):
        r = group(apps, {"name": "bless", "yield_to_arrivals": yield_to_arrivals})
        return [a.mean / a.iso_latency for a in r.apps]

    bert, *small = ratios(True)
    assert bert <= 1.0 and max(small) <= 0.7
    assert ratios(False)[0] > 1.01  # the ablation: the case this covers


def test_a_small_quota_alone_on_the_gpu_lets_a_large_quotas_arrivals_pass():
    """ResNet50's closed loop at 3/18 of the GPU, alone in the think time of BERT's at 15/18,
    runs ahead of the whole GPU's pace but not of its quota's.  Priced at its quota for one BERT
    request and the whole GPU after, it lets BERT's arrivals pass, and both keep their ISO
    latency; in its ordinary stream BERT's arrivals wait behind its queued kernels (1.022-1.025x
    ISO at seeds 0-3, as when the slack at its quota to its request's end had to cover two BERT
    requests)."""
    apps = [
        ("bert", "15/18", {"type": "closed", "interval": 1 / 3}),
        ("resnet50", "3/18", {"type": "closed", "interval": 2 / 3}),
    ]

    def ratios(yield_to_arrivals):
        r = group(apps, {"name": "bless", "yield_to_arrivals": yield_to_arrivals})
        return [a.mean / a.iso_latency for a in r.apps]

    bert, resnet50 = ratios(True)
    assert bert <= 1.0 and resnet50 <= 1.0
    assert ratios(False)[0] > 1.01  # the ablation: the case this covers


@pytest.mark.parametrize(
    ("victim", "interval", "neighbour"), [("resnet50", 1 / 3, "vgg11"), ("bert", 2 / 3, "nasnet")], ids=str
)
def test_a_large_quota_keeps_iso_beside_a_small_overloaded_app_running_ahead(victim, interval, neighbour):
    """A closed loop at 16/18 of the GPU beside an app at 2/18 and 5x its quota's throughput:
    the small app, over its share but far ahead of its ISO queue in the loop's think time, let
    no arrival pass, and each of the loop's requests waited behind the 1.5-2.5 windows it kept
    queued (ResNet50 1.084x, BERT 1.074x ISO; 28 of 100 such shipped pairs over 1 %).  Now it
    lets them pass while it has the slack, and alone it keeps :data:`LONE_QUEUED` windows
    queued, each enough on its own here (without letting them pass: 0.958x, 0.998x); it is
    still served above its quota's throughput."""
    share = 1 / load_app(neighbour, "a100").latency_at_quota(2 / 18)
    apps = [
        (victim, "16/18", {"type": "closed", "interval": interval}),
        (neighbour, "2/18", {"type": "poisson", "rate": 5 * share}),
    ]

    loop, overloaded = group(apps, "bless").apps
    assert loop.mean <= loop.iso_latency
    assert served_rate(overloaded, 2.0, since=0.5) >= share


def test_a_long_app_beside_a_short_one_keeps_its_iso_latency():
    """VGG11's short requests come back before ResNet101's long one is done: a projection that
    counts on the GPU freed after each of them leaves ResNet101 9 % over ISO; caution learnt
    from the lateness brings it to its quota's promise, and VGG11 still far below its own."""
    r = pair("B", apps=("vgg11", "resnet101"), duration=2.0)
    short, long = (a.mean / a.iso_latency for a in r.apps)
    assert long <= 1.03
    assert short <= 0.85


def test_caution_follows_lateness_and_stays_in_bounds():
    c = caution_after(0.0, 0.002, 0.020)
    assert 0.0 < c < 1.0  # late by a tenth of the target: a tenth more caution
    assert caution_after(c, -0.002, 0.020) < c  # early: back towards counting on the bubbles
    assert caution_after(0.9, 1.0, 0.020) == 1.0
    assert caution_after(0.1, -1.0, 0.020) == 0.0


def test_a_lead_is_what_requests_finished_early_less_a_reserve_and_stays_under_its_cap():
    target = 0.020
    lead = lead_after(0.0, 0.004, target)  # early by a fifth of its target
    assert lead == pytest.approx(0.004 - LEAD_RESERVE * target)
    assert lead_after(lead, -0.003, target) == pytest.approx(lead - 0.003 - LEAD_RESERVE * target)  # late: a debt
    assert lead_after(lead, 1.0, target) == pytest.approx(LEAD_CAP * target)  # a long time alone banks no more
    assert lead_after(0.0, LEAD_RESERVE * target, target) == pytest.approx(0.0)  # on its reserve: nothing to give


def test_an_app_ahead_of_its_deadlines_gives_its_lead_to_a_neighbour_behind():
    """``give_lead`` (opt-in).  NASNet's closed loop at 11/18 of the GPU beside ResNet50's at 7/18
    (load A): in most of each other's requests, NASNet at its quota's context falls behind
    (1.012-1.026x ISO at seeds 0-3) while ResNet50 runs ahead (0.92x).  ResNet50's requests take
    its lead as later deadlines, so NASNet is the earlier deadline more often: 0.986-1.000x,
    ResNet50 0.93-0.94x."""
    apps = [("resnet50", "7/18", "A"), ("nasnet", "11/18", "A")]

    def ratios(give_lead):
        r = group(apps, {"name": "bless", "give_lead": give_lead})
        return [a.mean / a.iso_latency for a in r.apps]

    assert max(ratios(True)) <= 1.0
    assert ratios(False)[1] > 1.01  # the default: the case this covers


def test_a_long_app_beside_big_kernels_keeps_its_iso_latency():
    """NASNet's small kernels queued beside VGG11's big ones run far slower than the walk
    priced them when VGG11 comes back; seeing the windows' real ends keeps NASNet to its
    quota's promise (it was 7 % over ISO when pacing trusted its own expectations)."""
    r = pair("B", apps=("vgg11", "nasnet"), duration=2.0)
    short, long = (a.mean / a.iso_latency for a in r.apps)
    assert long <= 1.01
    assert short <= 0.85


class _Launch:
    def __init__(self) -> None:
        self.end: float | None = None


def test_pacing_corrects_its_expectations_with_what_the_device_did():
    gpu = get_gpu("a100")
    app = AppState(0, "a", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=1), 0.5)
    table = PaceTable((54,), gpu.sm_count, np.cumsum(np.ones((2, 41)), axis=1) - 1.0)
    paced = PacedRequest(Request(0, app, 0.0), 10.0, table, 54.0, 1.0)
    first, second = _Launch(), _Launch()
    paced.busy_until = 1.0
    paced.launched(first)
    paced.busy_until = 2.0
    paced.launched(second)
    paced.observe(1.5)  # the first window, expected done at 1.0, still runs: at least until now
    assert paced.busy_until == pytest.approx(2.5)
    first.end = 1.75
    paced.observe(1.8)  # it ended at 1.75: the second, launched behind it, moves with it
    assert paced.busy_until == pytest.approx(2.75)
    second.end = 2.25
    paced.observe(2.3)  # done early: nothing in flight any more
    assert paced.busy_until == pytest.approx(2.25) and not paced.windows


def test_a_waiting_request_wakes_pacing_when_it_must_start():
    """A request that can wait is looked at again when it no longer can (its deadline less
    its remaining kernels at its quota and a window), not every window: waking every window
    made a third of the steps with 4 closed loops launch nothing."""
    gpu = get_gpu("a100")
    table = PaceTable((54,), gpu.sm_count, np.cumsum(np.ones((2, 41)), axis=1) - 1.0)  # 40 kernels of 1 s
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 0.5) for i in range(2)]
    top = PacedRequest(Request(0, apps[0], 0.0), 170.0, table, 54.0, 1.0, busy_until=300.0)  # plenty queued
    waiting = PacedRequest(Request(1, apps[1], 0.0), 200.0, table, 54.0, 1.0)
    must_start = 200.0 - 40.0 - 1.0  # deadline - kernels at its quota - one window
    assert build_deadline_squad([top, waiting], 0.0, 1.0).wake_at == pytest.approx(must_start)
    assert build_deadline_squad([top, waiting], must_start - 0.01, 1.0).launches == ()
    (launch,) = build_deadline_squad([top, waiting], must_start + 0.01, 1.0).launches
    assert launch.request is waiting.request and launch.sm_limit == 54
    # The ablation (wake_when_due False) looks again every window.
    assert build_deadline_squad([top, waiting], 0.0, 1.0, wake_when_due=False).wake_at == pytest.approx(1.0)


def test_a_late_top_takes_what_its_deadline_needs_from_a_neighbour_that_still_meets_its_own():
    """A top that has been finishing late (caution) and needs more than its quota to meet its
    deadline gets it from an urgent neighbour that has not, where the neighbour, slowed until the
    top is done and then on the whole GPU, still meets its own deadline with a window to spare,
    or from a neighbour whose app is over its share."""
    gpu = get_gpu("a100")
    table = linear_table(gpu)
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 0.5) for i in range(2)]

    def squad(caution, neighbour_deadline=80.5, lend=True, backlog=False):
        top = PacedRequest(
            Request(0, apps[0], 0.0), 16.0, table, 54.0, 1.0
        )  # 10 kernels left: 20 s at 54 SMs, 15 at 72
        top.request.scheduled = 30
        neighbour = PacedRequest(Request(1, apps[1], 0.0), neighbour_deadline, table, 54.0, 1.0)  # 80 s at 54 SMs
        apps[1].queue.clear()
        if backlog:  # a request waits behind the neighbour's, and has for long: over its share
            apps[1].submit(Request(2, apps[1], 0.0))
        saturated = (1,) if backlog else ()
        launches = build_deadline_squad(
            [top, neighbour], 0.0, 1.0, caution=caution, lend=lend, saturated=saturated
        ).launches
        return {launch.request.rid: launch.sm_limit for launch in launches}

    # 36 SMs until the top is done at 15 s (15 of its 120 s of work), then 35 s on the whole GPU: done at 50 s
    assert squad({0: 0.5}) == {0: None, 1: 36}
    assert squad({}) == {0: None, 1: 54}  # a top that has kept its deadlines lends nothing
    assert squad({0: 0.5, 1: 0.5}) == {0: None, 1: 54}  # nor does a neighbour that has been late
    assert squad({0: 0.5}, neighbour_deadline=50.5) == {0: None, 1: 54}  # one that would miss its own
    assert squad({0: 0.5}, lend=False) == {0: None, 1: 54}  # the ablation
    # An app over its share (requests queued behind this one) lends whatever its own deadline
    # and caution: what its quota promises it is throughput.
    assert squad({0: 0.5, 1: 0.5}, neighbour_deadline=50.5, backlog=True) == {0: None, 1: 36}
    assert squad({0: 0.5, 1: 0.5}, neighbour_deadline=50.5, backlog=True, lend=False) == {0: None, 1: 54}


def test_a_late_urgent_request_takes_what_its_deadline_needs_from_the_top_s_spare_quota():
    """The reverse of lending: a sole urgent request whose app has been the latest, that
    misses its deadline at its quota beside the top, takes SMs of the top's quota that the
    top's own deadline does not need."""
    gpu = get_gpu("a100")
    table = linear_table(gpu)
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 0.5) for i in range(2)]

    def squad(caution, top_deadline=60.0, lend=True):
        # The top: 10 kernels left, 10 s on the whole GPU, 30 s at 36 SMs.  The other: 80 s at
        # its 54 SMs, slowed 1.2x by its neighbour's interference: 96 s there, 72 s at 72 SMs.
        top = PacedRequest(Request(0, apps[0], 0.0), top_deadline, table, 54.0, 1.0)
        top.request.scheduled = 30
        urgent = PacedRequest(Request(1, apps[1], 0.0), 74.0, table, 54.0, 1.2)
        launches = build_deadline_squad([top, urgent], 0.0, 1.0, caution=caution, lend=lend).launches
        return {launch.request.rid: launch.sm_limit for launch in launches}

    # At 54 SMs until the top is done (10 s), then at its quota's pace (caution 1): done at 82 s.
    assert squad({1: 1.0}) == {0: None, 1: 72}  # the top's deadline needs 36 of its 54 SMs
    assert squad({}) == {0: None, 1: 54}  # its app has kept its deadlines: its quota
    assert squad({0: 1.0, 1: 0.9}) == {0: None, 1: 54}  # the top's app has been later
    assert squad({1: 0.5}) == {0: None, 1: 54}  # projected on time: the top's GPU after it is done
    assert squad({1: 1.0}, top_deadline=25.0) == {0: None, 1: 54}  # the top needs its whole quota
    assert squad({1: 1.0}, lend=False) == {0: None, 1: 54}  # the ablation


@pytest.mark.parametrize(
    ("neighbour", "quotas"),
    [("vgg11", ("7/18", "11/18")), ("vgg11", ("9/18", "9/18")), ("resnet50", ("9/18", "9/18"))],
)
def test_bert_keeps_its_iso_latency_beside_a_dram_heavy_neighbour(neighbour, quotas):
    """BERT beside VGG11 or ResNet50 (workload B): BERT's kernels run slower beside the
    neighbour's DRAM traffic than alone, so its quota's SMs are not enough to meet its deadlines.
    At 7/18-11/18 BERT was 15 % over ISO (VGG11 5 % under its own) before a late top could take
    SMs from an on-time neighbour; at 9/18 each, where the neighbour is the top most of the
    time and runs far ahead, 4.7 % (VGG11) and 2.7 % (ResNet50) over before a late urgent
    request could take what its deadline needs from the top's spare quota."""
    r = group([(neighbour, quotas[0], "B"), ("bert", quotas[1], "B")])
    assert all(a.mean <= 1.015 * a.iso_latency for a in r.apps), [a.mean / a.iso_latency for a in r.apps]


@pytest.mark.parametrize("n_apps", [4, 8])
def test_pacing_batches_refills_instead_of_polling(n_apps):
    """Closed loops keep pacing stepping for windows of kernels, not for each late window:
    a window that runs late pushes its refill back microseconds at a time, and a policy that
    woke for each would step for a few kernels (7-9 a step before refills were batched)."""
    profiles = [load_app(name, "a100") for name in ("resnet50", "bert", "vgg11", "resnet101")]
    run = bench_policy_step(profiles, n_apps, "deadline", duration=0.1, repeats=0)
    assert run.kernels / run.steps >= 15, f"{run.steps} steps for {run.kernels} kernels"


@pytest.mark.skipif(
    is_compiled("bless.core.deadline_pacing"),
    reason="patches a function of the module, which compiled code calls directly (tests/test_native.py "
    "checks the compiled step against the source)",
)
def test_the_top_is_priced_unrestricted_only_where_that_can_change_the_decision(monkeypatch):
    """Pacing skips the walk that prices the top unrestricted when a neighbour is sure to
    cap it (the walk never runs a window faster than alone on the whole GPU); every
    request must then finish exactly as when that walk always runs."""
    import bless.core.deadline_pacing as pacing

    apps = [("resnet50", "10%"), ("vgg11", "20%"), ("bert", "30%"), ("resnet101", "40%")]
    config = config_from_dict(
        {
            "gpu": "a100",
            "duration": 0.4,
            "warmup": 0.0,
            "seed": 0,
            "noise": 0.02,
            "policy": "bless",
            "apps": [{"app": a, "quota": q, "load": "A"} for a, q in apps],
        }
    )
    sure = pacing._surely_behind
    skipped = []

    def counted(*args):
        behind = sure(*args)
        skipped.append(behind is not None)
        return behind

    monkeypatch.setattr(pacing, "_surely_behind", counted)
    shortcut = run_config(config)
    monkeypatch.setattr(pacing, "_surely_behind", lambda *args: None)
    walked = run_config(config)
    assert sum(skipped) > 0.3 * len(skipped)  # a third of the capped steps skip the walk here
    for a, b in zip(shortcut.apps, walked.apps):
        np.testing.assert_array_equal(a.latencies, b.latencies)


def test_pacing_prices_each_app_at_the_sms_its_contexts_were_granted():
    """H100 green contexts: the split's 4-SM remainder joins the second app's groups, so its
    context asked for 64 SMs holds 68; deadline pacing's projections price each app at its own."""
    gpu = get_gpu("h100")
    apps = [AppState(i, f"vgg11#{i}", load_app("vgg11", "h100"), 0.5) for i in range(2)]
    policy = BlessPolicy(mechanism="green")
    Executor(SimBackend(gpu, mechanism="green"), policy, apps)
    first, second = (policy.pace_table(a) for a in apps)
    assert first.limits == second.limits and 64 in first.limits
    assert (first.row_sms[first.row_of(64)], second.row_sms[second.row_of(64)]) == (64, 68)
    profile = apps[1].profile
    assert second.rest(second.row_of(64), 0) == pytest.approx(profile.t_at_sms(68).sum())
    assert first.rest(first.row_of(64), 0) == pytest.approx(profile.t_at_sms(64).sum())
    assert second.first_row_at_least(66) == second.row_of(64) < first.first_row_at_least(66)


def test_the_earliest_waiting_request_runs_in_the_bubbles_while_the_others_can_afford_it():
    """A request that can wait streams a short window into the low-priority stream of its
    unrestricted context, where it takes only the SMs the others leave: the earliest waiting
    request of an app within its share only, and only while every request launched beside it,
    slowed by its interference on the whole GPU as well, still meets its deadline with a window
    to spare."""
    gpu = get_gpu("a100")
    table = PaceTable((54,), gpu.sm_count, np.cumsum(np.ones((2, 41)), axis=1) - 1.0)  # 40 kernels of 1 s
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 1 / 3) for i in range(3)]

    def launches(top_deadline, background=True, backlog=False):
        apps[1].queue.clear()
        if backlog:  # a request waits behind app 1's, and has for long: over its share
            apps[1].submit(Request(9, apps[1], 0.0))
        top = PacedRequest(Request(0, apps[0], 0.0), top_deadline, table, 36.0, 1.0)
        waiting = [PacedRequest(Request(i, apps[i], 0.0), 200.0 + i, table, 36.0, 1.0, 1.2) for i in (1, 2)]
        saturated = (1,) if backlog else ()
        out = build_deadline_squad([top, *waiting], 0.0, 1.0, background=background, saturated=saturated).launches
        return [(e.request.rid, e.sm_limit, e.low_priority) for e in out]

    # The top's 40 s on the whole GPU, slowed 1.2x by the waiting request's traffic, and a window: 49 s.
    assert launches(49.5) == [(0, None, False), (1, None, True)]
    assert launches(48.5) == [(0, None, False)]  # it cannot afford the interference
    assert launches(49.5, background=False) == [(0, None, False)]  # the ablation: waiting is idle
    assert launches(49.5, backlog=True) == [(0, None, False), (2, None, True)]  # app 1 is over its share


def test_running_in_the_bubbles_keeps_a_heavy_mix_at_iso():
    """Fig. 15's four apps at load B: run in the bubbles, waiting requests leave less for later,
    every app ends within the issue's 1 % of its ISO target and BERT, the app that scales worst,
    lower than with them idle (1.001 against 1.007x since the shortcut past the top's walk is
    exact, 0.992 against 0.998x before; 1.006x idle before each window was priced beside its
    neighbours' kernels over its whole length)."""

    def run(background):
        quotas = {"resnet50": "10%", "vgg11": "20%", "bert": "30%", "resnet101": "40%"}
        cfg = {
            "gpu": "a100",
            "duration": 3,
            "warmup": 0.5,
            "seed": 0,
            "noise": 0.02,
            "policy": {"name": "bless", "background": background},
            "apps": [{"app": a, "quota": q, "load": "B"} for a, q in quotas.items()],
        }
        return [a.mean / a.iso_latency for a in run_config(config_from_dict(cfg)).apps]

    bubbles, idle = run(True), run(False)
    assert max(bubbles) <= 1.01, bubbles
    assert bubbles[2] < idle[2], (bubbles, idle)


def test_deadline_pacing_never_fills_a_streams_launch_queue(stream_depth):
    """Beside an app at 5x its share, deadline pacing keeps every stream far below the launch
    queue (a full one would block the host's launches for every app on a GPU): it streams a
    window of kernels at a time, whatever the backlog."""
    pair({"type": "poisson", "rate": 269.474}, duration=0.8, apps=("resnet50", "bert"))
    assert 0 < stream_depth.most < STREAM_BUDGET


def test_the_shortcut_past_the_top_s_walk_decides_as_the_walk_with_kernels_queued(monkeypatch):
    """Wherever the top has kernels queued, the step that skips its unrestricted walk (a
    neighbour is sure to cap it) launches exactly what the step that walks launches, on random
    states of three requests priced by a walk that is never faster than alone."""
    import bless.core.deadline_pacing as pacing

    gpu = get_gpu("a100")
    rng = np.random.default_rng(7)
    table = linear_table(gpu, unit=1e-3)
    apps = [AppState(i, f"a{i}", synthetic_profile(gpu=gpu.name, n_kernels=40, seed=i), 1 / 3) for i in range(3)]

    def price(runs, horizon):
        return [table.work(table.row_of(limit), start, count) * 1.1 for _, start, count, limit in runs]

    def states():
        for _ in range(300):
            paced = []
            for i, app in enumerate(apps):
                p = PacedRequest(Request(i, app, 0.0), float(rng.uniform(0.01, 0.08)), table, 36.0, 1.1)
                p.request.scheduled = int(rng.integers(0, 35))
                p.busy_until = float(rng.uniform(0.0, 0.004)) if rng.random() < 0.7 else -np.inf
                paced.append(p)
            yield paced, {i: float(rng.choice([0.0, 0.5, 1.0])) for i in range(3)}

    cases = list(states())

    def decisions():
        out = []
        for paced, caution in cases:
            for p in paced:
                p.row = -1
            launch = build_deadline_squad(paced, 0.0, 1e-3, price, caution)
            out.append([(e.request.rid, e.start, e.count, e.sm_limit, e.low_priority) for e in launch.launches])
        return out

    shortcut = decisions()
    monkeypatch.setattr(pacing, "_surely_behind", lambda *args: None)
    assert decisions() == shortcut
