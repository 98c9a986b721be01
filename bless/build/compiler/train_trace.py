"""One training iteration traced op by op on the CPU: the kernel list when TVM cannot compile it.

TVM 0.27's Relax frontend has no converter for ``convolution_backward`` (and
others), so a training iteration of most apps cannot be compiled into PTX here.
What can be had without a GPU is the sequence of ATen operators one iteration
runs, which on a GPU is (to one launch per operator, see the gaps in
``apps/README.md``) the sequence of kernels PyTorch's eager CUDA backend
launches.  One seeded step (:func:`bless.build.zoo.training_step`: forward, loss,
backward, SGD-with-momentum update) runs under a ``TorchDispatchMode``; every
operator that does work is recorded in execution order with

* its phase: ``forward``, ``backward`` (inside the autograd engine) or
  ``optimizer`` (inside ``optimizer.step``);
* FLOPs from ``torch.utils.flop_counter``'s formulas (matmul, convolution,
  attention and their backwards; ``None`` for the operators it does not count,
  elementwise and reductions, which are memory-bound);
* DRAM bytes: the sizes of its distinct input and output tensors (each read or
  written once, as the TVM plans count them).

View and metadata operators (``view``, ``t``, ``expand``, ``detach``,
allocation without initialisation) launch no kernel and are skipped.  The SGD
step is traced in its steady state (momentum buffers already exist) and with
``foreach`` on, as PyTorch runs it for CUDA parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from bless.build.plan import KernelLaunch
from bless.build.zoo import App, example_inputs, instantiate, sgd, training_step

PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class TracedOp:
    """One operator of the iteration: one kernel in the descriptor-only plan."""

    op: str
    """ATen operator, e.g. ``aten.convolution_backward``."""
    phase: str
    flops: float | None
    dram_bytes: float


@dataclass(frozen=True)
class TracedStep:
    ops: tuple[TracedOp, ...]
    inputs: tuple[tuple[tuple[int, ...], str, int], ...]
    """(shape, dtype, bytes) of each input tensor."""
    param_bytes: int
    """Parameters; their gradients and momentum buffers are as large again each."""
    activation_bytes: int
    """Distinct storages autograd saved for the backward pass, parameters and inputs excluded:
    the activations held at the end of the forward pass, where training memory peaks."""


_NO_KERNEL = frozenset(
    {
        "aten.empty",
        "aten.empty_like",
        "aten.empty_strided",
        "aten.new_empty",
        "aten.new_empty_strided",
        "aten.lift_fresh",
        "aten.sym_size",
        "aten.sym_stride",
        "aten.sym_numel",
        "aten.is_same_size",
        "aten._local_scalar_dense",
        "aten.set_",
    }
)


def trace_training_step(app: App, seed: int) -> TracedStep:
    """Run one training iteration of ``app`` at its training batch and record its operators."""
    module = instantiate(app, seed=seed, train=True)
    inputs = example_inputs(app, app.training_batch, seed=seed)
    optimizer = sgd(module)
    for group in optimizer.param_groups:
        group["foreach"] = True  # what PyTorch picks for CUDA parameters (CPU defaults to a per-tensor loop)
    for p in module.parameters():
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)  # steady state: not the first step's clone
    recorder = _Recorder()
    optimizer.register_step_pre_hook(lambda *_: recorder.enter_optimizer())
    held = {t.untyped_storage().data_ptr() for t in (*module.parameters(), *inputs)}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in held:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    torch.manual_seed(seed + 2)
    with recorder, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        training_step(app, module, inputs, optimizer)
    return TracedStep(
        ops=tuple(recorder.ops),
        inputs=tuple(
            (tuple(x.shape), str(x.dtype).removeprefix("torch."), x.numel() * x.element_size()) for x in inputs
        ),
        param_bytes=sum(p.numel() * p.element_size() for p in module.parameters()),
        activation_bytes=sum(saved.values()),
    )


def trace_forward(app: App, batch: int, seed: int) -> tuple[TracedOp, ...]:
    """The operators of one eager inference pass (eval mode, no autograd) at ``batch``.

    This is the kernel list at PyTorch eager granularity -- one launch per
    operator, nothing fused -- the granularity of the measured A100 profiles;
    ``tools/validate_analytic.py`` times it to tell the analytic model's error
    apart from the difference between eager and TVM-fused kernel lists.
    """
    module = instantiate(app, seed=seed, train=False).eval()
    inputs = example_inputs(app, batch, seed=seed)
    recorder = _Recorder()
    with torch.no_grad(), recorder:
        module(*inputs)
    return tuple(recorder.ops)


def descriptor_launches(ops: tuple[TracedOp, ...]) -> tuple[KernelLaunch, ...]:
    """Descriptor-only launches (name, FLOPs, bytes; no image, grid or arguments), one per operator."""
    return tuple(
        KernelLaunch(
            kernel=op.op,
            image=None,
            grid=None,
            block=None,
            shared_mem_dynamic=0,
            shared_mem_static=0,
            registers=None,
            args=(),
            flops=op.flops,
            dram_bytes=op.dram_bytes,
        )
        for op in ops
    )


class _Recorder(TorchDispatchMode):
    """Records every operator that launches a kernel, with its phase, FLOPs and bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[TracedOp] = []
        self.in_optimizer = False

    def enter_optimizer(self) -> None:
        self.in_optimizer = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        if func.namespace != "aten" or func.is_view or name in _NO_KERNEL:
            return out
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        distinct = {(t.data_ptr(), t.numel(), t.dtype): t.numel() * t.element_size() for t in tensors}
        count = flop_registry.get(func.overloadpacket)
        self.ops.append(
            TracedOp(
                op=name,
                phase=self._phase(),
                flops=float(count(*args, **kwargs, out_val=out)) if count else None,
                dram_bytes=float(sum(distinct.values())),
            )
        )
        return out

    def _phase(self) -> str:
        if self.in_optimizer:
            return "optimizer"
        return "backward" if torch._C._current_graph_task_id() >= 0 else "forward"
