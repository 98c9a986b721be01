"""Architecture facts the profiles need: parameters, input/output tensors, optimizer state.

Parameter counts are the torchvision model zoo's (``torchvision.models`` weight
metadata ``num_params``) and, for BERT-large, Devlin et al. (NAACL'19) as published
by Hugging Face (``bert-large-uncased``: 335,141,888).  Inputs are fp32 images
(224x224, 299x299 for Inception-v3) or, for BERT, three int64 tensors (ids, token
types, attention mask) of the sequence length; outputs are fp32 logits.

Activation memory is estimated from the measured forward pass itself: a non-GEMM
kernel (BN, ReLU, add, pooling, copies) reads its input and writes its output, so
its output is about half its DRAM traffic ``dram_util * peak * t``.  The sum over
the pass is what training keeps for the backward pass; twice the largest one is
the live set of inference.  L2 hits make this an underestimate at small batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from bless.hw.gpus import A100
from bless.profiles.groundtruth.ops import is_conv_family
from bless.profiles.groundtruth.passes import PassData

FP32 = 4
INT64 = 8


@dataclass(frozen=True)
class ModelFacts:
    name: str
    params: int
    input_bytes_per_sample: int
    output_bytes_per_sample: int
    optimizer: str
    """Training optimizer (its state per parameter): ``sgd-momentum`` (1) or ``adam`` (2)."""
    description: str

    @property
    def optimizer_states(self) -> int:
        return {"sgd-momentum": 1, "adam": 2}[self.optimizer]


def _image(side: int) -> int:
    return 3 * side * side * FP32


BERT_SEQ_LEN = 128
"""The A100 BERT data's sequence length: its attention softmax kernel is
``softmax_warp_forward<..., 7, ...>``, i.e. rows of 2**7 = 128 elements."""

MODELS: dict[str, ModelFacts] = {
    m.name: m
    for m in (
        ModelFacts("resnet50", 25_557_032, _image(224), 1000 * FP32, "sgd-momentum", "ResNet-50 (torchvision)"),
        ModelFacts("resnet101", 44_549_160, _image(224), 1000 * FP32, "sgd-momentum", "ResNet-101 (torchvision)"),
        ModelFacts("resnet152", 60_192_808, _image(224), 1000 * FP32, "sgd-momentum", "ResNet-152 (torchvision)"),
        ModelFacts("vgg11", 132_863_336, _image(224), 1000 * FP32, "sgd-momentum", "VGG-11 (torchvision)"),
        ModelFacts("vgg16", 138_357_544, _image(224), 1000 * FP32, "sgd-momentum", "VGG-16 (torchvision)"),
        ModelFacts("vgg19", 143_667_240, _image(224), 1000 * FP32, "sgd-momentum", "VGG-19 (torchvision)"),
        ModelFacts("mobilenet", 3_504_872, _image(224), 1000 * FP32, "sgd-momentum", "MobileNetV2 (torchvision)"),
        ModelFacts(
            "inception",
            27_161_264,
            _image(299),
            1000 * FP32,
            "sgd-momentum",
            "Inception-v3 with auxiliary head (torchvision)",
        ),
        ModelFacts("densenet121", 7_978_856, _image(224), 1000 * FP32, "sgd-momentum", "DenseNet-121 (torchvision)"),
        ModelFacts("densenet169", 14_149_480, _image(224), 1000 * FP32, "sgd-momentum", "DenseNet-169 (torchvision)"),
        ModelFacts("densenet201", 20_013_928, _image(224), 1000 * FP32, "sgd-momentum", "DenseNet-201 (torchvision)"),
        ModelFacts(
            "bert",
            335_141_888,
            3 * BERT_SEQ_LEN * INT64,
            2 * FP32,
            "adam",
            "BERT-large, 24 layers, sequence length 128, sequence-classification head",
        ),
    )
}


def facts(model: str) -> ModelFacts:
    try:
        return MODELS[model]
    except KeyError:
        raise ValueError(f"no architecture facts for model {model!r}; known: {', '.join(MODELS)}") from None


def activation_bytes(forward: PassData) -> tuple[int, int]:
    """(largest single activation, sum of activations) of a forward pass, bytes (see module docstring)."""
    outputs = []
    for k in forward.kernels:
        if k.kind != "compute" or is_conv_family(k.name) or not k.points:
            continue
        full = k.points[max(k.points)]
        outputs.append(k.dram_util * A100.dram_bandwidth * full * 1e-6 / 2)
    return (int(max(outputs, default=0)), int(sum(outputs)))


def memory_bytes(model: str, forward: PassData, training: bool) -> int:
    """Device memory of one instance: weights, live activations, and for training the
    saved activations, gradients and optimizer state."""
    f = facts(model)
    weights = f.params * FP32
    largest, total = activation_bytes(forward)
    io = (f.input_bytes_per_sample + f.output_bytes_per_sample) * forward.batch
    if not training:
        return weights + 2 * largest + io
    return weights * (2 + f.optimizer_states) + total + 2 * largest + io
