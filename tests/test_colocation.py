"""KACE at admission: the gate in `bless run` and in the server's admission."""

import numpy as np
import pytest

from bless.colocation.advisor import ColocationGate, feature_table, rank
from bless.colocation.kace import KaceModel, pair_matrix
from bless.colocation.kace_generate import generate, synthetic_apps
from bless.core.lifecycle import AppState
from bless.harness.config import ConfigError, config_from_dict
from bless.harness.run import run_config
from bless.serving.server.admission import AdmissionLimits, AppDemand, admit


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    apps = synthetic_apps(5, "a100")
    g = generate(apps, "a100", 0.03)
    model = KaceModel.fit(
        pair_matrix(g.features, [(p.workload1, p.workload2) for p in g.pairs]),
        np.array(
            [
                p.throughput1 / g.features.column("solo_throughput")[g.features.index(p.workload1)]
                + p.throughput2 / g.features.column("solo_throughput")[g.features.index(p.workload2)]
                for p in g.pairs
            ]
        ),
        g.features.columns,
    )
    path = model.save(tmp_path_factory.mktemp("kace") / "model.json")
    return apps, g, model, path


def test_admission_features_match_what_the_generator_measured(fitted):
    apps, g, _, _ = fitted
    table = feature_table([(p.app, p) for p in apps])
    for col in g.features.columns:
        np.testing.assert_allclose(table.column(col), g.features.column(col), rtol=1e-3, err_msg=col)


def test_rank_orders_candidates_by_predicted_sum(fitted):
    apps, _, model, _ = fitted
    ranked = rank(model, (apps[0].app, apps[0]), [(p.app, p) for p in apps[1:]])
    sums = [s for _, s in ranked]
    assert sums == sorted(sums, reverse=True) and {n for n, _ in ranked} == {p.app for p in apps[1:]}


def test_gate_warns_or_rejects_below_the_threshold(fitted):
    apps, _, _model, path = fitted
    others = [(p.app, p) for p in apps[1:3]]
    warn = ColocationGate.from_settings({"kace_model": str(path), "min_throughput_sum": 10})
    rejected, warnings = warn.judge("new", apps[0], others)
    assert not rejected and len(warnings) == 2 and "KACE predicts" in warnings[0]
    strict = ColocationGate.from_settings({"kace_model": str(path), "min_throughput_sum": 10, "action": "reject"})
    rejected, warnings = strict.judge("new", apps[0], others)
    assert len(rejected) == 2 and not warnings
    lenient = ColocationGate.from_settings({"kace_model": str(path), "min_throughput_sum": 0.01, "action": "reject"})
    assert lenient.judge("new", apps[0], others) == ([], [])


def test_gate_settings_errors_name_the_field(fitted, tmp_path):
    *_, path = fitted
    assert ColocationGate.from_settings({}) is None
    with pytest.raises(ValueError, match="admission.action"):
        ColocationGate.from_settings({"kace_model": str(path), "action": "maybe"})
    with pytest.raises(ValueError, match="admission.min_throughput_sum"):
        ColocationGate.from_settings({"kace_model": str(path), "min_throughput_sum": -1})
    with pytest.raises(ValueError, match="set admission.kace_model"):
        ColocationGate.from_settings({"action": "reject"})
    with pytest.raises(ValueError, match="no such model file"):
        ColocationGate.from_settings({"kace_model": str(tmp_path / "missing.json")})


def test_server_admission_consults_the_gate(fitted):
    apps, _, _, path = fitted
    states = [AppState(i, p.app, p, 0.3) for i, p in enumerate(apps[:3])]
    demands = [AppDemand.of(s) for s in states]
    strict = AdmissionLimits(
        colocation=ColocationGate.from_settings({"kace_model": str(path), "min_throughput_sum": 10, "action": "reject"})
    )
    answer = admit(demands[0], demands[1:], None, 50, strict)
    assert not answer.accepted and "KACE predicts" in answer.reason
    warn = AdmissionLimits(colocation=ColocationGate.from_settings({"kace_model": str(path), "min_throughput_sum": 10}))
    answer = admit(demands[0], demands[1:], None, 50, warn)
    assert answer.accepted and len(answer.warnings) == 2


def test_bless_run_consults_the_gate(fitted, tmp_path, monkeypatch):
    apps, _, _, path = fitted
    for p in apps[:2]:
        p.save(tmp_path / "a100" / f"{p.app}.json")
    monkeypatch.setenv("BLESS_PROFILE_PATH", str(tmp_path))
    raw = {
        "duration": 0.05,
        "warmup": 0.0,
        "apps": [{"app": apps[0].app, "quota": 0.5, "load": "C"}, {"app": apps[1].app, "quota": 0.5, "load": "C"}],
        "admission": {"kace_model": str(path), "min_throughput_sum": 10},
    }
    result = run_config(config_from_dict(raw))
    assert len(result.notes) == 1 and "admission warning" in result.notes[0]
    raw["admission"]["action"] = "reject"
    with pytest.raises(ConfigError, match=r"apps\[1\]: admission rejected"):
        run_config(config_from_dict(raw))
    raw["admission"] = {"kace": "x"}
    with pytest.raises(ConfigError, match="admission.kace: unknown key"):
        config_from_dict(raw)
