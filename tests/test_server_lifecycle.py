"""A request's life in the server: bounded outputs built off the event loop, client
deadlines honoured by the scheduler, and a shutdown that answers everyone with a
retry hint."""

import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
from server_helpers import (  # noqa: F401  (fixtures)
    PROFILED_BATCH,
    admin,
    code_of,
    infer_future,
    make_server,
    profile_dir,
    received,
    server,
    wait_for,
)

from bless.serving.api import OIP_SERVICE, methods, oip
from bless.serving.client import BlessClient
from bless.serving.client.client import infer_request
from bless.serving.server.rpc import RETRY_PUSHBACK

BIG_OUTPUT = ("OUT", "FP64", [-1, 1_000_000])
"""8 MB per batch item: 64 MB per response at the profiled batch of 8, about what fits."""


def register_big(c: BlessClient, name: str = "big", output=BIG_OUTPUT, quota: str = "50%"):
    return c.register(name, "quick", quota, inputs=[("X", "INT8", [-1, 8])], outputs=[output])


def big_request(app: str = "big", batch: int = PROFILED_BATCH):
    meta = oip.ModelMetadataResponse(inputs=[oip.ModelMetadataResponse.TensorMetadata(name="X", datatype="INT8")])
    return infer_request(app, meta, {"X": np.ones((batch, 8), dtype=np.int8)})


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 * 2**20)])


def raw_infer(channel: grpc.Channel):
    """ModelInfer that returns the response's bytes unparsed: a client that reads tens of MB
    must not hold the GIL against the in-process server while it parses them."""
    m = methods(OIP_SERVICE)["ModelInfer"]
    return channel.unary_unary(m.path, request_serializer=m.request.SerializeToString)


def infer_error(call, request, timeout=10) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(request, timeout=timeout)
    return e.value


def test_outputs_too_large_for_a_message_are_refused_at_registration(admin):
    with pytest.raises(grpc.RpcError) as e:
        register_big(admin, output=("OUT", "FP64", [-1, 2_000_000]))  # 16 MB x batch 8 > 64 MiB
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("outputs[0].shape") and "max_message_bytes" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        register_big(admin, name="huge", output=("OUT", "FP32", [2**40, 2**40]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "batch of 8" in e.value.details()
    assert admin.apps().apps == []


def test_a_batch_over_the_profiled_one_is_invalid_argument_naming_both(server, admin):
    register_big(admin)
    call = raw_infer(channel(server.address))
    error = infer_error(call, big_request(batch=PROFILED_BATCH + 1))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "batch of 9" in error.details() and "batch of 8" in error.details()
    response = oip.ModelInferResponse.FromString(call(big_request(), timeout=10))
    assert list(response.outputs[0].shape) == [PROFILED_BATCH, 1_000_000]
    assert len(response.raw_output_contents[0]) == PROFILED_BATCH * 1_000_000 * 8


def p99(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 99))


def small_latencies(c: BlessClient, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.infer("small")
        out.append(time.perf_counter() - t0)
    return out


HAMMER = """
import sys, time, grpc
from bless.serving.api import OIP_SERVICE, methods
m = methods(OIP_SERVICE)["ModelInfer"]
channel = grpc.insecure_channel(sys.argv[1], options=[("grpc.max_receive_message_length", 64 * 2**20)])
call = channel.unary_unary(m.path)
request = bytes.fromhex(sys.argv[2])
print("ready", flush=True)
while True:
    call(request, timeout=30)
    print("big", flush=True)
"""


HOL_MARGIN_S = 0.15
"""How much slower the small app's median may be beside the big app: well under one 64 MB
encode on the event loop (0.3-1 s here), which is what every answer waited for before."""


def test_an_app_with_huge_outputs_does_not_stall_another_app(server, admin):
    """Before, each 64 MB response was built on the one gRPC event loop (0.3-1 s on a busy
    2-core machine), and every other app's answers waited behind it: the small app's p99
    went from ~5 ms to 0.6-1.7 s.  Now only the copies that hold the GIL delay it (45-110 ms
    measured here, with the big app's two clients and other work sharing two cores).  The
    big app's clients are other processes, as clients are: in this one they would hold the
    GIL against the server while they read 64 MB."""
    admin.register("small", "quick", "40%")
    register_big(admin, quota="40%")
    small_latencies(admin, 5)  # warm
    alone = small_latencies(admin, 30)
    request = big_request().SerializeToString().hex()
    hammers = [
        subprocess.Popen([sys.executable, "-c", HAMMER, server.address, request], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        for h in hammers:
            assert h.stdout.readline() == "ready\n" and h.stdout.readline() == "big\n"
        loaded = small_latencies(admin, 30)
    finally:
        for h in hammers:
            h.kill()
            h.wait()
    big = admin.stats("big").apps[0].succeeded
    print(
        f"\nsmall app p50 / p99 alone {np.median(alone) * 1e3:.1f} / {p99(alone) * 1e3:.1f} ms, next to the big app "
        f"{np.median(loaded) * 1e3:.1f} / {p99(loaded) * 1e3:.1f} ms ({big} big answered)"
    )
    # The median, not the tail: one unlucky GIL hand-off on a loaded CI machine can take a
    # few hundred ms, while head-of-line blocking delayed every answer by a whole encode.
    assert np.median(loaded) < np.median(alone) + HOL_MARGIN_S


def default_request(app: str):
    """A request of an app registered with the default tensors."""
    request = oip.ModelInferRequest(model_name=app, raw_input_contents=[np.zeros((1, 16), np.float32).tobytes()])
    request.inputs.add(name="INPUT", datatype="FP32", shape=[1, 16])
    return request


def test_a_request_whose_deadline_passed_in_the_queue_never_runs(server, admin):
    admin.register("s", "slow", "50%")
    running = infer_future(server.address, "s")
    wait_for(lambda: admin.stats("s").apps[0].running == 1, what="the first request on the GPU")
    m = methods(OIP_SERVICE)["ModelInfer"]
    call = grpc.insecure_channel(server.address).unary_unary(
        m.path, request_serializer=m.request.SerializeToString, response_deserializer=m.response.FromString
    )
    assert infer_error(call, default_request("s"), timeout=0.02).code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert code_of(running) == grpc.StatusCode.OK
    wait_for(lambda: admin.stats("s").apps[0].cancelled == 1, what="the expired request counted")
    s = admin.stats("s").apps[0]
    assert (s.succeeded, s.cancelled, s.latency.count) == (1, 1, 1)  # it never ran


def test_a_response_ready_after_the_deadline_is_not_a_success(server, admin):
    """The GPU part takes ~2 ms, building 8 MB of outputs much longer than the 10 ms deadline."""
    register_big(admin)
    call = raw_infer(channel(server.address))
    call(big_request(), timeout=10)
    assert infer_error(call, big_request(), timeout=0.01).code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(lambda: admin.stats("big").apps[0].cancelled == 1, what="the late request counted")
    s = admin.stats("big").apps[0]
    assert (s.succeeded, s.cancelled) == (1, 1)


def test_shutdown_answers_every_request_unavailable_with_a_retry_pushback(make_server):
    server = make_server()
    with BlessClient(server.address, token=server.token) as c:
        c.register("s", "slow", "50%")
    queued = [infer_future(server.address, "s") for _ in range(6)]
    wait_for(lambda: received(server) == 6, what="six requests in the server")
    stopper = threading.Thread(target=server.stop, kwargs={"grace": 0.15})
    stopper.start()
    late = []
    call = raw_infer(channel(server.address))
    while stopper.is_alive():
        late.append(call.future(default_request("s"), timeout=10))
        time.sleep(0.01)
    stopper.join()
    ok, cancelled = grpc.StatusCode.OK, grpc.StatusCode.CANCELLED
    assert {code_of(f) for f in queued} <= {ok, grpc.StatusCode.UNAVAILABLE}
    # A call still waiting for a handler when grpcio stops is answered CANCELLED by grpc
    # core itself (grpc/grpc#41785), never reaching the server; every call the server
    # received is answered by it: a result or UNAVAILABLE with its retry pushback.
    assert {code_of(f) for f in late} <= {ok, grpc.StatusCode.UNAVAILABLE, cancelled}
    refused = [
        f for f in queued + late if code_of(f) != ok and RETRY_PUSHBACK in dict(f.exception().trailing_metadata() or ())
    ]
    answered = [f for f in queued + late if code_of(f) == ok] + refused
    assert received(server) == len(answered)
    assert len(refused) >= 5  # at most one of the six ran within the grace
    for f in refused:
        assert f.exception().code() == grpc.StatusCode.UNAVAILABLE
        assert dict(f.exception().trailing_metadata())[RETRY_PUSHBACK] == "1000"
        assert "retry" in f.exception().details()
