"""experiments/paper.py: the mean latency / lower bound tables, on a tiny sweep of its own."""

from __future__ import annotations

import pytest
from scripts import load_script, markdown_rows, with_tiny_experiment

from bless.harness.bound import bound_for_config
from bless.harness.config import config_from_dict
from bless.harness.sweep import load_sweep, run_sweep


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    """paper.py with its sweep files and results in a temporary folder that holds the tiny sweep, run."""
    module = with_tiny_experiment("experiments/paper.py", tmp_path_factory.mktemp("experiments"))
    module.RESULTS = module.HERE / "results"
    run_sweep(load_sweep(module.HERE / "tiny.yaml"), module.RESULTS / "tiny", jobs=1, plot=False)
    return module


def test_bound_table_has_a_row_per_cell_and_a_column_per_policy(paper):
    rows = paper.rows_of("tiny")
    table = markdown_rows(paper.bound_section("tiny", rows, lambda r: r["apps.1.load"]))
    assert table[""] == ["BLESS", "UNBOUND", "ISO"]
    assert list(table)[1:] == ["poisson:20", "B", "**mean**"]
    assert all(float(c) > 0 for row in list(table.values())[1:] for c in row)


def test_ratio_is_mean_latency_over_the_bless_configs_bound(paper):
    rows = paper.rows_of("tiny")
    paper.attach_bound_ratios("tiny", rows)
    bless_bounds = {}
    for r, (values, raw) in zip(rows, load_sweep(paper.HERE / "tiny.yaml").runs(), strict=True):
        bound_ms = bound_for_config(config_from_dict({**raw, "policy": "bless"})).mean * 1e3
        assert r["bound_ratio"] == pytest.approx(r["mean_latency_ms"] / bound_ms)
        if values["policy"] == "bless":
            bless_bounds[r["apps.1.load"]] = bound_ms
        elif values["policy"] == "iso":  # ISO is held to the bound of its cell's BLESS run
            assert r["mean_latency_ms"] / r["bound_ratio"] == pytest.approx(bless_bounds[r["apps.1.load"]])
        if values["policy"] != "iso":  # measured with the bound's own arrivals and no noise
            assert r["bound_ratio"] >= 1.0


def test_headline_names_each_experiment_and_blesss_distance_to_the_bound(paper):
    text = "\n".join(paper.bound_headline(["tiny"]))
    table = markdown_rows(text)
    assert table["mean latency / lower bound (bless bound)"] == ["BLESS", "UNBOUND", "ISO"]
    assert [c.split(" ")[1] for c in table["**mean over the experiments**"]] == ["(1)"] * 3
    above = 100 * (paper.bound_means("tiny")["BLESS"] - 1)
    assert f"BLESS's mean latency is {above:.1f} % above the lower bound" in text


def test_neighbour_load_names_rates_in_multiples_of_the_quota_throughput(paper):
    assert paper.neighbour_load('{"rate":100,"type":"poisson"}', 50.0) == "Poisson 2x (100/s)"
    assert paper.neighbour_load('{"interval":0,"type":"closed"}', 50.0) == "closed loop, think 0 x solo"
    mmpp = '{"duration":4,"dwell":[0.4,0.1],"rate":50,"rates":[0,1],"trace":"mmpp","type":"trace"}'
    assert paper.neighbour_load(mmpp, 50.0) == "MMPP bursts, mean 1x, peaks 5x"


def test_the_readmes_headline_is_the_one_generated_from_the_stored_results():
    """``paper.py headline`` writes both; a figure edited in one and not the other fails here."""
    module = load_script("experiments/paper.py")
    readme = (module.HERE / "README.md").read_text()
    assert module.readme_headline(readme) == (module.RESULTS / "headline.md").read_text().strip("\n")


def test_the_readmes_headline_is_replaced_in_place(paper, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n{paper.HEADLINE_BEGIN}\nold\n{paper.HEADLINE_END}\n\nafter\n")
    paper.write_readme_headline(readme, "| new |")
    assert readme.read_text() == f"# title\n\n{paper.HEADLINE_BEGIN}\n| new |\n{paper.HEADLINE_END}\n\nafter\n"
    readme.write_text(f"{paper.HEADLINE_BEGIN}\n\nold, a blank line around it\n\n{paper.HEADLINE_END}\n")
    paper.write_readme_headline(readme, "| new |")
    assert readme.read_text() == f"{paper.HEADLINE_BEGIN}\n| new |\n{paper.HEADLINE_END}\n"
    with pytest.raises(ValueError, match="headline markers"):
        paper.readme_headline("no markers")
