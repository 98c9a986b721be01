"""ResNet-50 and ResNet-101 (He et al., CVPR'16; bottleneck blocks with the stride on the 3x3
convolution, as torchvision's v1.5), written here without torchvision.

Batches 16 and 23: those of the A100 ground-truth profiles (profiles/README.md).
"""

import torch
from torch import nn

from bless.build.zoo import App, cross_entropy, images


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + identity)


class ResNet(nn.Module):
    def __init__(self, blocks=(3, 4, 6, 3), classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        layers, inplanes = [], 64
        for i, n in enumerate(blocks):
            planes = 64 * 2**i
            for j in range(n):
                layers.append(Bottleneck(inplanes, planes, stride=2 if (j == 0 and i > 0) else 1))
                inplanes = planes * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


APPS = [
    App(
        name="resnet50",
        batch=16,
        model=lambda: ResNet((3, 4, 6, 3)),
        inputs=images,
        loss=cross_entropy,
        train_batch=32,
        description="ResNet-50, 224x224 images",
    ),
    App(
        name="resnet101",
        batch=23,
        model=lambda: ResNet((3, 4, 23, 3)),
        inputs=images,
        loss=cross_entropy,
        train_batch=32,
        description="ResNet-101, 224x224 images",
    ),
]
