"""Faults and endings: full queues, cancellation, unregistering with work queued,
a faulting kernel, graceful shutdown -- every request gets an explicit answer."""

import threading

import grpc
import pytest
from server_helpers import (  # noqa: F401  (fixtures)
    code_of,
    infer_future,
    make_server,
    profile_dir,
    received,
    server,
    wait_for,
)

from bless.serving.client import BlessClient


def counts(client, app):
    s = client.stats(app).apps[0]
    return s.queued, s.running


def test_a_full_queue_answers_resource_exhausted(make_server):
    server = make_server(max_queue=2)
    with BlessClient(server.address, token=server.token) as c:
        c.register("s", "slow", "50%")
        first, second = infer_future(server.address, "s"), infer_future(server.address, "s")
        wait_for(lambda: sum(counts(c, "s")) == 2, what="two requests in the server")
        third = infer_future(server.address, "s")
        assert code_of(third) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_queue" in third.exception().details()
        assert code_of(first) == code_of(second) == grpc.StatusCode.OK
        s = c.stats("s").apps[0]
        assert (s.received, s.succeeded, s.rejected) == (3, 2, 1)


def test_a_cancelled_request_leaves_the_queue(server):
    with BlessClient(server.address, token=server.token) as c:
        c.register("s", "slow", "50%")
        running = infer_future(server.address, "s")
        wait_for(lambda: counts(c, "s") == (0, 1), what="the first request on the GPU")
        queued = infer_future(server.address, "s")
        wait_for(lambda: counts(c, "s") == (1, 1), what="the second request queued")
        queued.cancel()
        wait_for(lambda: c.stats("s").apps[0].cancelled == 1, what="the cancellation")
        assert counts(c, "s")[0] == 0
        assert code_of(running) == grpc.StatusCode.OK and code_of(queued) == grpc.StatusCode.CANCELLED
        wait_for(lambda: c.stats("s").apps[0].succeeded == 1, what="the first request's stats")
        assert c.stats("s").apps[0].latency.count == 1  # the cancelled one never ran


def test_unregistering_fails_queued_requests_and_lets_the_running_one_finish(server):
    with BlessClient(server.address, token=server.token) as c:
        c.register("s", "slow", "50%")
        running = infer_future(server.address, "s")
        wait_for(lambda: counts(c, "s") == (0, 1), what="the first request on the GPU")
        queued = [infer_future(server.address, "s") for _ in range(2)]
        wait_for(lambda: counts(c, "s") == (2, 1), what="two requests queued")
        assert c.unregister("s") == 2
        assert code_of(running) == grpc.StatusCode.OK
        for f in queued:
            assert code_of(f) == grpc.StatusCode.ABORTED and "unregistered" in f.exception().details()
        with pytest.raises(grpc.RpcError) as e:
            c.infer("s")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        c.register("s", "quick", "50%")  # the name is free again
        c.infer("s")


def test_a_faulting_kernel_fails_its_request_only(server):
    with BlessClient(server.address, token=server.token) as c:
        c.register("a", "quick", "50%")
        c.register("b", "other", "50%")
        c.inject_fault("a", kernel=3)
        faulty, bystander = infer_future(server.address, "a"), infer_future(server.address, "b")
        assert code_of(faulty) == grpc.StatusCode.INTERNAL
        assert "faulted" in faulty.exception().details() and "only this request" in faulty.exception().details()
        assert code_of(bystander) == grpc.StatusCode.OK
        c.infer("a")  # the next request of the same app is fine
        a, b = c.stats().apps
        assert (a.failed, a.succeeded, b.failed, b.succeeded) == (1, 1, 0, 1)
        with pytest.raises(grpc.RpcError) as e:
            c.inject_fault("a", kernel=999)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and e.value.details().startswith("kernel")


def test_a_backend_that_cannot_inject_faults_answers_failed_precondition(make_server, monkeypatch):
    """The CUDA backend, for one, keeps the interface's default: it cannot inject faults."""
    from bless.backend.interface import Backend
    from bless.serving.server import server as server_module
    from bless.sim.backend import SimBackend

    class NoFaults(SimBackend):
        inject_fault = Backend.inject_fault

    monkeypatch.setattr(server_module, "make_backend", lambda cfg: NoFaults(cfg.gpu, clock="wall"))
    server = make_server()
    with BlessClient(server.address, token=server.token) as c:
        c.register("a", "quick", "50%")
        with pytest.raises(grpc.RpcError) as e:
            c.inject_fault("a", kernel=3)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "cannot inject faults" in e.value.details()
        c.infer("a")  # nothing else changed


def test_graceful_shutdown_answers_every_request(make_server):
    server = make_server()
    with BlessClient(server.address, token=server.token) as c:
        c.register("s", "slow", "50%")
    futures = [infer_future(server.address, "s") for _ in range(6)]
    wait_for(lambda: received(server) == 6, what="six requests in the server")
    stopper = threading.Thread(target=server.stop, kwargs={"grace": 0.15})
    stopper.start()
    stopper.join(timeout=10)
    assert not stopper.is_alive()
    codes = [code_of(f) for f in futures]
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}
    assert codes.count(grpc.StatusCode.UNAVAILABLE) >= 1
    assert all("shut down" in f.exception().details() for f in futures if f.exception() is not None)


def test_a_burst_replayed_at_once_gets_an_answer_for_every_request(make_server):
    from bless.harness.loads import Arrivals
    from bless.serving.client import AppLoad, replay

    server = make_server(max_queue=50)
    with BlessClient(server.address, token=server.token) as c:
        c.register("q", "quick", "50%")
    burst = Arrivals(tuple([0.0] * 200 + [0.5] * 10), label="burst")
    result = replay(server.address, [AppLoad("q", burst)], duration=1.0)
    (row,) = result.summary()
    assert row["sent"] == 210
    assert row["ok"] + row["errors"].get("RESOURCE_EXHAUSTED", 0) == 210
    assert row["ok"] >= 60 and row["errors"]["RESOURCE_EXHAUSTED"] >= 1  # the queue overflowed, nothing was lost
