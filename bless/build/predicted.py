"""Predicted profiles: a build plan in, a :class:`~bless.profiles.format.Profile` out, no GPU needed.

Each launch of the plan becomes one kernel of the profile (same order, same
name, so the CUDA backend can launch the plan against it), timed at the 18
levels by the analytic model (:mod:`bless.profiles.predict.analytic`).  A launch without
``dram_bytes`` is charged the bytes of the buffers it takes as arguments (each
read or written once); one without ``flops`` is timed as memory and launch only.
``T`` follows the rule of the A100 profiles: the sum of the kernels plus 3 us to
launch the first one.  The memory footprint is the plan's buffers.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict

import numpy as np

from bless.build.plan import KernelLaunch, Plan, portable_path
from bless.build.ptx import ptx_entries
from bless.hw.gpus import GpuSpec, get_gpu
from bless.profiles.format import KernelDesc, Profile, Provenance
from bless.profiles.predict import analytic

DEFAULT_PRECISION = "auto"
"""``auto``: each kernel at the precision it actually runs.  A compiled kernel whose PTX
issues tensor-core instructions (``mma``/``wmma``/``wgmma``) is timed on tensor cores
(TF32 for fp32 data), any other compiled kernel on the FP32 cores: TVM's default
schedules compile fp32 models to plain FMA code.  A descriptor-only launch (a traced
eager operator) stands for the cuDNN/cuBLAS kernel PyTorch would run, TF32 under its
defaults, as the measured A100 profiles ran.  ``tf32`` or ``fp32`` force one precision
for every kernel (``tf32``: library-like speed, what tools/validate_analytic.py also
compares with the measured eager profiles)."""

TENSOR_CORE_OPCODES = re.compile(r"\b(?:mma|wmma|wgmma)\.")

FIRST_LAUNCH_SECONDS = 3e-6
"""Host time to launch the first kernel (the T rule of profiles/a100, profiles/README.md)."""


NOMINAL_BLOCK = (256, 1, 1)
NOMINAL_BYTES_PER_BLOCK = 4096
"""A launch of a descriptor-only plan (a traced training iteration) has no shape: it is timed as
256-thread blocks, one per 4 KiB it moves (4 fp32 values a thread, like PyTorch's vectorised
elementwise kernels), which fills the GPU once it moves more than ~0.5 MB."""


def tensor_core_kernels(plan: Plan) -> frozenset[str]:
    """Names of the plan's compiled kernels whose PTX uses tensor cores."""
    return frozenset(
        name
        for image in plan.images
        if image.kind == "ptx"
        for name, body in ptx_entries(image.path.read_text(errors="replace")).items()
        if TENSOR_CORE_OPCODES.search(body)
    )


def launch_precision(launch: KernelLaunch, precision: str, tensor_core: frozenset[str]) -> str:
    """The precision one launch is timed at (see :data:`DEFAULT_PRECISION`)."""
    if precision != "auto":
        return precision
    if launch.image is None:
        return "tf32"
    return "tf32" if launch.kernel in tensor_core else "fp32"


def launch_work(launch: KernelLaunch, plan: Plan, precision: str = "fp32") -> analytic.KernelWork:
    """What the analytic model needs of one launch."""
    dram = launch.dram_bytes
    if dram is None:
        sizes = {b.id: b.nbytes for b in plan.buffers}
        dram = float(sum(sizes[a.buffer] for a in launch.args if a.buffer is not None))
    return analytic.KernelWork(
        name=launch.kernel,
        grid=launch.grid or (max(1, math.ceil(dram / NOMINAL_BYTES_PER_BLOCK)), 1, 1),
        block=launch.block or NOMINAL_BLOCK,
        flops=launch.flops or 0.0,
        dram_bytes=dram,
        registers=launch.registers,
        shared_mem=launch.shared_mem_static + launch.shared_mem_dynamic,
        precision=precision,
        compiled=launch.image is not None,
    )


def predict_profile(
    plan: Plan,
    gpu: GpuSpec | str | None = None,
    *,
    kind: str | None = None,
    mechanism: str = "mps",
    precision: str = DEFAULT_PRECISION,
    params: analytic.AnalyticParams | None = None,
) -> Profile:
    """The profile the analytic model predicts for ``plan`` on ``gpu`` (default: the plan's GPU).

    ``precision`` is ``auto`` (each kernel as it runs, :data:`DEFAULT_PRECISION`) or one
    of :data:`bless.profiles.predict.analytic.PRECISIONS` for every kernel.
    ``kind`` defaults to what the plan's build says (a training iteration or inference).
    """
    if kind is None:
        kind = "training" if plan.build.get("kind") == "training" else "inference"
    spec = get_gpu(gpu or plan.gpu) if not isinstance(gpu, GpuSpec) else gpu
    params = params or analytic.params_for(spec)
    levels = spec.level_sms(mechanism)
    if precision != "auto" and precision not in analytic.PRECISIONS:
        raise ValueError(f"precision must be auto or one of {', '.join(analytic.PRECISIONS)}, got {precision!r}")
    tensor_core = tensor_core_kernels(plan) if precision == "auto" else frozenset()
    works = []
    for i, launch in enumerate(plan.launches):
        try:
            works.append(launch_work(launch, plan, launch_precision(launch, precision, tensor_core)))
        except ValueError as e:
            raise ValueError(f"{plan.path}: launches[{i}]: {e}") from None
    t = np.array([[analytic.duration(w, spec, n, params) for w in works] for n in levels])
    kernels = tuple(
        KernelDesc(
            name=w.name,
            grid=w.grid,
            block=w.block,
            registers=w.registers,
            shared_mem=w.shared_mem,
            max_sm_share=analytic.max_sm_share(w, spec, params),
            dram_util=analytic.dram_util(w, spec, params),
            flops=w.flops,
            dram_bytes=w.dram_bytes,
        )
        for w in works
    )
    guessed = sum(1 for launch in plan.launches if launch.dram_bytes is None)
    no_flops = sum(1 for launch in plan.launches if not launch.flops)
    return Profile(
        app=plan.app,
        gpu=spec.name,
        kind=kind,
        batch=plan.batch,
        level_sms=tuple(levels),
        kernels=kernels,
        t=t,
        T=t.sum(axis=1) + FIRST_LAUNCH_SECONDS,
        memory_bytes=plan.memory_bytes,
        provenance=Provenance(
            method="predicted",
            gpu=spec.name,
            source=f"analytic model (bless.profiles.predict.analytic) on the build plan {portable_path(plan.path)} ({plan.arch})",
            model="roofline + occupancy/wave quantisation + DRAM saturation + block latency + launch floor, "
            f"constants fitted for {spec.name} ({params.provenance.get('data', 'see bless/profiles/predict/analytic.py')})",
            tool="bless.build.predicted.predict_profile",
            details={
                "plan": portable_path(plan.path),
                "mechanism": mechanism,
                "precision": precision,
                "launches_timed_tf32": sum(w.precision == "tf32" for w in works),
                "params": {k: v for k, v in asdict(params).items() if k != "provenance"},
                "launches_without_dram_bytes": guessed,
                "launches_without_flops": no_flops,
                "T_rule": "sum of the kernels at the level + 3 us host launch of the first kernel",
            },
        ),
    )
