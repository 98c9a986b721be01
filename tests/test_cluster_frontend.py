"""The cluster's front end on a local Ray cluster of 4 simulated GPUs: tritonclient (gRPC and
REST) and BlessClient against it, unmodified; health, reflection, TLS, the admin token, quotas
through the controller (skipped where Ray is not installed).  One Ray cluster for the module."""

from __future__ import annotations

import gc
import json
import ssl
import urllib.error
import urllib.request

import numpy as np
import pytest

ray = pytest.importorskip("ray")
grpcclient = pytest.importorskip("tritonclient.grpc")

import grpc  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from google.protobuf import descriptor_pool  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (  # noqa: E402
    ProtoReflectionDescriptorDatabase,
)
from server_helpers import needs_openssl, self_signed  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from bless.cluster import ray_actors as ra  # noqa: E402
from bless.cluster.controller import STATE_FILE  # noqa: E402
from bless.cluster.frontend import ClusterFrontend, FrontendConfig  # noqa: E402
from bless.serving.api import ADMIN_SERVICE, OIP_SERVICE  # noqa: E402
from bless.serving.client.client import BlessClient  # noqa: E402

GPUS = 4


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="module")
def front(ray_local, state_dir):
    ra.start_cluster(GPUS, state_dir, warm_up=False)
    try:
        with ClusterFrontend(ra.ClusterClient(), FrontendConfig(http_port=0), token="secret") as fe:
            admin = BlessClient(fe.address, token="secret")
            # two apps that cannot share a GPU (quotas 60% + 60%): on two GPUs
            a = admin.register("a", "resnet50", "60%")
            b = admin.register("b", "bert", "60%")
            yield fe, admin, (a, b)
            admin.close()
    finally:
        ra.stop_cluster()


def test_register_through_the_front_end_says_which_gpu_and_why(front):
    _, admin, (a, b) = front
    assert a.admission.accepted and a.gpu == "gpu-0" and a.placement
    assert b.gpu == "gpu-1" and "gpu-1" in b.admission.reason
    assert a.app.name == "a" and a.app.gpu == "gpu-0" and abs(a.app.quota - 0.6) < 1e-9
    listed = {app.name: app.gpu for app in admin.apps().apps}
    assert listed == {"a": "gpu-0", "b": "gpu-1"}
    stats = admin.stats()
    assert {s.name for s in stats.apps} == {"a", "b"} and stats.gpu.gpu.memory_bytes > 0
    assert admin.stats("b").apps[0].name == "b"


def test_set_quota_through_the_front_end_is_checked_and_stored_by_the_controller(front, state_dir):
    _, admin, _ = front
    changed = admin.set_quota("a", "50%")
    assert changed.name == "a" and changed.gpu == "gpu-0" and changed.quota == pytest.approx(0.5)
    assert {app.name: app.quota for app in admin.apps().apps}["a"] == pytest.approx(0.5)  # on its agent
    assert ra.ClusterClient().placements()["a"]["spec"]["quota"] == pytest.approx(0.5)  # in the placements
    stored = json.loads((state_dir / "controller" / STATE_FILE).read_text())
    assert stored["apps"]["a"]["spec"]["quota"] == pytest.approx(0.5)  # what a restarted controller reads
    c = admin.register("c", "vgg11", "40%", priority="best-effort")
    assert c.gpu == "gpu-0"
    assert {app.name: app.priority for app in admin.apps().apps}["c"] == "best-effort"  # on its agent
    assert ra.ClusterClient().placements()["c"]["spec"]["priority"] == "best-effort"  # stored
    with pytest.raises(grpc.RpcError) as e:  # 70% + c's 40% on gpu-0: refused by the controller
        admin.set_quota("a", "70%")
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "quota: 70% for 'a' would put gpu-0 at 110%" in e.value.details() and "at most 60%" in e.value.details()
    assert ra.ClusterClient().placements()["a"]["spec"]["quota"] == pytest.approx(0.5)
    with pytest.raises(grpc.RpcError) as e:
        BlessClient(front[0].address, token="wrong").set_quota("a", "10%")
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    admin.unregister("c")
    admin.set_quota("a", "60%")


def test_tritonclient_metadata_config_infer_and_statistics(front):
    fe, _, _ = front
    client = grpcclient.InferenceServerClient(fe.address)
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata().name == "bless"
    for name in ("a", "b"):
        assert client.is_model_ready(name)
        meta = client.get_model_metadata(name)
        assert meta.name == name and [t.name for t in meta.inputs] == ["INPUT"]
        assert client.get_model_config(name).config.name == name
        x = grpcclient.InferInput("INPUT", [1, 16], "FP32")
        x.set_data_from_numpy(np.ones((1, 16), np.float32))
        result = client.infer(name, [x])
        assert result.as_numpy("OUTPUT").shape == (1, 4)
        assert result.get_response().parameters["bless_latency_us"].int64_param > 0
    stats = client.get_inference_statistics()
    assert {s.name for s in stats.model_stats} == {"a", "b"}
    assert client.get_inference_statistics("a").model_stats[0].inference_stats.success.count >= 1
    index = client.get_model_repository_index()
    assert [m.name for m in index.models] == ["a", "b"]
    client.close()


def test_tritonclient_stream_over_two_gpus(front):
    fe, _, _ = front
    client = grpcclient.InferenceServerClient(fe.address)
    answers = []
    client.start_stream(callback=lambda result, error: answers.append((result, error)))
    x = grpcclient.InferInput("INPUT", [1, 16], "FP32")
    x.set_data_from_numpy(np.ones((1, 16), np.float32))
    for i, name in enumerate(["a", "b", "nobody"]):
        client.async_stream_infer(name, [x], request_id=str(i))
    client.stop_stream()
    by_id = {}
    for result, error in answers:
        if error is None:
            by_id[result.get_response().id] = result.get_response().model_name
        else:
            by_id["error"] = str(error)
    assert by_id["0"] == "a" and by_id["1"] == "b" and "nobody" in by_id["error"]
    client.close()


def test_an_unknown_model_is_not_found(front):
    fe, _, _ = front
    client = grpcclient.InferenceServerClient(fe.address)
    x = grpcclient.InferInput("INPUT", [1, 16], "FP32")
    x.set_data_from_numpy(np.ones((1, 16), np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("nobody", [x])
    assert e.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("nobody")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    assert not client.is_model_ready("nobody")
    client.close()


def test_unregister_through_the_front_end(front):
    fe, admin, _ = front
    c = admin.register("c", "resnet50", "30%")
    assert c.gpu == "gpu-0"
    admin.unregister("c")
    client = grpcclient.InferenceServerClient(fe.address)
    assert not client.is_model_ready("c")
    client.close()


def _infer_error(client, model: str, x) -> str:
    """The error of an inference (caught here, so no traceback keeps the client alive in a cycle)."""
    try:
        client.infer(model, [x])
    except InferenceServerException as e:
        return str(e)
    raise AssertionError(f"inference of {model!r} succeeded")


def test_tritonclient_http_against_the_front_end(front):
    """The REST API is `bless serve`'s own (serving/server/rest.py) over the front end's routing."""
    fe, _, _ = front
    client = httpclient.InferenceServerClient(fe.http_address)
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "bless" and "binary_tensor_data" in meta["extensions"]
    for name in ("a", "b"):
        assert client.is_model_ready(name)
        assert client.get_model_metadata(name)["inputs"][0]["name"] == "INPUT"
        assert client.get_model_config(name)["name"] == name
        x = httpclient.InferInput("INPUT", [1, 16], "FP32")
        x.set_data_from_numpy(np.ones((1, 16), np.float32))
        binary = client.infer(name, [x])
        assert binary.as_numpy("OUTPUT").shape == (1, 4)
        x.set_data_from_numpy(np.ones((1, 16), np.float32), binary_data=False)
        as_json = client.infer(name, [x], outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=False)])
        assert as_json.as_numpy("OUTPUT").shape == (1, 4)
        assert as_json.get_response()["parameters"]["bless_compute_seconds"] > 0
    assert {m["name"] for m in client.get_model_repository_index()} == {"a", "b"}
    assert client.get_inference_statistics("b")["model_stats"][0]["inference_stats"]["success"]["count"] >= 2
    assert {s["name"] for s in client.get_inference_statistics()["model_stats"]} == {"a", "b"}
    assert not client.is_model_ready("nobody")
    assert "no model 'nobody' in the cluster" in _infer_error(client, "nobody", x)
    client.close()
    # its __del__ closes again, which gevent allows on this thread only: collect it here, not
    # in a garbage collection that happens to run on another thread (Ray's, the front end's)
    del client
    gc.collect()
    with pytest.raises(urllib.error.HTTPError) as e:  # an unknown model is a 404 before its body is read
        urllib.request.urlopen(
            urllib.request.Request(f"http://{fe.http_address}/v2/models/nobody/infer", data=b"{}"), timeout=10
        )
    assert e.value.code == 404


def test_health_is_serving_and_reflection_lists_the_services(front):
    fe, _, _ = front
    with grpc.insecure_channel(fe.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", OIP_SERVICE, ADMIN_SERVICE):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, service
        db = ProtoReflectionDescriptorDatabase(channel)
        assert set(db.get_services()) == {
            OIP_SERVICE,
            ADMIN_SERVICE,
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }
        assert descriptor_pool.DescriptorPool(db).FindServiceByName(OIP_SERVICE).methods_by_name["ModelInfer"]


def test_a_front_end_with_no_agent_to_reach_is_not_serving(front):
    class Empty:
        def placements(self):
            return {}

        def endpoints(self):
            return {}

    with ClusterFrontend(Empty()) as fe, grpc.insecure_channel(fe.address) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING


@needs_openssl
def test_tls_round_trip_with_the_token_from_a_file(front, tmp_path):
    """A second front end on the same cluster, as `bless cluster up --tls-cert ... --admin-token-file`."""
    cert, key = self_signed(tmp_path, "server")
    token_file = tmp_path / "token"
    token_file.write_text("a-token-from-a-file\n")
    token_file.chmod(0o600)
    config = FrontendConfig(http_port=0, tls_cert=cert, tls_key=key, admin_token_file=token_file)
    with ClusterFrontend(ra.ClusterClient(), config) as fe:
        trusted = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with BlessClient(fe.address, token="a-token-from-a-file", timeout=10, credentials=trusted) as c:
            assert c.set_quota("b", "60%").gpu == "gpu-1"  # an admin call: the file's token
            assert {app.name for app in c.apps().apps} >= {"a", "b"}
            assert c.infer("a").outputs
        with BlessClient(fe.address, timeout=3) as plain, pytest.raises(grpc.RpcError) as e:
            plain.apps()
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # no clear text on a TLS port
        ctx = ssl.create_default_context(cafile=cert)
        with urllib.request.urlopen(f"https://{fe.http_address}/v2/health/ready", context=ctx, timeout=10) as r:
            assert r.status == 200 and json.loads(r.read()) == {"ready": True}
        with pytest.raises(OSError):  # nor on the TLS REST port
            urllib.request.urlopen(f"http://{fe.http_address}/v2/health/ready", timeout=5).read()
