import pytest

from bless.hw.gpus import A100, H100, N_LEVELS, get_gpu


def test_a100_levels_are_exact_sixths():
    assert A100.level_sms() == tuple(6 * k for k in range(1, 19))


@pytest.mark.parametrize("gpu", [A100, H100])
@pytest.mark.parametrize("mechanism", ["mps", "green"])
def test_levels_are_granular_monotone_and_end_at_whole_gpu(gpu, mechanism):
    levels = gpu.level_sms(mechanism)
    granule = gpu.granularity[mechanism]
    assert len(levels) == N_LEVELS
    assert levels[-1] == gpu.sm_count
    assert all(b >= a for a, b in zip(levels, levels[1:]))
    assert all(n % granule == 0 for n in levels[:-1])
    assert all(abs(n - k * gpu.sm_count / 18) <= granule for k, n in enumerate(levels[:-1], 1))


def test_hopper_green_contexts_round_to_8_sms():
    assert H100.level_sms("green")[:3] == (8, 16, 24)


def test_unknown_gpu_and_mechanism_errors_name_the_choices():
    with pytest.raises(ValueError, match="known GPUs: a100, h100"):
        get_gpu("v100")
    with pytest.raises(ValueError, match="mechanism"):
        A100.round_sms(10, "mig")
    assert get_gpu("A100") is A100 and get_gpu("NVIDIA H100-SXM5-80GB") is H100
