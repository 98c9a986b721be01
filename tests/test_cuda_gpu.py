"""tools/gpu_check.py: its checks on the fake driver here, and for real on a GPU (marked ``gpu``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed (pip install '.[cuda]')")
from cuda_fake import FakeDevice, FakeDriver
from scripts import load_script

from bless.cuda.backend import CudaBackend
from bless.cuda.driver import probe

gpu_check = load_script("tools/gpu_check.py")
HAS_GPU, GPU_REASON = probe()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason=f"needs an NVIDIA GPU: {GPU_REASON}")


def _fast_kernels(name: str, sms: int) -> float:
    return {"empty": 2e-6, "spin": 20e-6, "record_smid": 10e-6, "add_one": 3e-6}[name]


def test_gpu_check_runs_its_checks_on_the_fake_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no MPS daemon binary: that check must skip
    monkeypatch.setenv("BLESS_CACHE", str(tmp_path / "cache"))
    device = FakeDevice(kernel_time=_fast_kernels)
    backend = CudaBackend("h100", driver_module=FakeDriver(device))
    checks = {c.name: c for c in gpu_check.run_checks(backend, run_seconds=1.0)}
    assert checks["driver and device"].status == "PASS"
    split = checks["green-context split"]
    assert split.status == "PASS", split.detail
    assert not set(split.data["app_a_sms"]) & set(split.data["app_b_sms"])
    assert checks["VMM memory shared across contexts"].status == "PASS"
    assert checks["launch overhead (host)"].data["launch_us"] > 0
    assert checks["context-switch and event latency"].data["cross_stream_event_us"] >= 0
    # The fake runs every stream's kernels independently: no SM to contend for, only the numbers.
    assert set(checks["stream priorities"].data) == {"same context", "restricted context"}
    queue = checks["launch queue depth"]  # the fake's launches never block
    assert queue.status == "PASS" and queue.data["blocked_at"] is None, queue.detail
    assert checks["per-context memory"].status == "PASS"
    assert checks["MPS contexts"].status == "SKIP"
    assert checks["two-app BLESS run (GPU vs simulator)"].status == "SKIP"
    path = gpu_check.report(list(checks.values()), tmp_path / "out", "h100")
    assert json.loads(path.read_text())["checks"][1]["status"] == "PASS"


def test_gpu_check_without_a_gpu_says_so(capsys):
    if HAS_GPU:
        pytest.skip(f"a GPU is present here ({GPU_REASON})")
    assert gpu_check.main([]) == 2
    assert "no NVIDIA driver / no GPU found" in capsys.readouterr().out


@pytest.mark.gpu
@needs_gpu
def test_green_contexts_split_disjoint_sms_on_the_gpu(tmp_path):
    backend = CudaBackend(mechanism="green")
    profile = gpu_check.write_check_app(tmp_path, backend.gpu.name, backend.device.info.sm_count)
    apps = [backend.deploy(profile), backend.deploy(profile)]
    check = gpu_check.check_green_split(backend, apps)
    backend.close()
    assert check.status == "PASS", check.detail


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    "check_name",
    [
        "check_vmm_sharing",  # memory is shared across contexts
        "check_stream_priority",  # a low-priority backlog does not hold back an ordinary kernel
    ],
)
def test_one_app_checks_pass_on_the_gpu(tmp_path, check_name):
    backend = CudaBackend()
    app = backend.deploy(gpu_check.write_check_app(tmp_path, backend.gpu.name, backend.device.info.sm_count))
    check = getattr(gpu_check, check_name)(backend, app)
    backend.close()
    assert check.status == "PASS", check.detail


@pytest.mark.gpu
@needs_gpu
def test_timed_launches_and_notify_on_the_gpu(tmp_path):
    backend = CudaBackend()
    app = backend.deploy(gpu_check.write_check_app(tmp_path, backend.gpu.name, backend.device.info.sm_count))
    small = backend.create_stream(backend.create_context(app, backend.gpu.sms_for_level(3, backend.mechanism)))
    whole = backend.create_stream(backend.create_context(app, None))
    first = backend.launch(small, app, gpu_check.K_SPIN, timed=True)
    last = backend.launch(whole, app, gpu_check.K_EMPTY, after=first, notify=True, timed=True)
    done = []
    while not done:
        done = backend.wait(backend.now() + 1.0)
    assert done == [last] and last.start >= first.end - 10e-6
    assert 5e-6 < first.end - first.start < 1e-3  # ~20 us of spinning
    backend.close()
