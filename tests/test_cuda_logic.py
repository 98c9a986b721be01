"""Pure logic of the CUDA backend, on the CPU: rounding, group choice, packing, errors, plans, MPS paths."""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

from bless.backend.interface import BACKENDS, BackendError
from bless.build.plan import Arg, Buffer, PlanError, find_plan, load_plan
from bless.cuda import mps
from bless.cuda.contexts import choose_mechanism
from bless.cuda.driver import CudaError, Driver, error_name, explain
from bless.cuda.kernels import initial_contents, pack_args
from bless.cuda.memory import BUFFER_ALIGN, layout
from bless.cuda.timeline import estimate_start
from bless.hw.gpus import H100
from bless.hw.sm_sets import GreenHomes, select_groups
from bless.profiles.synthetic import synthetic_profile


# ------------------------------------------------------------------ green-context groups
def test_select_groups_rounds_to_nearest_group_with_ties_up():
    sizes = [8] * 16
    assert select_groups(sizes, 8, from_high=False) == (0,)
    assert select_groups(sizes, 11, from_high=False) == (0,)  # 1.375 groups -> 1
    assert select_groups(sizes, 12, from_high=False) == (0, 1)  # a tie goes up
    assert select_groups(sizes, 3, from_high=False) == (0,)  # at least one group
    assert select_groups(sizes, 500, from_high=False) == tuple(range(16))  # at most all


def test_select_groups_from_both_ends_are_disjoint_when_they_fit():
    sizes = [8] * 16
    for a in range(8, 129, 8):
        for b in range(8, 129 - a, 8):
            low = set(select_groups(sizes, a, from_high=False))
            high = set(select_groups(sizes, b, from_high=True))
            assert not low & high, (a, b)
            assert 8 * len(low) == a and 8 * len(high) == b


def test_select_groups_matches_gpu_rounding_on_h100():
    sizes = [8] * (H100.green_groupable_sms // 8)
    for level in range(1, 18):
        sms = H100.sms_for_level(level, "green")
        assert 8 * len(select_groups(sizes, sms, from_high=False)) == sms


def test_select_groups_uneven_sizes():
    assert select_groups([8, 16, 8], 20, from_high=False) == (0, 1)  # 24 is nearer than 8
    assert select_groups([8, 16, 8], 8, from_high=True) == (2,)


def test_select_groups_from_an_anchor_stay_contiguous_past_the_edge():
    sizes = [8] * 16
    assert select_groups(sizes, 24, anchor=5) == (5, 6, 7)
    assert select_groups(sizes, 24, from_high=True, anchor=5) == (3, 4, 5)
    assert select_groups(sizes, 32, anchor=14) == (12, 13, 14, 15)  # the edge first, then below the anchor
    assert select_groups(sizes, 32, from_high=True, anchor=1) == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="anchor"):
        select_groups(sizes, 8, anchor=16)


H100_SIZES = tuple(H100.green_group_sizes())  # 15 groups of 8 SMs and the 12-SM remainder


@pytest.mark.parametrize(
    "quota_sms",
    [(64, 68), (32, 36, 32, 32), (16, 28, 40, 48), (24, 20, 24, 24, 24, 16), (8, 20, 16, 16, 24, 16, 16, 16)],
    ids=["pair", "quarters", "uneven", "six", "eight"],
)
def test_apps_whose_quotas_fit_hold_disjoint_green_sets_at_their_quotas(quota_sms):
    """However many apps, each app's context at its quota lies on SMs no other app's does where the
    quotas fit the split's groups (here they fill an H100 exactly): a static split on green
    contexts is one, where taking every app's sets from the split's two ends put every second
    app on the first one's SMs."""
    homes = GreenHomes(H100_SIZES)
    sets = []
    for slot, sms in enumerate(quota_sms):
        homes.place(slot, sms, from_high=slot % 2 == 1)
        sets.append(homes.groups(slot, sms))
    assert [sum(H100_SIZES[i] for i in s) for s in sets] == list(quota_sms)
    assert sorted(i for s in sets for i in s) == list(range(len(H100_SIZES)))  # each group once
    for s in sets:
        assert list(s) == list(range(s[0], s[-1] + 1))  # contiguous


def test_two_apps_hold_the_two_ends_of_the_split_at_every_count():
    """Pairs keep the split's two ends (what the GPU measurements of pairs ran on): the first app's
    sets from the low groups, the second's from the high ones, at every SM count."""
    for quotas in ((66, 66), (44, 88), (120, 12)):
        homes = GreenHomes(H100_SIZES)
        homes.place("a", quotas[0], from_high=False)
        homes.place("b", quotas[1], from_high=True)
        for sms in range(8, 133, 4):
            assert homes.groups("a", sms) == select_groups(H100_SIZES, sms, from_high=False)
            assert homes.groups("b", sms) == select_groups(H100_SIZES, sms, from_high=True)


def test_a_released_home_is_free_again_and_an_app_that_cannot_fit_shares_the_fewest_sms():
    homes = GreenHomes((8,) * 8)
    homes.place("a", 32, from_high=False)
    homes.place("b", 16, from_high=False)
    assert homes.groups("b", 16) == (4, 5)
    homes.release("a")
    assert homes.place("c", 24, from_high=False) == 0
    assert homes.groups("c", 24) == (0, 1, 2)  # a's groups, free again
    assert homes.place("d", 40, from_high=True) == 16  # 3 groups free (6, 7 and 3): it shares the fewest
    assert set(homes.groups("d", 40)) & {4, 5} and len(homes.groups("d", 40)) == 5
    with pytest.raises(ValueError, match="no home"):
        homes.groups("e", 8)
    with pytest.raises(ValueError, match="already"):
        homes.place("b", 8, from_high=False)


# ------------------------------------------------------------------ mechanism choice
def test_auto_mechanism_prefers_green_on_new_drivers():
    assert choose_mechanism("auto", 12040, True) == "green"
    assert choose_mechanism("auto", 12030, True) == "mps"
    assert choose_mechanism("auto", 12080, False) == "mps"
    assert choose_mechanism("mps", 12080, True) == "mps"


def test_green_on_an_old_driver_says_what_to_do():
    with pytest.raises(BackendError, match=r"12\.4.*bless mps start"):
        choose_mechanism("green", 12020, True)
    with pytest.raises(ValueError, match="mechanism must be one of"):
        choose_mechanism("mig", 12080, True)


# ------------------------------------------------------------------ memory layout and buffers
def test_layout_aligns_every_buffer():
    offsets, total = layout([10, 0, 300, 256])
    assert offsets == [0, 256, 512, 1024]
    assert total == 1280
    assert all(o % BUFFER_ALIGN == 0 for o in offsets)


def test_initial_contents_by_role_and_dtype():
    rng = np.random.default_rng(0)
    param = initial_contents(Buffer(0, 4096, "float32", (1024,), "param"), rng)
    assert param.dtype == np.float32 and param.size == 1024
    assert np.all(np.abs(param) <= 0.05) and np.any(param != 0)
    assert initial_contents(Buffer(1, 4096, "float32", (1024,), "activation"), rng) is None
    assert initial_contents(Buffer(2, 64, "int64", (8,), "input"), rng) is None  # indices stay zero
    bf16 = initial_contents(Buffer(3, 64, "bfloat16", (32,), "param"), rng)
    back = (bf16.astype(np.uint32) << 16).view(np.float32)
    assert bf16.dtype == np.uint16 and np.all(np.abs(back) <= 0.0501)


# ------------------------------------------------------------------ kernel parameters
def test_pack_args_points_at_values_of_the_right_type():
    args = [
        Arg(buffer=7),
        Arg(scalar=-3, dtype="int32"),
        Arg(scalar=2.5, dtype="float32"),
        Arg(scalar=2**40, dtype="int64"),
    ]
    packed = pack_args(args, {7: 0x7F0000001000})
    ptrs = np.frombuffer(ctypes.string_at(packed.address, 8 * len(args)), dtype=np.uint64)
    assert int(np.frombuffer(ctypes.string_at(int(ptrs[0]), 8), np.uint64)[0]) == 0x7F0000001000
    assert int(np.frombuffer(ctypes.string_at(int(ptrs[1]), 4), np.int32)[0]) == -3
    assert float(np.frombuffer(ctypes.string_at(int(ptrs[2]), 4), np.float32)[0]) == 2.5
    assert int(np.frombuffer(ctypes.string_at(int(ptrs[3]), 8), np.int64)[0]) == 2**40
    assert pack_args([], {}).address == 0


# ------------------------------------------------------------------ errors
def test_error_messages_name_the_call_the_code_and_the_fix():
    text = explain("cuCtxCreate", 224)
    assert "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY (224)" in text and "bless mps start" in text
    assert "out of GPU memory" in explain("cuMemCreate", 2)
    assert "newer CUDA toolkit" in explain("cuLibraryLoadData", 222)
    assert error_name(600) == "CUDA_ERROR_NOT_READY"
    assert error_name(123456) == "CUresult 123456"
    err = CudaError("cuLaunchKernel(k)", 701)
    assert isinstance(err, BackendError) and err.code == 701 and "registers" in str(err)


class _Module:
    """Just enough of a bindings module for Driver's calling convention."""

    class CUresult(int):
        pass

    @staticmethod
    def cuGetErrorString(code):
        return 0, b"device says no"

    @staticmethod
    def none():
        return (0,)

    @staticmethod
    def one():
        return 0, 5

    @staticmethod
    def two():
        return 0, 5, 6

    @staticmethod
    def bad():
        return (2,)

    @staticmethod
    def query(done):
        return (0,) if done else (600,)


def test_driver_call_unpacks_and_raises():
    drv = Driver(_Module)
    assert drv.call("none") is None
    assert drv.call("one") == 5
    assert drv.call("two") == (5, 6)
    with pytest.raises(CudaError, match="bad failed with CUDA_ERROR_OUT_OF_MEMORY .2.: device says no"):
        drv.call("bad")
    assert drv.done("query", True) and not drv.done("query", False)


# ------------------------------------------------------------------ timeline logic
def test_estimated_start_is_the_latest_lower_bound():
    assert estimate_start(1.0, None, None) == 1.0
    assert estimate_start(1.0, 1.5, None) == 1.5
    assert estimate_start(1.0, 1.5, 2.0) == 2.0
    assert estimate_start(3.0, 1.5, 2.0) == 3.0


# ------------------------------------------------------------------ plans
def _plan_dict(**over):
    d = {
        "format": "bless-plan",
        "version": 1,
        "app": "tiny",
        "gpu": "h100",
        "arch": "sm_90",
        "batch": 1,
        "images": [{"id": 0, "file": "tiny.ptx", "kind": "ptx"}],
        "buffers": [{"id": 0, "bytes": 64, "dtype": "float32", "shape": [16], "role": "input"}],
        "launches": [
            {
                "kernel": "k",
                "image": 0,
                "grid": [1, 1, 1],
                "block": [32, 1, 1],
                "args": [{"buffer": 0}, {"scalar": 16, "dtype": "int32"}],
            }
        ],
    }
    d.update(over)
    return d


def test_load_plan_reads_the_spec_format(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps(_plan_dict()))
    plan = load_plan(tmp_path / "plan.json")
    assert plan.images[0].path == tmp_path / "tiny.ptx"
    assert plan.launches[0].args == (Arg(buffer=0), Arg(scalar=16, dtype="int32"))
    assert plan.launches[0].shared_mem_dynamic == 0 and plan.memory_bytes == 64


@pytest.mark.parametrize(
    "over, field",
    [
        ({"format": "other"}, "format"),
        ({"launches": [{"kernel": "k", "image": 3, "grid": [1, 1, 1], "block": [1, 1, 1]}]}, r"launches\[0\].image"),
        ({"launches": [{"kernel": "k", "image": 0, "grid": [0, 1, 1], "block": [1, 1, 1]}]}, r"launches\[0\].grid"),
        (
            {"launches": [{"kernel": "k", "image": 0, "grid": [1, 1, 1], "block": [1, 1, 1], "args": [{"buffer": 9}]}]},
            r"launches\[0\].args\[0\].buffer",
        ),
        (
            {
                "launches": [
                    {
                        "kernel": "k",
                        "image": 0,
                        "grid": [1, 1, 1],
                        "block": [1, 1, 1],
                        "args": [{"scalar": 1.5, "dtype": "int32"}],
                    }
                ]
            },
            r"args\[0\].scalar",
        ),
        ({"buffers": [{"id": 0, "bytes": 4, "dtype": "float8", "role": "input"}]}, r"buffers\[0\].dtype"),
        ({"buffers": [{"id": 0, "bytes": 4, "dtype": "float32", "role": "weights"}]}, r"buffers\[0\].role"),
    ],
)
def test_plan_errors_name_the_field(tmp_path, over, field):
    (tmp_path / "plan.json").write_text(json.dumps(_plan_dict(**over)))
    with pytest.raises(PlanError, match=field):
        load_plan(tmp_path / "plan.json")


def test_find_plan_uses_the_build_cache_and_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.setenv("BLESS_CACHE", str(tmp_path))
    profile = synthetic_profile("tiny", gpu="h100", n_kernels=2)
    with pytest.raises(BackendError, match=r"bless apps build tiny --gpu h100"):
        find_plan(profile, "h100")
    path = tmp_path / "builds" / "h100" / "tiny" / "plan.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    assert find_plan(profile, "h100") == path


# ------------------------------------------------------------------ registration and MPS paths
def test_cuda_backend_is_registered_and_imports_without_a_driver():
    from bless.cuda.backend import CudaBackend

    assert BACKENDS.get("cuda") is CudaBackend


def test_mps_paths_follow_xdg_state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    paths = mps.MpsPaths.default()
    assert paths.pipe == tmp_path / "bless" / "mps" / "pipe"
    env = paths.env()
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(paths.pipe) and env["CUDA_MPS_LOG_DIRECTORY"] == str(paths.log)


def test_mps_start_without_the_binary_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(mps.MpsError, match="nvidia-cuda-mps-control is not on PATH"):
        mps.start(mps.MpsPaths(tmp_path / "mps"))
    assert not mps.status(mps.MpsPaths(tmp_path / "mps")).running


def test_mps_client_joins_a_daemon_only_when_its_pipe_exists(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "")  # so that teardown restores the original state
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    paths = mps.MpsPaths(tmp_path)
    assert not mps.point_client_at_daemon(paths)
    paths.pipe.mkdir(parents=True)
    (paths.pipe / "control").touch()
    assert mps.point_client_at_daemon(paths)
    import os

    assert os.environ["CUDA_MPS_PIPE_DIRECTORY"] == str(paths.pipe)
