"""Trace loads: public formats read, windows, compression, scaling, seeded draws, clear errors."""

import io
import tarfile

import numpy as np
import pytest

from bless.harness.loads import Arrivals, parse_load
from bless.harness.loads.traces import (
    CountTrace,
    cut_gaps,
    read_azure2019,
    read_azure2021,
    read_azure_llm,
    read_trace,
    read_twitter,
    select,
    trace_load,
)
from bless.shared_data import MissingDataError, shared_data_dir


def times_of(load, solo=0.01, seed=0):
    load.bind(solo, np.random.default_rng(seed))
    return np.array(load._sorted)


def write_twitter(tmp_path, counts):
    path = tmp_path / "rps.txt"
    path.write_text("\n".join(str(c) for c in counts))
    return path


def test_readers_take_the_public_formats(tmp_path):
    az21 = tmp_path / "az21.csv"
    az21.write_text("app,func,end_timestamp,duration\na,f1,1.5,0.5\na,f1,2.2,0.1\nb,f2,3.9,0.4\n")
    t = read_azure2021(az21, 1.0)
    assert t.series["f1"].tolist() == [1, 1, 0] and t.series["f2"].tolist() == [0, 0, 1]
    az19 = tmp_path / "az19.csv"
    az19.write_text("HashOwner,HashApp,HashFunction,Trigger,480,481,482\no,a,f,http,3,0,7\n")
    t = read_azure2019(az19)
    assert t.bucket == 60.0 and t.series["f"].tolist() == [3, 0, 7]
    raw = b"5 6\n7  0 1"
    tbz = tmp_path / "workload.tbz2"
    with tarfile.open(tbz, "w:bz2") as tar:
        info = tarfile.TarInfo("workload.txt")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    assert read_twitter(tbz).series["twitter"].tolist() == [5, 6, 7, 0, 1]
    assert read_twitter(write_twitter(tmp_path, [5, 6])).series["twitter"].tolist() == [5, 6]
    llm = tmp_path / "llm.csv"
    llm.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"
        "2023-11-16 18:17:04.0319600,3180,8\n2023-11-16 18:17:06.5000000,10,1\n"
    )
    assert read_azure_llm(llm).series["requests"].tolist() == [2, 0, 1]


def test_window_rank_and_gaps():
    trace = CountTrace(1.0, {"aaa": np.array([1, 1, 1, 9, 9, 9.0]), "bbb": np.array([5, 5, 5, 0, 0, 0.0])})
    counts, _ = select(trace, 0, 0, 3)
    assert counts.tolist() == [5, 5, 5]  # the busiest function in that window
    counts, _ = select(trace, 0, 3, None)
    assert counts.tolist() == [9, 9, 9]
    assert select(trace, "all", 0, 2)[0].tolist() == [6, 6]
    assert select(trace, "bb", 0, 1)[0].tolist() == [5]
    with pytest.raises(ValueError, match="rank 5"):
        select(trace, 5, 0, None)
    with pytest.raises(ValueError, match="outside"):
        select(trace, 0, 100, None)
    assert cut_gaps(np.array([3, 0, 0, 0, 4, 0, 2.0]), 1.0, 2.0).tolist() == [3, 4, 0, 2]


def test_deterministic_for_a_seed_and_scaled_to_the_target_rate(tmp_path):
    path = write_twitter(tmp_path, np.random.default_rng(1).integers(10, 90, size=600))
    spec = {"type": "trace", "path": str(path), "format": "twitter", "duration": 5.0, "rate": 400.0}
    a, b, c = times_of(parse_load(spec), seed=3), times_of(parse_load(spec), seed=3), times_of(parse_load(spec), seed=4)
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    assert isinstance(parse_load(spec), Arrivals)
    assert len(a) == pytest.approx(2000, abs=4 * np.sqrt(2000))  # Poisson: within 4 sigma
    assert a.min() >= 0 and a.max() < 5.0
    # load: mean rate = load / solo latency
    rel = times_of(parse_load({**spec, "rate": None, "load": 0.5}), solo=0.004)
    assert len(rel) == pytest.approx(0.5 / 0.004 * 5, abs=4 * np.sqrt(625))
    # a fixed seed makes the draw independent of the run's seed
    fixed = {**spec, "seed": 7}
    assert times_of(parse_load(fixed), seed=1).tolist() == times_of(parse_load(fixed), seed=2).tolist()


def test_trace_shape_survives_compression(tmp_path):
    counts = [0] * 50 + [100] * 50  # silence, then a burst
    spec = {
        "type": "trace",
        "path": str(write_twitter(tmp_path, counts)),
        "format": "twitter",
        "drop_gaps": None,
        "speedup": 20.0,
    }
    t = times_of(parse_load(spec))
    assert t.min() >= 2.5 and t.max() < 5.0  # 100 trace seconds in 5 run seconds; the burst in the second half
    assert len(t) == pytest.approx(5000, abs=300)  # no rate target: the trace's own rate, compressed 20x


def test_mmpp_is_bursty_with_the_target_mean():
    load = trace_load("mmpp", duration=20.0, rate=200.0, rates=[0.2, 5.0], dwell=[0.5, 0.1])
    t = times_of(load, seed=5)
    assert len(t) / 20.0 == pytest.approx(200, rel=0.2)
    per_bin = np.histogram(t, bins=200, range=(0, 20))[0]
    assert per_bin.var() / per_bin.mean() > 3  # over-dispersed: a Poisson process has 1


def test_bad_parameters_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="bogus"):
        parse_load({"type": "trace", "trace": "twitter", "bogus": 1})
    with pytest.raises(ValueError, match="rate.*load"):
        trace_load("twitter", rate=1.0, load=0.5)
    with pytest.raises(ValueError, match="unknown trace"):
        trace_load("nope")
    with pytest.raises(ValueError, match="format"):
        trace_load(path=str(write_twitter(tmp_path, [1])), format="csv")
    with pytest.raises(ValueError, match="duration"):
        trace_load("mmpp", rate=1.0)


def test_missing_file_names_the_public_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("BLESS_SHARED_DATA", str(tmp_path))
    with pytest.raises(MissingDataError, match="Twitter Stream Grab.*BLESS_SHARED_DATA"):
        trace_load("twitter", duration=1.0, rate=10.0)
    with pytest.raises(MissingDataError, match="Azure Functions Invocation Trace 2021"):
        trace_load("azure2021", duration=1.0, rate=10.0)


def real(name):
    try:
        return read_trace(name)
    except MissingDataError as e:
        pytest.skip(f"shared trace data not on this machine ({shared_data_dir()}): {e}")


def test_real_traces_read_in_place():
    tw = real("twitter_day1").series["twitter"]
    assert len(tw) == 86400 and tw[:3].tolist() == [52, 55, 48]
    az = real("azure2021")
    assert len(az.series) == 49 and sum(s.sum() for s in az.series.values()) == 998
    assert len(real("azure2019").series) == 500
    assert sum(real("azure_llm_code").series["requests"]) == 8819
    load = trace_load("azure2021", function=0, duration=4.0, load=0.25)
    assert "CC BY 4.0" in load.describe()
