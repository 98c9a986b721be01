"""Sweeps: grid and zip expansion, dotted keys, one CSV row per run, deterministic results."""

import csv
import json

import pytest
import yaml

from bless.harness.config import ConfigError
from bless.harness.sweep import (
    PARTIAL,
    WALL_COLUMNS,
    SweepResult,
    label,
    load_sweep,
    parse_sweep,
    run_sweep,
    set_path,
)

BASE = {
    "duration": 0.15,
    "warmup": 0.02,
    "noise": 0.02,
    "apps": [{"app": "resnet50", "quota": 0.5, "load": "B"}, {"app": "bert", "quota": 0.5, "load": "B"}],
}


def test_grid_is_a_cartesian_product_and_zip_pairs_keys():
    sweep = parse_sweep(
        {
            "base": BASE,
            "grid": {"policy": ["bless", {"name": "bless", "pacing": False}], "apps.*.load": ["A", "C"]},
            "zip": [{"apps.0.quota": [0.25, 0.75], "apps.1.quota": [0.75, 0.25]}],
        }
    )
    runs = list(sweep.runs())
    assert len(sweep) == len(runs) == 2 * 2 * 2
    values, cfg = runs[-1]
    assert label(values["policy"]) == "bless(pacing=False)"
    assert [a["load"] for a in cfg["apps"]] == ["C", "C"]
    assert [a["quota"] for a in cfg["apps"]] == [0.75, 0.25]  # zipped keys move together
    assert BASE["apps"][0]["load"] == "B"  # the base is never modified
    assert sweep.keys == ["policy", "apps.*.load", "apps.0.quota", "apps.1.quota"]


def test_the_configs_a_sweep_repeats_for_each_value_of_a_key():
    sweep = parse_sweep(
        {
            "base": {**BASE, "policy": "iso"},
            "grid": {"policy": ["bless", "unbound", "bless"], "apps.*.load": ["A", "C"]},
        }
    )
    configs = sweep.configs_without("policy")
    assert [[a["load"] for a in c["apps"]] for c in configs] == [["A", "A"], ["C", "C"]]  # grid order, once each
    assert all("policy" not in c for c in configs)
    runs = [cfg for _, cfg in sweep.runs()]
    assert sweep.configs_without("seed") == runs[:4]  # the repeated bless's runs once
    assert BASE["apps"][0]["load"] == "B"


def test_set_path_and_errors():
    raw = {"apps": [{"app": "a"}, {"app": "b"}]}
    set_path(raw, "apps.1.quota", 0.3)
    set_path(raw, "apps.*.slo", "2x")
    set_path(raw, "policy.name", "bless")
    assert raw == {
        "apps": [{"app": "a", "slo": "2x"}, {"app": "b", "quota": 0.3, "slo": "2x"}],
        "policy": {"name": "bless"},
    }
    with pytest.raises(ConfigError, match="apps.5.quota"):
        set_path(raw, "apps.5.quota", 1)
    with pytest.raises(ConfigError, match="same length"):
        parse_sweep({"base": BASE, "zip": [{"apps.0.quota": [0.1, 0.2], "apps.1.quota": [0.3]}]})
    with pytest.raises(ConfigError, match="swept twice"):
        parse_sweep({"base": BASE, "grid": {"seed": [1]}, "zip": [{"seed": [2]}]})
    with pytest.raises(ConfigError, match="apps\\[0\\].quota"):
        parse_sweep({"base": BASE, "grid": {"apps.0.quota": [2.0]}})
    with pytest.raises(ConfigError, match="unknown sweep key"):
        parse_sweep({"base": BASE, "grids": {}})


def test_rows_per_run_errors_and_determinism(tmp_path):
    sweep = parse_sweep(
        {
            "name": "t",
            "base": BASE,
            "grid": {"policy": ["bless", "gslice", "mig"], "seed": [0, 1]},
        }
    )
    one = run_sweep(sweep, tmp_path / "one", jobs=1, plot=False)
    two = run_sweep(sweep, tmp_path / "two", jobs=2, plot=False)
    with (tmp_path / "two" / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(sweep) == 6
    assert [r["policy"] for r in rows] == ["bless", "bless", "gslice", "gslice", "mig", "mig"]
    assert all("MigUnsupported" in r["error"] for r in rows if r["policy"] == "mig")
    assert len(two.errors) == 2 and two.failures == []  # MIG's quotas it cannot host are a result
    assert all(float(r["mean_latency_ms"]) > 0 and r["app1.app"] == "bert" for r in rows if r["policy"] != "mig")
    strip = lambda rs: [{k: v for k, v in r.items() if k not in WALL_COLUMNS} for r in rs]
    assert strip(one.rows) == strip(two.rows)  # same results whatever the number of workers
    assert len(two.summary) == 3 and two.summary[0]["runs"] == 2  # seeds averaged
    assert (tmp_path / "two" / "apps.csv").exists() and (tmp_path / "two" / "summary.csv").exists()


def test_a_sweep_stopped_early_keeps_the_runs_it_finished(tmp_path):
    sweep = parse_sweep({"name": "t", "base": BASE, "grid": {"policy": ["bless", "gslice", "unbound"]}})

    class Stopped(Exception):
        pass

    def stop_after_two(done: int, total: int) -> None:
        if done == 2:
            raise Stopped

    with pytest.raises(Stopped):
        run_sweep(sweep, tmp_path / "cut", jobs=1, progress=stop_after_two, plot=False)
    kept = [json.loads(line) for line in (tmp_path / "cut" / PARTIAL).read_text().splitlines()]
    assert [k["row"]["policy"] for k in kept] == ["bless", "gslice"]
    assert all(k["row"]["mean_latency_ms"] > 0 and len(k["apps"]) == 2 for k in kept)
    assert not (tmp_path / "cut" / "runs.csv").exists()
    run_sweep(sweep, tmp_path / "whole", jobs=1, plot=False)
    assert not (tmp_path / "whole" / PARTIAL).exists()  # the tables hold every run now


def test_a_run_that_fails_otherwise_is_a_failure():
    rows = [{"run": 0, "error": "MigUnsupported: MIG cannot host 1g.5gb"}, {"run": 1, "error": "MissingDataError: x"}]
    assert [r["run"] for r in SweepResult(rows, [], []).failures] == [1]


def test_base_from_files_and_cli(tmp_path, capsys):
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "a.yaml").write_text(
        yaml.safe_dump({"base": "run.yaml", "set": {"duration": 0.1}, "grid": {"seed": [0, 1]}})
    )
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"base": "a.yaml", "grid": {"policy": ["unbound"]}}))
    sweep = load_sweep(tmp_path / "b.yaml")
    assert sweep.base["duration"] == 0.1 and len(sweep) == 1  # another sweep's base, its 'set' applied
    from bless.cli import main

    assert main(["sweep", str(tmp_path / "a.yaml"), "--dry-run"]) == 0
    assert "2 runs" in capsys.readouterr().out
    assert main(["sweep", str(tmp_path / "a.yaml"), "--jobs", "1", "--out", str(tmp_path / "out"), "--no-plot"]) == 0
    assert len((tmp_path / "out" / "runs.csv").read_text().splitlines()) == 3


def test_cli_exits_nonzero_when_a_run_fails(tmp_path, monkeypatch, capsys):
    """An operator's script (or CI) sees a sweep with a failed run as failed; the other runs'
    results are still written."""
    import bless.harness.run as run_module
    from bless.cli import main

    real = run_module.run_config

    def failing_for_seed_1(cfg):
        if cfg.seed == 1:
            raise RuntimeError("the backend went away")  # an error injected into one run
        return real(cfg)

    monkeypatch.setattr(run_module, "run_config", failing_for_seed_1)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"base": {**BASE, "duration": 0.1}, "grid": {"seed": [0, 1]}}))
    code = main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--out", str(tmp_path / "out"), "--no-plot"])
    assert code == 1
    assert "1 of 2 runs failed" in capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "out" / "runs.csv").open()))
    assert [bool(r["error"]) for r in rows] == [False, True] and "the backend went away" in rows[1]["error"]


def test_a_sweep_whose_profile_path_does_not_resolve_stops_before_any_run_naming_the_field(tmp_path, monkeypatch):
    profile = tmp_path / "profiles" / "mine.json"
    profile.parent.mkdir()
    from bless.profiles.catalog import load_app

    load_app("resnet50", "a100").save(profile)
    sweep = parse_sweep({"base": BASE, "grid": {"apps.1.app": ["bert", "profiles/mine.json"]}})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError, match=r"apps\.1\.app: profile file 'profiles/mine.json' does not exist.*elsewhere"):
        run_sweep(sweep, tmp_path / "out", jobs=1)
    assert not (tmp_path / "out").exists()  # nothing started
    monkeypatch.chdir(tmp_path)  # where the relative path resolves, every run runs
    result = run_sweep(sweep, None, jobs=1)
    assert not result.errors and len(result.rows) == 2
