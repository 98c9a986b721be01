"""The state directory: one server owns it, only its owner can read it, and a stored app
that cannot come back is listed and removable instead of an error at every start."""

import logging
import os
import sqlite3
import stat

import grpc
import pytest
from server_helpers import make_server, profile_dir  # noqa: F401  (fixtures)

from bless.serving.client import BlessClient
from bless.serving.server.admission import AdmissionLimits
from bless.serving.server.errors import StartupError
from bless.serving.server.store import FILENAME


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_second_server_on_the_same_state_dir_refuses_naming_the_holder(make_server, tmp_path):
    first = make_server()
    with pytest.raises(StartupError) as e:
        make_server()
    message = str(e.value)
    assert "\n" not in message
    assert f"pid {os.getpid()}" in message and f"serving {first.address}" in message
    assert str(tmp_path / "state") in message and "--state-dir" in message
    assert first.core.ready  # the holder is untouched
    first.stop()
    make_server().stop()  # released on stop


def test_the_state_dir_and_its_files_are_private(make_server, tmp_path):
    old_umask = os.umask(0o022)  # the common default, which would leave them world-readable
    try:
        server = make_server(state_dir=tmp_path / "new" / "state")
    finally:
        os.umask(old_umask)
    with BlessClient(server.address, token=server.token, timeout=10) as c:
        c.register("a", "quick", "50%")  # writes the database (and its journal)
    state = tmp_path / "new" / "state"
    assert mode(state) == 0o700
    files = list(state.iterdir())
    assert {f.name for f in files} >= {FILENAME, "lock", "admin-token"}
    assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


def break_row(state_dir, name: str) -> None:
    db = sqlite3.connect(state_dir / FILENAME)
    db.execute('UPDATE apps SET profile = \'{"not": "a profile"}\' WHERE name = ?', (name,))
    db.commit()
    db.close()


def test_a_stored_app_that_cannot_be_restored_is_listed_and_removable(make_server, tmp_path, caplog):
    server = make_server()
    with BlessClient(server.address, token=server.token, timeout=10) as c:
        c.register("good", "quick", "25%")
        c.register("bad", "other", "25%")
    server.stop()
    break_row(tmp_path / "state", "bad")

    with caplog.at_level(logging.ERROR, logger="bless.serving.server"):
        server = make_server()  # starts, serving the other app
    assert [r.message for r in caplog.records if "'bad'" in r.message]
    with BlessClient(server.address, token=server.token, timeout=10) as c:
        apps = {a.name: a for a in c.apps().apps}
        assert apps["good"].state == "ready"
        assert apps["bad"].state == "unavailable" and "cannot be read" in apps["bad"].error
        assert str(tmp_path) not in apps["bad"].error  # read without a token: no server paths
        with pytest.raises(grpc.RpcError) as e:
            c.register("bad", "quick", "10%")
        assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
        c.unregister("bad")
        assert [a.name for a in c.apps().apps] == ["good"]
    server.stop()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bless.serving.server"):
        server = make_server()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    with BlessClient(server.address, timeout=10) as c:
        assert [a.name for a in c.apps().apps] == ["good"]


def test_an_app_that_no_longer_passes_admission_is_listed_with_the_reason(make_server):
    server = make_server()
    with BlessClient(server.address, token=server.token, timeout=10) as c:
        c.register("quick", "quick", "50%")
        c.register("other", "other", "50%")  # kernels 1.25x longer on average
    server.stop()
    server = make_server(admission=AdmissionLimits(max_kernel_ratio=1.0))  # the operator tightened the rule
    with BlessClient(server.address, timeout=10) as c:
        apps = {a.name: a for a in c.apps().apps}
    assert apps["quick"].state == "ready"
    other = apps["other"]
    assert other.state == "unavailable" and other.quota == 0.5 and other.profile == "other"
    assert "kernels too short to share a squad" in other.error
