"""The request lifecycle its app owns: every transition through AppState, the state follows."""

import pytest

from bless.core.lifecycle import AppState, Request, RequestState
from bless.profiles.synthetic import synthetic_profile


@pytest.fixture
def app():
    return AppState(0, "a", synthetic_profile("a", n_kernels=4, mean_us=20, seed=1), 0.5)


def test_a_request_moves_queued_active_running_done(app):
    first, second = Request(1, app, 0.0), Request(2, app, 0.001)
    app.submit(first)
    app.submit(second)
    assert first.state is second.state is RequestState.QUEUED
    assert app.activate() is first and first.state is RequestState.ACTIVE
    assert app.activate() is first  # one active request per app
    first.scheduled = 2
    assert first.state is RequestState.RUNNING
    app.finish(first, end=0.01)
    assert first.state is RequestState.DONE and app.active is None
    assert app.activate() is second


def test_a_fault_fails_only_its_request(app):
    req = Request(1, app, 0.0)
    app.submit(req)
    app.activate()
    req.scheduled = req.n_kernels
    app.finish(req, end=0.01, error="illegal address")
    assert req.state is RequestState.FAILED and req.failed == "illegal address"


def test_withdraw_takes_out_only_what_has_not_launched(app):
    running, active, queued = Request(1, app, 0.0), Request(2, app, 0.0), Request(3, app, 0.0)
    for r in (running, active, queued):
        app.submit(r)
    app.activate()
    running.scheduled = 1
    assert not app.withdraw(running) and running.state is RequestState.RUNNING
    app.finish(running, end=0.01)
    assert app.activate() is active
    assert app.withdraw(queued) and queued.state is RequestState.WITHDRAWN and not app.queue
    assert app.drain() == [active] and active.state is RequestState.WITHDRAWN and app.active is None


def test_policies_that_launch_whole_requests_take_them_in_order(app):
    reqs = [Request(i, app, i * 1e-3) for i in range(3)]
    for r in reqs:
        app.submit(r)
    assert [app.take_queued() for _ in range(4)] == [*reqs, None]


def test_an_app_is_busy_from_an_arrival_to_the_end_of_its_last_request(app):
    assert app.busy_since is None
    first, second = Request(1, app, 0.002), Request(2, app, 0.003)
    app.submit(first)
    app.submit(second)
    assert app.busy_since == 0.002
    app.activate()
    app.finish(first, end=0.004)
    assert app.busy_since == 0.002  # the second still waits: no gap
    app.activate()
    app.finish(second, end=0.005)
    assert app.busy_since is None
    back_to_back = Request(3, app, 0.005)  # a closed loop with no think time
    app.submit(back_to_back)
    assert app.busy_since == 0.002
    app.activate()
    app.finish(back_to_back, end=0.006)
    later = Request(4, app, 0.007)
    app.submit(later)
    assert app.busy_since == 0.007  # a gap: a new busy period
    assert app.withdraw(later) and app.busy_since is None
