"""The simulated GPU: solo timing, SM sharing, DRAM interference, host costs, clocks."""

import dataclasses
import time

import numpy as np
import pytest

from bless.backend.interface import LAUNCH_QUEUE, HostCosts
from bless.build.profiler import profile_app
from bless.hw.gpus import H100
from bless.profiles import features
from bless.profiles.format import Profile
from bless.profiles.synthetic import synthetic_profile
from bless.sim.backend import SimBackend

NO_HOST = HostCosts(launch=0.0, sync=0.0, context_switch=0.0, event=0.0)
A100_HOST = HostCosts.for_gpu("a100")


def run_alone(profile, sm_limit=None, **kw):
    b = SimBackend("a100", **kw)
    h = b.deploy(profile)
    s = b.create_stream(b.create_context(h, sm_limit))
    runs = [b.launch(s, h, i) for i in range(profile.n_kernels)]
    b.synchronize()
    return b, runs


def test_profiler_recovers_ground_truth_at_every_level(app_a):
    prof, report = profile_app(SimBackend("a100"), app_a)
    np.testing.assert_allclose(prof.t, app_a.t, rtol=1e-9)
    assert prof.provenance.method == "simulated"
    assert report.kernel_runs == 18 * 4 * app_a.n_kernels
    # T is the lone request end to end: kernels back to back plus one launch.
    np.testing.assert_allclose(prof.T, app_a.t.sum(axis=1) + A100_HOST.launch, rtol=1e-9)


def test_profiling_keeps_the_bytes_each_kernel_moves(app_a):
    """Descriptors made at one speed and timed at another: dram_util (a share of peak bandwidth
    at the full-GPU time) follows the measured time, so dram_util x t stays the bytes moved."""
    described = dataclasses.replace(app_a, t=app_a.t / 2, T=app_a.T / 2)  # predicted twice too fast
    backend = SimBackend("a100")
    deploy = backend.deploy
    backend.deploy = lambda app: deploy(app_a)  # the GPU runs the kernels as they really are
    measured, _ = profile_app(backend, described)
    np.testing.assert_allclose(measured.t, app_a.t, rtol=1e-9)
    before = np.array([k.dram_util for k in described.kernels]) * described.t[-1]
    after = np.array([k.dram_util for k in measured.kernels]) * measured.t[-1]
    assert before.sum() > 0
    np.testing.assert_allclose(after, before, rtol=1e-6)


def test_a_full_stream_blocks_the_host_for_every_app():
    """The driver holds LAUNCH_QUEUE kernels per stream; one launch more waits for the first to
    end, and the one host thread with it: the next app's launch cannot start its kernel sooner."""
    app = synthetic_profile("a", n_kernels=10, mean_us=50, dram_util=0.0, seed=1)
    b = SimBackend("a100", host=NO_HOST)
    ha, hb = b.deploy(app), b.deploy(app)
    sa = b.create_stream(b.create_context(ha, 54))
    sb = b.create_stream(b.create_context(hb, 54))
    runs = [b.launch(sa, ha, i % 10) for i in range(LAUNCH_QUEUE)]
    assert b.now() == 0.0
    runs.append(b.launch(sa, ha, 0))
    other = b.launch(sb, hb, 0)
    b.synchronize()
    assert b.now() >= runs[0].end > 0
    assert other.start == pytest.approx(runs[0].end)
    assert [r.start for r in runs] == sorted(r.start for r in runs)  # nothing reordered


def test_restricted_context_runs_at_its_level(app_a):
    _, runs = run_alone(app_a, sm_limit=54, host=NO_HOST)
    np.testing.assert_allclose([r.duration for r in runs], app_a.t[8], rtol=1e-9)


def test_restricted_contexts_run_side_by_side_without_sm_contention():
    a = synthetic_profile("a", n_kernels=30, dram_util=0.0, seed=5)
    b = synthetic_profile("b", n_kernels=30, dram_util=0.0, seed=6)
    be = SimBackend("a100", host=NO_HOST)
    ha, hb = be.deploy(a), be.deploy(b)
    sa = be.create_stream(be.create_context(ha, 54))
    sb = be.create_stream(be.create_context(hb, 54))
    ra = [be.launch(sa, ha, i) for i in range(30)]
    rb = [be.launch(sb, hb, i) for i in range(30)]
    be.synchronize()
    # No DRAM traffic and disjoint SM budgets: each runs exactly as alone at 54 SMs.
    assert ra[-1].end == pytest.approx(a.t[8].sum())
    assert rb[-1].end == pytest.approx(b.t[8].sum())


def _one_kernel_app(name: str, share: float, *, gpu: str = "a100", curve_us=lambda n: 100.0, **launch) -> Profile:
    """One compute kernel spreading over ``share`` of the SMs, no DRAM traffic, taking
    ``curve_us(n)`` microseconds at each level's SMs (100 at every level unless given);
    ``launch`` replaces fields of its launch configuration."""
    p = synthetic_profile(name, gpu=gpu, n_kernels=1, dram_util=0.0, seed=7)
    kernel = dataclasses.replace(p.kernels[0], max_sm_share=share, **launch)
    t = np.array([[curve_us(n) * 1e-6] for n in p.level_sms])
    return dataclasses.replace(p, kernels=(kernel,), t=t, T=t.sum(axis=1))


def test_unrestricted_kernels_take_free_sms_in_launch_order():
    be = SimBackend("a100", host=NO_HOST)
    wide, narrow, other = _one_kernel_app("wide", 1.0), _one_kernel_app("narrow", 0.5), _one_kernel_app("o", 0.5)
    hw, hn, ho = be.deploy(wide), be.deploy(narrow), be.deploy(other)
    sw, sn, so = (be.create_stream(be.create_context(h, None)) for h in (hw, hn, ho))
    first = be.launch(sw, hw, 0)
    blocked = be.launch(sn, hn, 0)
    be.synchronize()
    # The first kernel holds every SM; the second gets SMs only when it ends.
    assert blocked.start == pytest.approx(first.end)
    a = be.launch(sn, hn, 0)
    b = be.launch(so, ho, 0)
    be.synchronize()
    # Two half-GPU kernels fit side by side.
    assert a.start == pytest.approx(b.start) and a.end == pytest.approx(b.end)


def test_a_low_priority_stream_takes_only_the_sms_ordinary_kernels_leave():
    """Launched first and wanting every SM, a low-priority kernel still leaves an ordinary one
    its SMs at once (in launch order alone it would hold them all), runs in the rest, and
    takes the whole GPU when the ordinary one ends."""
    be = SimBackend("a100", host=NO_HOST)
    wide = _one_kernel_app("wide", 1.0)
    wide = dataclasses.replace(wide, t=100e-6 * 108 / np.array(wide.level_sms, dtype=float)[:, None])
    half = _one_kernel_app("half", 0.5)
    hw, hh = be.deploy(wide), be.deploy(half)
    low = be.create_stream(be.create_context(hw, None), low_priority=True)
    ordinary = be.create_stream(be.create_context(hh, None))
    background = be.launch(low, hw, 0)
    foreground = be.launch(ordinary, hh, 0)
    be.synchronize()
    assert foreground.start == 0.0 and foreground.end == pytest.approx(100e-6)  # as alone
    # Half the work at 54 SMs (200 us alone there) while the ordinary kernel runs, the rest on 108.
    assert background.start == 0.0 and background.end == pytest.approx(150e-6)


@pytest.mark.parametrize("ctx", [None, 54])
def test_corunning_apps_slow_each_other_more_when_memory_intensive(ctx):
    slowdowns = []
    for util in (0.05, 0.4, 0.8):
        a = synthetic_profile("a", n_kernels=40, dram_util=util, seed=8)
        b = synthetic_profile("b", n_kernels=40, dram_util=util, seed=9)
        be = SimBackend("a100", host=NO_HOST)
        ha, hb = be.deploy(a), be.deploy(b)
        sa = be.create_stream(be.create_context(ha, ctx))
        sb = be.create_stream(be.create_context(hb, ctx))
        ra = [be.launch(sa, ha, i) for i in range(40)]
        rb = [be.launch(sb, hb, i) for i in range(40)]
        be.synchronize()
        level = 17 if ctx is None else 8
        slowdowns.append((ra[-1].end / a.t[level].sum() + rb[-1].end / b.t[level].sum()) / 2)
    assert all(s > 1.0 for s in slowdowns), slowdowns
    assert slowdowns[0] < slowdowns[1] < slowdowns[2], slowdowns


def test_host_costs_launch_sync_and_context_switch(app_a):
    be = SimBackend("a100")
    h = be.deploy(app_a)
    restricted = be.create_stream(be.create_context(h, 54))
    free = be.create_stream(be.create_context(h, None))
    k0 = be.launch(restricted, h, 0)
    assert k0.issue_time == pytest.approx(A100_HOST.launch)
    k1 = be.launch(free, h, 1, after=k0)
    be.synchronize()
    assert k1.start == pytest.approx(k0.end + A100_HOST.context_switch)
    assert be.now() == pytest.approx(k1.end + A100_HOST.sync)


def test_noise_is_seeded_and_off_by_default(app_a):
    _, quiet = run_alone(app_a)
    np.testing.assert_allclose([r.duration for r in quiet], app_a.t[-1], rtol=1e-9)
    _, n1 = run_alone(app_a, noise_sigma=0.05, seed=1)
    _, n2 = run_alone(app_a, noise_sigma=0.05, seed=1)
    _, n3 = run_alone(app_a, noise_sigma=0.05, seed=2)
    assert [r.duration for r in n1] == [r.duration for r in n2]
    assert [r.duration for r in n1] != [r.duration for r in n3]


def test_memory_is_accounted_and_exhaustion_is_an_error():
    from bless.backend.interface import BackendError

    big = synthetic_profile("big", n_kernels=2, memory_bytes=30 * 2**30)
    be = SimBackend("a100")
    h = be.deploy(big)
    with pytest.raises(BackendError, match="out of GPU memory"):
        be.deploy(big)
    be.undeploy(h)
    assert be.memory_used == 0
    be.deploy(big)


def test_wall_clock_mode_finishes_kernels_in_real_time():
    app = synthetic_profile("w", n_kernels=20, mean_us=1000.0, seed=10)
    be = SimBackend("a100", clock="wall")
    h = be.deploy(app)
    s = be.create_stream(be.create_context(h, None))
    t0 = time.monotonic()
    runs = [be.launch(s, h, i, notify=(i == 19)) for i in range(20)]
    done = []
    while not done:
        done = be.wait(be.now() + 1.0)
    wall = time.monotonic() - t0
    sim = runs[-1].end - runs[0].issue_time
    assert done == [runs[-1]]
    assert sim == pytest.approx(app.t[-1].sum(), rel=0.05)
    assert wall >= sim * 0.95


# ------------------------------------------------------------ deployments, time, contexts
def test_two_deployments_of_one_profile_launch_from_their_own_threads(app_a):
    host = HostCosts.for_gpu("a100")
    be = SimBackend("a100")
    one, two = be.deploy(app_a), be.deploy(app_a)
    s1 = be.create_stream(be.create_context(one, 54))
    s2 = be.create_stream(be.create_context(two, 54))
    r1 = [be.launch(s1, one, i) for i in range(3)]
    r2 = [be.launch(s2, two, i) for i in range(3)]
    # Each deployment's launches serialise on its own launch cost only.
    assert [r.issue_time for r in r1] == pytest.approx([host.launch * (i + 1) for i in range(3)])
    assert [r.issue_time for r in r2] == pytest.approx([host.launch * (i + 1) for i in range(3)])


def test_a_fault_injected_into_one_deployment_leaves_its_twin_alone(app_a):
    be = SimBackend("a100")
    one, two = be.deploy(app_a), be.deploy(app_a)
    s1 = be.create_stream(be.create_context(one, None))
    s2 = be.create_stream(be.create_context(two, None))
    be.inject_fault(one, kernel=0)
    assert be.launch(s2, two, 0).error is None
    assert be.launch(s1, one, 0).error is not None


def test_running_to_a_past_time_never_moves_the_clock_back(app_a):
    be = SimBackend("a100", host=NO_HOST)
    h = be.deploy(app_a)
    s = be.create_stream(be.create_context(h, None))
    for i in range(app_a.n_kernels):
        be.launch(s, h, i)
    be.engine.run(until=1e-3)
    now = be.engine.now
    assert now > 0
    be.engine.run(until=now / 2)
    assert be.engine.now == now


def _wide_app(name: str, share: float = 1.0, us: float = 100.0):
    """One 100 us compute kernel with no DRAM traffic keeping ``share`` of the SMs busy."""
    app = _one_kernel_app(name, share)
    return dataclasses.replace(app, t=app.t * (us / 100.0), T=app.T * (us / 100.0))


def test_an_mps_cap_binds_the_contexts_kernels_together():
    be = SimBackend("a100", host=NO_HOST)
    h = be.deploy(_wide_app("w"))
    ctx = be.create_context(h, 54)
    a, b = be.create_stream(ctx), be.create_stream(ctx)
    ra, rb = be.launch(a, h, 0), be.launch(b, h, 0)
    be.engine.run(until=1e-6)
    assert ra.sms + rb.sms == 54  # two streams, one cap
    be.synchronize()
    assert (rb.start == pytest.approx(0.0) and rb.sms == 0) or rb.start >= ra.end - 1e-12


def test_mps_caps_of_two_contexts_may_overlap_and_then_contend():
    be = SimBackend("a100", host=NO_HOST)
    ha, hb = be.deploy(_wide_app("a")), be.deploy(_wide_app("b"))
    ra = be.launch(be.create_stream(be.create_context(ha, 80)), ha, 0)
    rb = be.launch(be.create_stream(be.create_context(hb, 80)), hb, 0)
    be.engine.run(until=1e-6)
    assert (ra.sms, rb.sms) == (80, 28)  # caps add up to 160 SMs of 108


def test_green_contexts_are_sm_sets_other_contexts_cannot_lend():
    # An unrestricted kernel of 54 blocks takes SMs 0-53 first.  The green context of the app
    # in deployment slot 1 (high SMs) runs beside it; the one in slot 2 (low SMs) must wait,
    # although 54 SMs are free: they are not its SMs.  Under MPS caps it would run at once.
    for mechanism, low_waits in (("green", True), ("mps", False)):
        be = SimBackend("a100", host=NO_HOST, mechanism=mechanism)
        # Deployment slots 0, 1, 2: green sets low, high, low.
        first, high, low = (
            be.deploy(_wide_app(n, share=0.5 if n == "first" else 1.0)) for n in ("first", "high", "low")
        )
        r0 = be.launch(be.create_stream(be.create_context(first, None)), first, 0)
        r_low = be.launch(be.create_stream(be.create_context(low, 54)), low, 0)
        r_high = be.launch(be.create_stream(be.create_context(high, 54)), high, 0)
        be.synchronize()
        assert r0.start == pytest.approx(0.0)
        assert (r_low.start >= r0.end - 1e-12) is low_waits, mechanism
        if low_waits:
            assert r_high.start == pytest.approx(0.0)  # its own SMs are free


def test_apps_of_a_shared_partition_hold_its_sms_together():
    be = SimBackend("a100", host=NO_HOST)
    be1, be2 = be.deploy(_wide_app("be1", us=1000.0)), be.deploy(_wide_app("be2", us=1000.0))
    rt = be.deploy(_wide_app("rt", share=0.5))
    r1 = be.launch(be.create_stream(be.create_context(be1, 54, shared="best-effort")), be1, 0)
    r2 = be.launch(be.create_stream(be.create_context(be2, 54, shared="best-effort")), be2, 0)
    be.engine.run(until=50e-6)
    assert r1.sms + r2.sms == 54
    # The real-time kernel arriving later finds its 54 SMs free and starts at once.
    arrival = be.engine.now
    late = be.launch(be.create_stream(be.create_context(rt, None)), rt, 0)
    be.synchronize()
    assert late.start == pytest.approx(arrival)
    assert late.duration == pytest.approx(100e-6)


def test_green_sets_follow_the_gpus_split_groups():
    """On the H100 the simulator holds the SMs the GPU's green contexts hold (15 groups of 8 and a
    12-SM remainder): two apps asking half the GPU get 64 low and 68 high SMs, none shared."""
    from bless.profiles.synthetic import synthetic_profile

    be = SimBackend("h100", host=NO_HOST, mechanism="green")
    a, b = (be.deploy(synthetic_profile(n, gpu="h100", n_kernels=4, seed=i)) for i, n in enumerate("ab"))
    ca, cb = be.create_context(a, 64), be.create_context(b, 64)
    assert (be.granted_sms(ca), be.granted_sms(cb)) == (64, 68)
    assert ca.sm_set & cb.sm_set == 0 and (ca.sm_set | cb.sm_set).bit_count() == 132
    assert be.granted_sms(be.create_context(a, H100.sms_for_level(17, "green"))) == 120


def test_green_homes_that_must_share_sms_are_reported(caplog):
    """Four quarters of an A100 round to 28-SM green sets (groups of 2 SMs), 112 SMs in all: the
    last app's home shares SMs with another's, and the operator is told which and why."""
    from bless.profiles.synthetic import synthetic_profile

    be = SimBackend("a100", host=NO_HOST, mechanism="green")
    with caplog.at_level("WARNING", logger="bless.sim.backend"):
        for i in range(3):
            be.deploy(synthetic_profile(f"app{i}", n_kernels=2, seed=i), home_sms=27.0)
        assert not caplog.records
        be.deploy(synthetic_profile("app3", n_kernels=2, seed=3), home_sms=27.0)
    (record,) = caplog.records
    assert "'app3' shares 4 SMs" in record.getMessage() and "mechanism mps" in record.getMessage()


def test_a_static_split_of_four_apps_on_green_contexts_is_the_split_under_mps_caps():
    """Green contexts are fixed SM sets: four apps at 10/20/30/40 % each hold their quota's SMs
    apart from the others' (``bless.hw.sm_sets``), so GSLICE runs as it does under MPS caps that
    add up to the GPU.  With every app's sets taken from one of the GPU's two ends, the third and
    fourth sat on the first two's SMs: 1.17-1.77x ISO against 1.09-1.24x in 2 s runs
    (``experiments/design_log.md``, item 34)."""
    from bless.harness.config import config_from_dict
    from bless.harness.run import run_config

    apps = [
        {"app": a, "quota": q, "load": "A"}
        for a, q in zip(("resnet50", "vgg11", "bert", "resnet101"), (0.1, 0.2, 0.3, 0.4))
    ]
    means = {
        mechanism: [
            a.mean
            for a in run_config(
                config_from_dict(
                    {"duration": 1.0, "warmup": 0.2, "policy": "gslice", "mechanism": mechanism, "apps": apps}
                )
            ).apps
        ]
        for mechanism in ("mps", "green")
    }
    assert means["green"] == pytest.approx(means["mps"], rel=0.01)


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_a_replay_frees_the_kernels_it_has_run(traced):
    """Memory stays bounded over a long replay: each finished request keeps its first and last
    kernels (its timing), not the chain of every kernel that waited on another before it, and
    a timeline keeps rows of numbers, not the launch objects."""
    import gc

    from bless.core.lifecycle import AppState
    from bless.harness.loads import parse_load
    from bless.harness.replay import Replay
    from bless.harness.run import trace_recorder
    from bless.policies.bless import BlessPolicy
    from bless.profiles.catalog import load_app
    from bless.sim.engine import KernelRun

    states = [AppState(i, name, load_app(name, "a100"), 0.5) for i, name in enumerate(("resnet50", "bert"))]
    loads = [parse_load("A", name) for name in ("resnet50", "bert")]
    backend = SimBackend("a100")
    trace = trace_recorder(backend) if traced else None
    replay = Replay(backend, BlessPolicy(), states, loads, duration=1.0, seed=0, trace=trace)
    result = replay.run()  # the replay, alive, still holds every request it served
    gc.collect()
    alive = sum(type(o) is KernelRun for o in gc.get_objects())  # type(): isinstance reads proxies (torch warns)
    requests = sum(a.completed for a in result.apps)
    kernels = sum(s.profile.n_kernels * a.completed for s, a in zip(states, result.apps))
    assert requests > 50
    assert alive <= 2 * requests < kernels / 20
    assert not traced or len(result.trace.kernels) > kernels / 2


def _launched_app(name: str, curve_us, *, registers: int | None = 32) -> Profile:
    """An H100 app of one kernel of 132 blocks of 128 threads, no shared memory (16 resident
    blocks per SM), taking ``curve_us(n)`` microseconds at each level's SMs."""
    launch = {"grid": (132, 1, 1), "block": (128, 1, 1), "registers": registers, "shared_mem": 0}
    return _one_kernel_app(name, 1.0, gpu="h100", curve_us=curve_us, **launch)


def test_a_kernel_is_credited_the_sm_capacity_its_blocks_and_its_scaling_leave_no_room_in():
    gpu = H100
    flat = _launched_app("flat", lambda n: 100.0)
    # One block per SM of 16 that fit, and as fast on 8 SMs as on 132: 1/16 of each SM.
    assert features.busy_sms(flat, gpu).tolist() == [9]
    # The same launch, but 8 SMs take 16.5x as long as 132: it needs every SM's throughput.
    ideal = _launched_app("ideal", lambda n: 100.0 * 132 / n)
    assert features.busy_sms(ideal, gpu).tolist() == [132]
    # Without its registers the blocks per SM are unknown: whole SMs, as before.
    unknown = _launched_app("unknown", lambda n: 100.0, registers=None)
    assert features.busy_sms(unknown, gpu).tolist() == [132]


def test_co_resident_kernels_share_sms_their_blocks_leave_room_on():
    be = SimBackend("h100", host=NO_HOST)
    light = [be.deploy(_launched_app(f"light{i}", lambda n: 100.0)) for i in range(2)]
    runs = [be.launch(be.create_stream(be.create_context(h, None)), h, 0) for h in light]
    heavy = [be.deploy(_launched_app(f"heavy{i}", lambda n: 100.0, registers=None)) for i in range(2)]
    runs += [be.launch(be.create_stream(be.create_context(h, None)), h, 0) for h in heavy]
    be.synchronize()
    # Both light kernels and the first heavy one run at once, each as fast as alone (the heavy
    # one on the 114 SMs' worth the light ones leave, where its curve is as fast); the second
    # heavy kernel, which needs whole SMs, waits for them.
    assert [r.start for r in runs[:3]] == [0.0, 0.0, 0.0]
    assert [r.end for r in runs[:3]] == pytest.approx([100e-6] * 3)
    assert runs[3].start == pytest.approx(100e-6) and runs[3].end == pytest.approx(200e-6)


def test_an_sm_set_narrower_than_a_kernels_spread_runs_it_at_that_width():
    """A kernel that needs 16 SMs' worth of capacity but spreads over 132 runs at full speed
    unrestricted; in a green set of 64 SMs its blocks are squeezed onto those, at the
    profile's time there."""
    app = _launched_app("steps", lambda n: 100.0 if n >= 100 else 200.0)
    assert features.busy_sms(app, H100).tolist() == [16]
    for limit, took in ((None, 100e-6), (64, 200e-6)):
        be = SimBackend("h100", host=NO_HOST, mechanism="green")
        h = be.deploy(app)
        run = be.launch(be.create_stream(be.create_context(h, limit)), h, 0)
        be.synchronize()
        assert run.end - run.start == pytest.approx(took), limit


@pytest.mark.parametrize(
    ("registers", "ideal", "wait"),
    [(32, True, 50e-6), (32, False, 50e-6 * 9 / 132), (None, True, 0.0)],
)
def test_an_ordinary_kernel_waits_for_the_sms_a_low_priority_kernels_blocks_fill(registers, ideal, wait):
    """The hardware gives a higher-priority kernel an SM only as the blocks on it end: an
    ordinary kernel needing every SM, launched beside a low-priority kernel that fills them,
    starts half a round of those blocks later; one needing 9 SMs' worth, that share of it;
    beside blocks of unknown size, at once (the fluid model's reading)."""
    launch = {"grid": (132 * 16 * 4, 1, 1), "block": (128, 1, 1), "registers": registers, "shared_mem": 0}
    # 16 blocks per SM, 4 rounds over 132 SMs in 400 us: rounds of 100 us.
    long = _one_kernel_app("long", 1.0, gpu="h100", curve_us=lambda n: 400.0 * 132 / n, **launch)
    assert features.drain_seconds(long, H100).tolist() == pytest.approx([50e-6 if registers else 0.0])
    short = _launched_app("short", (lambda n: 10.0 * 132 / n) if ideal else (lambda n: 10.0))
    be = SimBackend("h100", host=NO_HOST)
    hl, hs = be.deploy(long), be.deploy(short)
    low = be.create_stream(be.create_context(hl, None), low_priority=True)
    ordinary = be.create_stream(be.create_context(hs, None))
    be.launch(low, hl, 0)
    be.wait(deadline=20e-6)  # the host comes back 20 us later
    run = be.launch(ordinary, hs, 0)
    be.synchronize()
    assert run.start == pytest.approx(20e-6 + wait)
