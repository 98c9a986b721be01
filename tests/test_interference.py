"""Co-location interference: the model's properties and its fit to the real A100 MPS pairs."""

from __future__ import annotations

import statistics

import pytest

from bless.backend.interface import HostCosts
from bless.hw.costs import gpu_constants
from bless.hw.gpus import get_gpu
from bless.hw.interference import InterferenceModel
from bless.profiles import features
from bless.profiles.synthetic import synthetic_profile
from bless.shared_data import shared_data_dir
from bless.sim import corun
from bless.sim.backend import SimBackend

PAIRS_DIR = shared_data_dir() / "colocation" / "a100_mps_pairs"
needs_pairs = pytest.mark.skipif(
    not (PAIRS_DIR / "corun_resnet50.csv").exists(), reason="needs ../shared/data/colocation/a100_mps_pairs"
)
NO_HOST = HostCosts(launch=0.0, sync=0.0, context_switch=0.0, event=0.0)


def _corun_slowdown(victim_sms: int, corunner_dram: float) -> float:
    """Victim (low DRAM) at ``victim_sms`` beside a looping co-runner on the rest, over alone."""
    victim = synthetic_profile("v", n_kernels=40, dram_util=0.1, seed=3)
    other = synthetic_profile("c", n_kernels=40, dram_util=corunner_dram, seed=4)

    def latency(with_corunner: bool) -> float:
        be = SimBackend("a100", host=NO_HOST)
        hv = be.deploy(victim)
        sv = be.create_stream(be.create_context(hv, victim_sms))
        if with_corunner:
            hc = be.deploy(other)
            sc = be.create_stream(be.create_context(hc, 108 - victim_sms))
            for _ in range(20):  # the co-runner keeps running past the victim's end
                for i in range(other.n_kernels):
                    be.launch(sc, hc, i)
        runs = [be.launch(sv, hv, i) for i in range(victim.n_kernels)]
        be.synchronize()
        return runs[-1].end - runs[0].start

    return latency(True) / latency(False)


def test_the_interference_constant_comes_from_the_gpu_data_with_its_source():
    sourced = gpu_constants("a100").sources["interference.bandwidth"]
    assert sourced.source and "a100_mps_pairs" in sourced.source
    assert InterferenceModel.for_gpu("a100").bandwidth == sourced.value > 0


def test_fewer_sms_beside_a_bigger_corunner_suffer_more():
    # The measured asymmetry: the co-runner's demand grows with its SMs, the victim's
    # sensitivity does not shrink with its own.
    assert _corun_slowdown(22, 0.5) > _corun_slowdown(88, 0.5) > 1.0


def test_a_more_memory_intensive_corunner_slows_more():
    assert _corun_slowdown(54, 0.05) < _corun_slowdown(54, 0.4) < _corun_slowdown(54, 0.8)


def test_pairs_files_missing_a_column_are_refused_by_name(tmp_path):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("model,batch,sm_pct,corunner,latency_s\nresnet50,1,20,vgg19,0.01\n")
    solo = tmp_path / "solo.csv"
    solo.write_text("model,batch,sm_pct,latency_s\nresnet50,1,20,0.005\n")
    with pytest.raises(ValueError, match="corunner_batch"):
        corun.load_pairs(pairs, solo)


@needs_pairs
def test_host_bound_rows_are_told_apart_by_the_lightest_corunners():
    data = corun.load_pairs(PAIRS_DIR / "corun_resnet50.csv", PAIRS_DIR / "solo.csv")
    excluded = {(e.row.batch, e.row.sm_pct) for e in data.excluded}
    kept = {(r.batch, r.sm_pct) for r in data.rows}
    assert (1, 20) in excluded and (2, 80) in excluded  # flat solo latency: the harness bounds them
    assert {(32, 20), (64, 80), (16, 50)} <= kept
    assert not excluded & kept  # a point is in or out as a whole
    assert all("host-bound" in e.reason for e in data.excluded)


@needs_pairs
def test_replayed_pairs_reproduce_the_measured_slowdowns_and_their_asymmetry():
    data = corun.load_pairs(PAIRS_DIR / "corun_resnet50.csv", PAIRS_DIR / "solo.csv")
    rows = [r for r in data.rows if r.batch == 32 and r.sm_pct in (20, 80) and r.corunner_batch in (1, 16, 64)]
    assert len(rows) == 30
    results = corun.replay_rows(rows)
    overall = corun.summarize("all", results)
    assert overall.mean_abs_error < 0.03
    assert 0.8 < overall.excess_reproduced < 1.25
    by_split = {p: statistics.fmean(r.replay.slowdown for r in results if r.row.sm_pct == p) for p in (20, 80)}
    assert by_split[20] - 1 > 1.5 * (by_split[80] - 1)  # fewer SMs, more slowdown, as measured


def test_the_simulated_gpu_slows_co_running_kernels_as_the_reference_term_says():
    # One kernel of each app, side by side on 54 SMs each from the same instant; the second is
    # 50x longer, so the first runs its whole life beside it at fixed demands.
    model = InterferenceModel.for_gpu("a100")
    short = synthetic_profile("short", n_kernels=1, mean_us=100.0, dram_util=0.3, seed=5)
    long = synthetic_profile("long", n_kernels=1, mean_us=5000.0, dram_util=0.6, seed=6)
    gpu = get_gpu("a100")

    def alone_and_demand(profile):
        solo = features.solo_curves(profile, gpu)
        seconds = float(solo[54, 0])
        return seconds, float(features.dram_seconds(profile, solo[-1])[0]) / seconds

    t_short, u_short = alone_and_demand(short)
    t_long, u_long = alone_and_demand(long)
    assert t_long > 10 * t_short and u_short > 0.05 and u_long > 0.1
    be = SimBackend("a100", host=NO_HOST, interference=model)
    streams = []
    for profile in (long, short):
        handle = be.deploy(profile)
        streams.append((be.create_stream(be.create_context(handle, 54)), handle))
    be.launch(*streams[0], 0)
    run = be.launch(*streams[1], 0)
    be.synchronize()
    expected = t_short * model.stretch(u_short, u_short + u_long)
    assert expected > 1.05 * t_short  # the neighbour's traffic does slow it
    assert run.end - run.start == pytest.approx(expected, rel=1e-9)
    assert model.stretch(u_short, u_short) == 1.0  # alone: exactly the profile


def test_the_h100_coefficient_fits_the_h200_runs_where_apps_share_only_the_memory_system():
    """The simulator against the GPU on the static splits and GSLICE runs of the H200 sessions
    (``tools/fit_interference.py``), NASNet's cells aside (there the GPU slows its neighbour by
    something other than DRAM bandwidth): each app's mean over ISO within 0.04 of the GPU's, 0.02
    on average, and the stored coefficient no worse than half or twice it."""
    from scripts import load_script

    fit = load_script("tools/fit_interference.py")
    cells = [
        (raw, gpu)
        for session in fit.SESSIONS
        for raw, gpu in fit.cells(session)
        if not any("nasnet" in app["app"] for app in raw["apps"])
    ]
    assert len(cells) >= 15

    def errors(bandwidth: float) -> list[float]:
        return [abs(s - g) for raw, gpu in cells for s, g in zip(fit.simulate((bandwidth, raw)), gpu)]

    stored = InterferenceModel.for_gpu("h100").bandwidth
    at_stored = errors(stored)
    assert max(at_stored) < 0.04 and statistics.mean(at_stored) < 0.02, at_stored
    for other in (stored / 2, stored * 2):
        assert statistics.mean(at_stored) <= statistics.mean(errors(other))
    assert InterferenceModel.for_gpu("h100").bandwidth == stored  # the fit's runs leave the constant as it was
