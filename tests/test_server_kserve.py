"""KServe's Python clients (``kserve.InferenceGRPCClient``, ``kserve.InferenceRESTClient``) against
``bless serve``: every call in tools/kserve_check.py.

Skipped where ``kserve`` is not installed: it is not a test dependency (~450 MB with
kubernetes and pandas, and it pins protobuf<7); see tools/kserve_check.py for the venv
that runs it.  The tool runs in a child process because ``kserve`` and ``tritonclient``
cannot share one: both register their generated ``inference.*`` messages in protobuf's
default descriptor pool, and whichever is imported second fails ("duplicate symbol
'inference.ServerLiveRequest'"), while the other server tests import tritonclient."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("kserve") is None,
    reason="KServe's client is not installed: not a test dependency (~450 MB, pins protobuf<7); "
    "run it in a venv of its own, see tools/kserve_check.py",
)

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "kserve_check.py"
TOOL_TIMEOUT_S = 60
"""The tool starts `bless serve` and makes every call: ~5 s here."""


def test_every_kserve_client_call_answers_as_the_oip_says():
    """Health, metadata, inference with every datatype KServe handles (raw, typed, JSON, binary
    outputs; outputs equal across protocols), errors with their statuses, the repository RPCs
    UNIMPLEMENTED with bless's reason, the REST bodies valid for KServe's data models.  Before
    the REST health endpoints sent the OIP's JSON bodies, rest_is_server_live,
    rest_is_server_ready and rest_bodies_match_kserve_models failed (JSONDecodeError)."""
    result = subprocess.run(
        [sys.executable, str(TOOL)], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, cwd=ROOT
    )
    table = result.stdout + result.stderr
    assert result.returncode == 0, table
    checks = [line.split()[0] for line in result.stdout.splitlines() if line.split()[1:2] == ["ok"]]
    assert (
        len(checks) >= 20 and any(c.startswith("grpc_") for c in checks) and any(c.startswith("rest_") for c in checks)
    )
    assert f"{len(checks)} of {len(checks)} checks passed" in result.stdout, table
