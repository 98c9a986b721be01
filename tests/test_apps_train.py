"""Training builds (bless apps build --train): one SGD iteration traced into a descriptor-only plan."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from bless.backend.interface import BackendError
from bless.build.plan import PlanError, check_matches, load_plan

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
            return self.fc(torch.relu(self.conv(x)).flatten(1))

    APPS = [App(name="tiny", batch=2, train_batch=4, model=Tiny, inputs=lambda b: (torch.randn(b, 3, 8, 8),))]
    """
)


@pytest.fixture(scope="module")
def train_build(tmp_path_factory):
    pytest.importorskip("torch")
    from bless.build.compiler import build_app
    from bless.build.zoo import find

    root = tmp_path_factory.mktemp("train")
    path = root / "tiny_model.py"
    path.write_text(TINY_APP)
    (app,) = find(str(path))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLESS_CACHE", str(root / "cache"))
        yield app, build_app(app, "h100", train=True)


def _phases(plan) -> list[str]:
    return [{"f": "forward", "b": "backward", "o": "optimizer"}[c] for c in plan.build["phase_of_launch"]]


def test_training_plan_lists_forward_backward_and_optimizer_ops_in_order(train_build):
    _app, result = train_build
    plan = result.plan
    assert (plan.app, plan.gpu, plan.batch, plan.descriptor_only) == ("tiny_train", "h100", 4, True)
    kernels = [launch.kernel for launch in plan.launches]
    phases = _phases(plan)
    assert len(phases) == len(kernels)
    assert phases == sorted(phases, key=("forward", "backward", "optimizer").index)  # three contiguous phases
    forward = [k for k, p in zip(kernels, phases) if p == "forward"]
    backward = [k for k, p in zip(kernels, phases) if p == "backward"]
    optimizer = [k for k, p in zip(kernels, phases) if p == "optimizer"]
    assert forward[:3] == ["aten.convolution", "aten.relu", "aten.addmm"]
    assert backward[-1] == "aten.convolution_backward"  # the first layer's gradient is the last one computed
    assert backward.count("aten.mm") == 2  # the Linear's input and weight gradients
    # SGD with momentum, foreach: buf = momentum * buf + grad; param -= lr * buf
    assert optimizer == ["aten._foreach_mul_", "aten._foreach_add_", "aten._foreach_add_"]
    assert not {"aten.view", "aten.t", "aten.detach", "aten.empty"} & set(kernels)  # no kernel, not listed


def test_training_plan_counts_flops_and_bytes(train_build):
    _app, result = train_build
    by_kernel = {}
    for launch in result.plan.launches:
        assert launch.dram_bytes > 0 and launch.grid is None and launch.block is None and launch.image is None
        by_kernel.setdefault(launch.kernel, []).append(launch.flops)
    conv = 2 * 4 * 8 * 8 * 8 * 27  # multiply-adds of the forward convolution, batch 4
    assert by_kernel["aten.convolution"] == [conv]
    assert by_kernel["aten.convolution_backward"] == [conv]  # weight gradient only: the input needs none
    assert by_kernel["aten.addmm"] == [2 * 4 * 512 * 10]
    assert all(f > 0 for f in by_kernel["aten.mm"])
    assert by_kernel["aten.relu"] == [None]  # not counted by torch's flop counter


def test_training_plan_loads_back_and_is_cached(train_build):
    app, result = train_build
    from bless.build.compiler import build_app

    again = load_plan(result.plan.path)
    assert again == result.plan and again.images == ()
    raw = json.loads(result.plan.path.read_text())
    assert raw["descriptor_only"] is True and raw["launches"][0]["grid"] is None
    assert build_app(app, "h100", train=True).cached


def test_descriptor_only_plan_predicts_but_the_cuda_backend_refuses_it(train_build):
    from bless.build.predicted import predict_profile

    plan = train_build[1].plan
    profile = predict_profile(plan)
    assert profile.n_kernels == len(plan.launches) and (profile.T > 0).all()
    with pytest.raises(BackendError, match="descriptor-only.*cannot run on a GPU"):
        check_matches(plan, profile, "h100")


def test_null_grid_is_rejected_in_a_compiled_plan(train_build, tmp_path):
    raw = json.loads(train_build[1].plan.path.read_text())
    del raw["descriptor_only"]
    path = Path(tmp_path) / "plan.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(PlanError, match="images: expected a non-empty list"):
        load_plan(path)
    raw["images"] = [{"id": 0, "file": "x.ptx", "kind": "ptx"}]
    path.write_text(json.dumps(raw))
    with pytest.raises(PlanError, match=r"launches\[0\]\.image"):
        load_plan(path)


def test_cli_says_the_plan_is_descriptor_only(train_build, capsys):
    from bless.cli import main

    app, _result = train_build
    assert main(["apps", "build", str(app.source), "--gpu", "h100", "--train"]) == 0
    out = capsys.readouterr().out
    assert "descriptor-only" in out and "GFLOP" in out


def test_eager_forward_trace_is_the_inference_part_at_the_asked_batch(train_build):
    """An inference pass traced op by op: the forward ops of training, in eval mode, sized for the batch."""
    from bless.build.compiler.train_trace import descriptor_launches, trace_forward

    app, _ = train_build
    ops = trace_forward(app, batch=2, seed=0)
    assert [op.op for op in ops] == ["aten.convolution", "aten.relu", "aten.addmm"]
    assert {op.phase for op in ops} == {"forward"}
    conv, relu, fc = ops
    assert conv.flops == 2 * 2 * 8 * 8 * 8 * 3 * 3 * 3  # 2 x batch x out (C,H,W) x in C x kernel
    assert fc.flops == 2 * 2 * 512 * 10
    assert relu.flops is None and relu.dram_bytes == 2 * 2 * 8 * 8 * 8 * 4  # read and write, fp32
    launches = descriptor_launches(ops)
    assert [(k.kernel, k.flops, k.grid) for k in launches] == [(o.op, o.flops, None) for o in ops]


def test_cli_profiles_a_training_iteration(train_build, tmp_path, capsys):
    from bless.cli import main
    from bless.profiles.format import load_profile

    app, result = train_build
    assert main(["profile", str(app.source), "--train", "--gpu", "h100", "--repeats", "1", "--out", str(tmp_path)]) == 0
    profile = load_profile(tmp_path / "h100" / "tiny_train.json")
    assert (profile.app, profile.kind, profile.batch) == ("tiny_train", "training", 4)
    assert profile.n_kernels == len(result.plan.launches) and profile.provenance.method == "predicted"
    # An inference profile is not silently taken for a training one.
    assert main(["profile", "resnet50", "--train", "--gpu", "a100", "--out", str(tmp_path)]) == 0
    assert load_profile(tmp_path / "a100" / "resnet50_train.json").kind == "training"
    inference = str(Path(__file__).parents[1] / "profiles" / "a100" / "resnet50.json")
    assert main(["profile", inference, "--train", "--out", str(tmp_path)]) == 2
    assert f"--train: {inference} is an inference profile" in capsys.readouterr().err


def test_training_memory_counts_the_activations_saved_for_backward(train_build):
    plan = train_build[1].plan
    by_role = {b.role: b.nbytes for b in plan.buffers}
    params = by_role["param"]
    assert params == 4 * (8 * 3 * 3 * 3 + 8 + 10 * 8 * 8 * 8 + 10)
    assert by_role["workspace"] == 2 * params  # gradients + momentum
    # Saved for backward: ReLU's output (4 x 8 x 8 x 8 float32), once, though the linear layer saves a
    # flattened view of it too; the conv's input is the batch and the weights are parameters, counted
    # already; the mean loss saves nothing.
    assert by_role["activation"] == 4 * 8 * 8 * 8 * 4
    assert plan.memory_bytes == sum(by_role.values())
