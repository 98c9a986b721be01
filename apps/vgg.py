"""VGG11 (Simonyan & Zisserman, ICLR'15, configuration "A"), written here without torchvision.

Batch 27: the batch of the A100 ground-truth profile (profiles/README.md: the
batch whose whole-GPU latency is closest to BLESS's Table 1, 10.2 ms).
"""

import torch
from torch import nn

from bless.build.zoo import App, cross_entropy, images

CONFIG_A = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    def __init__(self, config=CONFIG_A, classes: int = 1000) -> None:
        super().__init__()
        layers, channels = [], 3
        for v in config:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, v, 3, padding=1), nn.ReLU(inplace=True)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(4096, classes),
        )

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


APPS = [
    App(
        name="vgg11",
        batch=27,
        model=VGG,
        inputs=images,
        loss=cross_entropy,
        train_batch=32,
        description="VGG11 (config A), 224x224 images",
    ),
]
