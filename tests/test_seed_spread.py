"""experiments/seed_spread.py: an experiment's policies compared seed by seed, on a tiny sweep."""

from __future__ import annotations

import pytest
from scripts import markdown_rows, with_tiny_experiment


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    """seed_spread.py reading its experiments from a temporary folder that holds the tiny sweep."""
    return with_tiny_experiment("experiments/seed_spread.py", tmp_path_factory.mktemp("experiments"))


def test_seeds_read_as_ranges_and_lists(spread):
    assert spread.parse_seeds("0-3") == [0, 1, 2, 3]
    assert spread.parse_seeds("0-1,7") == [0, 1, 7]
    with pytest.raises(SystemExit, match="--seeds: 'x' is neither a seed nor a range"):
        spread.parse_seeds("x")


def test_the_policy_dimension_collapses_to_the_experiments_cells(spread):
    cells = spread.cells("tiny")
    assert len(cells) == 2 and all("policy" not in c for c in cells)


def test_each_seed_is_deterministic_and_the_mean_is_over_the_seeds(spread, capsys):
    argv = ["tiny", "--policies", "bless,unbound", "--seeds", "0-1", "--jobs", "1"]
    assert spread.main(argv) == 0
    first = capsys.readouterr().out
    assert spread.main(argv) == 0
    assert capsys.readouterr().out == first  # the same seeds, the same report
    table = markdown_rows(first)
    assert set(table) == {"seed", "0", "1", "**mean**"}
    per_seed = [[float(v) for v in table[s][:2]] for s in ("0", "1")]
    assert per_seed[0] != per_seed[1]  # the seed draws the arrivals and the noise
    means = [float(v) for v in table["**mean**"][:2]]
    assert means == pytest.approx([(a + b) / 2 for a, b in zip(*per_seed)], abs=1e-3)
    difference = float(table["0"][2].rstrip("%")) / 100  # bless over unbound, less 1, from unrounded means
    assert difference == pytest.approx(per_seed[0][0] / per_seed[0][1] - 1, abs=1e-4)
    assert "bless vs unbound: below it at " in first and " of 2 seeds" in first


def test_bad_arguments_name_the_fix(spread):
    with pytest.raises(SystemExit, match="no experiments/nope.yaml"):
        spread.main(["nope"])
    with pytest.raises(SystemExit, match="at least two policies"):
        spread.main(["tiny", "--policies", "bless"])
    with pytest.raises(
        SystemExit, match="--metric: 'p42' is not a number of a run's summary; use one of: .*mean_latency_ms"
    ):
        spread.main(["tiny", "--metric", "p42", "--seeds", "0"])


def test_another_metric_of_the_runs_summaries(spread, capsys):
    assert spread.main(["tiny", "--metric", "latency_deviation_ms", "--seeds", "0", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## tiny: latency_deviation_ms, the mean over its 2 cells, per seed")
    assert set(markdown_rows(out)) == {"seed", "0", "**mean**"}


def test_no_ratio_to_a_policy_whose_metric_is_zero(spread, capsys):
    # Deadline pacing streams its kernels: a BLESS run counts no squads.
    assert spread.main(["tiny", "--metric", "squads", "--policies", "iso,bless", "--seeds", "0", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert markdown_rows(out)["0"][2] == "-"
    assert "iso vs bless: no ratio (bless's squads is 0 at some seed)" in out


def test_the_worst_app_over_its_iso_target_is_the_largest_over_the_cells(spread, capsys):
    argv = ["tiny", "--metric", "worst_over_iso", "--policies", "bless,iso", "--seeds", "0", "--jobs", "1"]
    assert spread.main([*argv, "--cells", "mean"]) == 0
    mean = markdown_rows(capsys.readouterr().out)["0"][:2]
    assert spread.main([*argv, "--cells", "max"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## tiny: worst_over_iso, the largest of its 2 cells, per seed")
    worst = [float(v) for v in markdown_rows(out)["0"][:2]]
    assert all(w >= float(m) > 0 for w, m in zip(worst, mean))
    assert max(worst) > max(map(float, mean))  # the two cells differ, so their largest is above their mean
    assert "bless: above 1.01 at " in out and "iso: above 1.01 at " in out
