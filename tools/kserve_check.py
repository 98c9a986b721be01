"""Every call of KServe's Python inference clients against a bless server, and what it answered.

    python tools/kserve_check.py                          # starts `bless serve` with SAMPLE_APPS
    python tools/kserve_check.py --grpc-address 127.0.0.1:8001 --rest-url http://127.0.0.1:8000 --app resnet

KServe's ``kserve`` package has two OIP v2 clients: ``InferenceGRPCClient``
(``is_server_live``, ``is_server_ready``, ``is_model_ready``, ``infer``) and
``InferenceRESTClient`` (the same over REST with ``RESTConfig(protocol="v2")``, and
``explain``, which is KServe's v1 protocol only).  The metadata and repository RPCs
are on the client's generated stub only (``GRPCInferenceServiceStub``: ServerMetadata,
ModelMetadata, RepositoryModelLoad/Unload), so they are called there; the REST
metadata and health bodies, which the REST client never reads as a whole, are checked
against KServe's own data models (``kserve.protocol.rest.v2_datamodels``).  Each check
in :data:`CHECKS` is one call (with its variants: raw or typed tensors, requested
outputs, errors); outputs must agree across every variant and both protocols (bless's
simulated outputs are a function of the input bytes).  Exit status 1 if any check fails.

KServe is not a test dependency: ``pip install kserve`` (0.21) adds ~450 MB
(kubernetes, pandas, fastapi) and pins ``protobuf<7``, so it needs
``grpcio-health-checking``/``grpcio-reflection`` 1.81 rather than the newest.  Use a
venv of its own:

    python3 -m venv /tmp/kserve-venv
    /tmp/kserve-venv/bin/pip install -e '.[test]' kserve 'protobuf<7'
    /tmp/kserve-venv/bin/python tools/kserve_check.py
    /tmp/kserve-venv/bin/python -m pytest tests/test_server_kserve.py   # runs this tool

Run it in a process without ``tritonclient``: both packages register ``inference.*`` in
protobuf's default descriptor pool, and the second import fails.

What KServe's client cannot do, whatever the server (the checks leave it out and say
so): BF16 tensors (no BF16 in its numpy mapping; over gRPC a response holding a BF16
output fails to decode, so such outputs are not requested), FP16 as JSON or typed
contents (it sends FP16 only raw, and gRPC forbids mixing raw and typed inputs), and
double-valued parameters over gRPC (its ``InferParameter`` has no ``double_param``:
bless's ``bless_<name>_seconds`` arrive empty there, ``bless_<name>_us`` as int64).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.errors import UnsupportedProtocol
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub
from kserve.protocol.infer_type import InferResponse, RequestedOutput
from kserve.protocol.rest import v2_datamodels as rest_models

from bless.serving.client.client import sample_inputs

SAMPLE_APPS = {
    # name: (inputs, outputs), as BlessClient.register takes them
    "typed": (
        [
            ("F32", "FP32", [-1, 4]),
            ("I64", "INT64", [-1, 3]),
            ("I32", "INT32", [2]),
            ("I8", "INT8", [2]),
            ("U8", "UINT8", [2]),
            ("U64", "UINT64", [2]),
            ("F64", "FP64", [2]),
            ("FLAGS", "BOOL", [2]),
            ("TEXT", "BYTES", [2]),
        ],
        [
            ("SCORES", "FP32", [-1, 2]),
            ("F64", "FP64", [2]),
            ("IDS", "INT64", [3]),
            ("U16", "UINT16", [2]),
            ("I8", "INT8", [2]),
            ("FLAGS", "BOOL", [2]),
            ("LABELS", "BYTES", [2]),
            ("HALF", "FP16", [2]),
        ],
    ),
    # FP16 inputs travel raw only in KServe's client; a BF16 output it cannot read.
    "half": ([("X", "FP16", [-1, 2])], [("Y", "FP32", [-1, 1]), ("BITS", "BF16", [2])]),
}
"""Apps covering every OIP datatype KServe's client handles, for a server started here (and the tests)."""
SAMPLE_QUOTA = "30%"
SAMPLE_PROFILE = "kserve-check"
"""The synthetic profile a server started here registers the sample apps with (short kernels: fast answers)."""

UNKNOWN_MODEL = "no-such-model"
TIMINGS = ("queue", "compute", "latency", "sync_wait")
"""bless's timing parameters (``bless_<name>_us``, ``bless_<name>_seconds``)."""
KSERVE_UNREADABLE = {"BF16": "KServe's client has no BF16 (its numpy mapping lacks it)"}
"""Output datatypes KServe's client fails to decode, and why: checks do not request them."""
RAW_ONLY = {"FP16", "BF16"}
"""Input datatypes KServe's client sends raw only (no JSON, no typed gRPC contents)."""
TIMEOUT_S = 30.0
"""Each client call's deadline: answers take milliseconds; this only bounds a hung server."""


class NotApplicable(Exception):
    """The call cannot be made for this model with KServe's client (the reason says why)."""


@dataclass(frozen=True)
class Target:
    """The server: its gRPC address (``host:port``), REST base URL, and the models to call."""

    grpc: str
    http: str
    models: tuple[str, ...]


Check = Callable[[Target], Awaitable[str]]
CHECKS: list[Check] = []
"""Every check, in order; each returns what it saw and raises AssertionError if that was wrong."""


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


# ---------------------------------------------------------------- helpers
class Clients:
    """KServe's two clients and its gRPC stub, opened on the running event loop."""

    def __init__(self, target: Target) -> None:
        self.grpc = InferenceGRPCClient(target.grpc, timeout=TIMEOUT_S, retries=0)
        self.stub: GRPCInferenceServiceStub = self.grpc._client_stub  # the client's own stub: its other RPCs
        self.rest = InferenceRESTClient(RESTConfig(protocol="v2", timeout=TIMEOUT_S, retries=0))
        self.http = target.http

    async def __aenter__(self) -> Clients:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.grpc.close()
        await self.rest.close()

    async def metadata(self, model: str) -> Any:
        return await self.stub.ModelMetadata(pb.ModelMetadataRequest(name=model), timeout=TIMEOUT_S)


def _inputs(metadata: Any, binary: bool) -> list[InferInput]:
    """The model's inputs (bless's seeded sample values) as KServe's InferInput, raw bytes or typed."""
    blocked = [t.name for t in metadata.inputs if t.datatype in KSERVE_UNREADABLE]
    if blocked:
        raise NotApplicable(f"inputs {blocked}: {KSERVE_UNREADABLE['BF16']}")
    values = sample_inputs(metadata)
    inputs = []
    for t in metadata.inputs:
        x = InferInput(t.name, list(values[t.name].shape), t.datatype)
        x.set_data_from_numpy(values[t.name], binary_data=binary or t.datatype in RAW_ONLY)
        inputs.append(x)
    return inputs


def _wanted(metadata: Any) -> tuple[list[str], list[RequestedOutput] | None]:
    """The outputs KServe can read, and the request's output list (None: all of them)."""
    readable = [t.name for t in metadata.outputs if t.datatype not in KSERVE_UNREADABLE]
    if not readable:
        raise NotApplicable(f"no output KServe's client can read ({KSERVE_UNREADABLE})")
    if len(readable) == len(metadata.outputs):
        return readable, None
    return readable, [RequestedOutput(name) for name in readable]


def _values(response: InferResponse, metadata: Any) -> dict[str, list[Any]]:
    """Each output's values as a flat list (BYTES as bytes: REST's JSON gives str), checked
    against the model's declared datatype and shape (-1: any size)."""
    declared = {t.name: t for t in metadata.outputs}
    out = {}
    for o in response.outputs:
        want = declared[o.name]
        array = o.as_numpy()
        assert o.datatype == want.datatype, f"output {o.name}: datatype {o.datatype}, declared {want.datatype}"
        assert len(array.shape) == len(want.shape) and all(
            d == w or w == -1 for d, w in zip(array.shape, want.shape)
        ), f"output {o.name}: shape {array.shape}, declared {list(want.shape)}"
        out[o.name] = [v.encode() if isinstance(v, str) else v for v in array.ravel().tolist()]
    return out


async def _reference(c: Clients, model: str) -> tuple[Any, dict[str, list[Any]]]:
    """The model's metadata and its outputs for the sample inputs, over gRPC with raw tensors."""
    metadata = await c.metadata(model)
    readable, requested = _wanted(metadata)
    response = await c.grpc.infer(InferRequest(model, _inputs(metadata, True), request_outputs=requested))
    values = _values(response, metadata)
    assert sorted(values) == sorted(readable), f"{model}: outputs {sorted(values)}, asked for {sorted(readable)}"
    return metadata, values


async def _grpc_error(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    try:
        await call
    except grpc.aio.AioRpcError as e:
        return e
    raise AssertionError("the call succeeded; expected an error status")


async def _rest_error(call: Awaitable[Any]) -> httpx.HTTPStatusError:
    try:
        await call
    except httpx.HTTPStatusError as e:
        return e
    raise AssertionError("the call succeeded; expected an HTTP error status")


async def _each_model(target: Target, one: Callable[[Clients, str], Awaitable[str]]) -> str:
    """``one`` for every model: what each saw, then the models it does not apply to and why."""
    results, skipped = [], []
    async with Clients(target) as c:
        for model in target.models:
            try:
                results.append(f"{model}: {await one(c, model)}")
            except NotApplicable as e:
                skipped.append(f"n/a {model}: {e}")
    assert results, f"no model could be called: {'; '.join(skipped)}"
    return "; ".join(results + skipped)


# ---------------------------------------------------------------- gRPC: InferenceGRPCClient
@check
async def grpc_is_server_live(target: Target) -> str:
    async with Clients(target) as c:
        assert await c.grpc.is_server_live() is True
    return "True"


@check
async def grpc_is_server_ready(target: Target) -> str:
    async with Clients(target) as c:
        assert await c.grpc.is_server_ready() is True
    return "True"


@check
async def grpc_is_model_ready(target: Target) -> str:
    async with Clients(target) as c:
        for model in target.models:
            assert await c.grpc.is_model_ready(model) is True, model
        assert await c.grpc.is_model_ready(UNKNOWN_MODEL) is False
    return f"True for {', '.join(target.models)}; False for {UNKNOWN_MODEL!r}"


@check
async def grpc_infer_raw(target: Target) -> str:
    """KServe's default: numpy arrays as raw_input_contents.  The id comes back, the
    version is 1, and bless's timings are readable as int64 parameters."""

    async def one(c: Clients, model: str) -> str:
        metadata = await c.metadata(model)
        readable, requested = _wanted(metadata)
        r = await c.grpc.infer(
            InferRequest(model, _inputs(metadata, True), request_id="k-1", request_outputs=requested)
        )
        assert (r.model_name, r.model_version, r.id) == (model, "1", "k-1"), (r.model_name, r.model_version, r.id)
        assert sorted(_values(r, metadata)) == sorted(readable)
        us = {name: r.parameters[f"bless_{name}_us"].int64_param for name in TIMINGS}
        assert all(v >= 0 for v in us.values()) and us["latency"] >= us["compute"] > 0, us
        left_out = [t.name for t in metadata.outputs if t.name not in readable]
        unread = f" (not requested: {left_out}, {KSERVE_UNREADABLE['BF16']})" if left_out else ""
        return f"{len(readable)} outputs{unread}; timings (us) {us}"

    return await _each_model(target, one)


@check
async def grpc_infer_typed_contents(target: Target) -> str:
    """``set_data_from_numpy(binary_data=False)``: typed ``contents``; same outputs as raw."""

    async def one(c: Clients, model: str) -> str:
        metadata, want = await _reference(c, model)
        raw_only = [t.name for t in metadata.inputs if t.datatype in RAW_ONLY]
        if raw_only:
            raise NotApplicable(f"inputs {raw_only} are FP16/BF16, which KServe sends raw only")
        _, requested = _wanted(metadata)
        r = await c.grpc.infer(InferRequest(model, _inputs(metadata, False), request_outputs=requested))
        assert _values(r, metadata) == want
        return "outputs equal the raw request's"

    return await _each_model(target, one)


@check
async def grpc_infer_requested_output(target: Target) -> str:
    async def one(c: Clients, model: str) -> str:
        metadata, want = await _reference(c, model)
        last = list(want)[-1]
        r = await c.grpc.infer(InferRequest(model, _inputs(metadata, True), request_outputs=[RequestedOutput(last)]))
        assert _values(r, metadata) == {last: want[last]}
        return f"only {last!r}, as in the full answer"

    return await _each_model(target, one)


@check
async def grpc_infer_errors(target: Target) -> str:
    async with Clients(target) as c:
        model = target.models[0]
        metadata = await c.metadata(model)
        inputs = _inputs(metadata, True)
        unknown = await _grpc_error(c.grpc.infer(InferRequest(UNKNOWN_MODEL, inputs)))
        assert unknown.code() == grpc.StatusCode.NOT_FOUND and UNKNOWN_MODEL in unknown.details()
        version = await _grpc_error(c.grpc.infer(InferRequest(model, inputs, model_version="2")))
        assert version.code() == grpc.StatusCode.NOT_FOUND and "version" in version.details()
        short = await _grpc_error(c.grpc.infer(InferRequest(model, inputs[1:])))
        assert short.code() == grpc.StatusCode.INVALID_ARGUMENT and inputs[0].name in short.details()
    return f"NOT_FOUND (model, version 2), INVALID_ARGUMENT ({short.details()})"


@check
async def grpc_stub_server_metadata(target: Target) -> str:
    async with Clients(target) as c:
        m = await c.stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=TIMEOUT_S)
    assert m.name == "bless" and m.version, m
    return f"{m.name} {m.version}, extensions {list(m.extensions)}"


@check
async def grpc_stub_model_metadata(target: Target) -> str:
    async with Clients(target) as c:
        for model in target.models:
            m = await c.metadata(model)
            assert m.name == model and list(m.versions) == ["1"] and m.inputs and m.outputs, m
        missing = await _grpc_error(c.metadata(UNKNOWN_MODEL))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    return f"platform {m.platform!r}, versions ['1']; NOT_FOUND for {UNKNOWN_MODEL!r}"


@check
async def grpc_stub_repository_model_load_unload(target: Target) -> str:
    """KServe's Load/Unload messages differ from Triton's, but bless refuses both RPCs whatever they carry."""
    async with Clients(target) as c:
        model = target.models[0]
        load = await _grpc_error(c.stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=model)))
        unload = await _grpc_error(c.stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name=model)))
    for rpc, e in (("RepositoryModelLoad", load), ("RepositoryModelUnload", unload)):
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED and e.details().startswith(f"{rpc}: "), e
    return f"UNIMPLEMENTED: {load.details()}"


# ---------------------------------------------------------------- REST: InferenceRESTClient (v2)
@check
async def rest_is_server_live(target: Target) -> str:
    async with Clients(target) as c:
        assert await c.rest.is_server_live(c.http) is True
    return "True"


@check
async def rest_is_server_ready(target: Target) -> str:
    async with Clients(target) as c:
        assert await c.rest.is_server_ready(c.http) is True
    return "True"


@check
async def rest_is_model_ready(target: Target) -> str:
    async with Clients(target) as c:
        for model in target.models:
            assert await c.rest.is_model_ready(c.http, model) is True, model
        assert await c.rest.is_model_ready(c.http, UNKNOWN_MODEL) is False
    return f"True for {', '.join(target.models)}; False for {UNKNOWN_MODEL!r}"


async def _rest_infer(c: Clients, model: str, binary_inputs: bool, **request: Any) -> tuple[InferResponse, str]:
    metadata, want = await _reference(c, model)
    _, requested = _wanted(metadata)
    call = InferRequest(model, _inputs(metadata, binary_inputs), request_outputs=requested, **request)
    r = await c.rest.infer(c.http, call, model_name=model)
    assert _values(r, metadata) == want, "outputs differ from gRPC's"
    return r, "outputs equal gRPC's"


@check
async def rest_infer_binary(target: Target) -> str:
    """KServe's default: tensors after the JSON header (the binary extension); outputs come back as JSON data."""

    async def one(c: Clients, model: str) -> str:
        r, same = await _rest_infer(c, model, True, request_id="k-2")
        assert r.id == "k-2" and r.model_name == model
        p = r.parameters
        assert all(isinstance(p[f"bless_{n}_us"], int) and isinstance(p[f"bless_{n}_seconds"], float) for n in TIMINGS)
        return (
            f"{same}; bless_latency_us {p['bless_latency_us']}, bless_latency_seconds {p['bless_latency_seconds']:.6f}"
        )

    return await _each_model(target, one)


@check
async def rest_infer_json(target: Target) -> str:
    """``binary_data=False``: JSON ``data`` (FP16 stays binary: KServe refuses it as JSON)."""

    async def one(c: Clients, model: str) -> str:
        return (await _rest_infer(c, model, False))[1]

    return await _each_model(target, one)


@check
async def rest_infer_binary_outputs(target: Target) -> str:
    """``parameters={"binary_data_output": True}``: outputs after the JSON header, which KServe decodes."""

    async def one(c: Clients, model: str) -> str:
        return (await _rest_infer(c, model, True, parameters={"binary_data_output": True}))[1]

    return await _each_model(target, one)


@check
async def rest_infer_dict(target: Target) -> str:
    """A plain OIP JSON request (a dict, no InferRequest); the answer still decodes as an InferResponse."""

    async def one(c: Clients, model: str) -> str:
        metadata, want = await _reference(c, model)
        inputs = _inputs(metadata, False)
        if any(x.datatype in RAW_ONLY for x in inputs):
            raise NotApplicable("an FP16/BF16 input: JSON cannot carry it")
        body, _ = InferRequest(model, inputs).to_rest()
        body["outputs"] = [{"name": name} for name in want]
        r = await c.rest.infer(c.http, body, model_name=model)
        assert _values(r, metadata) == want
        return "outputs equal gRPC's"

    return await _each_model(target, one)


@check
async def rest_infer_errors(target: Target) -> str:
    async with Clients(target) as c:
        model = target.models[0]
        inputs = _inputs(await c.metadata(model), False)
        unknown = await _rest_error(c.rest.infer(c.http, InferRequest(UNKNOWN_MODEL, inputs), model_name=UNKNOWN_MODEL))
        assert unknown.response.status_code == 404 and UNKNOWN_MODEL in str(unknown)
        short = await _rest_error(c.rest.infer(c.http, InferRequest(model, inputs[1:]), model_name=model))
        assert short.response.status_code == 400 and inputs[0].name in str(short)
    return f"404 (unknown model), 400 ({short.response.json()['error']})"


@check
async def rest_explain(target: Target) -> str:
    """KServe's explain is its v1 protocol only: the v2 client refuses before sending anything."""
    async with Clients(target) as c:
        try:
            await c.rest.explain(c.http, target.models[0], {})
        except UnsupportedProtocol as e:
            return f"client-side UnsupportedProtocol ({e}): no request is sent"
    raise AssertionError("explain over v2 was sent; KServe's client used to refuse it")


@check
async def rest_bodies_match_kserve_models(target: Target) -> str:
    """The JSON bodies the REST client does not parse whole, validated with KServe's own pydantic models."""
    model = target.models[0]
    async with httpx.AsyncClient(base_url=target.http, timeout=TIMEOUT_S) as http, Clients(target) as c:

        async def get(path: str) -> Any:
            r = await http.get(path)
            assert r.status_code == 200, (path, r.status_code, r.text)
            return r.json()

        rest_models.ServerLiveResponse.model_validate(await get("/v2/health/live"))
        rest_models.ServerReadyResponse.model_validate(await get("/v2/health/ready"))
        rest_models.ModelReadyResponse.model_validate(await get(f"/v2/models/{model}/ready"))
        rest_models.ServerMetadataResponse.model_validate(await get("/v2"))
        for name in target.models:
            rest_models.ModelMetadataResponse.model_validate(await get(f"/v2/models/{name}"))
        metadata, _ = await _reference(c, model)
        inputs = _inputs(metadata, False)
        if not any(x.datatype in RAW_ONLY for x in inputs):
            body, _ = InferRequest(model, inputs, request_id="k-3").to_rest()
            r = await http.post(f"/v2/models/{model}/infer", json=body)
            assert r.status_code == 200, r.text
            rest_models.InferenceResponse.model_validate(r.json())
    return "health, server and model metadata, inference response: valid"


# ---------------------------------------------------------------- running them
def run_checks(target: Target) -> list[tuple[str, str, str]]:
    """(check, "ok" | "FAIL", what it saw) for every check."""
    rows = []
    for fn in CHECKS:
        try:
            rows.append((fn.__name__, "ok", asyncio.run(fn(target))))
        except Exception as e:
            rows.append((fn.__name__, "FAIL", f"{type(e).__name__}: {e}"))
    return rows


def register_sample_apps(admin: Any, profile: str) -> tuple[str, ...]:
    """Register :data:`SAMPLE_APPS` with ``profile`` over a :class:`~bless.serving.client.BlessClient`."""
    for name, (inputs, outputs) in SAMPLE_APPS.items():
        admin.register(name, profile, SAMPLE_QUOTA, inputs=inputs, outputs=outputs)
    return tuple(SAMPLE_APPS)


def _serve_and_check() -> list[tuple[str, str, str]]:
    from bless.profiles.synthetic import synthetic_profile
    from bless.serving.client import BlessClient
    from bless.serving.client.loadtest import ServeProcess

    with tempfile.TemporaryDirectory() as tmp:
        profiles = Path(tmp) / "profiles"
        synthetic_profile(SAMPLE_PROFILE, n_kernels=8, mean_us=25, seed=7).save(
            profiles / "a100" / f"{SAMPLE_PROFILE}.json"
        )
        server = ServeProcess(Path(tmp) / "state", profiles)
        try:
            with BlessClient(server.address, token=server.token) as admin:
                models = register_sample_apps(admin, SAMPLE_PROFILE)
            print(f"bless serve: gRPC {server.address}, REST {server.rest_url}; models {', '.join(models)}")
            return run_checks(Target(server.address, server.rest_url, models))
        finally:
            server.terminate()


def main() -> None:
    # Importing kserve already parsed sys.argv with its model server's options (--grpc_port,
    # --http_port, --model_name, ...), abbreviations allowed: ours must prefix none of them.
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grpc-address", help="a running server's gRPC address (host:port); default: start one")
    ap.add_argument("--rest-url", help="its REST base URL (http://host:port)")
    ap.add_argument("--app", action="append", help="a registered app (model) to call; repeatable")
    args = ap.parse_args()
    # KServe's clients log every failed call with its traceback; the expected errors here are checked instead.
    logging.getLogger("kserve.trace").setLevel(logging.CRITICAL)
    if args.grpc_address is None:
        rows = _serve_and_check()
    elif args.rest_url is None or not args.app:
        ap.error("--grpc-address needs --rest-url and at least one --app")
    else:
        rows = run_checks(Target(args.grpc_address, args.rest_url, tuple(args.app)))
    width = max(len(name) for name, _, _ in rows)
    for name, status, detail in rows:
        print(f"{name:<{width}}  {status:<4}  {detail}")
    failed = [name for name, status, _ in rows if status != "ok"]
    print(
        f"{len(rows) - len(failed)} of {len(rows)} checks passed" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
