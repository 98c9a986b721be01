"""Per-GPU constants as data (bless/hw): every value has its provenance, and the code reads them there."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from bless.backend.interface import HostCosts
from bless.core.lifecycle import AppState
from bless.hw.costs import (
    SECTIONS,
    UNITS,
    GpuDataError,
    data_files,
    gpu_constants,
    load,
)
from bless.hw.gpus import GPUS, get_gpu
from bless.policies.gslice import GslicePolicy, GsliceThresholds
from bless.profiles.synthetic import synthetic_profile


def file_text(gpu: str) -> str:
    return data_files()[gpu].read_text()


def write(tmp_path, text: str):
    path = tmp_path / "x100.toml"
    path.write_text(text)
    return path


A100_LAUNCH = next(line for line in file_text("a100").splitlines() if line.startswith("launch = "))


# ------------------------------------------------------------------ the shipped files


def test_every_gpu_model_has_a_data_file_and_every_file_a_model():
    assert set(data_files()) == set(GPUS)


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_every_value_names_its_source_or_is_marked_an_assumption(gpu):
    raw = tomllib.loads(file_text(gpu))
    assert list(raw) == list(SECTIONS)
    for section, entries in raw.items():
        for key, entry in entries.items():
            given = [k for k in ("source", "assumption") if k in entry]
            assert len(given) == 1 and entry[given[0]].strip(), f"{gpu}: {section}.{key}"
    constants = gpu_constants(gpu)
    assert set(constants.sources) == {f"{s}.{k}" for s, entries in raw.items() for k in entries}
    assert all(v.provenance.startswith(("source: ", "assumption: ")) for v in constants.sources.values())


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_host_costs_for_gpu_are_the_files_host_section(gpu):
    raw = tomllib.loads(file_text(gpu))["host"]
    host = HostCosts.for_gpu(gpu)
    for field in dataclasses.fields(HostCosts):
        entry = raw[field.name]
        mul, div = UNITS[entry.get("unit", "1")]
        assert getattr(host, field.name) == entry["value"] * mul / div
    assert HostCosts.for_gpu(GPUS[gpu]) == host


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_context_bytes_per_mechanism_are_the_files_context_memory(gpu):
    raw = tomllib.loads(file_text(gpu))["context_memory"]
    spec = get_gpu(gpu)
    assert set(raw) == set(spec.granularity)  # one figure per SM restriction mechanism
    for mechanism, entry in raw.items():
        mul, div = UNITS[entry["unit"]]
        assert spec.context_bytes(mechanism) == entry["value"] * mul // div
    with pytest.raises(ValueError, match="use one of: green, mps"):
        spec.context_bytes("mig")


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_gslice_defaults_are_the_files_and_arguments_override_them(gpu):
    spec = get_gpu(gpu)
    apps = [AppState(0, "a", synthetic_profile("a", gpu=gpu, n_kernels=4, seed=1), 0.5)]
    policy = GslicePolicy()
    policy.setup(apps, spec)
    assert dataclasses.asdict(policy.thresholds) == dict(gpu_constants(gpu).gslice)
    tuned = GslicePolicy(period=0.05)
    tuned.setup(apps, spec)
    assert tuned.thresholds == dataclasses.replace(GsliceThresholds.for_gpu(spec), period=0.05)
    with pytest.raises(ValueError, match="busy_low < busy_high"):
        GslicePolicy(busy_low=0.95).setup(apps, spec)


def test_the_cuda_backend_measures_context_memory_and_that_overrides_the_file(tmp_path):
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed (pip install '.[cuda]')")
    from cuda_fake import FakeDevice, FakeDriver, timing_from, write_app

    from bless.cuda.backend import CudaBackend

    app = write_app(tmp_path / "a", synthetic_profile("a", gpu="h100", n_kernels=3, seed=1))
    device = FakeDevice(mps_running=True)
    timing_from(device, app)
    backend = CudaBackend("h100", driver_module=FakeDriver(device), mechanism="mps")
    try:
        assert backend.context_bytes("mps") == backend.gpu.context_bytes("mps")  # nothing measured yet
        backend.create_context(backend.deploy(app), 22)
        assert backend.context_bytes("mps") == device.context_cost != backend.gpu.context_bytes("mps")
        assert backend.context_bytes("green") == backend.gpu.context_bytes("green")  # not this backend's mechanism
    finally:
        backend.close()


# ------------------------------------------------------------------ the loader's checks


def test_a_value_with_neither_source_nor_assumption_is_refused_naming_file_and_key(tmp_path):
    bare = A100_LAUNCH.split(", assumption")[0] + " }"
    path = write(tmp_path, file_text("a100").replace(A100_LAUNCH, bare))
    with pytest.raises(GpuDataError, match=r"x100\.toml: host\.launch has neither 'source' nor 'assumption'"):
        load(path)


def test_a_value_with_both_or_a_bare_number_is_refused(tmp_path):
    both = A100_LAUNCH.replace(", assumption", ', source = "a measurement", assumption')
    with pytest.raises(GpuDataError, match="host.launch has both"):
        load(write(tmp_path, file_text("a100").replace(A100_LAUNCH, both)))
    with pytest.raises(GpuDataError, match="host.launch is a bare float"):
        load(write(tmp_path, file_text("a100").replace(A100_LAUNCH, "launch = 3e-6")))
    with pytest.raises(GpuDataError, match="unknown unit 'ms'"):
        load(write(tmp_path, file_text("a100").replace(A100_LAUNCH, A100_LAUNCH.replace('"us"', '"ms"'))))


def test_sections_must_be_exactly_the_known_ones(tmp_path):
    text = file_text("a100")
    with pytest.raises(GpuDataError, match=r"missing \[interference\]"):
        load(write(tmp_path, text[: text.index("[interference]")]))
    with pytest.raises(GpuDataError, match=r"unknown \[hots\]"):
        load(write(tmp_path, text + '\n[hots]\nx = { value = 1, assumption = "typo" }\n'))


def test_interference_takes_new_names_without_code_changes(tmp_path):
    text = file_text("a100") + 'beta = { value = 1.5, source = "a fit" }\n'
    constants = load(write(tmp_path, text))
    assert constants.interference["beta"] == 1.5
    assert constants.sources["interference.beta"].provenance == "source: a fit"


def test_a_section_that_does_not_match_its_type_is_refused_naming_the_file(tmp_path):
    renamed = A100_LAUNCH.replace("launch = ", "lunch = ", 1)
    constants = load(write(tmp_path, file_text("a100").replace(A100_LAUNCH, renamed)))
    with pytest.raises(GpuDataError, match=r"x100\.toml \[host\]: missing launch, unknown lunch"):
        constants.build("host", HostCosts)
    out_of_range = load(
        write(tmp_path, file_text("a100").replace("busy_low = { value = 0.6", "busy_low = { value = 0.95"))
    )
    with pytest.raises(GpuDataError, match=r"x100\.toml \[gslice\]: gslice needs 0 <= busy_low < busy_high"):
        out_of_range.build("gslice", GsliceThresholds)


def test_an_unknown_gpu_says_which_files_exist():
    with pytest.raises(GpuDataError, match="no GPU data file for 'v100'.*known: a100, h100"):
        gpu_constants("v100")


@pytest.fixture
def gpu_data_path(tmp_path, monkeypatch):
    """A directory on ``$BLESS_GPU_DATA_PATH``, with the per-process cache emptied around the test."""
    monkeypatch.setenv("BLESS_GPU_DATA_PATH", str(tmp_path))
    gpu_constants.cache_clear()
    yield tmp_path
    monkeypatch.delenv("BLESS_GPU_DATA_PATH")
    gpu_constants.cache_clear()


def test_a_data_file_on_the_search_path_stands_in_for_the_shipped_one(gpu_data_path):
    shipped_h100 = HostCosts.for_gpu("h100")
    text = file_text("a100").replace(A100_LAUNCH, 'launch = { value = 0, unit = "us", assumption = "what if" }')
    (gpu_data_path / "a100.toml").write_text(text)
    assert HostCosts.for_gpu("a100").launch == 0.0
    assert data_files()["a100"] == gpu_data_path / "a100.toml"
    assert HostCosts.for_gpu("h100") == shipped_h100  # the others still the shipped files


def test_a_bad_file_on_the_search_path_is_refused_naming_it(gpu_data_path):
    (gpu_data_path / "a100.toml").write_text(file_text("a100").replace("[tally]", "[talley]"))
    with pytest.raises(GpuDataError, match=rf"{gpu_data_path}/a100\.toml: sections must be exactly"):
        gpu_constants("a100")
