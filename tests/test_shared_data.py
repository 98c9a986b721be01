"""Where bless looks for the shared measurements: a source checkout, an installed wheel, or the
directory ``$BLESS_SHARED_DATA`` names."""

from __future__ import annotations

import pytest

import bless.shared_data as shared_data
from bless.shared_data import MissingDataError, shared_data_dir, shared_file


@pytest.fixture
def wheel_in_a_checkout(tmp_path, monkeypatch):
    """The package installed under ``site-packages``, run from a checkout's root whose
    ``../shared/data`` holds the data."""
    monkeypatch.delenv("BLESS_SHARED_DATA", raising=False)
    monkeypatch.setattr(shared_data, "REPO_ROOT", tmp_path / "venv" / "lib" / "site-packages")
    (tmp_path / "shared" / "data" / "traces").mkdir(parents=True)
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    return tmp_path


def test_an_installed_package_finds_the_data_beside_the_checkout_it_runs_from(wheel_in_a_checkout):
    assert shared_data_dir() == (wheel_in_a_checkout / "shared" / "data").resolve()
    assert shared_file("traces", "a trace") == (wheel_in_a_checkout / "shared" / "data" / "traces").resolve()


def test_the_environment_variable_wins(wheel_in_a_checkout, monkeypatch, tmp_path):
    monkeypatch.setenv("BLESS_SHARED_DATA", str(tmp_path / "elsewhere"))
    assert shared_data_dir() == tmp_path / "elsewhere"


def test_where_neither_place_has_it_the_error_names_the_place_beside_the_package(wheel_in_a_checkout, monkeypatch):
    elsewhere = wheel_in_a_checkout / "a" / "b"  # its ../shared/data does not exist
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    beside_package = (wheel_in_a_checkout / "venv" / "lib" / "shared" / "data").resolve()
    assert shared_data_dir() == beside_package
    with pytest.raises(MissingDataError, match="download a trace .*BLESS_SHARED_DATA"):
        shared_file("traces/x.csv", "a trace")
