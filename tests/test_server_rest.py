"""The OIP v2 REST API through real HTTP on loopback: tritonclient.http unmodified, plain JSON
as curl sends it, errors with Triton's statuses, and one serving core behind REST and gRPC."""

import gzip
import socket

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from server_helpers import code_of, infer_future, make_server, profile_dir, wait_for  # noqa: F401  (fixtures)
from tritonclient.utils import serialize_byte_tensor

from bless.harness.config import ConfigError
from bless.profiles.synthetic import synthetic_profile
from bless.serving.client import BlessClient
from bless.serving.server import ServerConfig
from bless.serving.server.config import config_from_dict

MULTI_INPUTS = [("IDS", "INT64", [-1, 3]), ("TEXT", "BYTES", [2]), ("MASK", "BOOL", [2]), ("HALF", "FP16", [2])]
MULTI_OUTPUTS = [("SCORES", "FP32", [-1, 2]), ("LABELS", "BYTES", [2]), ("FLAGS", "BOOL", [2]), ("BITS", "BF16", [2])]


@pytest.fixture
def rest(make_server):
    """A server with REST on a free port, an admin client, and apps 'm' (FP32) and 'multi'."""
    server = make_server(http_port=0)
    with BlessClient(server.address, token=server.token, timeout=10) as admin:
        admin.register("m", "quick", "30%", inputs=[("INPUT", "FP32", [-1, 16])], outputs=[("OUTPUT", "FP32", [-1, 4])])
        admin.register("multi", "quick", "30%", inputs=MULTI_INPUTS, outputs=MULTI_OUTPUTS)
        yield server, admin


def url(server, path: str) -> str:
    return f"http://{server.http_address}{path}"


def http_input(name, value, datatype, binary=True):
    x = triton_http.InferInput(name, list(value.shape), datatype)
    x.set_data_from_numpy(value, binary_data=binary)
    return x


def multi_values():
    return {
        "IDS": np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64),
        "TEXT": np.array([b"hello", b"world"], dtype=object),
        "MASK": np.array([True, False]),
        "HALF": np.array([0.5, -2.0], dtype=np.float16),
    }


def grpc_outputs(server, app, values):
    """The same request over gRPC: the reference the REST answers must equal."""
    client = triton_grpc.InferenceServerClient(server.address)
    inputs = []
    for name, datatype, _ in MULTI_INPUTS if app == "multi" else [("INPUT", "FP32", None)]:
        x = triton_grpc.InferInput(name, list(values[name].shape), datatype)
        x.set_data_from_numpy(values[name])
        inputs.append(x)
    result = client.infer(app, inputs)
    return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


def test_tritonclient_http_works_unmodified(rest):
    server, _ = rest
    client = triton_http.InferenceServerClient(server.http_address)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("m") and client.is_model_ready("m", "1")
    assert not client.is_model_ready("nope") and not client.is_model_ready("m", "2")

    meta = client.get_server_metadata()
    assert meta["name"] == "bless" and "binary_tensor_data" in meta["extensions"]
    meta = client.get_model_metadata("m")
    assert meta["versions"] == ["1"] and meta["platform"] == "bless_sim"
    assert meta["inputs"] == [{"name": "INPUT", "datatype": "FP32", "shape": [-1, 16]}]
    config = client.get_model_config("multi")
    assert config["max_batch_size"] == 0 and config["parameters"]["bless_quota"] == {"string_value": "0.3"}
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]][:2] == [
        ("IDS", "TYPE_INT64", [-1, 3]),
        ("TEXT", "TYPE_STRING", [2]),
    ]
    assert client.get_model_repository_index() == [
        {"name": "m", "version": "1", "state": "READY"},
        {"name": "multi", "version": "1", "state": "READY"},
    ]

    values = multi_values()
    expected = grpc_outputs(server, "multi", values)
    binary = client.infer("multi", [http_input(n, values[n], d) for n, d, _ in MULTI_INPUTS])  # the default
    as_json = client.infer(
        "multi",
        [http_input(n, values[n], d, binary=False) for n, d, _ in MULTI_INPUTS],
        outputs=[triton_http.InferRequestedOutput(n, binary_data=False) for n, _, _ in MULTI_OUTPUTS],
        request_compression_algorithm="gzip",
    )
    json_outputs = {o["name"]: o for o in as_json.get_response()["outputs"]}
    assert "data" in json_outputs["SCORES"] and "data" in json_outputs["LABELS"]
    assert json_outputs["BITS"]["parameters"]["binary_data_size"] == 4  # BF16: always binary
    for result in (binary, as_json):
        assert result.get_response()["parameters"]["bless_compute_seconds"] > 0
        for name, want in expected.items():
            got = result.as_numpy(name)
            values = [v.encode() if isinstance(v, str) else v for v in got.ravel().tolist()]  # JSON BYTES: str
            assert got.shape == want.shape and values == want.ravel().tolist(), name

    stats = client.get_inference_statistics("multi")["model_stats"][0]
    assert stats["inference_count"] == 3 and stats["inference_stats"]["success"]["count"] == 3
    everything = client.get_inference_statistics()["model_stats"]
    assert [s["name"] for s in everything] == ["m", "multi"]


def test_plain_json_as_curl_sends_it(rest):
    server, _ = rest
    body = {
        "id": "req-7",
        "parameters": {"priority": 1, "note": "curl"},
        "inputs": [
            {"name": "IDS", "datatype": "INT64", "shape": [2, 3], "data": [[1, 2, 3], [4, 5, 6]]},
            {"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": ["hello", "world"]},
            {"name": "MASK", "datatype": "BOOL", "shape": [2], "data": [True, False]},
            {"name": "HALF", "datatype": "FP16", "shape": [2], "data": [0.5, -2]},
        ],
        "outputs": [{"name": "LABELS"}, {"name": "SCORES"}],
    }
    r = httpx.post(url(server, "/v2/models/multi/versions/1/infer"), json=body, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    answer = r.json()
    assert answer["id"] == "req-7" and answer["model_name"] == "multi" and answer["model_version"] == "1"
    assert answer["parameters"]["bless_latency_seconds"] >= answer["parameters"]["bless_compute_seconds"] > 0
    expected = grpc_outputs(server, "multi", multi_values())
    labels, scores = answer["outputs"]
    assert labels["name"] == "LABELS" and labels["data"] == [v.decode() for v in expected["LABELS"]]
    assert scores["shape"] == [2, 2] and scores["data"] == pytest.approx(expected["SCORES"].ravel().tolist())

    assert httpx.get(url(server, "/v2/health/ready")).status_code == 200
    assert httpx.get(url(server, "/v2/models/m")).json()["outputs"][0]["shape"] == [-1, 4]


def test_health_answers_carry_the_oip_json_bodies(rest):
    """The OIP REST spec's bodies, which KServe's InferenceRESTClient reads (Triton sends none,
    and tritonclient reads only the status): an empty body made its is_server_live fail."""
    server, _ = rest
    for path, body in [
        ("/v2/health/live", {"live": True}),
        ("/v2/health/ready", {"ready": True}),
        ("/v2/models/m/ready", {"name": "m", "ready": True}),
        ("/v2/models/m/versions/1/ready", {"name": "m", "ready": True}),
    ]:
        r = httpx.get(url(server, path))
        assert (r.status_code, r.headers["content-type"], r.json()) == (200, "application/json", body), path
    not_ready = httpx.get(url(server, "/v2/models/nope/ready"))
    assert not_ready.status_code == 400 and "model 'nope' is not ready" in not_ready.json()["error"]


def fp32_input(**changes):
    tensor = {"name": "INPUT", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}
    return {"inputs": [tensor | changes]}


BAD_BODIES = [
    (b"{", {}, "request body: not valid JSON"),
    (b"[1, 2]", {}, "request body: expected a JSON object"),
    ({"inputs": 3}, {}, "inputs: expected a JSON list"),
    ({"inputs": [{"name": "INPUT"}]}, {}, "inputs[0].datatype"),
    (fp32_input(shape=[1, "16"]), {}, "inputs[0].shape"),
    (fp32_input(data=[1.0, 2.0]), {}, "inputs[0].data: shape [1, 16] holds 16 elements, got 2"),
    (fp32_input(data=["a"] * 16), {}, "inputs[0].data: FP32 elements are numbers"),
    (fp32_input(name="NOPE"), {}, "inputs[0].name: app 'm' has no input 'NOPE'"),
    (fp32_input(datatype="INT32", data=[1] * 16), {}, "inputs[0].datatype: input 'INPUT' is FP32"),
    (fp32_input(datatype="FLOAT"), {}, "inputs[0].datatype: 'FLOAT' is not an OIP datatype"),
    (fp32_input(shape=[1, 8], data=[0.5] * 8), {}, "inputs[0].shape: input 'INPUT' takes shape [-1, 16]"),
    (
        {"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 16]}]},
        {},
        "inputs[0]: input 'INPUT' carries no data",
    ),
    (fp32_input() | {"outputs": [{"name": "LOGITS"}]}, {}, "outputs[0].name: app 'm' has no output 'LOGITS'"),
    (
        fp32_input() | {"outputs": [{"name": "OUTPUT", "parameters": {"classification": 2}}]},
        {},
        "outputs[0].parameters.classification: bless has no classification extension",
    ),
    (fp32_input() | {"parameters": {"binary_data_output": "yes"}}, {}, "parameters.binary_data_output"),
    (fp32_input() | {"parameters": {"x": [1]}}, {}, "parameters.x: a parameter is"),
    (fp32_input() | {"id": 7}, {}, "id: expected a string"),
    (b'{"inputs": []}', {"Inference-Header-Content-Length": "99"}, "Inference-Header-Content-Length header"),
    (b'{"inputs": []}' + b"\0" * 8, {"Inference-Header-Content-Length": "14"}, "8 bytes of binary data"),
    (b"\x1f\x8b not gzip", {"Content-Encoding": "gzip"}, "request body: not valid gzip data"),
    (b"{}", {"Content-Encoding": "br"}, "Content-Encoding header: 'br' is not supported"),
]


@pytest.mark.parametrize("body, headers, message", BAD_BODIES)
def test_malformed_requests_are_400_naming_the_field(rest, body, headers, message):
    server, _ = rest
    if isinstance(body, dict):
        r = httpx.post(url(server, "/v2/models/m/infer"), json=body, headers=headers, timeout=10)
    else:
        r = httpx.post(url(server, "/v2/models/m/infer"), content=body, headers=headers, timeout=10)
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert message in r.json()["error"], r.json()["error"]


def binary_request(size_claimed: int, data: bytes) -> tuple[bytes, dict[str, str]]:
    header = (
        b'{"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 16], '
        b'"parameters": {"binary_data_size": %d}}]}' % size_claimed
    )
    return header + data, {"Inference-Header-Content-Length": str(len(header))}


def test_binary_data_is_checked_as_grpc_raw_contents(rest):
    server, _ = rest
    body, headers = binary_request(64, np.ones(16, np.float32).tobytes())
    r = httpx.post(url(server, "/v2/models/m/infer"), content=body, headers=headers, timeout=10)
    assert r.status_code == 200 and r.json()["outputs"][0]["shape"] == [1, 4]
    body, headers = binary_request(40, b"\0" * 40)
    r = httpx.post(url(server, "/v2/models/m/infer"), content=body, headers=headers, timeout=10)
    assert r.status_code == 400 and "raw_input_contents[0]" in r.json()["error"] and "64 bytes" in r.json()["error"]
    body, headers = binary_request(64, b"\0" * 10)
    r = httpx.post(url(server, "/v2/models/m/infer"), content=body, headers=headers, timeout=10)
    assert r.status_code == 400 and "inputs[0].parameters.binary_data_size" in r.json()["error"]


def test_unknown_models_versions_and_paths_are_404(rest):
    server, _ = rest
    for method, path in (
        ("POST", "/v2/models/ghost/infer"),
        ("GET", "/v2/models/ghost"),
        ("GET", "/v2/models/ghost/config"),
        ("GET", "/v2/models/ghost/stats"),
        ("GET", "/v2/models/m/versions/2"),
        ("POST", "/v2/models/m/versions/2/infer"),
        ("GET", "/v3/anything"),
    ):
        r = httpx.request(method, url(server, path), content=b"{not json", timeout=10)
        assert r.status_code == 404, path
        assert "ghost" in r.json()["error"] or "version" in r.json()["error"] or "/v2" in r.json()["error"]
    r = httpx.get(url(server, "/v2/models/m/infer"))
    assert r.status_code == 405 and "Method Not Allowed" in r.json()["error"]
    with pytest.raises(triton_http.InferenceServerException) as e:
        triton_http.InferenceServerClient(server.http_address).get_model_metadata("ghost")
    assert e.value.status() == "404" and "ghost" in e.value.message()


def test_rest_and_grpc_share_one_serving_core(rest):
    server, admin = rest
    for _ in range(2):
        r = httpx.post(url(server, "/v2/models/m/infer"), json=fp32_input(), timeout=10)
        assert r.status_code == 200
    admin.infer("m")
    bad = httpx.post(url(server, "/v2/models/m/infer"), json=fp32_input(datatype="INT32", data=[1] * 16), timeout=10)
    assert bad.status_code == 400
    via_grpc = admin.model_statistics("m").model_stats[0]
    via_rest = httpx.get(url(server, "/v2/models/m/versions/1/stats")).json()["model_stats"][0]
    assert via_grpc.inference_count == via_rest["inference_count"] == 3
    assert via_grpc.inference_stats.fail.count == via_rest["inference_stats"]["fail"]["count"] == 1
    assert via_rest["inference_stats"]["success"]["ns"] == via_grpc.inference_stats.success.ns
    window = admin.stats("m").apps[0]
    assert (window.received, window.succeeded) == (4, 3)  # the rejected one is counted, never scheduled


@pytest.fixture
def second_long(profile_dir):
    """An app profile whose requests take ~1 s: long enough for a test to act while one runs,
    even on a loaded machine (the shared 'slow' profile's 0.1 s can pass between two polls)."""
    synthetic_profile("second", n_kernels=10, mean_us=100_000.0, seed=4).save(profile_dir / "a100" / "second.json")
    return "second"


def test_a_full_queue_is_503_as_in_triton(make_server, second_long):
    server = make_server(http_port=0, max_queue=1)
    with BlessClient(server.address, token=server.token) as admin:
        admin.register("s", second_long, "50%")
        first = infer_future(server.address, "s")
        wait_for(lambda: admin.stats("s").apps[0].running == 1, what="the first request on the GPU")
        r = httpx.post(url(server, "/v2/models/s/infer"), json=fp32_input(shape=[1, 16]), timeout=10)
        assert r.status_code == 503 and "max_queue" in r.json()["error"]
        assert code_of(first) == grpc.StatusCode.OK
        assert admin.stats("s").apps[0].rejected == 1


def test_a_client_that_disconnects_cancels_its_queued_request(make_server, second_long):
    server = make_server(http_port=0)
    with BlessClient(server.address, token=server.token) as admin:
        admin.register("s", second_long, "50%")
        running = infer_future(server.address, "s")
        wait_for(lambda: admin.stats("s").apps[0].running == 1, what="the first request on the GPU")
        body = b'{"inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 16], "data": [%s]}]}' % b",".join(
            [b"1"] * 16
        )
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as conn:
            conn.sendall(
                b"POST /v2/models/s/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            wait_for(lambda: admin.stats("s").apps[0].queued == 1, what="the REST request queued")
        wait_for(lambda: admin.stats("s").apps[0].cancelled == 1, what="the cancellation")
        assert admin.stats("s").apps[0].queued == 0
        assert code_of(running) == grpc.StatusCode.OK


def test_an_oversized_body_is_413(rest):
    server, _ = rest
    bomb = gzip.compress(b" " * (64 * 2**20 + 1))  # past the gRPC message limit once inflated
    r = httpx.post(url(server, "/v2/models/m/infer"), content=bomb, headers={"Content-Encoding": "gzip"}, timeout=30)
    assert r.status_code == 413 and "limit" in r.json()["error"]


def test_bytes_json_data_is_utf8_and_binary_bytes_are_length_prefixed(rest):
    """The two encodings of a BYTES input reach the service as the same raw contents."""
    server, _ = rest
    values = multi_values()
    header = b'{"inputs": [%s], "outputs": [{"name": "LABELS"}]}'
    parts, blob = [], b""
    for name, datatype, _ in MULTI_INPUTS:
        value = values[name]
        raw = serialize_byte_tensor(value).item() if datatype == "BYTES" else value.tobytes()
        parts.append(
            b'{"name": "%s", "datatype": "%s", "shape": %s, "parameters": {"binary_data_size": %d}}'
            % (name.encode(), datatype.encode(), str(list(value.shape)).encode(), len(raw))
        )
        blob += raw
    head = header % b", ".join(parts)
    r = httpx.post(
        url(server, "/v2/models/multi/infer"),
        content=head + blob,
        headers={"Inference-Header-Content-Length": str(len(head))},
        timeout=10,
    )
    labels = next(o for o in r.json()["outputs"] if o["name"] == "LABELS")
    assert labels["data"] == [v.decode() for v in grpc_outputs(server, "multi", values)["LABELS"]]


def test_http_port_setting():
    assert (ServerConfig().http_port, ServerConfig().grpc_port, ServerConfig().metrics_port) == (8000, 8001, 8002)
    assert config_from_dict({"http_port": -1}).http_port == -1
    with pytest.raises(ConfigError, match="http_port"):
        config_from_dict({"http_port": -2})
    with pytest.raises(ConfigError, match="http_port"):
        config_from_dict({"http_port": "8000"})


@pytest.mark.parametrize("field", ["shutdown_grace", "noise", "window"])
def test_a_boolean_is_not_a_number_of_the_server_config(field):
    """YAML reads ``true`` as a bool, which Python would take for 1: refused, naming the field."""
    with pytest.raises(ConfigError, match=field):
        config_from_dict({field: True})


def test_a_taken_port_is_an_error_at_start_and_stop_closes_the_port(make_server):
    first = make_server(http_port=0)
    with pytest.raises(OSError, match="http_port: 0 picks a free one"):
        make_server(http_port=first.http_port, state_dir=first.config.state_dir.parent / "other")
    assert httpx.get(url(first, "/v2/health/live")).status_code == 200
    port = first.http_port
    first.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v2/health/live")


def test_triton_extensions_that_do_not_apply_answer_501_with_the_reason(rest):
    """tritonclient.http's repository, shared-memory, trace and log calls get Triton's
    'not implemented' status and the same reason the gRPC service gives, not a bare 404."""
    server, _ = rest
    client = triton_http.InferenceServerClient(server.http_address)
    calls = {
        "load_model": lambda: client.load_model("m"),
        "unload_model": lambda: client.unload_model("m"),
        "get_system_shared_memory_status": client.get_system_shared_memory_status,
        "register_system_shared_memory": lambda: client.register_system_shared_memory("r", "/k", 8),
        "get_cuda_shared_memory_status": client.get_cuda_shared_memory_status,
        "get_trace_settings": client.get_trace_settings,
        "get_log_settings": client.get_log_settings,
    }
    for name, call in calls.items():
        with pytest.raises(triton_http.InferenceServerException) as e:
            call()
        assert e.value.status() == "501", name
        assert "bless" in e.value.message() and "no endpoint" not in e.value.message(), name
