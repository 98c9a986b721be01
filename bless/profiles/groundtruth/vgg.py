"""VGG11 from VGG16's measured kernels.

VGG16 = conv 64,64,M,128,128,M,256,256,256,M,512,512,512,M,512,512,512,M + 3 FC and
VGG11 = conv 64,M,128,M,256,256,M,512,512,M,512,512,M + the same 3 FC (Simonyan &
Zisserman, ICLR'15, Table 1, configurations A and D).  Every VGG11 layer exists in
VGG16 with the same input size, channels and position relative to the pools: VGG11's
convs are VGG16's conv1_1, conv2_1, conv3_1, conv3_2, conv4_1, conv4_2, conv5_1, conv5_2.
So VGG11 is VGG16 without conv1_2, conv2_2, conv3_3, conv4_3, conv5_3, each dropped
with the bias-add and ReLU kernels that follow it.

In the kernel sequence a conv layer starts at a conv/GEMM operator and runs to the
next conv operator or pool; the classifier starts at the adaptive average pool.
"""

from __future__ import annotations

from dataclasses import replace

from bless.profiles.groundtruth.ops import operators
from bless.profiles.groundtruth.passes import PassData

VGG16_CONV_LAYERS = 13
DROPPED_FOR_VGG11 = (2, 4, 7, 10, 13)
"""1-based VGG16 conv layers VGG11 does not have: conv1_2, conv2_2, conv3_3, conv4_3, conv5_3."""


def vgg11_from_vgg16(vgg16: PassData) -> PassData:
    ops = operators([k.name for k in vgg16.kernels])
    classifier = next((i for i, (tok, _) in enumerate(ops) if "adaptive" in tok or "avg_pool" in tok), len(ops))
    layer = 0
    keep: list[int] = []
    in_dropped = False
    for i, (tok, idx) in enumerate(ops):
        if i < classifier and tok == "conv":
            layer += 1
            in_dropped = layer in DROPPED_FOR_VGG11
        elif "pool" in tok:
            in_dropped = False
        if not in_dropped:
            keep.extend(idx)
    if layer != VGG16_CONV_LAYERS:
        raise ValueError(
            f"expected {VGG16_CONV_LAYERS} conv layers before the classifier in the VGG16 kernel sequence, "
            f"found {layer}; cannot identify VGG16's layer boundaries"
        )
    note = (
        "VGG11 = VGG16's kernels without conv1_2, conv2_2, conv3_3, conv4_3, conv5_3 and their "
        "bias-add/ReLU kernels (layer boundaries at conv operators and pools)"
    )
    return replace(
        vgg16, model="vgg11", kernels=tuple(vgg16.kernels[i] for i in sorted(keep)), notes=vgg16.notes + (note,)
    )
