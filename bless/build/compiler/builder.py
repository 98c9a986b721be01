"""Build an app for a GPU into the build cache: PTX plus the launch plan (:mod:`bless.build.plan`).

Inference is compiled by TVM into PTX.  A training iteration is a
descriptor-only plan traced on the CPU (:mod:`bless.build.compiler.train_trace`):
TVM 0.27 cannot compile torch's joint forward-backward graphs (no Relax
converter for ``convolution_backward``; an internal error in the ``dlight``
reduction schedule even for an MLP's gradients), and that graph would lack the
optimizer's update anyway.

The cache directory is ``$BLESS_CACHE/builds/<gpu>/<app>/`` (``<app>_train``
for a training iteration).  A build is reused when its key matches: the app
file's bytes, the app, GPU, mode and seed, the TVM/torch versions and the
builder's own source.  A cache hit reads one JSON file and imports neither
torch nor TVM.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bless.build.plan import (
    Buffer,
    Image,
    KernelLaunch,
    Plan,
    load_plan,
    plan_path,
    write_plan,
)
from bless.build.ptx import ptx_entries
from bless.build.zoo import DEFAULT_SEED, App
from bless.hw.gpus import get_gpu

_BUILDER_SOURCES = sorted(Path(__file__).parent.glob("*.py"))
_PTX_SHARED = re.compile(r"^\s*\.shared\s+(?:\.align\s+\d+\s+)?\.b(8|16|32|64)\s+\w+\[(\d+)\]", re.M)


class BuildError(ValueError):
    """A build could not be made; the message names the app, the step and the fix."""


@dataclass(frozen=True)
class BuildResult:
    plan: Plan
    seconds: float
    cached: bool
    warnings: tuple[str, ...] = ()


def arch_of(gpu: str) -> str:
    """CUDA architecture of a GPU model: A100 -> ``sm_80``, H100 -> ``sm_90``."""
    major, minor = get_gpu(gpu).compute_capability
    return f"sm_{major}{minor}"


def plan_name(app: App, train: bool) -> str:
    return f"{app.name}_train" if train else app.name


def cached_plan_path(app: App, gpu: str, *, train: bool = False, out: str | Path | None = None) -> Path:
    return Path(out) / "plan.json" if out else plan_path(plan_name(app, train), get_gpu(gpu).name)


def build_app(
    app: App,
    gpu: str,
    *,
    train: bool = False,
    out: str | Path | None = None,
    seed: int = DEFAULT_SEED,
    force: bool = False,
) -> BuildResult:
    """Compile ``app`` for ``gpu`` (``h100``, ``a100``) and write its plan; reuse a matching cached build."""
    gpu = get_gpu(gpu).name
    path = cached_plan_path(app, gpu, train=train, out=out)
    key = _cache_key(app, gpu, train, seed)
    start = time.perf_counter()
    if key is not None and not force:
        hit = _cached(path, key)
        if hit is not None:
            return BuildResult(
                hit, time.perf_counter() - start, cached=True, warnings=tuple(hit.build.get("warnings", ()))
            )
    plan = _trace_training(app, gpu, seed, path, key, start) if train else _compile(app, gpu, seed, path, key, start)
    return BuildResult(plan, plan.build["seconds"], cached=False, warnings=tuple(plan.build["warnings"]))


def _compile(app: App, gpu: str, seed: int, path: Path, key: str | None, start: float) -> Plan:
    from bless.build.compiler import launches, ptxas, torch_import, tvm_compile

    arch = arch_of(gpu)
    try:
        mod = torch_import.forward_module(app, seed)
        compiled = tvm_compile.compile_module(mod, arch)
        buffers, kernel_launches = launches.extract(compiled)
    except (torch_import.ImportFailed, tvm_compile.CompileFailed, launches.UnsupportedProgram) as e:
        raise BuildError(f"building {app.name} for {gpu}: {e}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    image = path.parent / f"{app.name}.ptx"
    image.write_text(compiled.ptx)
    static_shared = ptx_static_shared(compiled.ptx)
    notes: list[str] = []
    if ptxas.available():
        resources = ptxas.kernel_resources(image, arch)
    else:
        resources = {}
        notes.append("ptxas not found on PATH: registers are null; install the CUDA toolkit's ptxas and rebuild")
        warnings.warn(notes[-1], stacklevel=3)
    plan_launches = tuple(
        KernelLaunch(
            kernel=k.kernel,
            image=0,
            grid=k.grid,
            block=k.block,
            shared_mem_dynamic=k.shared_mem_dynamic,
            shared_mem_static=resources[k.kernel].shared_mem_static
            if k.kernel in resources
            else static_shared.get(k.kernel, 0),
            registers=resources[k.kernel].registers if k.kernel in resources else None,
            args=k.args,
            flops=k.flops,
            dram_bytes=k.dram_bytes,
        )
        for k in kernel_launches
    )
    plan = Plan(
        app=app.name,
        gpu=gpu,
        arch=arch,
        batch=app.batch,
        images=(Image(id=0, path=image, kind="ptx"),),
        buffers=tuple(buffers),
        launches=plan_launches,
        path=path,
        build=_build_record(
            app,
            key,
            "inference",
            seed,
            start,
            tvm=_version("apache-tvm"),
            kernel_groups=len({k.group for k in kernel_launches}),
            flops_source="tvm estimate_tir_flops on each fused TIR function before scheduling",
            dram_bytes_source="sum of the sizes of each kernel's distinct argument tensors",
            warnings=notes,
        ),
    )
    return write_plan(plan)


def _trace_training(app: App, gpu: str, seed: int, path: Path, key: str | None, start: float) -> Plan:
    """The descriptor-only plan of one training iteration (see :mod:`bless.build.compiler.train_trace`)."""
    from bless.build.compiler.train_trace import (
        PHASES,
        descriptor_launches,
        trace_training_step,
    )

    try:
        step = trace_training_step(app, seed)
    except Exception as e:
        raise BuildError(
            f"building {plan_name(app, True)} for {gpu}: one training step failed on the CPU: {e}"
        ) from None
    inputs = [
        Buffer(id=i, nbytes=nbytes, dtype=dtype, shape=shape, role="input")
        for i, (shape, dtype, nbytes) in enumerate(step.inputs)
    ]
    n = len(inputs)
    state = [  # parameters, their gradients and momentum buffers, the activations saved for backward
        Buffer(id=n, nbytes=step.param_bytes, dtype="uint8", shape=(step.param_bytes,), role="param"),
        Buffer(id=n + 1, nbytes=2 * step.param_bytes, dtype="uint8", shape=(2 * step.param_bytes,), role="workspace"),
        Buffer(
            id=n + 2, nbytes=step.activation_bytes, dtype="uint8", shape=(step.activation_bytes,), role="activation"
        ),
    ]
    plan = Plan(
        app=plan_name(app, True),
        gpu=gpu,
        arch=arch_of(gpu),
        batch=app.training_batch,
        images=(),
        buffers=(*inputs, *state),
        launches=descriptor_launches(step.ops),
        path=path,
        descriptor_only=True,
        build=_build_record(
            app,
            key,
            "training",
            seed,
            start,
            method="one SGD-with-momentum step (bless.build.zoo.training_step, foreach update, steady-state momentum) "
            "run on the CPU under a TorchDispatchMode; one launch per ATen operator that launches a kernel",
            phases={p: sum(1 for op in step.ops if op.phase == p) for p in PHASES},
            phase_of_launch="".join(op.phase[0] for op in step.ops),
            flops_source="torch.utils.flop_counter formulas (matmul, convolution, attention and their "
            "backwards); null for the other operators",
            dram_bytes_source="sum of the sizes of each operator's distinct input and output tensors",
            buffers="inputs, parameters, gradients + momentum, and the activations autograd saves for the "
            "backward pass (distinct storages; the forward pass's transient tensors and library workspaces are "
            "not counted)",
            warnings=[],
        ),
    )
    return write_plan(plan)


def _build_record(app: App, key: str | None, kind: str, seed: int, start: float, **details) -> dict:
    """The plan's ``build`` block: what every build records (the cache key first), then ``details``."""
    return {
        "key": key,
        "kind": kind,
        "seed": seed,
        "source": str(app.source) if app.source else None,
        "seconds": round(time.perf_counter() - start, 2),
        "torch": _version("torch"),
        **details,
    }


def ptx_static_shared(ptx: str) -> dict[str, int]:
    """Static ``.shared`` bytes declared inside each ``.entry`` of a PTX file (exact, no ptxas needed)."""
    return {
        name: sum(int(bits) // 8 * int(n) for bits, n in _PTX_SHARED.findall(body))
        for name, body in ptx_entries(ptx).items()
    }


def _cached(path: Path, key: str) -> Plan | None:
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("build"), dict) or raw["build"].get("key") != key:
        return None
    plan = load_plan(path)
    return plan if all(im.path.is_file() for im in plan.images) else None


def _cache_key(app: App, gpu: str, train: bool, seed: int) -> str | None:
    """None when the app has no source file (built in code): such builds are never reused."""
    if app.source is None or not Path(app.source).is_file():
        return None
    h = hashlib.sha256()
    h.update(
        json.dumps(
            [app.name, gpu, train, seed, app.batch, app.training_batch, _version("apache-tvm"), _version("torch")]
        ).encode()
    )
    for source in (Path(app.source), *_BUILDER_SOURCES):
        h.update(source.read_bytes())
    return h.hexdigest()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
