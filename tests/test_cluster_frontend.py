"""The cluster's gRPC front end on a local Ray cluster of 4 simulated GPUs: tritonclient and
BlessClient against it, unmodified (skipped where Ray is not installed)."""

from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray")
grpcclient = pytest.importorskip("tritonclient.grpc")

from tritonclient.utils import InferenceServerException  # noqa: E402

from bless.cluster import ray_actors as ra  # noqa: E402
from bless.cluster.frontend import ClusterFrontend  # noqa: E402
from bless.serving.api import oip  # noqa: E402
from bless.serving.client.client import BlessClient  # noqa: E402
from bless.serving.server.wire import wire_string  # noqa: E402

GPUS = 4


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    ra.connect(None, resources={ra.SIM_RESOURCE: GPUS}, num_cpus=2)
    try:
        ra.start_cluster(GPUS, tmp_path_factory.mktemp("cluster"), warm_up=False)
        with ClusterFrontend(ra.ClusterClient(), token="secret") as fe:
            admin = BlessClient(fe.address, token="secret")
            # two apps that cannot share a GPU (quotas 60% + 60%): on two GPUs
            a = admin.register("a", "resnet50", "60%")
            b = admin.register("b", "bert", "60%")
            yield fe, admin, (a, b)
            admin.close()
        ra.stop_cluster()
    finally:
        ray.shutdown()


def test_wire_string_reads_a_field_without_decoding_the_rest():
    raw = oip.ModelInferRequest(model_name="m", id="x7", raw_input_contents=[b"\0" * 1000]).SerializeToString()
    assert wire_string(raw, 1) == "m" and wire_string(raw, 3) == "x7" and wire_string(raw, 2) == ""


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
    admin.set_quota("a", "50%")  # forwarded to a's agent
    assert {app.name: app.quota for app in admin.apps().apps}["a"] == pytest.approx(0.5)
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
