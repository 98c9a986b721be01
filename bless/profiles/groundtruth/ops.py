"""Framework operators in a kernel sequence, and aligning two sequences operator by operator.

cuDNN and cuBLAS pick a convolution/GEMM algorithm per call: the same operator may
run as one kernel at one SM count or batch and as three (layout transforms, a
split-K reduction) at another.  Everything else (BN, ReLU, pooling, copies) is one
kernel per operator.  So two passes of the same network agree operator by operator
once each run of consecutive conv/GEMM-family kernels is collapsed into one
operator; that is what lets us carry a kernel's work across levels and batches.
"""

from __future__ import annotations

import difflib

_CONV_FAMILY = (
    "gemm",
    "gemv",
    "xmma",
    "conv",
    "nchwtonhwc",
    "nhwctonchw",
    "splitk",
    "cutlass",
    "implicit",
    "winograd",
    "fft",
    "cudnn::detail::",
    "sm80_",
    "cask",
    "scudnn",
    "flip_filter",
    "region_transform",
    "cudnn::cnn::",
)
_NOT_CONV = ("bn_fw", "bn_bw", "elementwise")

Operator = tuple[str, list[int]]
"""(token, indices of its kernels in the sequence)."""


def is_conv_family(name: str) -> bool:
    """Whether a kernel belongs to a convolution/GEMM operator (whose kernels vary by SM count and batch)."""
    low = name.lower()
    if any(s in low for s in _NOT_CONV):
        return False
    return any(s in low for s in _CONV_FAMILY)


def operators(names: list[str]) -> list[Operator]:
    """Group a kernel sequence (by name) into operators."""
    ops: list[Operator] = []
    for i, name in enumerate(names):
        if is_conv_family(name):
            if ops and ops[-1][0] == "conv":
                ops[-1][1].append(i)
                continue
            ops.append(("conv", [i]))
        else:
            ops.append((name, [i]))
    return ops


def align(ref_ops: list[Operator], other_ops: list[Operator]) -> list[tuple[list[int], list[int]]]:
    """Groups (reference kernel indices, other kernel indices) that did the same work.

    Identical operator sequences pair one to one; otherwise a diff pairs equal
    stretches and lumps each differing stretch into one group.  Extra operators in
    ``other`` with no reference counterpart join the preceding group.  A reference
    group may get no other kernels (its operator did not run there).
    """
    a = [o[0] for o in ref_ops]
    b = [o[0] for o in other_ops]
    if a == b:
        return [(list(r[1]), list(q[1])) for r, q in zip(ref_ops, other_ops)]
    groups: list[tuple[list[int], list[int]]] = []
    leading: list[int] = []  # extra kernels before the first reference operator
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs = [(list(ref_ops[i][1]), list(other_ops[j][1])) for i, j in zip(range(i1, i2), range(j1, j2))]
        else:
            ref_idx = [k for o in ref_ops[i1:i2] for k in o[1]]
            other_idx = [k for o in other_ops[j1:j2] for k in o[1]]
            if not ref_idx:
                (groups[-1][1] if groups else leading).extend(other_idx)
                continue
            pairs = [(ref_idx, other_idx)]
        if leading:
            pairs[0] = (pairs[0][0], leading + pairs[0][1])
            leading = []
        groups.extend(pairs)
    return groups
