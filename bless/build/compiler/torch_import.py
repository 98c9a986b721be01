"""torch module -> TVM Relax IRModule of its forward pass (training iterations: :mod:`bless.build.compiler.train_trace`)."""

from __future__ import annotations

from bless.build.zoo import App, example_inputs, instantiate


class ImportFailed(RuntimeError):
    """torch.export or the Relax frontend refused the model; the message says which step and why."""


def forward_module(app: App, seed: int):
    """The Relax module of ``app``'s forward pass at its batch; weights are ``main``'s inputs after the data."""
    import torch

    module = instantiate(app, seed=seed, train=False)
    inputs = example_inputs(app, seed=seed)
    with torch.no_grad():
        program = _export(app, module, inputs)
    return _to_relax(app, program)


def _export(app: App, module, inputs: tuple):
    import torch

    try:
        return torch.export.export(module, inputs)
    except Exception as e:
        raise ImportFailed(f"app {app.name!r}: torch.export failed: {e}") from None


def _to_relax(app: App, program):
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    try:
        mod = from_exported_program(program, keep_params_as_input=True)
    except Exception as e:
        raise ImportFailed(f"app {app.name!r}: the TVM Relax frontend cannot import the model: {e}") from None
    mod, _params = relax.frontend.detach_params(mod)
    return _lift_weight_transforms(mod)


def _lift_weight_transforms(mod):
    """Move computations on weights alone (e.g. transposing a Linear's weight) out of ``main``.

    A deployment runs them once when it loads the weights, not per request;
    ``main`` then takes the transformed weights as its parameters.
    """
    from tvm import relax

    mod = relax.transform.LiftTransformParams()(mod)
    transform = [gv for gv in mod.functions if gv.name_hint.endswith("_transform_params")]
    for gv in transform:
        del mod[gv]
    return relax.transform.DeadCodeElimination(["main"])(mod)
