import json

import numpy as np
import pytest

from bless.profiles.format import ProfileError, load_profile, profile_from_dict
from bless.profiles.synthetic import synthetic_profile


@pytest.fixture
def good() -> dict:
    return synthetic_profile("p", n_kernels=5, seed=3, memcpy_first=True).to_dict()


def test_round_trip(tmp_path, good):
    p = profile_from_dict(good)
    path = p.save(tmp_path / "p.json")
    q = load_profile(path)
    assert q.n_kernels == 5 and q.kernels[0].kind == "memcpy"
    np.testing.assert_allclose(q.t, p.t, rtol=1e-6)
    np.testing.assert_allclose(q.tau, np.cumsum(q.t, axis=1))
    assert q.provenance.method == "derived"


def _set(d, path, value):
    keys = path.split("/")
    for k in keys[:-1]:
        d = d[int(k)] if isinstance(d, list) else d[k]
    last = keys[-1]
    if isinstance(d, list):
        d[int(last)] = value
    elif value is KeyError:
        del d[last]
    else:
        d[last] = value


@pytest.mark.parametrize(
    "path,value,message",
    [
        ("format", "other", "format"),
        ("version", 99, "version"),
        ("gpu", "v100", "gpu: unknown GPU"),
        ("kind", "serving", "kind"),
        ("batch", 0, "batch"),
        ("memory_bytes", -1, "memory_bytes"),
        ("level_sms/17", 100, "level_sms"),
        ("kernels", [], "kernels"),
        ("kernels/1/kind", "dma", r"kernels\[1\]\.kind"),
        ("kernels/2/grid", [1, 0, 1], r"kernels\[2\]\.grid"),
        ("kernels/2/max_sm_share", 1.5, r"kernels\[2\]\.max_sm_share"),
        ("kernels/3/dram_util", -0.1, r"kernels\[3\]\.dram_util"),
        ("kernels/3/name", KeyError, r"kernels\[3\]\.name"),
        ("t_us/4/2", -1.0, r"t_us\[4\]\[2\]"),
        ("t_us/4", [1.0], r"t_us\[4\]: expected 5 values"),
        ("tau_us/0/3", 1e9, r"tau_us\[0\]\[3\].*cumulative"),
        ("T_us/5", 0.001, r"T_us\[5\].*shorter"),
        ("provenance/method", "guessed", "provenance.method"),
    ],
)
def test_bad_files_name_the_field(good, path, value, message):
    _set(good, path, value)
    with pytest.raises(ProfileError, match=message):
        profile_from_dict(good)


def test_load_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match="bad.json: not valid JSON"):
        load_profile(bad)
    with pytest.raises(ProfileError, match="no such profile"):
        load_profile(tmp_path / "missing.json")
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(ProfileError, match="top level"):
        load_profile(bad)


def test_quota_latency_interpolates_between_levels():
    p = synthetic_profile("q", n_kernels=20, seed=4)
    assert p.latency_at_quota(1.0) == pytest.approx(p.T[-1])
    assert p.latency_at_quota(0.5) == pytest.approx(p.T[8])
    mid = p.latency_at_quota(0.52)
    assert p.T[9] <= mid <= p.T[8]
