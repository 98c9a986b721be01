"""NASNet-A Mobile (Zoph et al., CVPR'18, "4 @ 1056": 4 normal cells per stage, 44 filters in the
first stage, 1056 channels before the classifier), written here without any model zoo.

Cells follow the paper's Figure 4 (NASNet-A normal and reduction cells) and the mobile layout
of the TF-slim reference (two reduction cells in the stem with 11 and 22 filters, then
3 x 4 normal cells at 44/88/176 filters with reduction cells between them).  Simplified: no
drop-path and no auxiliary head (neither runs at inference).

Batch 94: the batch of the ``nasnet`` A100 ground-truth profile, which is an Inception-v3 proxy
(profiles/README.md); this is the real NASNet-A, so its kernels and times differ from that proxy.
"""

import torch
from torch import nn

from bless.build.zoo import App, cross_entropy, images


def relu_conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.ReLU(), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))


class SepConv(nn.Module):
    """ReLU, depthwise k x k, pointwise 1 x 1, BN, applied twice (the first with the stride)."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.ops = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(cin, cin, k, stride, k // 2, groups=cin, bias=False),
            nn.Conv2d(cin, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, k, 1, k // 2, groups=cout, bias=False),
            nn.Conv2d(cout, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )

    def forward(self, x):
        return self.ops(x)


class FactorizedReduce(nn.Module):
    """Halve the resolution of the previous cell's output with two offset 1 x 1 paths."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.path1 = nn.Conv2d(cin, cout // 2, 1, bias=False)
        self.path2 = nn.Conv2d(cin, cout - cout // 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = self.relu(x)
        a = self.path1(nn.functional.avg_pool2d(x, 1, 2))
        shifted = nn.functional.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:]
        b = self.path2(nn.functional.avg_pool2d(shifted, 1, 2))
        return self.bn(torch.cat([a, b], 1))


def avg3(stride: int = 1) -> nn.AvgPool2d:
    return nn.AvgPool2d(3, stride, 1, count_include_pad=False)


class Cell(nn.Module):
    """Adjusts both inputs to ``filters`` channels at the current cell's input resolution."""

    def __init__(self, prev_channels: int, channels: int, filters: int, prev_reduced: bool) -> None:
        super().__init__()
        self.adjust_prev = (
            FactorizedReduce(prev_channels, filters) if prev_reduced else relu_conv_bn(prev_channels, filters)
        )
        self.adjust = relu_conv_bn(channels, filters)


class NormalCell(Cell):
    def __init__(self, prev_channels: int, channels: int, filters: int, prev_reduced: bool) -> None:
        super().__init__(prev_channels, channels, filters, prev_reduced)
        f = filters
        self.c0 = nn.ModuleList([SepConv(f, f, 5), SepConv(f, f, 3)])
        self.c1 = nn.ModuleList([SepConv(f, f, 5), SepConv(f, f, 3)])
        self.c2 = avg3()
        self.c3 = nn.ModuleList([avg3(), avg3()])
        self.c4 = SepConv(f, f, 3)
        self.out_channels = 6 * f

    def forward(self, prev, x):
        p, h = self.adjust_prev(prev), self.adjust(x)
        c0 = self.c0[0](h) + self.c0[1](p)
        c1 = self.c1[0](p) + self.c1[1](p)
        c2 = self.c2(h) + p
        c3 = self.c3[0](p) + self.c3[1](p)
        c4 = self.c4(h) + h
        return torch.cat([p, c0, c1, c2, c3, c4], 1)


class ReductionCell(Cell):
    def __init__(self, prev_channels: int, channels: int, filters: int, prev_reduced: bool) -> None:
        super().__init__(prev_channels, channels, filters, prev_reduced)
        f = filters
        self.c0 = nn.ModuleList([SepConv(f, f, 5, 2), SepConv(f, f, 7, 2)])
        self.c1 = nn.ModuleList([nn.MaxPool2d(3, 2, 1), SepConv(f, f, 7, 2)])
        self.c2 = nn.ModuleList([avg3(2), SepConv(f, f, 5, 2)])
        self.c3 = avg3()
        self.c4 = nn.ModuleList([SepConv(f, f, 3), nn.MaxPool2d(3, 2, 1)])
        self.out_channels = 4 * f

    def forward(self, prev, x):
        p, h = self.adjust_prev(prev), self.adjust(x)
        c0 = self.c0[0](h) + self.c0[1](p)
        c1 = self.c1[0](h) + self.c1[1](p)
        c2 = self.c2[0](h) + self.c2[1](p)
        c3 = self.c3(c0) + c1
        c4 = self.c4[0](c0) + self.c4[1](h)
        return torch.cat([c1, c2, c3, c4], 1)


class NASNetAMobile(nn.Module):
    def __init__(
        self, filters: int = 44, cells_per_stage: int = 4, stem_filters: int = 32, classes: int = 1000
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, stem_filters, 3, 2, bias=False), nn.BatchNorm2d(stem_filters))
        cells: list[nn.Module] = []
        # (previous output channels, current channels, whether previous is at twice the resolution)
        prev, cur, prev_reduced = stem_filters, stem_filters, False
        plan = [("R", filters // 4), ("R", filters // 2)]
        for stage in range(3):
            if stage:
                plan.append(("R", filters * 2**stage))
            plan += [("N", filters * 2**stage)] * cells_per_stage
        for kind, f in plan:
            cls = ReductionCell if kind == "R" else NormalCell
            cell = cls(prev, cur, f, prev_reduced)
            cells.append(cell)
            prev, cur = cur, cell.out_channels
            prev_reduced = kind == "R"
        self.cells = nn.ModuleList(cells)
        self.head = nn.Sequential(
            nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.5), nn.Linear(cur, classes)
        )

    def forward(self, x):
        prev = x = self.stem(x)
        for cell in self.cells:
            prev, x = x, cell(prev, x)
        return self.head(x)


APPS = [
    App(
        name="nasnet",
        batch=94,
        model=NASNetAMobile,
        inputs=images,
        loss=cross_entropy,
        train_batch=32,
        description="NASNet-A Mobile (4 @ 1056), 224x224 images",
    ),
]
