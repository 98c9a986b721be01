"""Triton's tools against a real server, unmodified: every RPC perf_analyzer makes
through tritonclient, the rest of Triton's GRPCInferenceService (repository index,
streaming inference, the UNIMPLEMENTED ones), the standard gRPC health and reflection
services, and perf_analyzer itself."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.grpc.model_config_pb2 as triton_config_pb2
import tritonclient.grpc.service_pb2 as triton_pb2
import tritonclient.grpc.service_pb2_grpc as triton_grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from server_helpers import admin, make_server, profile_dir, server, wait_for  # noqa: F401  (fixtures)

from bless.profiles.synthetic import synthetic_profile
from bless.serving.api import OIP_SERVICE, oip, pool
from bless.serving.server.inference import NOT_APPLICABLE, TIMINGS

TENSORS = {"inputs": [("INPUT", "FP32", [-1, 16])], "outputs": [("OUTPUT", "FP32", [-1, 4])]}
BATCH = 8
"""The batch of the ``batched`` profile, which ModelConfig reports as max_batch_size."""


@pytest.fixture
def batched(profile_dir):
    """A profile measured at batch :data:`BATCH`."""
    profile = synthetic_profile("batched", n_kernels=20, mean_us=40.0, seed=4)
    dataclasses.replace(profile, batch=BATCH).save(profile_dir / "a100" / "batched.json")
    return "batched"


def one_input(batch: int = 1, value: float = 1.0) -> triton.InferInput:
    x = triton.InferInput("INPUT", [batch, 16], "FP32")
    x.set_data_from_numpy(np.full([batch, 16], value, np.float32))
    return x


def status_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(triton.InferenceServerException) as e:
        call()
    return e.value.status(), e.value.message()


def test_protos_match_tritons_names_and_numbers():
    """Every service method, message, field and enum value bless declares in package
    `inference` has Triton's name, number and type, so Triton's clients decode it."""
    ours_service = pool().FindServiceByName(OIP_SERVICE)
    theirs_service = triton_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert [m.name for m in ours_service.methods] == [m.name for m in theirs_service.methods]
    for m in ours_service.methods:
        t = theirs_service.methods_by_name[m.name]
        assert (m.input_type.full_name, m.output_type.full_name) == (t.input_type.full_name, t.output_type.full_name)
        assert (m.client_streaming, m.server_streaming) == (t.client_streaming, t.server_streaming), m.name

    theirs = {**triton_pb2.DESCRIPTOR.message_types_by_name, **triton_config_pb2.DESCRIPTOR.message_types_by_name}
    stack = [
        (desc, theirs[name])
        for f in (ours_service.file, *ours_service.file.dependencies)
        for name, desc in f.message_types_by_name.items()
    ]
    assert {"ModelConfig", "ModelStreamInferResponse", "RepositoryIndexResponse"} <= {a.name for a, _ in stack}
    while stack:
        a, b = stack.pop()
        for f in a.fields:
            g = b.fields_by_name[f.name]
            assert (f.number, f.type) == (g.number, g.type), f"{a.full_name}.{f.name}"
            assert (f.containing_oneof and f.containing_oneof.name) == (g.containing_oneof and g.containing_oneof.name)
            if f.message_type is not None:
                stack.append((f.message_type, g.message_type))
            if f.enum_type is not None:
                assert {v.name: v.number for v in f.enum_type.values}.items() <= {
                    v.name: v.number for v in g.enum_type.values
                }.items(), f.enum_type.full_name


def test_every_call_perf_analyzer_makes(server, admin, batched):
    """ServerMetadata, ModelMetadata, ModelConfig, ModelStatistics and ModelInfer as perf_analyzer
    reads them, and the repository index."""
    admin.register("app", batched, "50%", **TENSORS)
    client = triton.InferenceServerClient(server.address)

    assert "model_configuration" in client.get_server_metadata().extensions
    meta = client.get_model_metadata("app")
    assert meta.platform == "bless_sim" and [list(t.shape) for t in meta.inputs] == [[-1, 16]]

    config = client.get_model_config("app").config
    assert (config.name, config.platform, config.backend, config.max_batch_size) == ("app", "bless_sim", "bless", BATCH)
    # Triton's batching convention: the batch dimension is left out of dims.
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("INPUT", triton_config_pb2.TYPE_FP32, [16])]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("OUTPUT", triton_config_pb2.TYPE_FP32, [4])
    ]
    assert list(config.version_policy.specific.versions) == [1]
    assert not config.HasField("sequence_batching") and not config.HasField("ensemble_scheduling")
    assert config.parameters["bless_profile"].string_value == batched
    assert config.parameters["bless_quota"].string_value == "0.5"

    result = client.infer("app", [one_input(batch=2)], request_id="r1")
    assert result.as_numpy("OUTPUT").shape == (2, 4) and result.get_response().id == "r1"
    params = result.get_response().parameters
    for name in TIMINGS:
        seconds = params[f"bless_{name}_seconds"].double_param
        assert params[f"bless_{name}_us"].int64_param == round(seconds * 1e6), name
    assert params["bless_compute_us"].int64_param > 0

    stats = client.get_inference_statistics("app", "1").model_stats[0]
    assert (stats.name, stats.version, stats.inference_count, stats.inference_stats.success.count) == ("app", "1", 1, 1)

    index = client.get_model_repository_index().models
    assert [(m.name, m.version, m.state) for m in index] == [("app", "1", "READY")]
    assert status_of(lambda: client.get_model_config("ghost"))[0] == "StatusCode.NOT_FOUND"
    # tritonclient asks for the unnamed repository only; Triton's own stub names one.
    stub = triton_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.address))
    with pytest.raises(grpc.RpcError) as e:
        stub.RepositoryIndex(triton_pb2.RepositoryIndexRequest(repository_name="models"), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "leave repository_name empty" in e.value.details()


def test_model_config_of_an_app_without_a_batch_dimension(server, admin, batched):
    """max_batch_size is 0 unless every tensor starts with -1, and dims are then the full shapes."""
    admin.register(
        "fixed",
        batched,
        "30%",
        inputs=[("IDS", "INT64", [4]), ("TEXT", "BYTES", [-1])],
        outputs=[("OUT", "BF16", [2, 3])],
    )
    config = triton.InferenceServerClient(server.address).get_model_config("fixed").config
    assert config.max_batch_size == 0
    assert [(t.data_type, list(t.dims)) for t in config.input] == [
        (triton_config_pb2.TYPE_INT64, [4]),
        (triton_config_pb2.TYPE_STRING, [-1]),
    ]
    assert [(t.data_type, list(t.dims)) for t in config.output] == [(triton_config_pb2.TYPE_BF16, [2, 3])]


def test_stream_inference_answers_each_request_and_survives_a_bad_one(server, admin):
    admin.register("app", "quick", "50%", **TENSORS)
    client = triton.InferenceServerClient(server.address)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("app", [one_input(value=1.0)], request_id="a")
        bad = triton.InferInput("INPUT", [1, 15], "FP32")
        bad.set_data_from_numpy(np.ones([1, 15], np.float32))
        client.async_stream_infer("app", [bad], request_id="bad")
        client.async_stream_infer("app", [one_input(value=2.0)], request_id="b")
        got = [answers.get(timeout=10) for _ in range(3)]
        client.async_stream_infer("app", [one_input(value=1.0)], request_id="c")  # the stream goes on
        got.append(answers.get(timeout=10))
    finally:
        client.stop_stream()
    results = {r.get_response().id: r for r, e in got if e is None}
    errors = [e for r, e in got if e is not None]
    assert sorted(results) == ["a", "b", "c"]
    assert len(errors) == 1 and "inputs[0].shape" in errors[0].message()
    assert np.array_equal(results["a"].as_numpy("OUTPUT"), results["c"].as_numpy("OUTPUT"))  # same path as ModelInfer
    assert results["a"].get_response().parameters["bless_latency_us"].int64_param > 0
    stats = client.get_inference_statistics("app").model_stats[0].inference_stats
    assert (stats.success.count, stats.fail.count) == (3, 1)


def test_cancelling_a_stream_cancels_its_queued_requests(server, admin):
    admin.register("slow", "slow", "50%", **TENSORS)  # ~0.1 s a request: the rest wait in the queue
    client = triton.InferenceServerClient(server.address)
    client.start_stream(callback=lambda result, error: None)
    for i in range(5):
        client.async_stream_infer("slow", [one_input()], request_id=str(i))
    wait_until_pending(admin, "slow", 5)
    client.stop_stream(cancel_requests=True)
    wait_until_pending(admin, "slow", 0)
    assert admin.stats("slow").apps[0].cancelled >= 4  # at most the one on the GPU runs to the end


def wait_until_pending(admin, app: str, n: int) -> None:
    def pending() -> int:
        a = admin.stats(app).apps[0]
        return a.queued + a.running

    wait_for(lambda: pending() == n, what=f"{n} requests of {app} pending")


@pytest.mark.parametrize("rpc", sorted(NOT_APPLICABLE))
def test_rpcs_that_do_not_apply_say_why(server, rpc):
    client = triton.InferenceServerClient(server.address)
    calls = {
        "RepositoryModelLoad": lambda: client.load_model("app"),
        "RepositoryModelUnload": lambda: client.unload_model("app"),
        "SystemSharedMemoryStatus": client.get_system_shared_memory_status,
        "SystemSharedMemoryRegister": lambda: client.register_system_shared_memory("r", "/key", 64),
        "SystemSharedMemoryUnregister": client.unregister_system_shared_memory,
        "CudaSharedMemoryStatus": client.get_cuda_shared_memory_status,
        "CudaSharedMemoryRegister": lambda: client.register_cuda_shared_memory("r", b"AAAA", 0, 64),
        "CudaSharedMemoryUnregister": client.unregister_cuda_shared_memory,
        "TraceSetting": client.get_trace_settings,
        "LogSettings": client.get_log_settings,
    }
    code, message = status_of(calls[rpc])
    assert code == "StatusCode.UNIMPLEMENTED" and message == f"{rpc}: {NOT_APPLICABLE[rpc]}"


def test_health_is_serving_then_not_serving_from_the_start_of_shutdown(make_server):
    srv = make_server()
    channel = grpc.insecure_channel(srv.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", OIP_SERVICE, "bless.admin.v1.AdminService"):
        assert (
            health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
            == health_pb2.HealthCheckResponse.SERVING
        )
    with pytest.raises(grpc.RpcError) as e:
        health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND

    watch = health.Watch(health_pb2.HealthCheckRequest(service=OIP_SERVICE), timeout=20)
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    stopping = threading.Thread(target=srv.stop)
    stopping.start()
    assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    stopping.join()
    channel.close()


def test_reflection_describes_every_service(server):
    db = ProtoReflectionDescriptorDatabase(grpc.insecure_channel(server.address))
    assert set(db.get_services()) == {
        OIP_SERVICE,
        "bless.admin.v1.AdminService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    described = descriptor_pool.DescriptorPool(db)
    service = described.FindServiceByName(OIP_SERVICE)
    stream = service.methods_by_name["ModelStreamInfer"]
    assert stream.client_streaming and stream.server_streaming
    assert service.methods_by_name["ModelConfig"].output_type.fields_by_name["config"].message_type.full_name == (
        "inference.ModelConfig"
    )
    assert described.FindServiceByName("grpc.health.v1.Health").methods_by_name["Check"]
    assert described.FindMessageTypeByName("bless.admin.v1.RegisterAppRequest").fields_by_name["quota"]
    # The reflected descriptors are the server's own: a message built from them is one bless parses.
    assert oip.ModelConfigRequest.DESCRIPTOR.fields_by_name["name"].number == (
        described.FindMessageTypeByName("inference.ModelConfigRequest").fields_by_name["name"].number
    )


# ---------------------------------------------------------------- perf_analyzer itself

PERF_ANALYZER_TIMEOUT = 120
"""Seconds one perf_analyzer run may take (it measures for 2-4 s)."""
MEASUREMENT = ["--measurement-interval", "500", "--stability-percentage", "100"]
"""Short windows (three per load level, the fewest perf_analyzer takes), and a loose stability
criterion (the slowest of three windows at most twice the fastest): this checks that perf_analyzer
works against bless, not how stable a shared 2-core machine is."""


def perf_analyzer() -> tuple[list[str], dict[str, str]]:
    """The perf_analyzer command and the environment it loads (libcudart from the
    nvidia-cuda-runtime wheel: perf_analyzer links it even without a GPU); skips if missing."""
    exe = shutil.which("perf_analyzer") or str(Path(sys.executable).with_name("perf_analyzer"))
    if not Path(exe).exists():
        pytest.skip("perf_analyzer is not installed (pip install perf-analyzer)")
    env = dict(os.environ)
    try:
        spec = importlib.util.find_spec("nvidia.cuda_runtime")
    except ModuleNotFoundError:  # no nvidia.* wheel at all
        spec = None
    if spec is not None and spec.submodule_search_locations:
        lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, (str(lib), env.get("LD_LIBRARY_PATH"))))
    probe = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env, timeout=30)
    if probe.returncode != 0:
        pytest.skip(
            f"perf_analyzer cannot start (its libraries, e.g. libcudart from nvidia-cuda-runtime-cu12): {probe.stderr.strip()[:300]}"
        )
    return [exe], env


@pytest.mark.slow  # perf_analyzer waits for stable windows, which a machine busy with other tests may not give
@pytest.mark.parametrize(
    "load",
    [["--concurrency-range", "1:2"], ["--request-rate-range", "200"], ["--concurrency-range", "2", "--streaming"]],
)
def test_perf_analyzer_measures_a_bless_app(server, admin, load):
    command, env = perf_analyzer()
    admin.register("app", "quick", "50%", **TENSORS)
    run = subprocess.run(
        [*command, "-m", "app", "-i", "grpc", "-u", server.address, *MEASUREMENT, *load],
        capture_output=True,
        text=True,
        env=env,
        timeout=PERF_ANALYZER_TIMEOUT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Throughput:" in run.stdout and "Successful request count" in run.stdout, run.stdout
