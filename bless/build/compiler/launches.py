"""The launch sequence of a compiled app: every kernel launch in order, with its argument buffers.

Reads the lowered Relax ``main`` (after TVM's static memory planning) binding by
binding: parameters and inputs become buffers, every ``alloc_storage`` becomes
an activation buffer (storage is reused between tensors exactly as TVM's VM
reuses it), reshapes are views of their input's buffer, and every call of a TIR
function expands into the device kernels its host code launches
(``call_ffi_kernel`` with the grid, block and dynamic shared memory as
constants).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bless.build.plan import Arg, Buffer

_DTYPE_BYTES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
}
_IGNORED_BUILTINS = (
    "vm.builtin.check_tensor_info",
    "vm.builtin.match_shape",
    "vm.builtin.check_tuple_info",
    "vm.builtin.check_shape_info",
    "vm.builtin.match_prim_value",
    "vm.builtin.check_prim_value_info",
)
_IGNORED_OPS = ("relax.vm.kill_object", "relax.null_value")
_VIEWS = ("vm.builtin.reshape",)
_LAUNCH_DIMS = {
    "blockIdx.x": ("grid", 0),
    "blockIdx.y": ("grid", 1),
    "blockIdx.z": ("grid", 2),
    "threadIdx.x": ("block", 0),
    "threadIdx.y": ("block", 1),
    "threadIdx.z": ("block", 2),
}
_DYNAMIC_SHARED = "tirx.use_dyn_shared_memory"


class UnsupportedProgram(RuntimeError):
    """The compiled program does something the launch plan cannot express (the message says what)."""


@dataclass(frozen=True)
class LoweredLaunch:
    """One launch before ptxas: what the lowered IR fixes."""

    kernel: str
    group: str
    """The TIR function (fused operator) the kernel belongs to."""
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem_dynamic: int
    args: tuple[Arg, ...]
    flops: float
    dram_bytes: float


@dataclass(frozen=True)
class _Tensor:
    buffer: int
    nbytes: int


class _Buffers:
    def __init__(self) -> None:
        self.items: list[Buffer] = []

    def add(self, nbytes: int, dtype: str, shape: tuple[int, ...], role: str) -> int:
        self.items.append(Buffer(id=len(self.items), nbytes=nbytes, dtype=dtype, shape=shape, role=role))
        return len(self.items) - 1

    def mark(self, buffer: int, role: str) -> None:
        self.items[buffer] = replace(self.items[buffer], role=role)


def extract(compiled) -> tuple[list[Buffer], list[LoweredLaunch]]:
    """Buffers and kernel launches, in launch order, of a :class:`~bless.build.compiler.tvm_compile.Compiled`."""
    main = compiled.main
    buffers = _Buffers()
    tensors: dict[object, _Tensor] = {}
    tuples: dict[object, list] = {}
    storages: dict[object, int] = {}
    num_input = int(main.attrs["num_input"])
    for i, param in enumerate(main.params):
        tensors[param] = _new_tensor(buffers, param.ty, "input" if i < num_input else "param")
    launches: list[LoweredLaunch] = []
    for block in main.body.blocks:
        for binding in block.bindings:
            var, value = binding.var, binding.value
            kind = type(value).__name__
            if kind == "Tuple":
                tuples[var] = list(value.fields)
            elif kind in ("Var", "DataflowVar"):
                tensors[var] = tensors[value]
            elif kind == "Call":
                _call(var, value, buffers, tensors, storages, launches, compiled)
            else:
                raise UnsupportedProgram(f"Relax main binds {var.name} to a {kind}, which the plan cannot express")
    for field in tuples.get(main.body.body, [main.body.body]):
        if field in tensors:
            buffers.mark(tensors[field].buffer, "output")
    return buffers.items, launches


def _call(var, call, buffers: _Buffers, tensors, storages, launches, compiled) -> None:
    op_kind = type(call.op).__name__
    if op_kind == "Op":
        name = call.op.name
        if name == "relax.vm.alloc_storage":
            nbytes = int(call.args[0].values[0])
            storages[var] = buffers.add(nbytes, "uint8", (nbytes,), "activation")
        elif name == "relax.vm.alloc_tensor":
            offset = int(call.args[1].value)
            if offset != 0:
                raise UnsupportedProgram(
                    f"tensor {var.name} lies at offset {offset} of its storage; plans hold whole buffers"
                )
            tensors[var] = _Tensor(storages[call.args[0]], _nbytes(var.ty))
        elif name not in _IGNORED_OPS:
            raise UnsupportedProgram(f"Relax main calls {name}, which the plan cannot express")
    elif op_kind == "ExternFunc":
        name = call.op.global_symbol
        if name in _VIEWS:
            tensors[var] = _Tensor(tensors[call.args[0]].buffer, _nbytes(var.ty))
        elif name not in _IGNORED_BUILTINS:
            raise UnsupportedProgram(
                f"Relax main calls the runtime function {name} (a library call, not a TVM kernel); the plan holds TVM kernels only"
            )
    elif op_kind == "GlobalVar":
        launches.extend(_group_launches(call.op.name_hint, call.args, buffers, tensors, compiled))
    else:
        raise UnsupportedProgram(f"Relax main calls a {op_kind}, which the plan cannot express")


def _group_launches(name: str, relax_args, buffers: _Buffers, tensors, compiled) -> list[LoweredLaunch]:
    """The device kernels one call of TIR function ``name`` launches, in order."""
    params = compiled.tir_functions[name].params
    if len(params) != len(relax_args):
        raise UnsupportedProgram(f"{name} takes {len(params)} arguments but main passes {len(relax_args)}")
    by_name: dict[str, _Tensor] = {}
    for param, arg in zip(params, relax_args):
        if _is_constant_tensor(arg):
            tensors.setdefault(arg, _new_tensor(buffers, arg.ty, "param"))
        if arg not in tensors:
            raise UnsupportedProgram(f"argument {param.name} of {name} is a {type(arg).__name__}, not a tensor")
        by_name[param.name] = tensors[arg]
    calls = _kernel_calls(compiled.host_functions[name].body)
    if not calls:
        raise UnsupportedProgram(f"the host code of {name} launches no kernel")
    launches = [_launch(name, call, by_name) for call in calls]
    total_threads = sum(_threads(launch) for launch in launches)
    flops = compiled.flops.get(name, 0.0)
    # A TIR function that needs several kernels: its FLOPs are shared in proportion to threads.
    return [replace(launch, flops=flops * _threads(launch) / total_threads) for launch in launches]


def _launch(group: str, call, by_name: dict[str, _Tensor]) -> LoweredLaunch:
    kernel = str(call.args[0].value)
    params = list(call.attrs.launch_params)
    values = call.args[len(call.args) - len(params) :]
    dims = {"grid": [1, 1, 1], "block": [1, 1, 1]}
    dynamic_shared = 0
    for param, value in zip(params, values):
        if type(value).__name__ != "IntImm":
            raise UnsupportedProgram(f"kernel {kernel}: launch parameter {param} is not a constant ({value})")
        if param == _DYNAMIC_SHARED:
            dynamic_shared = int(value.value)
        elif param in _LAUNCH_DIMS:
            which, axis = _LAUNCH_DIMS[param]
            dims[which][axis] = int(value.value)
        else:
            raise UnsupportedProgram(f"kernel {kernel}: unknown launch parameter {param}")
    args: list[Arg] = []
    touched: dict[int, int] = {}
    for arg in call.args[1 : len(call.args) - len(params)]:
        text = str(arg)
        if type(arg).__name__ == "IntImm":
            args.append(Arg(scalar=int(arg.value), dtype=str(arg.dtype)))
        elif text.endswith(".data") and text[: -len(".data")] in by_name:
            tensor = by_name[text[: -len(".data")]]
            args.append(Arg(buffer=tensor.buffer))
            touched[tensor.buffer] = max(touched.get(tensor.buffer, 0), tensor.nbytes)
        else:
            raise UnsupportedProgram(f"kernel {kernel} of {group}: cannot map argument {text} to a buffer or constant")
    return LoweredLaunch(
        kernel=kernel,
        group=group,
        grid=tuple(dims["grid"]),
        block=tuple(dims["block"]),
        shared_mem_dynamic=dynamic_shared,
        args=tuple(args),
        flops=0.0,
        dram_bytes=float(sum(touched.values())),
    )


def _threads(launch: LoweredLaunch) -> int:
    g, b = launch.grid, launch.block
    return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]


def _kernel_calls(stmt) -> list:
    """``call_ffi_kernel`` calls under ``stmt``, in program order (TVM has no Python TIR visitor)."""
    found: list = []

    def visit(node) -> None:
        kind = type(node).__name__
        if kind == "Call":
            if getattr(node.op, "name", "") == "tirx.call_ffi_kernel":
                found.append(node)
            return
        if kind == "Array" or isinstance(node, (list, tuple)):
            for item in node:
                visit(item)
            return
        for field in ("seq", "value", "body", "then_case", "else_case"):
            child = getattr(node, field, None)
            if child is not None and not isinstance(child, (int, float, str)):
                visit(child)

    visit(stmt)
    return found


def _shape_dtype(ty) -> tuple[tuple[int, ...], str]:
    try:
        shape = tuple(int(d) for d in ty.shape.values)
    except (AttributeError, TypeError):
        raise UnsupportedProgram(f"a tensor has no static shape ({ty}); build with fixed input shapes") from None
    dtype = str(ty.dtype)
    if dtype not in _DTYPE_BYTES:
        raise UnsupportedProgram(f"tensor dtype {dtype} is not supported by the plan")
    return shape, dtype


def _nbytes(ty) -> int:
    shape, dtype = _shape_dtype(ty)
    n = _DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def _new_tensor(buffers: _Buffers, ty, role: str) -> _Tensor:
    shape, dtype = _shape_dtype(ty)
    nbytes = _nbytes(ty)
    return _Tensor(buffers.add(nbytes, dtype, shape, role), nbytes)


def _is_constant_tensor(expr) -> bool:
    """A tensor constant folded into the program (e.g. eval-mode batch-norm statistics)."""
    return (
        type(expr).__name__ in ("Constant", "GenericConst") and type(getattr(expr, "ty", None)).__name__ == "TensorType"
    )
