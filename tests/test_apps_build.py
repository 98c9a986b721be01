"""Building apps into PTX and launch plans (bless.build.compiler, bless apps), end to end on a tiny user model."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from bless.build.compiler.builder import ptx_static_shared
from bless.build.compiler.ptxas import parse_verbose
from bless.build.plan import load_plan

TINY_APP = textwrap.dedent(
    """
    import torch
    from torch import nn
    from bless.build.zoo import App

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            return torch.softmax(self.fc(torch.relu(self.conv(x)).flatten(1)), -1)

    APPS = [App(name="tiny", batch=2, model=Tiny, inputs=lambda b: (torch.randn(b, 3, 8, 8),))]
    """
)


@pytest.fixture(scope="module")
def tiny_app(tmp_path_factory) -> Path:
    """The user's model file; builds go to a private cache shared by this module's tests (one compile)."""
    pytest.importorskip("torch")
    pytest.importorskip("tvm")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc (CUDA toolkit) is not on PATH: it compiles TVM's CUDA source to PTX")
    root = tmp_path_factory.mktemp("apps")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLESS_CACHE", str(root / "cache"))
        path = root / "tiny_model.py"
        path.write_text(TINY_APP)
        yield path


@pytest.fixture(scope="module")
def tiny_build(tiny_app):
    from bless.build.compiler import build_app
    from bless.build.zoo import find

    (app,) = find(str(tiny_app))
    return app, build_app(app, "h100")


def test_tiny_model_builds_to_a_plan_with_launch_parameters(tiny_build):
    _app, result = tiny_build
    plan = result.plan
    assert (plan.app, plan.gpu, plan.arch, plan.batch) == ("tiny", "h100", "sm_90", 2)
    assert plan.path.parent.parts[-3:] == ("builds", "h100", "tiny")
    groups = [launch.kernel for launch in plan.launches]
    # launch order follows the model: the convolution first, the softmax last
    assert groups[0].startswith("fused_conv2d") and groups[-1].startswith("softmax")
    for launch in plan.launches:
        assert all(d >= 1 for d in (*launch.grid, *launch.block))
        assert launch.block[0] * launch.block[1] * launch.block[2] <= 1024
        assert launch.shared_mem_dynamic >= 0 and launch.shared_mem_static >= 0
        assert launch.args and all(a.buffer is not None or a.scalar is not None for a in launch.args)
        assert launch.dram_bytes > 0
    assert plan.launches[0].flops >= 2 * 2 * 8 * 8 * 8 * 27  # the convolution's multiply-adds
    assert any(launch.shared_mem_static > 0 for launch in plan.launches)  # tiled matmul/conv stage in shared memory
    roles = {b.role for b in plan.buffers}
    assert {"input", "param", "output"} <= roles


def test_every_kernel_is_in_the_ptx_with_registers_when_ptxas_exists(tiny_build):
    _app, result = tiny_build
    plan = result.plan
    (image,) = plan.images
    ptx = image.path.read_text()
    assert ".target sm_90" in ptx
    for launch in plan.launches:
        assert f".entry {launch.kernel}(" in ptx
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas is not on PATH: registers are recorded as null")
    assert all(launch.registers and launch.registers > 0 for launch in plan.launches)


def test_plan_round_trips_and_the_cache_is_reused(tiny_build):
    from bless.build.compiler import build_app

    app, result = tiny_build
    again = load_plan(result.plan.path)
    assert again.launches == result.plan.launches and again.buffers == result.plan.buffers
    hit = build_app(app, "h100")
    assert hit.cached and hit.seconds < 1.0
    assert hit.plan.launches == result.plan.launches


def test_a100_build_targets_sm_80(tiny_app, tmp_path):
    from bless.build.compiler import build_app
    from bless.build.zoo import find

    (app,) = find(str(tiny_app))
    result = build_app(app, "a100", out=tmp_path / "out")
    assert result.plan.arch == "sm_80" and result.plan.path == tmp_path / "out" / "plan.json"
    assert ".target sm_80" in result.plan.images[0].path.read_text()


def test_cli_builds_and_lists(tiny_app, capsys):
    from bless.cli import main

    assert main(["apps", "build", str(tiny_app), "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "tiny (h100, sm_90, batch 2)" in out and "kernel launches" in out and "plan.json" in out


def test_cli_errors_name_the_field(tiny_app, capsys):
    from bless.cli import main

    assert main(["apps", "build", str(tiny_app), "--gpu", "v100"]) == 2
    assert "--gpu: unknown GPU 'v100'" in capsys.readouterr().err
    assert main(["apps", "build", "no_such_model", "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert "unknown app 'no_such_model'" in err and "resnet50" in err


def test_an_app_file_without_apps_is_rejected(tmp_path):
    from bless.build.zoo import find

    bad = tmp_path / "empty.py"
    bad.write_text("x = 1\n")
    with pytest.raises(ValueError, match="must define APPS"):
        find(str(bad))
    with pytest.raises(FileNotFoundError):
        find(str(tmp_path / "missing.py"))


def test_an_app_file_whose_imports_are_missing_names_the_module_and_the_extra(tmp_path):
    """The shipped apps import torch, which only the apps extra installs: a core install that
    lists or builds them is told what to install, not shown a traceback."""
    from bless.build.zoo import find

    app = tmp_path / "needs_a_module.py"
    app.write_text("import bless_no_such_module\n")
    with pytest.raises(ValueError, match=r"imports 'bless_no_such_module'.*bless\[apps\]"):
        find(str(app))


def test_ptx_static_shared_and_ptxas_parsing():
    ptx = textwrap.dedent(
        """
        .visible .entry a_kernel(
        .param .u64 a_kernel_param_0
        )
        {
            .shared .align 4 .b8 buf[324];
            .shared .align 16 .b32 tile[64];
        }
        .visible .entry b_kernel(
        )
        {
            .extern .shared .align 16 .b8 dyn[];
        }
        """
    )
    assert ptx_static_shared(ptx) == {"a_kernel": 324 + 256, "b_kernel": 0}
    verbose = (
        "ptxas info    : Compiling entry function 'a_kernel' for 'sm_90'\n"
        "ptxas info    : Used 17 registers, used 1 barriers, 324 bytes smem\n"
        "ptxas info    : Compiling entry function 'b_kernel' for 'sm_90'\n"
        "ptxas info    : Used 10 registers, used 0 barriers\n"
    )
    resources = parse_verbose(verbose)
    assert resources["a_kernel"].registers == 17 and resources["a_kernel"].shared_mem_static == 324
    assert resources["b_kernel"].registers == 10 and resources["b_kernel"].shared_mem_static == 0


@pytest.mark.slow
def test_resnet50_builds_for_h100(tmp_path, monkeypatch):
    pytest.importorskip("tvm")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc (CUDA toolkit) is not on PATH")
    from bless.build.compiler import build_app
    from bless.build.zoo import find

    monkeypatch.setenv("BLESS_CACHE", str(tmp_path))
    (app,) = find("resnet50")
    plan = build_app(app, "h100").plan
    assert len(plan.launches) > 50
    ptx = plan.images[0].path.read_text()
    assert all(f".entry {launch.kernel}(" in ptx for launch in plan.launches)
    raw = json.loads(plan.path.read_text())
    assert raw["format"] == "bless-plan" and raw["batch"] == 16
