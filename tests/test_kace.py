"""KACE colocation prediction: policies, the linear model, CSV checks, generator and CLI."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from bless.cli import main
from bless.colocation import kace_data
from bless.colocation import kace_policies as pol
from bless.colocation.kace import (
    CORRELATION_GRID,
    ForestModel,
    KaceModel,
    ModelError,
    SoloRun,
    app_features,
    pair_matrix,
)
from bless.colocation.kace_data import DataError, FeatureTable
from bless.colocation.kace_eval import EvalConfig, evaluate
from bless.colocation.kace_generate import closed_loop, generate, synthetic_apps, write
from bless.hw.gpus import GIB, get_gpu
from bless.profiles.synthetic import synthetic_profile


# ------------------------------------------------------------------ policies
def _cands():
    # partner: (memory_mib, sm_busy_pct, memory_busy_pct), measured sum, predicted sum
    rows = {
        "small": ((100, 50, 40), 1.2, 1.1),
        "busy": ((900, 95, 60), 1.0, 1.3),
        "quiet": ((500, 70, 10), 1.5, 1.2),
    }
    return [
        pol.Candidate(
            name,
            {"memory_mib": f[0], "sm_busy_pct": f[1], "memory_busy_pct": f[2]},
            measured=m,
            predicted={"KACE": p},
        )
        for name, (f, m, p) in rows.items()
    ]


def test_policies_pick_the_known_partner():
    cands = _cands()
    memcap, sm, mem = pol.rules("memory_mib", "sm_busy_pct", "memory_busy_pct")
    assert cands[memcap.pick(cands)].partner == "small"
    assert cands[sm.pick(cands)].partner == "busy"
    assert cands[mem.pick(cands)].partner == "quiet"
    assert cands[pol.pick_predicted(cands, "KACE")].partner == "busy"
    assert cands[pol.pick_oracle(cands)].partner == "quiet"
    assert pol.score(cands, pol.pick_oracle(cands)) == 1.0
    assert pol.score(cands, pol.pick_predicted(cands, "KACE")) == pytest.approx(1.0 / 1.5)
    assert pol.random_score(cands) == pytest.approx((1.2 + 1.0 + 1.5) / 3 / 1.5)


def test_best_rule_is_the_rule_that_scores_best_on_training_groups():
    rules = pol.rules("memory_mib", "sm_busy_pct", "memory_busy_pct")
    best = pol.best_rule(rules, [_cands()])
    assert best.name == "MEM%"  # picks "quiet", the Oracle's choice
    assert pol.rule_score(best, [_cands()]) == 1.0
    assert pol.best_rule(rules, []).name == "MEMCAP"  # nothing to learn from: the first rule


def test_ties_go_to_the_first_candidate():
    cands = [pol.Candidate(n, {"m": 1.0}, measured=1.0, predicted={"KACE": 2.0}) for n in "abc"]
    assert pol.pick_predicted(cands, "KACE") == 0
    assert pol.Rule("X", "m", highest=False).pick(cands) == 0


# ------------------------------------------------------------------ model
def _table(n=8, seed=0) -> FeatureTable:
    rng = np.random.default_rng(seed)
    values = np.column_stack([rng.uniform(0, 100, n), rng.uniform(10, 90, n), rng.uniform(1, 5, n)])
    return FeatureTable(tuple(f"w{i}" for i in range(n)), ("mem", "sm_pct", "x"), values)


def test_pair_features_sum_raw_metrics_and_average_percentages():
    t = _table(3)
    x = pair_matrix(t, [("w0", "w1"), ("w2", "w2")])
    np.testing.assert_allclose(
        x[0], [t.values[0, 0] + t.values[1, 0], (t.values[0, 1] + t.values[1, 1]) / 2, t.values[0, 2] + t.values[1, 2]]
    )
    np.testing.assert_allclose(x[1], [2 * t.values[2, 0], t.values[2, 1], 2 * t.values[2, 2]])
    assert kace_data.is_percentage("sm%") and kace_data.is_percentage("dram_pct")
    assert not kace_data.is_percentage("memory_mib")


def test_linear_model_recovers_a_known_linear_relation():
    t = _table(10)
    pairs = list(itertools.combinations_with_replacement(t.workloads, 2))
    x = pair_matrix(t, pairs)
    y = 0.5 + 0.01 * x[:, 0] - 0.02 * x[:, 1] + 0.1 * x[:, 2]
    train = np.arange(0, len(pairs), 3)
    model = KaceModel.fit(x[train], y[train], t.columns, min_correlation=0.0)
    test = np.setdiff1d(np.arange(len(pairs)), train)
    np.testing.assert_allclose(model.predict(x[test]), y[test], rtol=1e-9)
    # Back in raw units the coefficients are the relation's.
    raw = model.coefficients / model.inputs.normaliser.scale
    np.testing.assert_allclose(raw, [0.01, -0.02, 0.1], rtol=1e-9)
    # The normaliser holds the training pairs' statistics, not the test pairs'.
    np.testing.assert_allclose(model.inputs.normaliser.mean, x[train].mean(axis=0))


def test_correlation_filter_drops_uncorrelated_features():
    signal = np.arange(8.0)
    noise = np.array([1.0, -1, -1, 1, 1, -1, -1, 1])  # orthogonal to the centred signal: r = 0
    x = np.column_stack([signal, noise])
    model = KaceModel.fit(x, 2 * signal + 1, ("signal", "noise"))
    assert model.inputs.selected_names == ("signal",)
    np.testing.assert_allclose(model.predict(x), 2 * signal + 1)


def test_exactly_dependent_columns_do_not_blow_up_predictions():
    t = _table(10)
    values = np.column_stack([t.values, t.values[:, 0] * 1.0])  # a duplicate column
    t2 = FeatureTable(t.workloads, (*t.columns, "mem_copy"), values)
    pairs = list(itertools.combinations_with_replacement(t2.workloads, 2))
    x = pair_matrix(t2, pairs)
    y = 1 + 0.01 * x[:, 0] + 0.1 * x[:, 2]
    model = KaceModel.fit(x[:6], y[:6], t2.columns, min_correlation=0.0)
    assert np.all(np.abs(model.coefficients) < 1e3)
    assert np.all(np.abs(model.predict(x) - y) < 10)


def test_model_file_round_trip_and_rank_by_name(tmp_path):
    t = _table(6)
    pairs = list(itertools.combinations_with_replacement(t.workloads, 2))
    x = pair_matrix(t, pairs)
    y = 1 + 0.01 * x[:, 0] + 0.1 * x[:, 2]
    model = KaceModel.fit(x, y, t.columns)
    loaded = KaceModel.load(model.save(tmp_path / "m.json"))
    np.testing.assert_allclose(loaded.predict(x), model.predict(x))
    np.testing.assert_allclose(loaded.predict_pairs(t, pairs), y, rtol=1e-9)


def test_forest_baseline_is_seeded():
    t = _table(8)
    pairs = list(itertools.combinations_with_replacement(t.workloads, 2))
    x = pair_matrix(t, pairs)
    y = 1 + np.sin(x[:, 0] / 30)
    a = ForestModel.fit(x, y, t.columns, seed=4).predict(x)
    b = ForestModel.fit(x, y, t.columns, seed=4).predict(x)
    np.testing.assert_array_equal(a, b)
    assert np.corrcoef(a, y)[0, 1] > 0.9


def test_models_refuse_too_little_or_flat_data():
    x = np.arange(6.0).reshape(3, 2)
    with pytest.raises(ModelError, match="at least 3"):
        KaceModel.fit(x[:2], np.array([1.0, 2.0]), ("a", "b"))
    with pytest.raises(ModelError, match="same throughput sum"):
        KaceModel.fit(x, np.ones(3), ("a", "b"))


# ------------------------------------------------------------------ CSV errors
def _write(path, text):
    path.write_text(text)
    return path


GOOD_F = (
    "workload,memory_mib,sm_busy_pct,memory_busy_pct,solo_throughput\na,100,90,20,10\nb,200,80,40,20\nc,300,70,60,5\n"
)


@pytest.mark.parametrize(
    "f_text, p_text, match",
    [
        ("name,x\na,1\n", "workload1,workload2,throughput1,throughput2\n", r"f\.csv: row 1: no 'workload' column"),
        ("workload,x\na,1\na,2\n", "", r"f\.csv: row 3, column 'workload': workload 'a' already on row 2"),
        ("workload,x\na,1\nb,fast\n", "", r"f\.csv: row 3, column 'x': 'fast' is not a number"),
        ("workload,x\na,1\nb,nan\n", "", r"f\.csv: row 3, column 'x': 'nan' is not a finite number"),
        ("workload\na\n", "", r"f\.csv: row 1: no feature columns"),
        ("workload,x\na,1,2\n", "", r"f\.csv: row 2: 3 fields, the header has 2"),
        (GOOD_F, "workload1,workload2,throughput1\na,b,1\n", r"p\.csv: row 1: missing column\(s\) throughput2"),
        (
            GOOD_F,
            "workload1,workload2,throughput1,throughput2\na,zz,1,2\n",
            r"p\.csv: row 2, column 'workload2': workload 'zz' is not in",
        ),
        (
            GOOD_F,
            "workload1,workload2,throughput1,throughput2\na,b,1,x\n",
            r"p\.csv: row 2, column 'throughput2': 'x' is not a number",
        ),
        (
            GOOD_F,
            "workload1,workload2,throughput1,throughput2\na,b,1,2\nb,a,2,1\n",
            r"p\.csv: row 3: pair b\+a already measured on row 2",
        ),
        (GOOD_F, "workload1,workload2,throughput1,throughput2\na,b,-1,2\n", r"p\.csv: row 2, column 'throughput1'"),
    ],
)
def test_bad_csvs_name_file_row_and_column(tmp_path, f_text, p_text, match):
    f = _write(tmp_path / "f.csv", f_text)
    p = _write(tmp_path / "p.csv", p_text or "workload1,workload2,throughput1,throughput2\n")
    with pytest.raises(DataError, match=match):
        kace_data.load(f, p)


def test_too_few_pairs_to_train_is_a_clear_error(tmp_path):
    f = _write(tmp_path / "f.csv", GOOD_F)
    p = _write(tmp_path / "p.csv", "workload1,workload2,throughput1,throughput2\na,b,5,10\na,c,5,3\nb,c,10,3\n")
    data = kace_data.load(f, p)
    with pytest.raises(DataError, match=r"3 pairs; --train-frac 0.2 leaves 1 for training, fewer than the 3"):
        evaluate(data, EvalConfig(train_frac=0.2))


def test_throughputs_are_related_to_solo(tmp_path):
    f = _write(tmp_path / "f.csv", GOOD_F)
    p = _write(tmp_path / "p.csv", "workload1,workload2,throughput1,throughput2\nb,a,10,5\n")
    np.testing.assert_allclose(kace_data.load(f, p).throughput_sums, [10 / 20 + 5 / 10])
    np.testing.assert_allclose(kace_data.load(f, p, normalised=True).throughput_sums, [15.0])
    # Without solo throughputs in F, P's values are taken as relative to solo already.
    bare = _write(tmp_path / "bare.csv", "workload,x\na,1\nb,2\n")
    data = kace_data.load(bare, p)
    assert data.relative_to_solo
    np.testing.assert_allclose(data.throughput_sums, [15.0])


def test_cli_reports_csv_errors_without_traceback(tmp_path, capsys):
    f = _write(tmp_path / "f.csv", "workload,x\na,1\na,2\n")
    p = _write(tmp_path / "p.csv", "workload1,workload2,throughput1,throughput2\n")
    assert main(["kace", "evaluate", "--features", str(f), "--pairs", str(p)]) == 2
    assert "already on row 2" in capsys.readouterr().err


# ------------------------------------------------------------------ generator
def test_solo_closed_loop_matches_the_profile():
    app = synthetic_profile("s", n_kernels=30, mean_us=50.0, seed=2)
    run = closed_loop([app], "a100", 0.05)
    # Back to back, one request's period is its isolated latency (kernels plus one launch).
    assert run.throughputs[0] == pytest.approx(1 / app.T[-1], rel=1e-6)
    assert run.requests[0] >= 4
    assert run.memory_bytes[0] == app.memory_bytes + get_gpu("a100").context_bytes("mps")


def test_pairs_that_do_not_fit_in_memory_are_absent():
    big = [synthetic_profile(f"big{i}", n_kernels=10, seed=i, memory_bytes=25 * GIB) for i in range(2)]
    small = synthetic_profile("small", n_kernels=10, seed=9, memory_bytes=GIB)
    g = generate([*big, small], "a100", 0.02)
    measured = {frozenset((p.workload1, p.workload2)) for p in g.pairs}
    assert frozenset(("big0", "big1")) not in measured
    assert frozenset(("big0",)) not in measured  # two instances of a 25 GiB app do not fit either
    assert frozenset(("big0", "small")) in measured
    assert ("big0", "big1") in g.absent


def test_app_features_follow_the_kernel_model():
    app = synthetic_profile("s", n_kernels=20, seed=5, dram_util=0.3)
    f = app_features(app, SoloRun(throughput=100.0, memory_bytes=2 * 2**20), get_gpu("a100"))
    assert f["dram_throughput_pct"] == pytest.approx(30.0)
    assert f["memory_throughput_pct"] == pytest.approx(30.0)  # no copies
    assert f["memory_mib"] == pytest.approx(2.0)
    assert 0 < f["sm_throughput_pct"] <= 100 and 0 < f["sm_busy_pct"] <= 100
    assert f["memory_busy_pct"] == pytest.approx(f["sm_busy_pct"] * 0.3)
    assert {"threads_per_block", "registers_per_thread", "static_shared_mem_bytes"} <= f.keys()


def test_app_features_count_copies_as_memory_load_and_need_the_profiles_gpu():
    app = synthetic_profile("c", n_kernels=20, seed=5, dram_util=0.3, memcpy_first=True)
    a100 = get_gpu("a100")
    f = app_features(app, SoloRun(throughput=100.0, memory_bytes=2**20), a100)
    copy = app.t[-1, 0]
    compute = app.t[-1, 1:].sum()  # synthetic times never rise with SMs: the envelope is level 18
    assert f["dram_throughput_pct"] == pytest.approx(30.0)
    assert f["memory_throughput_pct"] == pytest.approx(100.0 * (0.3 * compute + copy) / (compute + copy))
    with pytest.raises(ValueError, match="is for a100, not h100"):
        app_features(app, SoloRun(throughput=100.0, memory_bytes=2**20), get_gpu("h100"))


def _generated(tmp_path, n=5, jobs=1):
    g = generate(synthetic_apps(n, "a100"), "a100", 0.03, jobs=jobs)
    return g, write(g, tmp_path, {"test": True})


def test_generate_writes_f_and_p_deterministically(tmp_path):
    g, (f, p) = _generated(tmp_path / "a")
    _, (f2, p2) = _generated(tmp_path / "b", jobs=2)
    assert f.read_text() == f2.read_text() and p.read_text() == p2.read_text()
    assert len(g.pairs) == 15  # 5 apps: 10 pairs and 5 self-pairs
    assert json.loads((tmp_path / "a" / "generate.json").read_text())["pairs"] == 15


def test_evaluate_end_to_end_on_generated_data_is_deterministic(tmp_path):
    _, (f, p) = _generated(tmp_path, n=6)
    data = kace_data.load(f, p)
    config = EvalConfig(train_frac=0.3, seed=1, repeats=3)
    a, b = evaluate(data, config), evaluate(data, config)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert a.policies == ("KACE", "Xu RF", "Linear", "MEMCAP", "SM%", "MEM%", "Best-rule", "Random", "Oracle")
    assert np.all(a.scores[~np.isnan(a.scores)] <= 1 + 1e-12)
    assert np.allclose(a.average[a.policies.index("Oracle")], 1.0)
    unseen = evaluate(data, EvalConfig(train_frac=0.5, seed=1, unseen=True))
    assert not np.isnan(unseen.scores).any()  # every target has all its pairs as candidates


def test_cli_generate_evaluate_fit_rank(tmp_path, capsys):
    out = tmp_path / "data"
    assert main(["kace", "generate", "--synthetic", "5", "--out", str(out), "--seconds", "0.03", "--jobs", "1"]) == 0
    f, p = str(out / "features.csv"), str(out / "pairs.csv")
    assert main(["kace", "evaluate", "--features", f, "--pairs", p, "--train-frac", "0.4", "--repeats", "2"]) == 0
    text = capsys.readouterr().out
    assert "average" in text and "KACE" in text and "Best-rule" in text
    model = tmp_path / "model.json"
    assert main(["kace", "fit", "--features", f, "--pairs", p, "--out", str(model)]) == 0
    assert (
        main(
            [
                "kace",
                "rank",
                "--model",
                str(model),
                "--features",
                f,
                "--target",
                "syn0",
                "--candidates",
                "syn1",
                "syn2",
                "syn3",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "syn1" in text and "predicted throughput sum" in text
    assert (
        main(["kace", "rank", "--model", str(model), "--features", f, "--target", "nope", "--candidates", "syn1"]) == 2
    )
    assert "unknown workload 'nope'" in capsys.readouterr().err


# ------------------------------------------------------------------ cross-validated fit, symmetry, recovery
def _linear_data(n=12, noise_columns=0, seed=3):
    """F whose pair throughput sum is a known linear function of the pair features (plus noise columns)."""
    t = _table(n, seed)
    rng = np.random.default_rng(seed + 100)
    if noise_columns:
        extra = rng.normal(size=(n, noise_columns))
        t = FeatureTable(
            t.workloads, (*t.columns, *(f"n{i}" for i in range(noise_columns))), np.hstack([t.values, extra])
        )
    pairs = list(itertools.combinations_with_replacement(t.workloads, 2))
    x = pair_matrix(t, pairs)
    y = 2.0 - 0.004 * x[:, 0] - 0.01 * x[:, 1] + 0.05 * x[:, 2]
    return t, pairs, x, y


def test_kace_is_symmetric_in_the_pair():
    t, pairs, x, y = _linear_data(noise_columns=3)
    model = KaceModel.fit(x[::3], y[::3] + 0.01 * np.sin(np.arange(len(y[::3]))), t.columns)
    np.testing.assert_allclose(model.predict_pairs(t, pairs), model.predict_pairs(t, [(b, a) for a, b in pairs]))


def test_default_fit_recovers_an_exact_linear_relation_and_the_paper_model_is_one_choice():
    t, _pairs, x, y = _linear_data()
    model = KaceModel.fit(x[::2], y[::2], t.columns)  # cut-off and penalty by CV
    assert model.min_correlation in CORRELATION_GRID
    assert model.ridge == 0.0  # noiseless: least squares has no CV error, and ties go to it
    np.testing.assert_allclose(model.predict(x), y, rtol=1e-8)
    paper = KaceModel.fit(x[::2], y[::2], t.columns, min_correlation=0.2, ridge=0.0)
    assert (paper.min_correlation, paper.ridge) == (0.2, 0.0)
    again = KaceModel.fit(x[::2], y[::2], t.columns)
    np.testing.assert_array_equal(again.coefficients, model.coefficients)  # deterministic


def test_evaluation_kace_matches_the_oracle_on_a_linear_data_set_and_the_oracle_scores_one(tmp_path):
    t, pairs, _x, y = _linear_data(n=10, noise_columns=2)
    measured = [kace_data.PairMeasurement(a, b, s / 2, s / 2) for (a, b), s in zip(pairs, y)]
    f = kace_data.write_features(tmp_path / "f.csv", t)
    p = kace_data.write_pairs(tmp_path / "p.csv", tuple(measured))
    data = kace_data.load(f, p)
    ev = evaluate(data, EvalConfig(train_frac=0.3, repeats=3, seed=2))
    avg = dict(zip(ev.policies, ev.average))
    assert avg["Oracle"] == 1.0
    assert avg["KACE"] == pytest.approx(1.0, abs=1e-6)  # the ranking is recovered for every target
    assert avg["Linear"] == pytest.approx(1.0, abs=1e-6)
    assert avg["Random"] < 0.99


def test_version_1_model_files_still_load(tmp_path):
    t, _pairs, x, y = _linear_data()
    model = KaceModel.fit(x, y, t.columns, 0.2, 0.0)
    raw = model.to_dict()
    raw["version"] = 1
    del raw["ridge"]
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(raw))
    loaded = KaceModel.load(path)
    assert loaded.ridge == 0.0
    np.testing.assert_allclose(loaded.predict(x), model.predict(x))


def test_negative_ridge_is_refused():
    t, _pairs, x, y = _linear_data()
    with pytest.raises(ModelError, match="ridge"):
        KaceModel.fit(x, y, t.columns, ridge=-1.0)


# ------------------------------------------------------------------ the real A100 pairs in KACE's format
def test_a100_pairs_convert_to_kace_format():
    from bless.colocation.kace_a100 import convert
    from bless.shared_data import shared_data_dir

    pairs_dir = shared_data_dir() / "colocation" / "a100_mps_pairs"
    kernels_dir = shared_data_dir() / "calibration" / "a100_mps_kernels"
    if not (pairs_dir / "corun_resnet50.csv").exists() or not kernels_dir.exists():
        pytest.skip("needs ../shared/data/colocation/a100_mps_pairs and calibration/a100_mps_kernels")
    table, pairs = convert(pairs_dir, kernels_dir)
    assert len(table.workloads) == 35 and len(pairs) == 126
    mps = dict(zip(table.workloads, table.column("mps_pct")))
    assert all(mps[p.workload1] + mps[p.workload2] == 100 for p in pairs)
    assert len({p.key for p in pairs}) == len(pairs)
