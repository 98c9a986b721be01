"""The shipped A100 ground-truth profiles and the SM scaling model they stand on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bless.backend import HostCosts
from bless.gpu import A100
from bless.groundtruth.names import short_name
from bless.groundtruth.ops import align, operators
from bless.profile import load_profile
from bless.scaling import KernelTraits, fit_curve, predict

PROFILES = Path(__file__).resolve().parent.parent / "profiles" / "a100"
APPS = ("vgg11", "resnet50", "resnet101", "nasnet", "bert")
SHIPPED = APPS + tuple(f"{a}_train" for a in APPS)
PAPER_MS = {"vgg11": 10.2, "resnet50": 8.7, "resnet101": 17.2, "nasnet": 32.7, "bert": 12.8}


def _shared_data_or_skip():
    from bless.data import shared_data_dir

    if not (shared_data_dir() / "calibration" / "a100_mps_kernels").is_dir():
        pytest.skip(f"shared calibration data not found under {shared_data_dir()} (set BLESS_SHARED_DATA)")


@pytest.fixture(scope="module")
def profiles():
    return {name: load_profile(PROFILES / f"{name}.json") for name in SHIPPED}


def test_ten_profiles_load_with_18_levels(profiles):
    for name, p in profiles.items():
        assert p.level_sms == A100.level_sms(), name
        assert p.t.shape == (18, p.n_kernels) and p.T.shape == (18,)
        assert p.kind == ("training" if name.endswith("_train") else "inference")
        assert p.kernels[0].kind == p.kernels[-1].kind == "memcpy", "input copy first, output copy last"
        assert p.provenance.method == "derived" and p.provenance.source
        assert len(p.provenance.details["kernel_sources"]) == p.n_kernels


@pytest.mark.parametrize("app", APPS)
def test_full_gpu_latency_within_15_percent_of_the_paper(profiles, app):
    t100_ms = profiles[app].T[-1] * 1e3
    assert abs(t100_ms / PAPER_MS[app] - 1) < 0.15, f"{app}: T[100%] {t100_ms:.2f} ms vs paper {PAPER_MS[app]} ms"


def test_curves_never_get_faster_with_fewer_sms(profiles):
    for name, p in profiles.items():
        assert np.all(np.diff(p.t, axis=0) <= 1e-12), name
        assert np.all(np.diff(p.T) <= 1e-12), name


def test_max_sm_share_agrees_with_the_curve(profiles):
    sms = np.array(A100.level_sms())
    for name, p in profiles.items():
        for k, desc in enumerate(p.kernels):
            flat = sms >= desc.max_sm_share * A100.sm_count - 1e-9
            assert np.allclose(p.t[flat, k], p.t[-1, k], rtol=1e-6, atol=1e-12), (name, k, desc.name)


def test_t_is_the_kernel_sum_plus_one_launch(profiles):
    # The launch the simulator charges (bless/gpudata/a100.toml): a lone request's T there.
    launch = HostCosts.for_gpu(A100).launch
    for name, p in profiles.items():
        np.testing.assert_allclose(p.T, p.t.sum(axis=1) + launch, rtol=1e-6, err_msg=name)


# ------------------------------------------------------------------ the model, without data
def test_predict_is_the_reference_at_the_reference_and_grows_as_sms_shrink():
    traits = KernelTraits(blocks=784, dram_util=0.2, conv_family=True)
    assert predict(100.0, 108, traits) == pytest.approx(100.0)
    times = [predict(100.0, n, traits) for n in (108, 88, 66, 44, 22, 6)]
    assert all(a <= b for a, b in zip(times, times[1:]))
    assert predict(4.0, 22, KernelTraits(blocks=4)) == pytest.approx(4.0), "a 4-block kernel ignores SMs above 4"


def test_memory_bound_kernels_stop_gaining_at_about_half_the_gpu():
    mem = KernelTraits(blocks=100_000, dram_util=0.95)
    assert predict(200.0, 60, mem) == pytest.approx(200.0, rel=0.02)
    assert predict(200.0, 22, mem) > 400.0


def test_fit_curve_keeps_measured_levels_and_is_flat_from_max_share():
    points = {22: 480.0, 44: 250.0, 54: 201.0, 66: 170.0, 88: 120.0, 108: 118.0}
    curve = fit_curve(A100.level_sms(), points, KernelTraits(blocks=392, conv_family=True))
    sms = list(A100.level_sms())
    assert curve.t[sms.index(54)] == pytest.approx(201.0) and curve.t[sms.index(66)] == pytest.approx(170.0)
    assert np.all(np.diff(curve.t) <= 0)
    assert curve.max_sm_share == pytest.approx(90 / 108), "88 SMs are within 3 %: the first level there is 90"
    assert np.all(curve.t[np.array(sms) >= 90] == curve.t[-1])


def test_fit_curve_pools_noisy_points_and_caps_at_the_block_count():
    curve = fit_curve(A100.level_sms(), {54: 10.0, 66: 11.0, 108: 10.0}, KernelTraits(blocks=30))
    assert np.all(np.diff(curve.t) <= 0)
    assert curve.max_sm_share == pytest.approx(30 / 108)


def test_short_names_stay_recognisable():
    assert short_name("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(T1::Params)") == \
        "cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4"
    assert short_name("void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::"
                      "launch_clamp_scalar(at::TensorIteratorBase &)::[lambda] , at::detail::Array<char *, "
                      "(int)2>>(int, T2, T3)") == "vectorized_elementwise_kernel<launch_clamp_scalar>"


def test_operator_alignment_lumps_differing_conv_algorithms():
    ref = ["relu", "cutlass_gemm", "bn_fw_x", "relu"]
    other = ["relu", "nchwToNhwcKernel", "sm80_xmma_fprop", "splitKreduce_kernel", "bn_fw_x", "relu"]
    groups = align(operators(ref), operators(other))
    assert groups == [([0], [0]), ([1], [1, 2, 3]), ([2], [4]), ([3], [5])]


# ------------------------------------------------------------------ against the measurements
def test_scaling_model_whole_pass_error_under_10_percent_on_the_measurements():
    _shared_data_or_skip()
    from bless.groundtruth import calibrate
    from bless.scaling import FITTED

    passes = calibrate.fit_passes()
    errors = calibrate.whole_model_errors(passes, FITTED, calibrate.loo_twin_ratios(passes, calibrate.FIT_MODELS))
    worst = max(errors, key=lambda e: abs(e.error))
    assert abs(worst.error) < 0.10, f"{worst.model} batch {worst.batch} at {worst.sms} SMs: {worst.error:+.1%}"


def test_shipped_resnet50_is_what_the_builder_makes_today():
    _shared_data_or_skip()
    from bless.groundtruth import apps

    built, _ = apps.build_inference("resnet50")
    shipped = json.loads((PROFILES / "resnet50.json").read_text())
    assert built.to_dict() == shipped, "profiles/a100 is stale: run tools/build_a100_profiles.py"
