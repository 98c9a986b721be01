"""The kernel manager: a decision's launches go to the contexts and streams it names, in order."""

import numpy as np
import pytest

from bless.core.lifecycle import AppState, Request
from bless.core.manager import KernelManager
from bless.core.policy import Decision, RequestLaunch
from bless.profiles.synthetic import synthetic_profile
from bless.sim.backend import SimBackend


def test_a_low_priority_launch_needs_the_stream_and_keeps_the_request_in_order():
    profile = synthetic_profile("a", n_kernels=6, seed=1)
    plain, background = AppState(0, "plain", profile, 0.5), AppState(1, "background", profile, 0.5)
    manager = KernelManager(SimBackend("a100"))
    manager.deploy(plain, [54])
    manager.deploy(background, [54], low_priority=True)
    with pytest.raises(ValueError, match=r"'plain' has no low-priority stream; .* low_priority\(\)"):
        manager.execute(Decision((RequestLaunch(Request(0, plain, 0.0), 0, 2, low_priority=True),)))
    request = Request(1, background, 0.0)
    bubbles, restricted = manager.execute(
        Decision((RequestLaunch(request, 0, 2, low_priority=True), RequestLaunch(request, 2, 4, 54)))
    )[1:3]
    manager.backend.synchronize()
    assert bubbles.stream.low_priority and bubbles.stream.context.sm_limit is None
    assert not restricted.stream.low_priority and restricted.stream.context.sm_limit == 54
    assert restricted.start >= bubbles.end  # the request's kernels never overlap or reorder


def test_a_decision_in_numpy_integers_launches_as_one_in_python_integers():
    """A policy may count kernels with NumPy (a plug-in's ``np.searchsorted``); the request's
    progress stays a Python integer, which the compiled ``Request`` of a wheel requires."""
    app = AppState(0, "a", synthetic_profile("a", n_kernels=6, seed=1), 0.5)
    manager = KernelManager(SimBackend("a100"))
    manager.deploy(app, [54])
    request = Request(0, app, 0.0)
    first, second = np.int64(0), np.int64(4)
    manager.execute(Decision((RequestLaunch(request, first, second, 54), RequestLaunch(request, second, np.int64(2)))))
    manager.backend.synchronize()
    assert request.scheduled == 6 and type(request.scheduled) is int
