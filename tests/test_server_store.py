"""The server's SQLite state: round trips, order, and failed changes that leave the old state."""

import sqlite3

import pytest

from bless.profiles.synthetic import synthetic_profile
from bless.serving.server.spec import AppSpec
from bless.serving.server.store import FILENAME, StateStore
from bless.serving.server.tensors import TensorSpec


def spec(name, quota=0.5):
    return AppSpec(
        name, "quick", quota, 0, "2x", (TensorSpec("X", "FP32", (-1, 4)),), (TensorSpec("Y", "INT64", (1,)),)
    )


def test_apps_round_trip_in_registration_order(tmp_path):
    store = StateStore(tmp_path)
    prof = synthetic_profile("b", n_kernels=5, seed=1)
    store.put(spec("b"), prof)
    store.put(spec("a", 0.25), prof)
    store.update_spec(spec("b", 0.75))
    store.close()
    loaded = StateStore(tmp_path).load()
    assert [s.spec.name for s in loaded] == ["b", "a"]
    assert loaded[0].spec == spec("b", 0.75)
    kept, original = loaded[0].profile.to_dict(), prof.to_dict()
    assert kept["t_us"] == original["t_us"] and kept["T_us"] == original["T_us"]  # to the nanosecond


def test_a_failed_change_leaves_the_old_state(tmp_path):
    store = StateStore(tmp_path)
    store.put(spec("a"), synthetic_profile("a", n_kernels=5, seed=1))
    with pytest.raises(KeyError):
        store.update_spec(spec("ghost"))
    store.delete("a")
    store.delete("a")  # idempotent
    assert store.load() == []


def test_a_state_file_from_a_newer_bless_is_refused(tmp_path):
    db = sqlite3.connect(tmp_path / FILENAME)
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(RuntimeError, match="schema version 99"):
        StateStore(tmp_path)
