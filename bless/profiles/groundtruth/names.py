"""Short, recognisable kernel names from demangled CUDA symbols.

``void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::launch_clamp_scalar(...)
::[lambda...], at::detail::Array<char *, (int)2>>(int, T2, T3)`` becomes
``vectorized_elementwise_kernel<launch_clamp_scalar>``; ``void cutlass::Kernel<cutlass_80_tensorop_
s1688gemm_64x64_16x6_nn_align4>(T1::Params)`` becomes the cutlass configuration name.
"""

from __future__ import annotations

import re

MAX_LEN = 96
_NOISE = ("at::native::", "<unnamed>::", "(anonymous namespace)::", "at::", "void ")
_HINT = re.compile(
    r"copy_device_to_device|launch_clamp_scalar|[A-Za-z0-9_]*Functor[A-Za-z0-9_]*|[A-Za-z0-9_]+_kernel_cuda"
    r"|[A-Za-z0-9_]+KernelImpl|[A-Za-z0-9_]+_cuda_out|[A-Za-z0-9_]+Ops\b"
)
_WRAPPERS = ("cutlass::Kernel", "cutlass_cudnn::Kernel", "Kernel")


def short_name(name: str) -> str:
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    if s.startswith("std::enable_if") and ">::type " in s:  # cuBLAS gemv: the name follows the return type
        s = s.split(">::type ", 1)[1]
    for noise in ("<unnamed>::", "(anonymous namespace)::"):
        s = s.replace(noise, "")
    s = _drop_call_args(s)
    base, bracket, targs = s.partition("<")
    base = _clean(base)
    if not bracket:
        return base[:MAX_LEN]
    if base in _WRAPPERS:
        inner = _clean(re.split(r"[,>]", targs, maxsplit=1)[0])
        return inner[:MAX_LEN]
    hints = _HINT.findall(targs)
    if hints and base.endswith("_kernel"):
        functors = [h for h in hints if "Functor" in h]  # innermost functor says what it computes
        return f"{base}<{functors[-1] if functors else hints[0]}>"[:MAX_LEN]
    return base[:MAX_LEN]


def _clean(s: str) -> str:
    for noise in _NOISE:
        s = s.replace(noise, "")
    return s.strip()


def _drop_call_args(s: str) -> str:
    """Remove the trailing parameter list ``(...)`` (balanced parentheses)."""
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        if s[i] == ")":
            depth += 1
        elif s[i] == "(":
            depth -= 1
            if depth == 0:
                head = s[:i]
                return head if head.strip() else s
    return s
