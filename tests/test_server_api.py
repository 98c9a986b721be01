"""The server through real gRPC on loopback: an unmodified OIP client, the admin API,
every documented error status, and restarts."""

import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import (  # noqa: F401  (fixtures)
    admin,
    code_of,
    infer_future,
    make_server,
    profile_dir,
    received,
    server,
    wait_for,
)

from bless.serving.api import oip
from bless.serving.client import BlessClient


def triton_input(batch=2, dtype=np.float32, shape=None, name="INPUT", datatype="FP32", value=1.0):
    shape = shape or [batch, 16]
    x = triton.InferInput(name, shape, datatype)
    x.set_data_from_numpy(np.full(shape, value, dtype=dtype))
    return x


def test_tritonclient_works_unmodified(server, admin):
    admin.register(
        "resnet", "quick", "50%", inputs=[("INPUT", "FP32", [-1, 16])], outputs=[("OUTPUT", "FP32", [-1, 4])]
    )
    client = triton.InferenceServerClient(server.address)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("resnet") and not client.is_model_ready("nope")

    meta = client.get_model_metadata("resnet")
    assert meta.name == "resnet" and list(meta.versions) == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("INPUT", "FP32", [-1, 16])]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("OUTPUT", "FP32", [-1, 4])]

    first = client.infer("resnet", [triton_input(batch=3)])
    out = first.as_numpy("OUTPUT")
    assert out.shape == (3, 4) and out.dtype == np.float32
    params = first.get_response().parameters
    assert params["bless_compute_seconds"].double_param > 0
    assert params["bless_latency_seconds"].double_param >= params["bless_compute_seconds"].double_param
    again = client.infer("resnet", [triton_input(batch=3)]).as_numpy("OUTPUT")
    other = client.infer("resnet", [triton_input(batch=3, value=2.0)]).as_numpy("OUTPUT")
    assert np.array_equal(out, again) and not np.array_equal(out, other)  # a function of the input

    stats = client.get_inference_statistics("resnet").model_stats[0]
    assert stats.name == "resnet" and stats.inference_count == 3
    s = stats.inference_stats
    assert s.success.count == 3 and s.success.ns > 0 and s.compute_infer.count == 3 and s.fail.count == 0
    everything = client.get_inference_statistics()
    assert [m.name for m in everything.model_stats] == ["resnet"]


def test_typed_contents_and_every_output_kind(server, admin):
    admin.register(
        "multi",
        "quick",
        0.3,
        inputs=[("IDS", "INT64", [4]), ("TEXT", "BYTES", [2])],
        outputs=[("SCORES", "FP16", [4]), ("LABELS", "BYTES", [2]), ("MASK", "BOOL", [4])],
    )
    req = oip.ModelInferRequest(model_name="multi")
    ids = req.inputs.add(name="IDS", datatype="INT64", shape=[4])
    ids.contents.int64_contents.extend([1, 2, 3, 4])
    text = req.inputs.add(name="TEXT", datatype="BYTES", shape=[2])
    text.contents.bytes_contents.extend([b"hello", b"world"])
    client = triton.InferenceServerClient(server.address)
    ids_in = triton.InferInput("IDS", [4], "INT64")
    ids_in.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.int64))
    text_in = triton.InferInput("TEXT", [2], "BYTES")
    text_in.set_data_from_numpy(np.array([b"hello", b"world"], dtype=object))
    via_raw = client.infer("multi", [ids_in, text_in])
    assert via_raw.as_numpy("SCORES").dtype == np.float16 and via_raw.as_numpy("LABELS").shape == (2,)
    assert via_raw.as_numpy("MASK").dtype == bool
    # The same values sent as typed contents give the same outputs.
    with BlessClient(server.address) as c:
        via_contents = c.model_infer(req)
    assert list(via_contents.raw_output_contents) == list(via_raw.get_response().raw_output_contents)


BAD_TENSORS = [
    (dict(name="NOPE"), "inputs[0].name"),
    (dict(datatype="INT32", dtype=np.int32), "inputs[0].datatype"),
    (dict(shape=[2, 8]), "inputs[0].shape"),
    (dict(shape=[2, 16, 1]), "inputs[0].shape"),
]


@pytest.mark.parametrize("bad, field", BAD_TENSORS)
def test_bad_tensors_are_invalid_argument_naming_the_field(server, admin, bad, field):
    admin.register("m", "quick", 0.5)
    client = triton.InferenceServerClient(server.address)
    with pytest.raises(triton.InferenceServerException) as e:
        client.infer("m", [triton_input(**bad)])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and field in e.value.message()


def test_wrong_byte_count_missing_input_and_unknown_output(server, admin):
    admin.register("m", "quick", 0.5)
    with BlessClient(server.address) as c:

        def status(req):
            with pytest.raises(grpc.RpcError) as e:
                c.model_infer(req)
            return e.value.code(), e.value.details()

        short = oip.ModelInferRequest(model_name="m", raw_input_contents=[b"\0" * 10])
        short.inputs.add(name="INPUT", datatype="FP32", shape=[1, 16])
        code, msg = status(short)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents[0]" in msg and "64 bytes" in msg
        code, msg = status(oip.ModelInferRequest(model_name="m"))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "missing input 'INPUT'" in msg
        ok = oip.ModelInferRequest(model_name="m", raw_input_contents=[b"\0" * 64])
        ok.inputs.add(name="INPUT", datatype="FP32", shape=[1, 16])
        ok.outputs.add(name="LOGITS")
        code, msg = status(ok)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "outputs[0].name" in msg


def test_unknown_app_is_not_found_everywhere(server, admin):
    client = triton.InferenceServerClient(server.address)
    for call in (
        lambda: client.infer("ghost", [triton_input()]),
        lambda: client.get_model_metadata("ghost"),
        lambda: client.get_inference_statistics("ghost"),
    ):
        with pytest.raises(triton.InferenceServerException) as e:
            call()
        assert e.value.status() == "StatusCode.NOT_FOUND" and "ghost" in e.value.message()
    for call in (
        lambda: admin.set_quota("ghost", 0.5),
        lambda: admin.unregister("ghost"),
        lambda: admin.stats("ghost"),
    ):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(quota="150%"), "quota"),
        (dict(quota="half"), "quota"),
        (dict(quota=""), "quota"),
        (dict(name="bad name!"), "name"),
        (dict(profile="no-such-profile"), "profile"),
        (dict(slo="soon"), "slo"),
        (dict(inputs=[("X", "FLOAT", [1])]), "inputs[0].datatype"),
        (dict(outputs=[("Y", "FP32", [0])]), "outputs[0].shape"),
        (dict(inputs=[]), "inputs"),
        (dict(priority="urgent"), "priority"),
        (dict(priority="best-effort", slo="25ms"), "slo"),
    ],
)
def test_bad_registrations_are_invalid_argument_naming_the_field(admin, kwargs, field):
    args = dict(name="a", profile="quick", quota="50%") | kwargs
    name, profile, quota = args.pop("name"), args.pop("profile"), args.pop("quota")
    with pytest.raises(grpc.RpcError) as e:
        admin.register(name, profile, quota, **args)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(field), e.value.details()


def test_mutating_calls_need_the_token_and_reads_do_not(server, admin):
    admin.register("a", "quick", 0.5)
    for token in (None, "wrong-token-123"):
        with BlessClient(server.address, token=token) as c:
            for call in (
                lambda: c.register("b", "quick", 0.1),
                lambda: c.set_quota("a", 0.2),
                lambda: c.unregister("a"),
                lambda: c.reset_stats(),
                lambda: c.inject_fault("a"),
            ):
                with pytest.raises(grpc.RpcError) as e:
                    call()
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and "authorization" in e.value.details()
            assert [a.name for a in c.apps().apps] == ["a"]
            assert c.stats().apps[0].name == "a"


def test_over_admission_is_failed_precondition_with_the_reason(admin):
    admin.register("a", "quick", "60%")
    with pytest.raises(grpc.RpcError) as e:
        admin.register("b", "other", "50%")
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "110%" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        admin.register("big", "other", "10%", memory_bytes=39 * 2**30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "memory" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        admin.register("long", "slow", "10%")  # 10 ms kernels next to a ~0.5 ms app
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "too long" in e.value.details()
    admin.register("b", "other", "30%")
    with pytest.raises(grpc.RpcError) as e:
        admin.set_quota("a", "95%")
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "125%" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        admin.register("a", "other", "10%")
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    # A dry run answers without an error status and changes nothing.
    answer = admin.register("c", "other", "50%", dry_run=True).admission
    assert not answer.accepted and "140%" in answer.reason
    assert admin.register("c", "other", "10%", dry_run=True).admission.accepted
    assert [a.name for a in admin.apps().apps] == ["a", "b"]


def test_restart_keeps_apps_quotas_and_tensors(make_server, tmp_path):
    first = make_server()
    with BlessClient(first.address, token=first.token) as c:
        c.register("a", "quick", "30%", slo="2x", inputs=[("IMG", "UINT8", [3, 4])], outputs=[("CLS", "INT32", [1])])
        c.register("b", "other", 0.5, priority="best-effort")
        c.register("gone", "other", 0.1)
        c.set_quota("a", "40%")
        c.unregister("gone")
        before = {a.name: a for a in c.apps().apps}
    first.stop()
    second = make_server()
    assert second.token == first.token  # the generated token lives in the state dir
    with BlessClient(second.address, token=second.token) as c:
        after = {a.name: a for a in c.apps().apps}
        assert sorted(after) == ["a", "b"]
        for name in after:
            assert after[name] == before[name]
        assert after["a"].quota == pytest.approx(0.4) and after["a"].slo_seconds == pytest.approx(
            2 * after["a"].iso_latency_seconds
        )
        assert c.infer("a").outputs["CLS"].dtype == np.int32
        assert (after["a"].priority, after["b"].priority) == ("latency-critical", "best-effort")
        assert c.infer("b").outputs  # a best-effort app is served when the GPU is free


def test_set_quota_moves_the_iso_target(admin):
    before = admin.register("a", "quick", "20%").app
    after = admin.set_quota("a", "1/2")
    assert after.quota == 0.5 and after.iso_latency_seconds < before.iso_latency_seconds


def test_set_quota_with_requests_in_flight_loses_none(server, admin):
    admin.register("a", "other", "30%")
    admin.register("b", "quick", "30%")
    sent = [infer_future(server.address, name) for _ in range(20) for name in ("a", "b")]
    wait_for(lambda: received(server) > 0, what="a request in the server")
    admin.set_quota("a", "60%")  # the scheduler sets up again while both apps have requests
    admin.set_quota("b", "20%")
    assert [code_of(f) for f in sent] == [grpc.StatusCode.OK] * len(sent)
    assert {a.name: round(a.quota, 2) for a in admin.apps().apps} == {"a": 0.6, "b": 0.2}


def test_metrics_endpoint(server, admin):
    admin.register("a", "quick", "50%")
    for _ in range(3):
        admin.infer("a")
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    for line in (
        'bless_requests_total{model="a",reason="ok",status="succeeded",version="1"} 3.0',
        'bless_request_duration_seconds_count{model="a",version="1"} 3.0',
        'bless_request_queue_duration_seconds_count{model="a",version="1"} 3.0',
        'bless_app_quota_ratio{model="a",version="1"} 0.5',
        'bless_active_requests{model="a",version="1"} 0.0',
    ):
        assert line in text, line
    for name in (
        "bless_squads_total",
        "bless_squad_duration_seconds_count",
        "bless_gpu_utilisation_ratio",
        "bless_gpu_memory_used_bytes",
        "bless_kernels_total",
    ):
        assert name in text, name


def scrape(server) -> dict[tuple[str, frozenset], float]:
    """The samples of the metrics endpoint, by name and labels (see :func:`key`)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    return {key(s.name, **s.labels): s.value for family in text_string_to_metric_families(text) for s in family.samples}


def key(name: str, **labels: str) -> tuple[str, frozenset]:
    return name, frozenset(labels.items())


def test_get_stats_and_metrics_report_the_same_numbers(server, admin):
    admin.register("a", "quick", "50%")
    admin.register("b", "other", "25%")
    for _ in range(3):
        admin.infer("a")
    admin.infer("b")
    stats, metrics = admin.stats(), scrape(server)
    for app in stats.apps:
        model = dict(model=app.name, version="1")
        assert metrics[key("bless_requests_total", **model, status="succeeded", reason="ok")] == app.succeeded
        latency = "bless_request_scheduler_latency_seconds"
        assert metrics[key(f"{latency}_count", **model)] == app.latency.count
        assert metrics[key(f"{latency}_sum", **model)] == pytest.approx(app.latency.mean_seconds * app.latency.count)
        assert metrics[key(f"{latency}_bucket", **model, le="+Inf")] == app.latency.count
        assert metrics[key("bless_request_duration_seconds_count", **model)] == app.succeeded
        assert metrics[key("bless_app_quota_ratio", **model)] == pytest.approx(app.quota)
        # One request at a time, each faster than its quota alone: never behind its quota's throughput.
        assert metrics[key("bless_app_behind_quota_requests", **model)] == app.behind_quota == 0
    assert metrics[key("bless_kernels_total")] == stats.gpu.kernels > 0

    admin.reset_stats()  # the GetStats window restarts; Prometheus counters never do
    assert admin.stats("a").apps[0].succeeded == 0
    assert scrape(server)[key("bless_requests_total", model="a", version="1", status="succeeded", reason="ok")] == 3


def test_cli_client_against_a_server(server, capsys):
    from bless.cli import main

    base = ["client", "--server", server.address, "--token", server.token]
    assert main([*base, "register", "a", "--profile", "quick", "--quota", "50%", "--input", "X:INT32:-1,2"]) == 0
    assert main([*base, "apps"]) == 0
    assert main([*base, "infer", "--app", "a", "-n", "20", "--rate", "200"]) == 0
    assert main([*base, "stats"]) == 0
    out = capsys.readouterr().out
    assert "registered a" in out and "X:INT32[-1, 2]" in out and "20" in out
    assert main([*base, "register", "b", "--profile", "other", "--quota", "80%"]) == 1
    assert "FAILED_PRECONDITION" in capsys.readouterr().out
