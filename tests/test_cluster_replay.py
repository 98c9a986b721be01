"""bless cluster replay: placement by the pure policies, one virtual-time replay per GPU, no Ray."""

from __future__ import annotations

import numpy as np
import pytest

from bless.cli import main
from bless.cluster.replay import (
    cluster_config_from_dict,
    gpu_run_config,
    place_apps,
    replay_cluster,
    write_results,
)
from bless.harness.config import ConfigError
from bless.harness.run import run_config

MMPP = {"type": "trace", "trace": "mmpp", "duration": 0.3, "load": 0.3}


def config(**over):
    raw = {
        "name": "t",
        "gpus": 3,
        "duration": 0.3,
        "warmup": 0.05,
        "seed": 3,
        "apps": [
            {"app": "resnet50", "quota": "1/4", "load": MMPP, "slo": "2x"},
            {"app": "vgg11", "quota": "1/4", "load": "B", "slo": "2x"},
            {"app": "resnet50", "quota": "1/4", "load": "C", "slo": "3x"},
            {"app": "resnet101", "quota": "1/4", "load": MMPP},
            {"app": "resnet50", "quota": "1/2", "load": "B", "slo": "2x"},
        ],
    }
    raw.update(over)
    return cluster_config_from_dict(raw)


def spread(app, residents):
    """A colocation estimator that rates every pair below an empty GPU (2.0): spreads the apps."""
    return [1.0] * len(residents)


def test_every_app_is_replayed_exactly_once():
    cfg = config()
    (res,) = replay_cluster(cfg, ["first-fit"], iso=False)
    names = [a.name for a in cfg.apps]
    assert names == ["resnet50", "vgg11", "resnet50-2", "resnet101", "resnet50-3"]
    assert [a.name for a in res.apps] == names
    placed = [n for _, apps in res.placement.gpus for n in apps]
    assert sorted(placed) == sorted(names)
    assert all(a.gpu_id is not None and a.result is not None and a.result.completed for a in res.apps)
    assert sum(len(run.apps) for run in res.gpus.values()) == len(names)


def test_a_best_effort_app_keeps_its_class_on_its_gpu():
    apps = [
        {"app": "resnet50", "quota": "1/2", "load": "B"},
        {"app": "resnet50_train", "quota": "1/2", "load": {"type": "closed", "interval": 0}, "priority": "best-effort"},
    ]
    cfg = config(gpus=1, apps=apps)
    run = gpu_run_config(cfg, "gpu-0", list(cfg.apps))
    assert [a.priority for a in run.apps] == ["latency-critical", "best-effort"]


def test_aggregates_match_the_per_gpu_runs():
    cfg = config()
    (res,) = replay_cluster(cfg, ["first-fit"])
    by_name = {a.name: a for a in cfg.apps}
    rows = {r["app"]: r for r in res.app_rows()}
    for gid, names in res.placement.gpus:
        if not names:
            continue
        alone = run_config(gpu_run_config(cfg, gid, [by_name[n] for n in names]))
        for name, app in zip(names, alone.apps):
            assert rows[name]["gpu"] == gid
            assert rows[name]["mean_ms"] == pytest.approx(app.mean * 1e3, rel=1e-12)
            assert rows[name]["requests"] == app.completed
    s = res.summary()
    assert s["mean_latency_ms"] == pytest.approx(np.mean([r["mean_ms"] for r in rows.values()]))
    assert s["mean_vs_iso"] == pytest.approx(np.mean([r["mean_ms"] / r["iso_mean_ms"] for r in rows.values()]))
    slo = [a.result for a in res.apps if a.result.slo is not None]
    violated = sum(int((r.latencies > r.slo).sum()) for r in slo)
    assert s["slo_violation_rate"] == pytest.approx(violated / sum(r.completed for r in slo))
    assert s["requests"] == sum(r["requests"] for r in rows.values())


def test_a_packing_policy_reports_fewer_gpus_used():
    cfg = config()
    packed, spreading = replay_cluster(cfg, ["first-fit", "colocation"], iso=False, estimator=spread)
    assert packed.summary()["gpus_used"] == 2  # 1/4 x 4 on gpu0, the 1/2 on gpu1
    assert spreading.summary()["gpus_used"] == 3
    assert packed.summary()["gpus_used"] < spreading.summary()["gpus_used"]
    # placement alone, without the replay, says the same
    assert place_apps(cfg, "first-fit").gpus_used == 2


def test_replay_is_deterministic_and_arrivals_do_not_depend_on_the_gpu():
    cfg = config()
    a = replay_cluster(cfg, ["first-fit", "colocation"], estimator=spread)
    b = replay_cluster(cfg, ["first-fit", "colocation"], estimator=spread)
    # repr: NaN (an app without an SLO) compares equal to itself there
    assert repr([r.app_rows() for r in a]) == repr([r.app_rows() for r in b])
    assert repr([r.gpu_rows() for r in a]) == repr([r.gpu_rows() for r in b])
    # trace loads got a per-app seed: resnet50 (an MMPP) saw the same arrivals wherever it was placed
    ff, co = a
    r_ff = next(x.result for x in ff.apps if x.name == "resnet50")
    r_co = next(x.result for x in co.apps if x.name == "resnet50")
    assert np.array_equal(np.sort(r_ff.arrivals), np.sort(r_co.arrivals))


def test_apps_no_gpu_can_take_are_reported_unplaced():
    cfg = config(gpus=1)
    (res,) = replay_cluster(cfg, ["first-fit"], iso=False)
    assert list(res.placement.unplaced) == ["resnet50-3"]  # 1/2 does not fit beside 4 x 1/4
    assert res.summary()["unplaced"] == 1
    row = next(r for r in res.app_rows() if r["app"] == "resnet50-3")
    assert row["gpu"] == "unplaced" and row["requests"] == 0


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"gpus": 0}, "gpus"),
        ({"policy": "round-robin"}, "policy"),
        ({"colour": 1}, "colour: unknown key"),
        ({"apps": [{"app": "bert", "quota": 0.5, "load": "B", "name": "x"}] * 2}, "already used"),
        ({"apps": [{"app": "bert", "quota": 2, "load": "B"}]}, "apps[0].quota"),
        ({"duration": -1}, "duration"),
        ({"apps": [{"app": "bert", "quota": 0.5, "load": "B", "name": "a b"}]}, "apps[0].name"),
        ({"apps": [{"app": "bert", "quota": 0.5, "load": "B", "priority": "low"}]}, "apps[0].priority"),
        ({"apps": [{"app": "bert", "quota": 0.5, "load": "B", "priority": "best-effort", "slo": "2x"}]}, "apps[0].slo"),
    ],
)
def test_config_errors_name_the_field(over, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config(**over)


def test_cli_replay_writes_tables(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(
        "gpus: 2\nduration: 0.2\nwarmup: 0.02\napps:\n"
        "  - {app: resnet50, quota: 1/2, load: B, slo: 2x}\n  - {app: vgg11, quota: 1/2, load: B}\n"
    )
    out = tmp_path / "out"
    assert main(["cluster", "replay", str(path), "--policy", "first-fit", "--out", str(out), "--no-plot"]) == 0
    text = capsys.readouterr().out
    assert "first-fit" in text and "resnet50" in text and "vgg11" in text
    assert {p.name for p in out.iterdir()} == {"apps.csv", "gpus.csv", "summary.csv", "table.md"}
    assert "| first-fit | 1 of 2 |" in (out / "table.md").read_text()


def test_cli_names_the_placement_policies():
    from bless.cli._cluster_replay import PLACEMENTS
    from bless.cluster.placement import POLICIES

    assert PLACEMENTS == POLICIES


def test_write_results_plot(tmp_path):
    results = replay_cluster(config(), ["first-fit", "colocation"], estimator=spread)
    paths = write_results(results, tmp_path / "x", "t")
    assert (tmp_path / "x" / "x.png") in paths and (tmp_path / "x" / "x.png").stat().st_size > 0


def test_live_replay_through_the_front_end(ray_local, tmp_path, capsys):
    """The same config against a running 2-GPU cluster (Ray, wall clock): every app placed and served."""
    from bless.cluster import ray_actors as ra
    from bless.cluster.frontend import ClusterFrontend
    from bless.cluster.replay import replay_live

    cfg = cluster_config_from_dict(
        {
            "gpus": 2,
            "duration": 0.5,
            "apps": [
                {"app": "resnet50", "quota": "60%", "load": "B"},
                {"app": "vgg11", "quota": "60%", "load": "B"},
                {"app": "resnet50", "quota": "1/4", "load": {"type": "poisson", "rate": 20}},
            ],
        }
    )
    ra.start_cluster(2, tmp_path / "cluster", warm_up=False)
    try:
        with ClusterFrontend(ra.ClusterClient(), token="secret") as fe:
            live = replay_live(cfg, fe.address, token="secret")
            # the command, on the apps now registered
            path = tmp_path / "c.yaml"
            path.write_text("gpus: 2\nduration: 0.3\napps:\n  - {app: vgg11, quota: 60%, load: B}\n")
            assert main(["cluster", "replay", str(path), "--address", fe.address, "--no-register"]) == 0
    finally:
        ra.stop_cluster()
    assert live.rejected == {}
    assert live.placements["resnet50"] != live.placements["vgg11"]  # 60 % + 60 %: two GPUs
    assert [r["app"] for r in live.rows] == ["resnet50", "vgg11", "resnet50-2"]
    assert all(r["ok"] > 0 and r["ok"] == r["sent"] for r in live.rows)
    assert sum(g["ok"] for g in live.gpu_rows()) == sum(r["ok"] for r in live.rows)
    out = capsys.readouterr().out
    assert "live on" in out and "vgg11" in out and live.placements["vgg11"] in out
