"""Shared pieces of the server tests: synthetic app profiles and real servers on loopback."""

from __future__ import annotations

import dataclasses
import math
import shutil
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from bless.profiles.synthetic import synthetic_profile
from bless.serving.api import OIP_SERVICE, methods
from bless.serving.client import BlessClient
from bless.serving.client.client import infer_request, sample_inputs
from bless.serving.server import BlessServer, ServerConfig

PROFILED_BATCH = 8
"""The batch the test profiles say they were measured at: the most a request may send."""
PROFILES = {
    # name: (kernels, mean kernel us, seed)
    "quick": (30, 40.0, 1),
    "other": (40, 50.0, 2),
    "slow": (10, 10_000.0, 3),  # ~0.1 s per request: requests pile up
}


def write_profiles(root: Path) -> Path:
    for name, (kernels, mean_us, seed) in PROFILES.items():
        profile = synthetic_profile(name, n_kernels=kernels, mean_us=mean_us, seed=seed)
        dataclasses.replace(profile, batch=PROFILED_BATCH).save(root / "a100" / f"{name}.json")
    return root


@pytest.fixture
def profile_dir(tmp_path, monkeypatch) -> Path:
    root = write_profiles(tmp_path / "profiles")
    monkeypatch.setenv("BLESS_PROFILE_PATH", str(root))
    return root


@pytest.fixture
def make_server(tmp_path, profile_dir):
    """Start servers on free loopback ports (same state dir unless given); all stopped at the end."""
    started: list[BlessServer] = []

    def make(**config) -> BlessServer:
        config.setdefault("grpc_port", 0)
        config.setdefault("http_port", -1)  # REST off unless a test asks (tests/test_server_rest.py)
        config.setdefault("metrics_port", 0)
        config.setdefault("state_dir", tmp_path / "state")
        config.setdefault("shutdown_grace", 1.0)
        server = BlessServer(ServerConfig(**config)).start()
        started.append(server)
        return server

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def server(make_server) -> BlessServer:
    return make_server()


@pytest.fixture
def admin(server) -> BlessClient:
    with BlessClient(server.address, token=server.token, timeout=10) as c:
        yield c


_CHANNELS: dict[str, grpc.Channel] = {}


def infer_future(address: str, app: str) -> grpc.Future:
    """Send one ModelInfer without waiting (a raw gRPC future, cancellable)."""
    channel = _CHANNELS.get(address)
    if channel is None:
        channel = _CHANNELS[address] = grpc.insecure_channel(address)
    m = methods(OIP_SERVICE)
    meta_call = channel.unary_unary(
        m["ModelMetadata"].path,
        request_serializer=m["ModelMetadata"].request.SerializeToString,
        response_deserializer=m["ModelMetadata"].response.FromString,
    )
    meta = meta_call(m["ModelMetadata"].request(name=app), timeout=10)
    call = channel.unary_unary(
        m["ModelInfer"].path,
        request_serializer=m["ModelInfer"].request.SerializeToString,
        response_deserializer=m["ModelInfer"].response.FromString,
    )
    return call.future(infer_request(app, meta, sample_inputs(meta)), timeout=30)


def received(server: BlessServer) -> int:
    """Inference requests the server has received, all apps (a count that only grows: a
    wait on it cannot miss a moment the way one on the queue's length can)."""
    return sum(a.stats.window(math.inf).received for a in server.core.apps())


def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def code_of(fut: grpc.Future) -> grpc.StatusCode:
    try:
        fut.result(timeout=30)
    except grpc.FutureCancelledError:
        return grpc.StatusCode.CANCELLED
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def self_signed(tmp_path, name: str) -> tuple:
    """A self-signed certificate for 127.0.0.1/localhost and its key (openssl writes the key 0600)."""
    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}"]
        + ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True,
        capture_output=True,
    )
    return cert, key


needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
