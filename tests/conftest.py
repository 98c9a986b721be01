"""Shared fixtures: seeded synthetic apps and a recording simulated backend."""

from __future__ import annotations

import pytest

from bless.profiles.format import Profile
from bless.profiles.synthetic import synthetic_profile
from bless.sim.backend import SimBackend


class RecordingBackend(SimBackend):
    """A simulated GPU that remembers every launch (request id, kernel index, run)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[object, int, object]] = []

    def launch(self, stream, app, kernel, **kwargs):
        run = super().launch(stream, app, kernel, **kwargs)
        self.log.append((kwargs.get("tag"), kernel, run))
        return run


@pytest.fixture
def app_a() -> Profile:
    return synthetic_profile("a", n_kernels=60, mean_us=40.0, seed=1)


@pytest.fixture
def app_b() -> Profile:
    return synthetic_profile("b", n_kernels=90, mean_us=30.0, seed=2)
