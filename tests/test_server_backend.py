"""What the server asks of a backend through the interface: memory in use, busy SM-seconds
and fault injection, on the simulator and on the CUDA backend (fake driver, tests/cuda_fake.py).

A backend answers what it can measure and says plainly what it cannot: nan for a
statistic, an error for a fault it cannot inject (the server turns that into
FAILED_PRECONDITION, tests/test_server_faults.py)."""

from __future__ import annotations

import math

import pytest

from bless.backend.interface import BackendError
from bless.profiles.synthetic import synthetic_profile
from bless.sim.backend import SimBackend


@pytest.fixture
def cuda(tmp_path):
    """A CUDA backend on the fake driver with one deployed app, its driver, and the app."""
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed (pip install '.[cuda]')")
    from cuda_fake import FakeDevice, FakeDriver, timing_from, write_app

    from bless.cuda.backend import CudaBackend

    profile = write_app(tmp_path / "a", synthetic_profile("a", gpu="h100", n_kernels=4, mean_us=300, seed=1))
    device = FakeDevice(mps_running=True)
    timing_from(device, profile)
    fake = FakeDriver(device)
    backend = CudaBackend("h100", driver_module=fake, mechanism="mps")
    yield backend, fake, backend.deploy(profile)
    backend.close()


def test_the_simulator_counts_busy_sm_seconds_within_the_contexts_limit():
    app = synthetic_profile("a", n_kernels=6, mean_us=200.0, seed=4)
    be = SimBackend("a100")
    assert be.sm_seconds() == 0.0
    h = be.deploy(app)
    s = be.create_stream(be.create_context(h, 54))
    runs = [be.launch(s, h, i) for i in range(app.n_kernels)]
    be.synchronize()
    busy = sum(r.end - r.start for r in runs)
    assert 0 < be.sm_seconds() <= 54 * busy * (1 + 1e-9)
    assert be.utilisation() > 0


def test_cuda_memory_used_counts_the_arenas_and_what_each_context_took(cuda):
    backend, fake, app = cuda
    assert backend.memory_used == app.private.arena.size
    backend.create_context(app, 22)
    assert backend.memory_used == app.private.arena.size + fake.dev.context_cost


def test_cuda_answers_nan_for_busy_sm_time_and_refuses_to_inject_faults(cuda):
    backend, _, app = cuda
    backend.launch(backend.create_stream(backend.create_context(app, None)), app, 0)
    backend.synchronize()
    assert math.isnan(backend.sm_seconds()) and math.isnan(backend.utilisation())
    with pytest.raises(BackendError, match="cannot inject faults"):
        backend.inject_fault(app, kernel=0)
