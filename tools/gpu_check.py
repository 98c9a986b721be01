"""Check the CUDA backend on a real GPU: contexts, SM sets, memory sharing, latencies, MPS, a BLESS run.

    .venv/bin/python tools/gpu_check.py [--skip-run] [--out tools/gpu_check_results]

Prints a PASS/FAIL/SKIP table and writes every number to
``tools/gpu_check_results/<date>-<gpu>.json``.  Without a GPU it says so and
exits with status 2.  The checks run through :class:`bless.cuda.backend.CudaBackend`
with a small app whose kernels are written here by hand in PTX:

* ``record_smid`` spins ~10 us per block, then block i writes ``%smid`` to
  ``out[i]``: launched with 4 blocks per SM in a green context, the set of SM
  ids it wrote is the context's SM set;
* ``add_one`` adds 1 to every element of a buffer (VMM sharing: the same
  arena incremented from several contexts);
* ``empty`` (launch overhead) and ``spin`` (a backlog of known length), the
  latter also launched wide (many waves of 1024-thread blocks): a backlog on a
  low-priority stream that an ordinary stream's kernel should not wait behind,
  and launched back to back until a launch blocks (the stream's launch queue).

MPS needs the daemon running before the driver initialises, so the MPS
check starts a daemon in a temporary state directory and runs its part in a
child process (``--mps-child``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bless.backend.interface import LAUNCH_QUEUE, BackendError, HostCosts  # noqa: E402
from bless.build.profiler import no_gc  # noqa: E402
from bless.hw.costs import gpu_constants  # noqa: E402
from bless.hw.gpus import N_LEVELS  # noqa: E402
from bless.policies.common import STREAM_BUDGET  # noqa: E402
from bless.profiles.format import KernelDesc, Profile, Provenance  # noqa: E402

CHECK_PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry empty()
{
    ret;
}

.visible .entry spin(.param .u64 cycles)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [cycles];
    mov.u64 %rd2, %clock64;
SPIN_LOOP:
    mov.u64 %rd3, %clock64;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra SPIN_LOOP;
    ret;
}

.visible .entry record_smid(.param .u64 out, .param .u64 cycles)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [cycles];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u64 %rd3, %clock64;
SMID_SPIN:
    mov.u64 %rd4, %clock64;
    sub.s64 %rd5, %rd4, %rd3;
    setp.lt.u64 %p1, %rd5, %rd2;
    @%p1 bra SMID_SPIN;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p2, %r1, 0;
    @%p2 bra SMID_DONE;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %smid;
    mul.wide.u32 %rd6, %r2, 4;
    add.s64 %rd7, %rd1, %rd6;
    st.global.u32 [%rd7], %r3;
SMID_DONE:
    ret;
}

.visible .entry add_one(.param .u64 buf, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r1, [n];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra ADD_DONE;
    mul.wide.u32 %rd2, %r5, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.u32 %r6, [%rd3];
    add.s32 %r7, %r6, 1;
    st.global.u32 [%rd3], %r7;
ADD_DONE:
    ret;
}
"""
"""Hand-written PTX (ISA 7.0, sm_70: JIT-compiled by any CUDA 11+ driver for Ampere and Hopper)."""

BLOCKS_PER_SM = 4
SMID_SPIN_CYCLES = 20_000  # ~10 us at H100 clocks (1.98 GHz boost, NVIDIA H100 whitepaper)
SPIN_CYCLES = 40_000  # ~20 us: longer than one host launch, so streams are backed up behind it
ADD_N = 4096
WIDE_BLOCKS_PER_SM = 32  # 1024-thread blocks: at most 2 resident per SM, so ~16 waves of ~20 us
K_SMID, K_ADD, K_EMPTY, K_SPIN, K_WIDE = range(5)


@dataclass
class Check:
    name: str
    status: str  # PASS, FAIL, SKIP
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ the check app
def write_check_app(root: Path, gpu: str, sm_count: int) -> Profile:
    """Plan + PTX of the check app under ``root``; returns its kernel-list profile (timings unused)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "check.ptx").write_text(CHECK_PTX)
    blocks = BLOCKS_PER_SM * sm_count
    plan = {
        "format": "bless-plan",
        "version": 1,
        "app": "gpucheck",
        "gpu": gpu,
        "arch": "sm_70",
        "batch": 1,
        "images": [{"id": 0, "file": "check.ptx", "kind": "ptx"}],
        "buffers": [
            {"id": 0, "bytes": 4 * blocks, "dtype": "uint32", "shape": [blocks], "role": "output"},
            {"id": 1, "bytes": 4 * ADD_N, "dtype": "uint32", "shape": [ADD_N], "role": "activation"},
        ],
        "launches": [
            {
                "kernel": "record_smid",
                "image": 0,
                "grid": [blocks, 1, 1],
                "block": [128, 1, 1],
                "args": [{"buffer": 0}, {"scalar": SMID_SPIN_CYCLES, "dtype": "uint64"}],
            },
            {
                "kernel": "add_one",
                "image": 0,
                "grid": [ADD_N // 256, 1, 1],
                "block": [256, 1, 1],
                "args": [{"buffer": 1}, {"scalar": ADD_N, "dtype": "uint32"}],
            },
            {"kernel": "empty", "image": 0, "grid": [1, 1, 1], "block": [32, 1, 1], "args": []},
            {
                "kernel": "spin",
                "image": 0,
                "grid": [1, 1, 1],
                "block": [32, 1, 1],
                "args": [{"scalar": SPIN_CYCLES, "dtype": "uint64"}],
            },
            {
                "kernel": "spin",
                "image": 0,
                "grid": [WIDE_BLOCKS_PER_SM * sm_count, 1, 1],
                "block": [1024, 1, 1],
                "args": [{"scalar": SPIN_CYCLES, "dtype": "uint64"}],
            },
        ],
    }
    (root / "plan.json").write_text(json.dumps(plan))
    names = [launch["kernel"] for launch in plan["launches"]]
    from bless.hw.gpus import get_gpu

    spec = get_gpu(gpu)
    ones = np.full((N_LEVELS, len(names)), 1e-6)
    return Profile(
        app="gpucheck",
        gpu=spec.name,
        kind="inference",
        batch=1,
        level_sms=spec.level_sms(),
        kernels=tuple(KernelDesc(name=n) for n in names),
        t=ones,
        T=ones.sum(axis=1),
        memory_bytes=0,
        provenance=Provenance(
            method="derived",
            gpu=spec.name,
            source="tools/gpu_check.py check kernels",
            details={"plan": str(root / "plan.json")},
        ),
    )


def buffer_u32(backend, app, buffer_id: int) -> np.ndarray:
    """Read one of the check app's uint32 buffers back from the device."""
    from bless.cuda.memory import layout

    state = app.private
    offsets, _ = layout([b.nbytes for b in state.plan.buffers])
    buf = state.plan.buffers[buffer_id]
    out = np.empty(buf.nbytes // 4, dtype=np.uint32)
    state.arena.read(offsets[buffer_id], out.ctypes.data, buf.nbytes)
    return out


def zero_buffer(app, buffer_id: int) -> None:
    from bless.cuda.memory import layout

    state = app.private
    offsets, _ = layout([b.nbytes for b in state.plan.buffers])
    state.arena.zero(offsets[buffer_id], state.plan.buffers[buffer_id].nbytes)


def us(x: float) -> float:
    return round(x * 1e6, 2)


# ------------------------------------------------------------------ checks
def check_device(backend) -> Check:
    import cuda.bindings

    info = backend.device.info
    from bless.cuda.backend import cuda_environment

    return Check(
        "driver and device",
        "PASS",
        info.describe(),
        {
            **asdict(info),
            "bindings": cuda.bindings.__version__,
            "mechanism": backend.mechanism,
            "gpu_model": backend.gpu.name,
            "env": cuda_environment(),
        },
    )


def smid_set(backend, app, ctx) -> set[int]:
    zero_buffer(app, 0)
    stream = backend.create_stream(ctx)
    backend.launch(stream, app, K_SMID)
    backend.synchronize()
    return set(int(x) for x in buffer_u32(backend, app, 0))


def check_green_split(backend, apps) -> Check:
    if backend.mechanism != "green":
        return Check("green-context split", "SKIP", f"backend uses {backend.mechanism} contexts")
    gpu = backend.gpu
    a, b = apps
    half = gpu.sms_for_level(N_LEVELS // 2, "green")
    # Without the remainder two apps hold at most the grouped SMs between them.
    other = half if backend.pool.remainder_merged else min(half, sum(backend.pool.sizes) - half)
    ca, cb = backend.create_context(a, half), backend.create_context(b, other)
    sa, sb = smid_set(backend, a, ca), smid_set(backend, b, cb)
    full = smid_set(backend, a, backend.create_context(a, None))
    granted = [
        backend.granted_sms(backend.create_context(a, gpu.sms_for_level(k, "green"))) for k in range(1, N_LEVELS + 1)
    ]
    expected = list(gpu.level_sms("green"))
    ok = not (sa & sb) and len(sa) == backend.granted_sms(ca) and len(sb) == backend.granted_sms(cb)
    ok = ok and granted == expected and len(full) == gpu.sm_count
    detail = (
        f"groups {backend.pool.sizes} (remainder {'merged' if backend.pool.remainder_merged else 'not merged'}); "
        f"two apps asking {half} and {other} SMs ran on {len(sa)} and {len(sb)} SMs, "
        f"{len(sa & sb)} shared; whole GPU {len(full)} SMs; levels granted {'as planned' if granted == expected else granted}"
    )
    return Check(
        "green-context split",
        "PASS" if ok else "FAIL",
        detail,
        {
            "group_sizes": backend.pool.sizes,
            "remainder_merged": backend.pool.remainder_merged,
            "app_a_sms": sorted(sa),
            "app_b_sms": sorted(sb),
            "whole_gpu_sms": len(full),
            "granted_per_level": granted,
            "expected_per_level": expected,
        },
    )


def check_vmm_sharing(backend, app) -> Check:
    gpu = backend.gpu
    contexts = [backend.create_context(app, None)] + [
        backend.create_context(app, gpu.sms_for_level(k, backend.mechanism)) for k in (1, 9, 17)
    ]
    zero_buffer(app, 1)
    for ctx in contexts:
        backend.launch(backend.create_stream(ctx), app, K_ADD)
        backend.synchronize()
    values = buffer_u32(backend, app, 1)
    want = len(contexts)
    ok = bool(np.all(values == want))
    return Check(
        "VMM memory shared across contexts",
        "PASS" if ok else "FAIL",
        f"one arena incremented from {want} contexts ({', '.join(c.context.label for c in contexts)}): "
        f"{'every element' if ok else 'NOT every element'} = {want}",
        {
            "contexts": [c.context.label for c in contexts],
            "values_min": int(values.min()),
            "values_max": int(values.max()),
        },
    )


def time_per_call(fn: Callable[[], Any], n: int, every: int, sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    for i in range(n):
        fn()
        if (i + 1) % every == 0:
            sync()
    elapsed = time.perf_counter() - t0
    sync()
    return elapsed / n


def check_launch_overhead(backend, app) -> Check:
    stream = backend.create_stream(backend.create_context(app, None))
    entry = app.private.entries[K_EMPTY]
    cu = backend.driver.cu
    raw = time_per_call(
        lambda: cu.cuLaunchKernel(entry.kernel, 1, 1, 1, 32, 1, 1, 0, stream.handle, entry.params.address, 0),
        5000,
        1000,
        lambda: backend.driver.call("cuStreamSynchronize", stream.handle),
    )
    plain = time_per_call(lambda: backend.launch(stream, app, K_EMPTY), 5000, 500, backend.synchronize)
    timed = time_per_call(lambda: backend.launch(stream, app, K_EMPTY, timed=True), 5000, 500, backend.synchronize)
    detail = f"cuLaunchKernel {us(raw)} us, backend.launch {us(plain)} us, timed {us(timed)} us per kernel"
    return Check(
        "launch overhead (host)", "PASS", detail, {"raw_us": us(raw), "launch_us": us(plain), "timed_us": us(timed)}
    )


def check_launch_queue(backend, app, most: int = 3 * LAUNCH_QUEUE) -> Check:
    """How many kernels one stream takes before a launch blocks the host until one ends.

    Wide spin kernels (~360 us each) launched back to back into one stream, each launch timed
    on the host, the garbage collector off: once the queue is full every launch waits for a
    kernel to end, so the first of five launches in a row over 100 us marks it (a slow launch
    or two are the host's own hiccups: a loaded host stalled one 375 ms, and the next two).
    The simulator blocks at ``LAUNCH_QUEUE`` and the whole-request policies keep at most
    ``STREAM_BUDGET`` kernels in a stream, so a queue shorter than that budget would hold up
    every app's launches."""
    stream = backend.create_stream(backend.create_context(app, None))
    backend.synchronize()
    times: list[float] = []
    blocked = None
    with no_gc():
        for i in range(most):
            t0 = time.perf_counter()
            backend.launch(stream, app, K_WIDE)
            times.append(time.perf_counter() - t0)
            if i >= 4 and min(times[-5:]) > 100e-6:
                blocked = i - 4
                break
    backend.synchronize()
    typical = us(statistics.median(times))
    data = {
        "blocked_at": blocked,
        "launched": len(times),
        "median_launch_us": typical,
        "assumed": LAUNCH_QUEUE,
        "policies_keep": STREAM_BUDGET,
    }
    if blocked is None:
        detail = f"no launch blocked in {len(times)} (median {typical} us each): the queue holds at least that many"
        return Check("launch queue depth", "PASS", detail, data)
    ok = blocked > STREAM_BUDGET
    detail = (
        f"launch {blocked} blocked for {us(times[blocked])} us (median {typical} us before): a stream holds "
        f"about {blocked} kernels; the simulator assumes {LAUNCH_QUEUE}, the policies keep at most {STREAM_BUDGET}"
    )
    return Check("launch queue depth", "PASS" if ok else "FAIL", detail, data)


def gaps(backend, first_stream, second_stream, app, n: int = 50) -> list[float]:
    """Idle time between a spin kernel and the kernel that waits for it (host-clock times)."""
    out = []
    for _ in range(n):
        a = backend.launch(first_stream, app, K_SPIN, timed=True)
        b = backend.launch(second_stream, app, K_EMPTY, timed=True, after=a)
        backend.synchronize()
        out.append(b.start - a.end)
    return out


def check_latencies(backend, app) -> Check:
    gpu = backend.gpu
    host = HostCosts.for_gpu(gpu)
    primary = backend.create_context(app, None)
    restricted = backend.create_context(app, gpu.sms_for_level(9, backend.mechanism))
    s1, s2 = backend.create_stream(primary), backend.create_stream(primary)
    s3 = backend.create_stream(restricted)
    same_stream = statistics.median(gaps(backend, s1, s1, app))
    cross_stream = statistics.median(gaps(backend, s1, s2, app))
    cross_context = statistics.median(gaps(backend, s3, s1, app))
    # Timed-launch bias: the same empty kernel timed on an idle stream and behind a backlog.
    idle, backed = [], []
    for _ in range(50):
        backend.synchronize()
        r = backend.launch(s1, app, K_EMPTY, timed=True)
        backend.synchronize()
        idle.append(r.end - r.start)
        backend.launch(s1, app, K_SPIN)
        r = backend.launch(s1, app, K_EMPTY, timed=True)
        backend.synchronize()
        backed.append(r.end - r.start)
    data = {
        "same_stream_gap_us": us(same_stream),
        "cross_stream_event_us": us(cross_stream),
        "cross_context_switch_us": us(cross_context),
        "timed_empty_idle_us": us(statistics.median(idle)),
        "timed_empty_backlogged_us": us(statistics.median(backed)),
        "host_costs_modelled_us": {  # what the simulator charges (bless/hw/<gpu>.toml)
            "event": us(host.event),
            "context_switch": us(host.context_switch),
        },
    }
    detail = (
        f"gap after a kernel: same stream {us(same_stream)} us, other stream (event) {us(cross_stream)} us, "
        f"other context {us(cross_context)} us (cross-context gaps carry the anchors' few-us error); "
        f"timed empty kernel: {data['timed_empty_idle_us']} us on an idle stream vs "
        f"{data['timed_empty_backlogged_us']} us behind a backlog"
    )
    return Check("context-switch and event latency", "PASS", detail, data)


def check_stream_priority(backend, app) -> Check:
    """A backlog on a low-priority stream (deadline pacing runs a waiting request there, in the
    bubbles) does not hold back a kernel of an ordinary stream: its blocks are dispatched before
    the backlog's remaining ones (CUDA C++ Programming Guide, "Stream Priorities").  Measured as
    when a one-block kernel launched just after a many-wave kernel ends, from the wide kernel's
    start, with the wide kernel on a low-priority and on an ordinary stream; the probe runs in the
    same (unrestricted) context and in a restricted one, as an app's restricted kernels would."""
    gpu = backend.gpu
    primary = backend.create_context(app, None)
    restricted = backend.create_context(app, gpu.sms_for_level(9, backend.mechanism))
    low, other = backend.create_stream(primary, low_priority=True), backend.create_stream(primary)
    probes = {"same context": backend.create_stream(primary), "restricted context": backend.create_stream(restricted)}

    def waits(backlog, probe) -> tuple[float, float]:
        done, wide_len = [], []
        for _ in range(10):
            backend.synchronize()
            wide = backend.launch(backlog, app, K_WIDE, timed=True)
            p = backend.launch(probe, app, K_SPIN, timed=True)
            backend.synchronize()
            done.append(p.end - wide.start)
            wide_len.append(wide.end - wide.start)
        return statistics.median(done), statistics.median(wide_len)

    data: dict[str, Any] = {}
    for where, probe in probes.items():
        behind_low, wide = waits(low, probe)
        behind_ordinary, _ = waits(other, probe)
        data[where] = {
            "probe_done_behind_low_priority_us": us(behind_low),
            "probe_done_behind_ordinary_us": us(behind_ordinary),
            "wide_kernel_us": us(wide),
        }
    same = data["same context"]
    ok = same["probe_done_behind_low_priority_us"] < 0.5 * same["probe_done_behind_ordinary_us"]
    detail = "; ".join(
        f"{where}: probe done {d['probe_done_behind_low_priority_us']} us after a low-priority "
        f"{d['wide_kernel_us']}-us backlog started, {d['probe_done_behind_ordinary_us']} us after an ordinary one"
        for where, d in data.items()
    )
    return Check("stream priorities", "PASS" if ok else "FAIL", detail, data)


def check_context_memory(backend) -> Check:
    mem = backend.context_memory
    if not mem:
        return Check("per-context memory", "SKIP", "no restricted context was created")
    values = list(mem.values())
    data = gpu_constants(backend.gpu.name)
    filed = data.sources[f"context_memory.{backend.mechanism}"]
    kind = "source" if filed.source is not None else "assumption"
    detail = (
        f"{len(values)} {backend.mechanism} contexts: median {statistics.median(values) / 2**20:.1f} MiB, "
        f"max {max(values) / 2**20:.1f} MiB each (cuMemGetInfo before/after); "
        f"the data file has {filed.written} ({kind}, {data.path}), which the measurement overrides"
    )
    return Check(
        "per-context memory",
        "PASS",
        detail,
        {"bytes_per_context": mem, "data_file_bytes": backend.gpu.context_bytes(backend.mechanism)},
    )


def check_mps(gpu: str) -> Check:
    from bless.cuda import mps

    if shutil.which(mps.CONTROL) is None:
        return Check("MPS contexts", "SKIP", f"{mps.CONTROL} not on PATH")
    with tempfile.TemporaryDirectory(prefix="bless-mps-") as tmp:
        paths = mps.MpsPaths(Path(tmp))
        try:
            mps.start(paths)
        except BackendError as e:
            return Check("MPS contexts", "SKIP", f"the MPS daemon could not start: {e}")
        try:
            env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(paths.pipe)}
            child = subprocess.run(
                [sys.executable, __file__, "--mps-child", "--gpu", gpu],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            mps.stop(paths)
    if child.returncode != 0:
        return Check("MPS contexts", "FAIL", f"child failed: {(child.stderr or child.stdout).strip()[-800:]}")
    data = json.loads(child.stdout.strip().splitlines()[-1])
    asked, granted = data["asked"], data["granted"]
    ok = all(g >= a for a, g in zip(asked, granted)) and data["vmm_ok"]
    rounded = sum(g != a for a, g in zip(asked, granted))
    detail = (
        f"{len(asked)} levels: {rounded} rounded up by the driver (asked {asked} -> granted {granted}); "
        f"VMM sharing {'ok' if data['vmm_ok'] else 'FAILED'}; context memory median "
        f"{statistics.median(data['context_bytes']) / 2**20:.0f} MiB"
    )
    return Check("MPS contexts", "PASS" if ok else "FAIL", detail, data)


def mps_child(gpu: str) -> int:
    """Run in a process started with CUDA_MPS_PIPE_DIRECTORY set: MPS grants and VMM sharing."""
    from bless.cuda.backend import CudaBackend

    backend = CudaBackend(gpu, mechanism="mps")
    with tempfile.TemporaryDirectory() as tmp:
        app = backend.deploy(write_check_app(Path(tmp), backend.gpu.name, backend.device.info.sm_count))
        asked = [backend.gpu.sms_for_level(k, "mps") for k in range(1, N_LEVELS)]
        granted = [backend.granted_sms(backend.create_context(app, n)) for n in asked]
        vmm = check_vmm_sharing(backend, app)
        data = {
            "asked": asked,
            "granted": granted,
            "vmm_ok": vmm.status == "PASS",
            "context_bytes": list(backend.context_memory.values()),
        }
        backend.close()
    print(json.dumps(data))
    return 0


def check_bless_run(backend_gpu: str, mechanism: str, duration: float, profiles: Path | None = None) -> Check:
    """ResNet50 + BERT at 50/50 under BLESS on the GPU and on the simulator.

    With ``profiles`` (a folder of profiles measured on this GPU, ``bless profile
    --backend cuda``) both runs use those; else the shipped ones, whose ISO
    targets are only as good as their prediction.
    """
    from bless.build.plan import find_plan
    from bless.harness.config import config_from_dict
    from bless.profiles.catalog import load_app

    names = ("resnet50", "bert")
    apps = tuple(str(profiles / f"{n}.json") for n in names) if profiles is not None else names
    try:
        for name in apps:
            find_plan(load_app(name, backend_gpu), backend_gpu)
    except (BackendError, ValueError) as e:
        return Check("two-app BLESS run (GPU vs simulator)", "SKIP", str(e))
    from bless.harness.run import run_config

    results = {}
    for backend in ("cuda", "sim"):
        cfg = config_from_dict(
            {
                "name": f"gpu-check-{backend}",
                "gpu": backend_gpu,
                "backend": backend,
                "mechanism": mechanism,
                "policy": "bless",
                "duration": duration,
                "warmup": min(2.0, duration / 4),
                "seed": 0,
                "apps": [{"app": a, "quota": 0.5, "load": "B"} for a in apps],
            }
        )
        results[backend] = run_config(cfg)
    rows = {}
    ok = True
    for real, sim in zip(results["cuda"].apps, results["sim"].apps):
        rows[real.app] = {"gpu": real.summary(), "sim": sim.summary()}
        ok = ok and real.completed > 0 and real.mean <= real.iso_latency * 1.05
    detail = "; ".join(
        f"{a}: GPU mean {r['gpu']['mean_ms']:.2f} ms vs ISO {r['gpu']['iso_ms']:.2f} ms (sim {r['sim']['mean_ms']:.2f} ms)"
        for a, r in rows.items()
    )
    return Check("two-app BLESS run (GPU vs simulator)", "PASS" if ok else "FAIL", detail, rows)


def guarded(name: str, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as e:
        return Check(name, "FAIL", f"{type(e).__name__}: {e}")


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default=None, help="GPU model (default: detected)")
    parser.add_argument("--mechanism", default="auto", choices=("auto", "green", "mps"))
    parser.add_argument("--out", type=Path, default=ROOT / "tools" / "gpu_check_results")
    parser.add_argument("--run-seconds", type=float, default=10.0, help="arrival window of the two-app run")
    parser.add_argument("--skip-run", action="store_true", help="skip the two-app BLESS run")
    parser.add_argument(
        "--profiles", type=Path, help="folder of profiles measured on this GPU for the two-app run (default: shipped)"
    )
    parser.add_argument("--mps-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mps_child:
        return mps_child(args.gpu)

    from bless.cuda.backend import CudaBackend

    try:
        backend = CudaBackend(args.gpu, mechanism=args.mechanism)
    except BackendError as e:
        print(f"gpu_check: {e}\ngpu_check needs a machine with an NVIDIA GPU and driver; nothing was checked.")
        return 2
    checks = run_checks(backend, run_seconds=None if args.skip_run else args.run_seconds, profiles=args.profiles)
    report(checks, args.out, checks[0].data["gpu_model"])
    return 1 if any(c.status == "FAIL" for c in checks) else 0


def run_checks(backend, run_seconds: float | None, profiles: Path | None = None) -> list[Check]:
    """Every check, in order; closes ``backend`` (the MPS and run checks make their own)."""
    gpu = backend.gpu.name
    checks = [check_device(backend)]
    with tempfile.TemporaryDirectory() as tmp:
        profile = write_check_app(Path(tmp), gpu, backend.device.info.sm_count)
        apps = [backend.deploy(profile), backend.deploy(profile)]  # two apps: deployment slots 0 and 1
        checks.append(guarded("green-context split", lambda: check_green_split(backend, apps)))
        checks.append(guarded("VMM memory shared across contexts", lambda: check_vmm_sharing(backend, apps[0])))
        checks.append(guarded("launch overhead (host)", lambda: check_launch_overhead(backend, apps[0])))
        checks.append(guarded("context-switch and event latency", lambda: check_latencies(backend, apps[0])))
        checks.append(guarded("stream priorities", lambda: check_stream_priority(backend, apps[0])))
        checks.append(guarded("launch queue depth", lambda: check_launch_queue(backend, apps[0])))
        checks.append(check_context_memory(backend))
        mechanism = backend.mechanism
        backend.close()
    checks.append(guarded("MPS contexts", lambda: check_mps(gpu)))
    if run_seconds is None:
        checks.append(Check("two-app BLESS run (GPU vs simulator)", "SKIP", "--skip-run"))
    else:
        checks.append(
            guarded(
                "two-app BLESS run (GPU vs simulator)", lambda: check_bless_run(gpu, mechanism, run_seconds, profiles)
            )
        )
    return checks


def report(checks: list[Check], out_dir: Path, gpu: str) -> Path:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"bless GPU check ({gpu})")
    for col in ("check", "result", "detail"):
        table.add_column(col)
    colour = {"PASS": "green", "FAIL": "red", "SKIP": "yellow"}
    for c in checks:
        table.add_row(c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail)
    Console(width=200).print(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC)
    path = out_dir / f"{stamp:%Y-%m-%d}-{gpu}.json"
    path.write_text(
        json.dumps(
            {
                "when": stamp.isoformat(timespec="seconds"),
                "gpu": gpu,
                "checks": [asdict(c) for c in checks],
            },
            indent=2,
            default=lambda o: o if not isinstance(o, float) or math.isfinite(o) else None,
        )
        + "\n"
    )
    print(f"results: {path}")
    return path


if __name__ == "__main__":
    sys.exit(main())
