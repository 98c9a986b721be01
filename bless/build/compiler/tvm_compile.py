"""Relax IRModule -> lowered Relax ``main``, per-kernel host/device TIR, CUDA source and PTX.

TVM's own CUDA pipeline (``tvm.relax.backend.cuda.pipeline``) with its
``dlight`` default GPU schedules is used unchanged; this module only splits it
where the launch plan needs to look: FLOPs are counted on each fused TIR
function *before* scheduling (scheduling pads loops to tile sizes, which would
inflate the count), and the TIR functions are lowered to host and device code
here instead of inside ``tvm.compile`` so that the host side's kernel launches
can be read.  PTX comes from ``nvcc``: TVM's NVRTC path needs ``libnvrtc``,
which is not installed on machines without the CUDA runtime.
"""

from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass


class CompileFailed(RuntimeError):
    """TVM or nvcc refused the model; the message names the step."""


@dataclass
class Compiled:
    main: object
    """The lowered Relax ``main`` (memory planned, one call per TIR function launch)."""
    tir_functions: dict
    """name -> scheduled TIR PrimFunc (parameter names and shapes of every kernel group)."""
    host_functions: dict
    """name -> host TIR PrimFunc whose body calls the device kernels."""
    flops: dict[str, float]
    """name -> FLOPs of one call of the TIR function (TVM's estimate on the unscheduled function)."""
    cuda_source: str
    ptx: str


def target_for(arch: str):
    import tvm

    return tvm.target.Target({"kind": "cuda", "arch": arch})


def compile_module(mod, arch: str) -> Compiled:
    """Compile the Relax module for CUDA ``arch`` (``sm_80``, ``sm_90``)."""
    import tvm
    from tvm.relax.backend.cuda import pipeline as cuda
    from tvm.s_tir.analysis import estimate_tir_flops

    target = target_for(arch)
    legalize = cuda.legalize_passes(target)
    schedule = legalize[-1]  # dlight.ApplyDefaultSchedule: the only pass that schedules
    with target:
        mod = tvm.transform.Sequential(cuda.library_dispatch_passes(target) + legalize[:-1])(mod)
        flops = {
            gv.name_hint: float(estimate_tir_flops(tvm.IRModule({gv: f})))
            for gv, f in mod.functions.items()
            if _is_prim_func(f)
        }
        mod = tvm.transform.Sequential([schedule] + cuda.dataflow_lower_passes(target) + cuda.finalize_passes(target))(
            mod
        )
    tir = tvm.IRModule({gv: f for gv, f in mod.functions.items() if _is_prim_func(f)})
    host, device = _lower_tir(tir, target)
    source = _cuda_source(device)
    return Compiled(
        main=mod["main"],
        tir_functions={gv.name_hint: f for gv, f in tir.functions.items()},
        host_functions={gv.name_hint: f for gv, f in host.functions.items()},
        flops=flops,
        cuda_source=source,
        ptx=_ptx(source, target),
    )


def _is_prim_func(f) -> bool:
    return type(f).__name__ == "PrimFunc"


def _lower_tir(tir, target):
    """Host module and the one CUDA device module, as ``tvm.tirx.build`` makes them."""
    import tvm

    build = importlib.import_module("tvm.tirx.build")  # the module, not the function tvm.tirx.build
    tir = tvm.tirx.transform.BindTarget(target.with_host("llvm"))(tir)
    pipeline, _finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    host, devices = build.split_host_device_mods(pipeline(tir))
    if len(devices) != 1:
        raise CompileFailed(f"expected one CUDA device module after lowering, got {len(devices)}")
    ((device_target, device),) = devices.items()
    return host, (device_target, finalize_device()(device))


def _cuda_source(device) -> str:
    import tvm

    target, module = device
    return tvm.get_global_func("target.build.cuda")(module, target).inspect_source("")


def _ptx(source: str, target) -> str:
    from tvm.support import nvcc

    if shutil.which("nvcc") is None:
        raise CompileFailed(
            "nvcc was not found on PATH: it turns TVM's CUDA source into PTX; install the CUDA toolkit "
            "(e.g. /usr/local/cuda/bin) or the nvidia-cuda-nvcc pip package and put nvcc on PATH"
        )
    try:
        with target:
            return bytes(nvcc.compile_cuda(source, target_format="ptx", arch=target.arch, compiler="nvcc")).decode()
    except RuntimeError as e:
        raise CompileFailed(f"nvcc could not compile TVM's CUDA source for {target.arch}: {e}") from None
