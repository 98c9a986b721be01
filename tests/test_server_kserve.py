"""KServe's Python clients (``kserve.InferenceGRPCClient``, ``kserve.InferenceRESTClient``) against
a real server: every call in tools/kserve_check.py, one test each.

Skipped where ``kserve`` is not installed: it is not a test dependency (~450 MB with
kubernetes and pandas, and it pins protobuf<7); see tools/kserve_check.py for the venv
that runs these."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "kserve",
    reason="KServe's client is not installed: not a test dependency (~450 MB, pins protobuf<7); "
    "run these in a venv of their own, see tools/kserve_check.py",
)
from server_helpers import make_server, profile_dir  # noqa: F401  (fixtures)

from bless.serving.client import BlessClient

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "kserve_check.py"
TOOL_TIMEOUT_S = 60
"""The tool starts `bless serve` and makes every call: ~5 s here."""


def _load_tool():
    spec = importlib.util.spec_from_file_location("kserve_check", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["kserve_check"] = module
    spec.loader.exec_module(module)
    return module


kserve_check = _load_tool()


@pytest.fixture
def target(make_server):
    """A server with REST and the tool's sample apps (every datatype KServe's client handles)."""
    server = make_server(http_port=0)
    with BlessClient(server.address, token=server.token, timeout=10) as admin:
        models = kserve_check.register_sample_apps(admin, "quick")
    return kserve_check.Target(server.address, f"http://{server.http_address}", models)


@pytest.mark.parametrize("check", kserve_check.CHECKS, ids=lambda c: c.__name__)
def test_kserve_client_call(target, check, caplog):
    """The call answers as the OIP says (outputs equal across protocols and encodings; errors
    with their status; the repository RPCs UNIMPLEMENTED with bless's reason).  Before the
    REST health endpoints sent JSON bodies, rest_is_server_live, rest_is_server_ready and
    rest_bodies_match_kserve_models failed (JSONDecodeError in KServe's client)."""
    caplog.set_level(logging.CRITICAL, logger="kserve.trace")  # KServe logs each expected error's traceback
    detail = asyncio.run(check(target))
    assert detail and "n/a" not in detail.split(";")[0], detail  # the sample apps exercise every call


def test_the_tool_starts_bless_serve_and_every_check_passes():
    result = subprocess.run(
        [sys.executable, str(TOOL)], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(kserve_check.CHECKS)} of {len(kserve_check.CHECKS)} checks passed" in result.stdout
