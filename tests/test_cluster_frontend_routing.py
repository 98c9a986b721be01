"""The cluster front end against a stand-in agent (a plain gRPC server), no Ray: its routing, its
configuration checks, and the wire reads it routes by."""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import time

import grpc
import pytest

from bless.cluster.frontend import ClusterFrontend, FrontendConfig
from bless.harness.config import ConfigError
from bless.serving.api import oip
from bless.serving.server.errors import StartupError
from bless.serving.server.rpc import RETRY_PUSHBACK
from bless.serving.server.wire import wire_string

INFER = "/inference.GRPCInferenceService/ModelInfer"


class DyingAgent:
    """Answers ModelInfer of request id ``fail`` UNAVAILABLE without a retry hint (what a
    connection to a killed process gives) and holds every other request until released."""

    def __init__(self) -> None:
        self.arrived = threading.Semaphore(0)
        self.release = threading.Event()
        self.server = grpc.server(cf.ThreadPoolExecutor(8))
        handler = grpc.unary_unary_rpc_method_handler(self.infer)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {"ModelInfer": handler}),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def infer(self, raw: bytes, context) -> bytes:
        request = oip.ModelInferRequest.FromString(raw)
        self.arrived.release()
        if request.id == "fail":
            context.abort(grpc.StatusCode.UNAVAILABLE, "Connection reset by peer")
        self.release.wait(30)
        return oip.ModelInferResponse(model_name=request.model_name, id=request.id).SerializeToString()

    # the Cluster protocol: one model on one GPU, this agent's endpoint
    def placements(self):
        return {"m": {"gpu": "gpu-0"}}

    def endpoints(self):
        return {"gpu-0": {"address": f"127.0.0.1:{self.port}", "token": "incarnation-1"}}

    def health(self):
        return {"unplaced": {}}


@pytest.fixture
def dying():
    agent = DyingAgent()
    yield agent
    agent.release.set()
    agent.server.stop(0)


def test_every_request_in_flight_to_a_lost_agent_is_answered_unavailable_at_once(dying):
    """The first failed call drops the agent and closes its channel, which cancels the other
    call in flight on it; that one must be UNAVAILABLE too, not left hanging to its deadline
    (the cancelled call's CancelledError, let through, made gRPC send no status at all)."""
    with ClusterFrontend(dying) as fe, grpc.insecure_channel(fe.address) as channel:
        call = channel.unary_unary(INFER)
        answers: dict[str, tuple] = {}

        def send(request_id: str) -> None:
            started = time.monotonic()
            try:
                call(oip.ModelInferRequest(model_name="m", id=request_id).SerializeToString(), timeout=10.0)
                answers[request_id] = ("OK", time.monotonic() - started, {})
            except grpc.RpcError as e:
                answers[request_id] = (e.code(), time.monotonic() - started, dict(e.trailing_metadata() or ()))

        held = threading.Thread(target=send, args=("held",))
        held.start()
        assert dying.arrived.acquire(timeout=10)  # in flight on the agent
        send("fail")
        held.join(15)
    for request_id in ("fail", "held"):
        code, seconds, trailing = answers[request_id]
        assert code == grpc.StatusCode.UNAVAILABLE, (request_id, code)
        assert seconds < 3.0 and RETRY_PUSHBACK in trailing


def test_wire_string_reads_a_field_without_decoding_the_rest():
    raw = oip.ModelInferRequest(model_name="m", id="x7", raw_input_contents=[b"\0" * 1000]).SerializeToString()
    assert wire_string(raw, 1) == "m" and wire_string(raw, 3) == "x7" and wire_string(raw, 2) == ""


def test_exposure_and_secret_files_are_checked_as_for_bless_serve(dying, tmp_path):
    with pytest.raises(ConfigError, match="host: 0.0.0.0 is reachable from other machines.*--tls-cert"):
        FrontendConfig(host="0.0.0.0")
    FrontendConfig(host="0.0.0.0", insecure=True)  # behind a TLS proxy: allowed when asked for
    with pytest.raises(ConfigError, match="tls_cert, tls_key: give both"):
        FrontendConfig(tls_cert=tmp_path / "cert.pem")
    loose = tmp_path / "token"
    loose.write_text("a-token-others-can-read\n")
    os.chmod(loose, 0o644)
    with pytest.raises(StartupError, match="admin_token_file: .*chmod 600"):
        ClusterFrontend(dying, FrontendConfig(admin_token_file=loose))
