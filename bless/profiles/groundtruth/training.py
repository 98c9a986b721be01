"""One training iteration on the A100, from the measured A100 forward pass and measured backward ratios.

No SM sweep of training exists, so a training iteration is derived from what is
measured (every step is recorded in the profile's provenance):

1. **Forward**: the app's A100 inference kernels at the training batch (MPS data,
   every level measured or derived as for inference).  Training-mode operators
   cost more: batch-norm also computes the batch statistics, one more read of its
   input (``BN_TRAIN_FACTOR`` = 3 passes over the tensor instead of 2), and BERT's
   elementwise operators gain the dropout kernels (factor measured, below).
2. **Backward**: per forward operator, in reverse order, kernels whose total is
   ``ratio x`` the operator's training-forward time at every level (a backward
   operator scales with SMs like its forward one).  The ratios and the number of
   backward kernels per operator are measured on real training iterations:

   * CNNs: the A100 ResNet-50 training trace (``kineto_traces/a100_convnet_train_
     2rank_kernels.csv``: PyTorch profiler, batch 32, TF32; each kernel's aten op
     says whether it is forward or backward; NCCL and DDP-only kernels dropped);
   * transformers: the V100 BERT training iteration of Orion
     (``orion_v100/bert_8_fb1.csv``; the ratios are dimensionless, the GPU's
     absolute speed does not enter).
3. **Optimizer**: its kernels move ``bytes_per_param x params`` at the effective
   bandwidth of the A100 trace's SGD-momentum step (multi-tensor ``_foreach``
   kernels: 3 passes reading/writing fp32 parameters, gradients and momentum = 32
   bytes per parameter).  Adam (PyTorch's foreach implementation: lerp, mul,
   addcmul, sqrt, div, add, addcdiv) moves about 76 bytes per parameter.
   Gradients are zeroed by ``set_to_none`` (PyTorch's default): no kernels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from bless.hw.gpus import A100
from bless.profiles.groundtruth import networks
from bless.profiles.groundtruth.kineto import KINETO_A100, cnn_trace
from bless.profiles.groundtruth.names import short_name
from bless.profiles.groundtruth.ops import is_conv_family, operators
from bless.profiles.groundtruth.passes import KernelSeries, PassData
from bless.shared_data import shared_file

ORION_BERT = "calibration/orion_v100/bert_8_fb1.csv"
ORION_DATASET = "the Orion (eth-easl/orion, EuroSys'24) V100 kernel profiles (calibration/orion_v100)"
BN_TRAIN_FACTOR = 1.5
"""Training-mode batch-norm forward vs inference: 3 passes over the tensor instead of 2."""
SGD_MOMENTUM_BYTES_PER_PARAM = 32
ADAM_BYTES_PER_PARAM = 76


@dataclass(frozen=True)
class BackwardRatio:
    """Backward time / training-forward time of an operator category, and its kernel count."""

    ratio: float
    kernels_per_op: int
    evidence: str


def category(name: str, family: str) -> str:
    """The operator category of a forward kernel, as the ratio tables name them."""
    low = name.lower()
    if is_conv_family(name):
        return "conv" if family == "cnn" else "gemm"
    for key, cat in (
        ("bn_fw", "bn"),
        ("clamp", "relu"),
        ("threshold", "relu"),
        ("max_pool", "maxpool"),
        ("avg_pool", "avgpool"),
        ("adaptive", "avgpool"),
        ("meanops", "avgpool"),
        ("catarray", "cat"),
        ("softmax", "softmax"),
        ("layernorm", "layernorm"),
        ("rowwisemoments", "layernorm"),
        ("indexselect", "embedding"),
        ("functor_add", "add"),
        ("addfunctor", "add"),
    ):
        if key in low:
            return cat
    return "elementwise"


# ------------------------------------------------------------------ CNN ratios (A100 trace)
def cnn_ratios() -> dict[str, BackwardRatio]:
    """Backward/forward ratios of CNN operators, from the A100 ResNet-50 training trace."""
    tr = cnn_trace()

    def ratio(cat: str, fwd_ops, bwd_ops, fwd_ops_count: float | None = None) -> BackwardRatio:
        f = sum(tr.time_us.get(("fwd", o), 0.0) for o in fwd_ops)
        b = sum(tr.time_us.get(("bwd", o), 0.0) for o in bwd_ops)
        n_fwd = fwd_ops_count or sum(tr.kernels.get(("fwd", o), 0.0) for o in fwd_ops)
        n_bwd = sum(tr.kernels.get(("bwd", o), 0.0) for o in bwd_ops)
        return BackwardRatio(
            b / f,
            max(1, round(n_bwd / n_fwd)),
            f"{cat}: {'+'.join(bwd_ops)} {b / 1e3:.3f} ms / {'+'.join(fwd_ops)} {f / 1e3:.3f} ms",
        )

    conv_ops = 53  # ResNet-50's convolutions: the trace's conv kernels include layout transforms
    table = {
        "conv": ratio("conv", ["aten::cudnn_convolution"], ["aten::convolution_backward"], conv_ops),
        "bn": ratio("bn", ["aten::cudnn_batch_norm"], ["aten::cudnn_batch_norm_backward"]),
        "relu": ratio("relu", ["aten::clamp_min_"], ["aten::threshold_backward"]),
        "add": ratio("add", ["aten::add_"], ["aten::add_"]),
        "maxpool": ratio(
            "maxpool", ["aten::max_pool2d_with_indices"], ["aten::max_pool2d_with_indices_backward", "aten::fill_"]
        ),
        "avgpool": ratio("avgpool", ["aten::mean"], ["aten::div"]),
    }
    table["cat"] = replace(
        table["add"],
        evidence="cat: like add (the concatenated branches' gradients "
        "are views; their inputs' gradients are accumulated)",
    )
    table["elementwise"] = BackwardRatio(1.0, 1, "elementwise: assumed one backward kernel of equal time")
    return table


def sgd_effective_bandwidth() -> float:
    """Bytes/s the A100 trace's SGD-momentum step achieved over ResNet-50's parameters."""
    tr = cnn_trace()
    opt_us = sum(v for (phase, _), v in tr.time_us.items() if phase == "opt")
    return networks.facts("resnet50").params * SGD_MOMENTUM_BYTES_PER_PARAM / (opt_us * 1e-6)


def optimizer_kernel_count() -> float:
    """Kernels per iteration of the trace's multi-tensor SGD step."""
    tr = cnn_trace()
    return sum(v for (phase, _), v in tr.kernels.items() if phase == "opt")


def measured_iteration_ms() -> dict[str, float]:
    """The A100 trace's mean iteration by phase (ms), without DDP's gradient scaling: the check
    for the derived ResNet-50 iteration."""
    out: dict[str, float] = {}
    for (phase, op), v in cnn_trace().time_us.items():
        if phase in ("fwd", "bwd", "opt") and not (phase == "bwd" and op == "aten::mul"):
            out[phase] = out.get(phase, 0.0) + v / 1e3
    return out


# ------------------------------------------------------------------ transformer ratios (Orion V100)
@functools.lru_cache(maxsize=1)
def transformer_ratios() -> tuple[dict[str, BackwardRatio], float]:
    """(ratios by category, elementwise training factor) from Orion's V100 BERT iteration.

    Phases: forward from the first embedding lookup to the loss, backward to the last
    embedding-gradient kernel, then the optimizer.  The elementwise factor is
    (elementwise + dropout) / elementwise in the forward phase.
    """
    path = shared_file(ORION_BERT, ORION_DATASET)
    rows = []
    with path.open() as fh:
        next(fh)
        for line in fh:  # names may hold unquoted commas: the last four fields are numbers
            name, _profile, _mem, _sm, dur = line.rstrip("\n").rsplit(",", 4)
            rows.append((name.strip('"'), float(dur) / 1e3))
    names = [n for n, _ in rows]
    start = next(i for i, n in enumerate(names) if "indexSelect" in n)
    bwd = next(i for i, n in enumerate(names) if "backward" in n or "grad" in n)
    end = max(i for i, n in enumerate(names) if "embedding" in n.lower())
    fwd_t: dict[str, float] = {}
    bwd_t: dict[str, float] = {}
    fwd_n: dict[str, int] = {}
    bwd_n: dict[str, int] = {}
    for i, (name, t) in enumerate(rows[start : end + 1], start):
        cat = _orion_category(name)
        t_map, n_map = (fwd_t, fwd_n) if i < bwd else (bwd_t, bwd_n)
        t_map[cat] = t_map.get(cat, 0.0) + t
        n_map[cat] = n_map.get(cat, 0) + 1
    elementwise_factor = (fwd_t["elementwise"] + fwd_t.get("dropout", 0.0)) / fwd_t["elementwise"]
    fwd_t["elementwise"] += fwd_t.pop("dropout", 0.0)
    fwd_n["elementwise"] += fwd_n.pop("dropout", 0)
    table = {}
    for cat in fwd_t:
        b = bwd_t.get(cat, 0.0)
        table[cat] = BackwardRatio(
            b / fwd_t[cat],
            max(1, round(bwd_n.get(cat, 0) / fwd_n[cat])),
            f"{cat}: backward {b / 1e3:.2f} ms / training forward {fwd_t[cat] / 1e3:.2f} ms (V100, Orion BERT)",
        )
    return table, elementwise_factor


def _orion_category(name: str) -> str:
    low = name.lower()
    if "gemm" in low:
        return "gemm"
    for key, cat in (
        ("softmax", "softmax"),
        ("layer_norm", "layernorm"),
        ("dropout", "dropout"),
        ("indexselect", "embedding"),
        ("embedding", "embedding"),
    ):
        if key in low:
            return cat
    return "elementwise"  # including reductions (bias gradients) and other pointwise kernels


# ------------------------------------------------------------------ the iteration
def training_pass(forward: PassData, family: str, facts_model: str) -> tuple[PassData, dict]:
    """One training iteration from the inference ``forward`` pass; also the ratios used."""
    if family == "cnn":
        table = cnn_ratios()
        fwd_factor = {"bn": BN_TRAIN_FACTOR}
        optimizer_bytes = SGD_MOMENTUM_BYTES_PER_PARAM
    elif family == "transformer":
        table, elementwise_factor = transformer_ratios()
        fwd_factor = {"elementwise": elementwise_factor}
        optimizer_bytes = ADAM_BYTES_PER_PARAM
    else:
        raise ValueError(f"family must be 'cnn' or 'transformer', got {family!r}")
    fwd = [
        k.scaled(fwd_factor.get(category(k.name, family), 1.0), source="f", category=category(k.name, family))
        for k in forward.kernels
    ]
    backward: list[KernelSeries] = []
    for _, idx in reversed(operators([k.name for k in fwd])):
        op = [fwd[i] for i in idx]
        r = table.get(op[0].category, table["elementwise"])
        if r.ratio <= 0:
            continue
        main = max(op, key=lambda k: k.points[max(k.points)])
        common = set.intersection(*(set(k.points) for k in op))
        total = {s: sum(k.points[s] for k in op) for s in common}
        share = r.ratio / r.kernels_per_op
        backward.extend(
            replace(
                main,
                name=f"bwd:{short_name(main.name)}",
                points={s: v * share for s, v in total.items()},
                source="b",
                grid=None,
                block=None,
                registers=None,
                shared_mem=None,
            )
            for _ in range(r.kernels_per_op)
        )
    opt = optimizer_kernels(facts_model, optimizer_bytes)
    ratio_file = KINETO_A100 if family == "cnn" else ORION_BERT
    note = (
        f"training iteration: forward = inference kernels x training factors {fwd_factor}; backward per operator "
        f"= measured backward/forward ratio x its training forward ({ratio_file}); optimizer = {len(opt)} "
        f"kernels moving {optimizer_bytes} B/param at the A100 trace's SGD-step bandwidth"
    )
    train = replace(
        forward,
        kernels=tuple(fwd + backward + opt),
        files=tuple(dict.fromkeys(forward.files + (ratio_file, KINETO_A100))),
        notes=forward.notes + (note,),
    )
    used = {
        "family": family,
        "forward_factors": fwd_factor,
        "backward_ratios": {
            c: {"ratio": round(r.ratio, 4), "kernels_per_op": r.kernels_per_op, "evidence": r.evidence}
            for c, r in table.items()
        },
        "optimizer_bytes_per_param": optimizer_bytes,
        "optimizer_bandwidth_bytes_per_s": round(sgd_effective_bandwidth()),
    }
    return train, used


def optimizer_kernels(facts_model: str, bytes_per_param: int) -> list[KernelSeries]:
    """The optimizer step: kernels sharing ``params x bytes`` at the measured effective bandwidth."""
    params = networks.facts(facts_model).params
    bandwidth = sgd_effective_bandwidth()
    seconds = params * bytes_per_param / bandwidth
    n = max(
        1,
        round(
            optimizer_kernel_count()
            * (params / networks.facts("resnet50").params)
            * bytes_per_param
            / SGD_MOMENTUM_BYTES_PER_PARAM
        ),
    )
    return [
        KernelSeries(
            name="multi_tensor_apply_kernel<optimizer step>",
            points={108: seconds * 1e6 / n},
            source="o",
            dram_util=min(1.0, bandwidth / A100.dram_bandwidth),
            category="optimizer",
        )
        for _ in range(n)
    ]
