"""Compile an app (a torch module) into the CUDA kernels bless schedules.

Pipeline, one module per step:

* :mod:`bless.build.compiler.torch_import`: ``torch.export`` of the forward pass and
  the TVM Relax frontend.
* :mod:`bless.build.compiler.tvm_compile`: TVM's CUDA pipeline (fusion, ``dlight``
  default GPU schedules, static memory planning), TIR lowering to kernels, CUDA
  source, PTX through ``nvcc``.
* :mod:`bless.build.compiler.launches`: the launch sequence, read from the lowered Relax
  ``main`` and the host side of every TIR function: kernel, grid, block,
  dynamic shared memory, argument buffers, FLOPs and bytes.
* :mod:`bless.build.compiler.ptxas`: registers and static shared memory per kernel.
* :mod:`bless.build.compiler.train_trace`: one training iteration traced op by op on
  the CPU (the descriptor-only plan of ``--train``: TVM cannot compile it).
* :mod:`bless.build.compiler.builder`: the build cache and the plan file
  (:mod:`bless.build.plan`).

Nothing here needs a GPU.  Importing this package does not import torch or TVM.
"""

from bless.build.compiler.builder import (
    BuildError,
    BuildResult,
    build_app,
    cached_plan_path,
)

__all__ = ["BuildError", "BuildResult", "build_app", "cached_plan_path"]
