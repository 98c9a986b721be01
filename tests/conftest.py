"""Shared fixtures: seeded synthetic apps, a recording simulated backend, the depth of its
streams and one local Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bless.profiles.format import Profile
from bless.profiles.synthetic import synthetic_profile
from bless.sim.backend import SimBackend

MEASURED_H100 = Path(__file__).resolve().parents[1] / "tools/gpu_check_results/2026-11-26-h200/profiles"
"""Profiles measured on a GH100 (an H200), every kernel with its launch configuration, so the
simulated GPU lets blocks of two kernels share an SM (``profiles/h100/README.md``)."""


def pytest_configure(config: pytest.Config) -> None:
    """``make test-native`` sets BLESS_EXPECT_NATIVE=1: a run that would test the interpreted
    modules instead of the compiled ones stops before its first test."""
    if os.environ.get("BLESS_EXPECT_NATIVE") == "1":
        from bless.native import NATIVE_MODULES, compiled_modules

        interpreted = sorted(set(NATIVE_MODULES) - set(compiled_modules()))
        if interpreted:
            raise pytest.UsageError(
                f"BLESS_EXPECT_NATIVE=1 but {', '.join(interpreted)} run interpreted: put the compiled "
                "build first on PYTHONPATH (make test-native) and run pytest, not python -m pytest"
            )


class RecordingBackend(SimBackend):
    """A simulated GPU that remembers every launch (request id, kernel index, run)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[object, int, object]] = []

    def launch(self, stream, app, kernel, **kwargs):
        run = super().launch(stream, app, kernel, **kwargs)
        self.log.append((kwargs.get("tag"), kernel, run))
        return run


class StreamDepth:
    """The most kernels any simulated stream held when one more was launched into it."""

    most = 0


@pytest.fixture
def stream_depth(monkeypatch) -> StreamDepth:
    """Watches every simulated launch (any SimBackend made during the test) for how deep its
    stream was: a GPU's host blocks at LAUNCH_QUEUE."""
    depth = StreamDepth()
    launch = SimBackend.launch

    def watched(self, stream, app, kernel, **kwargs):
        depth.most = max(depth.most, len(stream.ops) + stream.busy)
        return launch(self, stream, app, kernel, **kwargs)

    monkeypatch.setattr(SimBackend, "launch", watched)
    return depth


@pytest.fixture
def app_a() -> Profile:
    return synthetic_profile("a", n_kernels=60, mean_us=40.0, seed=1)


@pytest.fixture
def app_b() -> Profile:
    return synthetic_profile("b", n_kernels=90, mean_us=30.0, seed=2)


RAY_SIM_GPUS = 4
"""Simulated GPUs (Ray resources) of the local Ray the cluster tests share."""


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray for every cluster test module (skipped where Ray is not installed).

    Each start of a local Ray is a chance for its own startup check to give up (the raylet
    must register with the GCS within 30 s; seen on a loaded 2-core machine after several
    back-to-back starts), so the modules share one and each starts and stops its bless cluster.
    """
    ray = pytest.importorskip("ray")
    from bless.cluster import ray_actors as ra

    ra.connect(None, resources={ra.SIM_RESOURCE: RAY_SIM_GPUS}, num_cpus=2)
    yield ray
    ray.shutdown()
