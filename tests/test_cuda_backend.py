"""The CUDA backend end to end on a fake driver (tests/cuda_fake.py): contexts, memory, launches, events.

The fake keeps CUDA's rules (events live in one context, kernels read only
mapped VMM memory, affinity contexts need MPS), so these tests check how
the backend uses the driver; what only a GPU can tell is in test_cuda_gpu.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed (pip install '.[cuda]')")
from cuda_fake import FakeDevice, FakeDriver, timing_from, write_app

from bless.backend.interface import BackendError
from bless.build.profiler import profile_app
from bless.cuda.backend import CudaBackend
from bless.hw.gpus import H100
from bless.profiles.synthetic import synthetic_profile


@pytest.fixture
def apps(tmp_path):
    a = write_app(tmp_path / "a", synthetic_profile("a", gpu="h100", n_kernels=6, mean_us=300, seed=1))
    b = write_app(tmp_path / "b", synthetic_profile("b", gpu="h100", n_kernels=4, mean_us=400, seed=2))
    return a, b


@pytest.fixture
def fake(apps):
    device = FakeDevice()
    timing_from(device, *apps)
    return FakeDriver(device)


def backend(fake: FakeDriver, **kw) -> CudaBackend:
    return CudaBackend("h100", driver_module=fake, **kw)


# ------------------------------------------------------------------ no driver, wrong GPU
def test_no_driver_is_a_clear_error():
    with pytest.raises(BackendError, match=r"^no NVIDIA driver / no GPU found \(.*could not be loaded"):
        CudaBackend("h100", driver_module=FakeDriver(present=False))


def test_no_driver_on_this_machine_with_the_real_bindings():
    from bless.cuda.driver import probe

    ok, why = probe()
    if ok:
        pytest.skip(f"a GPU is present here ({why})")
    with pytest.raises(BackendError, match="no NVIDIA driver / no GPU found"):
        CudaBackend("h100")
    assert "no NVIDIA driver / no GPU found" in why


def test_a_gpu_model_that_does_not_match_the_device_is_refused(fake):
    with pytest.raises(BackendError, match=r"a100 .*was asked for"):
        CudaBackend("a100", driver_module=fake)
    assert CudaBackend(None, driver_module=FakeDriver()).gpu.name == "h100"  # detected


# ------------------------------------------------------------------ contexts
def test_green_contexts_round_to_groups_and_split_disjointly(fake, apps):
    b = backend(fake)
    assert b.mechanism == "green"
    ha, hb = b.deploy(apps[0]), b.deploy(apps[1])
    ca, cb = b.create_context(ha, 64), b.create_context(hb, 66)
    # 15 groups of 8 and the 12-SM remainder: the low end rounds 64 to 8 groups, the high end
    # 66 to the remainder and 7 groups (68 SMs, 2 away; 60 is 6 away).
    assert b.pool.sizes == [8] * 15 + [12]
    assert b.granted_sms(ca) == 64 and b.granted_sms(cb) == 68
    ids_a = fake.contexts[int(ca.context.handle)].sm_ids
    ids_b = fake.contexts[int(cb.context.handle)].sm_ids
    assert not ids_a & ids_b and len(ids_a | ids_b) == 132  # the two apps of a split share no SM
    assert b.granted_sms(b.create_context(ha, None)) == 132
    assert b.create_context(hb, 132).context is b.pool.primary
    assert b.create_context(ha, 64).context is ca.context  # pooled, not re-created
    b.close()


def test_four_apps_green_contexts_at_their_quotas_share_no_sm(fake, apps):
    """Each app's green contexts grow from a home of its quota's SMs apart from the other apps'
    (bless.hw.sm_sets), so four apps whose quotas fill the GPU hold four disjoint sets; taken
    from the split's two ends, the third and fourth apps' sets were the first two's."""
    b = backend(fake)
    quota_sms = (32, 36, 32, 32)  # 15 groups of 8 and the remainder of 12, all of them
    handles = [b.deploy(apps[i % 2], home_sms=sms) for i, sms in enumerate(quota_sms)]
    sets = [fake.contexts[int(b.create_context(h, sms).context.handle)].sm_ids for h, sms in zip(handles, quota_sms)]
    assert [len(s) for s in sets] == list(quota_sms)
    assert len(frozenset().union(*sets)) == 132
    b.undeploy(handles[2])
    later = b.deploy(apps[0], home_sms=32)  # the freed home is the newcomer's
    assert fake.contexts[int(b.create_context(later, 32).context.handle)].sm_ids == sets[2]
    b.close()


def test_green_contexts_without_the_remainder_hold_the_grouped_sms(apps):
    """Where the remainder cannot merge, a split is disjoint only while it fits the 120 grouped SMs."""
    fake = FakeDriver(FakeDevice(merges_remainder=False))
    b = CudaBackend("h100", driver_module=fake)
    ha, hb = b.deploy(apps[0]), b.deploy(apps[1])
    assert b.pool.sizes == [8] * 15 and not b.pool.remainder_merged
    assert b.granted_sms(b.create_context(ha, H100.sms_for_level(17, "green"))) == 120
    ca, cb = b.create_context(ha, 56), b.create_context(hb, 64)
    assert not fake.contexts[int(ca.context.handle)].sm_ids & fake.contexts[int(cb.context.handle)].sm_ids
    b.close()


def test_green_contexts_on_drivers_that_cannot_merge_groups(apps):
    fake = FakeDriver(FakeDevice(merges_groups=False))
    b = CudaBackend("h100", driver_module=fake)
    app = b.deploy(apps[0])
    ctx = b.create_context(app, 40)
    assert b.granted_sms(ctx) == 40 and "own split" in ctx.context.label
    assert b.granted_sms(b.create_context(app, 8)) == 8  # one group: the shared split still works
    b.close()


def test_mps_contexts_need_the_daemon(apps):
    with pytest.raises(BackendError, match="bless mps start"):
        b = CudaBackend("h100", driver_module=FakeDriver(), mechanism="mps")
        b.create_context(b.deploy(apps[0]), 22)


def test_mps_contexts_report_the_rounded_up_grant(apps):
    fake = FakeDriver(FakeDevice(mps_running=True))
    b = CudaBackend("h100", driver_module=fake, mechanism="mps")
    app = b.deploy(apps[0])
    ctx = b.create_context(app, 21)
    assert b.granted_sms(ctx) == 22  # the fake driver rounds up to whole TPCs, as MPS does
    assert b.context_memory[ctx.context.label] == fake.dev.context_cost
    b.close()
    assert fake.used == 0


def test_auto_falls_back_to_mps_before_driver_12_4(apps):
    b = CudaBackend("h100", driver_module=FakeDriver(FakeDevice(driver_version=12030, mps_running=True)))
    assert b.mechanism == "mps"
    b.close()


# ------------------------------------------------------------------ deployment and memory
def test_deploy_fills_buffers_and_points_kernels_at_them(fake, apps):
    b = backend(fake, seed=3)
    app = b.deploy(apps[0])
    state = app.private
    param, act = state.plan.buffers[0], state.plan.buffers[1]
    base = state.arena.base
    values = np.frombuffer(fake.read(base, param.nbytes), np.float32)
    assert np.any(values != 0) and np.all(np.abs(values) <= 0.05)
    assert fake.read(base + 4096, act.nbytes) == bytes(act.nbytes)
    stream = b.create_stream(b.create_context(app, None))
    b.launch(stream, app, 1)
    b.synchronize()
    run = fake.dev.runs[-1]
    assert run.name == apps[0].kernels[1].name
    assert run.args[:2] == [base + 2 * 4096, base + 3 * 4096]  # buffers 2 and 3, 256-byte aligned
    assert b.memory_used == state.arena.size
    b.undeploy(app)
    assert b.memory_used == 0 and not fake.mappings
    b.close()


def test_kernels_are_loaded_into_each_context_before_use(fake, apps):
    b = backend(fake)
    app = b.deploy(apps[0])
    ctx = b.create_context(app, 32)
    kernels = {int(e.kernel) for e in app.private.entries}
    assert kernels <= fake.loaded_per_ctx[int(ctx.context.handle)]
    b.close()


def test_out_of_memory_is_reported_before_allocating(apps):
    fake = FakeDriver(FakeDevice(memory=1 << 20))
    b = CudaBackend("h100", driver_module=fake)
    with pytest.raises(BackendError, match="out of GPU memory for app 'a'"):
        b.deploy(apps[0])


def test_missing_plan_says_how_to_build(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("BLESS_CACHE", str(tmp_path / "cache"))
    b = backend(fake)
    with pytest.raises(BackendError, match="bless apps build nobuild --gpu h100"):
        b.deploy(synthetic_profile("nobuild", gpu="h100", n_kernels=3))


# ------------------------------------------------------------------ launches and events
def test_after_orders_kernels_across_contexts(fake, apps):
    b = backend(fake)
    app = b.deploy(apps[0])
    s_small = b.create_stream(b.create_context(app, 8))
    s_all = b.create_stream(b.create_context(app, None))
    first = b.launch(s_small, app, 0)
    second = b.launch(s_all, app, 1, after=first, notify=True)
    done = b.wait()
    assert done == [second]
    assert first.end is not None and second.start >= first.end - 1e-6
    r0, r1 = fake.dev.runs[-2:]
    assert r1.start >= r0.end  # the device really waited (cuStreamWaitEvent)
    assert any(name == "cuStreamWaitEvent" for name, _ in fake.calls)
    b.close()


def test_timed_launches_measure_the_kernel(fake, apps):
    b = backend(fake)
    app = b.deploy(apps[1])
    stream = b.create_stream(b.create_context(app, 40))
    runs = [b.launch(stream, app, k, timed=True) for k in range(4)]
    b.synchronize()
    truth = apps[1].t_at_sms(40)
    measured = np.array([r.end - r.start for r in runs])
    # Events bracket the kernel plus, on an idle stream, the host's launch latency: a launch
    # issued while the kernel before it still ran measures the kernel alone (on a loaded host
    # a launch can come after the stream went idle).
    assert np.all(measured >= truth - 1e-6)
    behind = [i for i in range(1, len(runs)) if runs[i].issue < runs[i - 1].end]
    assert behind, "no launch was issued behind a running kernel"
    assert np.all(measured[behind] <= truth[behind] + 2e-6)
    assert all(r.start >= prev.end - 1e-6 for prev, r in zip(runs, runs[1:]))
    b.close()


def test_wait_returns_notify_launches_in_completion_order_and_honours_deadlines(fake, apps):
    b = backend(fake)
    app = b.deploy(apps[0])
    s1 = b.create_stream(b.create_context(app, None))
    s2 = b.create_stream(b.create_context(app, 16))
    assert b.wait(b.now() + 1e-3) == []  # nothing launched: returns at the deadline
    assert b.wait() == []  # nothing could ever finish: returns at once
    x = b.launch(s1, app, 0, notify=True)
    y = b.launch(s2, app, 1, notify=True)
    z = b.launch(s1, app, 2, notify=True)
    seen = []
    while len(seen) < 3:
        seen += b.wait()
    assert set(seen) == {x, y, z} and seen.index(x) < seen.index(z)
    assert all(r.start is not None and r.end >= r.start for r in seen)
    b.close()


def test_wake_interrupts_a_wait(fake, apps):
    import threading

    b = backend(fake)
    timer = threading.Timer(0.05, b.wake)
    timer.start()
    t0 = b.now()
    assert b.wait(b.now() + 5.0) == []
    assert b.now() - t0 < 2.0
    b.close()


def test_events_are_recycled(fake, apps):
    b = backend(fake)
    app = b.deploy(apps[0])
    stream = b.create_stream(b.create_context(app, None))
    for _ in range(5):
        for k in range(6):
            b.launch(stream, app, k, timed=True)
        b.synchronize()
    assert len(fake.events) < 40  # 5 x 6 x 2 launches' events reused, not leaked
    b.close()
    assert not fake.events and not fake.streams and not fake.greens


def test_anchor_renewal_keeps_times_consistent(fake, apps, monkeypatch):
    import bless.cuda.timeline as timeline

    monkeypatch.setattr(timeline, "ANCHOR_MAX_AGE", 0.0)  # renew at every launch
    b = backend(fake)
    app = b.deploy(apps[0])
    stream = b.create_stream(b.create_context(app, None))
    runs = [b.launch(stream, app, k, timed=True) for k in range(6)]
    b.synchronize()
    truth = apps[0].t_at_sms(132)
    assert np.all(np.array([r.end - r.start for r in runs]) >= truth - 1e-6)
    assert all(b.start >= a.end - 1e-6 for a, b in zip(runs, runs[1:]))
    b.close()
    assert not fake.events


def test_renewals_correct_a_drifting_gpu_clock(fake, apps, monkeypatch):
    """A GPU clock 0.1 % fast must not push device times past the host moment they were read."""
    import time

    import bless.cuda.timeline as timeline

    monkeypatch.setattr(timeline, "ANCHOR_MAX_AGE", 0.0)
    t_start = time.perf_counter()
    monkeypatch.setattr(fake, "now", lambda: t_start + 1.001 * (time.perf_counter() - t_start))
    b = backend(fake)
    app = b.deploy(apps[0])
    stream = b.create_stream(b.create_context(app, None))
    for k in range(40):  # ~0.2 s: uncorrected, the chain would run 200 us late
        run = b.launch(stream, app, k % 6, timed=True)
        b.synchronize()
        assert run.end <= b.now() and run.start >= run.issue - 1e-6
        time.sleep(0.005)
    b.close()


# ------------------------------------------------------------------ the profiler and the runtime on this backend
def test_profiler_measures_every_level_through_green_contexts(fake, apps):
    b = backend(fake)
    # Three repeats: the median drops one sample stretched by the host being preempted.
    measured, report = profile_app(b, apps[1], repeats=3, warmup=1, mechanism=b.mechanism)
    assert measured.provenance.method == "measured"
    assert measured.level_sms[0] == 8 and measured.level_sms[-1] == 132
    assert all(n % 8 == 0 for n in measured.level_sms[:-1])
    truth = np.array([apps[1].t_at_sms(n) for n in measured.level_sms])
    assert np.all(measured.t >= truth - 1e-6)
    # A request's first kernel starts on an idle stream: its start event fires before the
    # kernel reaches the GPU, so it carries the host's launch latency (Python here: tens of us).
    assert np.all(measured.t[:, 1:] <= truth[:, 1:] + 2e-6)
    assert np.all(measured.t[:, 0] <= truth[:, 0] + 500e-6)
    assert np.all(measured.t.sum(axis=1) <= measured.T)
    assert report.kernel_runs == 18 * 4 * 4
    b.close()


def test_runtime_runs_two_apps_under_bless(fake, apps):
    from bless.core.lifecycle import AppState
    from bless.harness.loads import parse_load
    from bless.harness.replay import Replay
    from bless.policies.bless import BlessPolicy

    b = backend(fake)
    states = [AppState(0, "a", apps[0], 0.5), AppState(1, "b", apps[1], 0.5)]
    loads = [parse_load("A", "a"), parse_load("A", "b")]
    result = Replay(b, BlessPolicy(mechanism="green"), states, loads, duration=0.05, seed=0).run()
    assert all(a.completed > 0 for a in result.apps)
    assert all(math.isfinite(a.mean) and a.mean > 0 for a in result.apps)
    b.close()


def test_a_baseline_streams_a_request_longer_than_the_launch_queue(tmp_path):
    """UNBOUND launches a 1200-kernel request in chunks on the CUDA backend too: each chunk's
    end comes back to the host as a notice, the request finishes once, in kernel order."""
    from bless.core.lifecycle import AppState
    from bless.harness.loads import parse_load
    from bless.harness.replay import Replay
    from bless.policies.unbound import UnboundPolicy

    long = write_app(tmp_path / "long", synthetic_profile("long", gpu="h100", n_kernels=1200, mean_us=2, seed=3))
    short = write_app(tmp_path / "short", synthetic_profile("short", gpu="h100", n_kernels=4, mean_us=400, seed=4))
    device = FakeDevice()
    timing_from(device, long, short)
    b = backend(FakeDriver(device))
    kernels = {"long": 0, "short": 0}
    launch = b.launch

    def counting(stream, app, kernel, **kwargs):
        kernels[app.name] += 1
        return launch(stream, app, kernel, **kwargs)

    b.launch = counting
    states = [AppState(0, "long", long, 0.5), AppState(1, "short", short, 0.5)]
    loads = [parse_load({"type": "closed", "interval": 0}, "long"), parse_load("A", "short")]
    result = Replay(b, UnboundPolicy(), states, loads, duration=0.05, warmup=0.0, seed=0).run()
    assert result.apps[0].completed >= 1 and result.apps[1].completed >= 1
    assert result.apps[0].failed == 0
    # Each request finished at its last kernel, not at a chunk's end: all its kernels ran.
    assert kernels["long"] == 1200 * result.apps[0].submitted
    b.close()


# ------------------------------------------------------------------ the calls themselves
def test_recorded_calls_match_the_real_bindings_signatures(fake, apps):
    """Replay every driver call the backend made against cuda.bindings: arguments must be accepted.

    Without a driver each call fails only when it reaches libcuda; a wrong
    argument type or count fails earlier with a TypeError.
    """
    from cuda.bindings import driver as real

    try:
        real.cuDriverGetVersion()
        pytest.skip("a CUDA driver is present: replaying fake handles against it would be unsafe")
    except Exception:
        pass
    b = backend(fake)
    app = b.deploy(apps[0])
    s1 = b.create_stream(b.create_context(app, 16))
    s2 = b.create_stream(b.create_context(app, None))
    r = b.launch(s1, app, 0, timed=True)
    b.launch(s2, app, 1, after=r, notify=True)
    b.wait()
    b.close()
    first: dict[str, tuple] = {}
    for name, args in fake.calls:
        first.setdefault(name, args)
    for name, args in first.items():
        with pytest.raises(Exception) as info:
            getattr(real, name)(*args)
        assert not isinstance(info.value, TypeError), f"{name}{args}: {info.value}"


@pytest.mark.parametrize("mechanism", ["mps", "green"])
def test_a_low_priority_stream_is_made_at_the_devices_lowest_priority(fake, apps, mechanism):
    """Ordinary streams at the highest stream priority, all alike (the default is the lowest);
    a low-priority stream at the lowest, so the block scheduler serves the others first."""
    fake.dev.mps_running = True
    b = backend(fake, mechanism=mechanism)
    app = b.deploy(apps[0])
    for ctx in (b.create_context(app, None), b.create_context(app, 64)):
        ordinary, low = b.create_stream(ctx), b.create_stream(ctx, low_priority=True)
        assert fake.streams[int(ordinary.handle)].priority == -5
        assert fake.streams[int(low.handle)].priority == 0
    b.close()
