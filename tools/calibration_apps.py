"""Models of the A100 MPS data that are not bless apps, to fit the analytic model's tensor-core efficiency.

ResNet-152 and VGG-16 at batch 8: built with ``bless apps build tools/calibration_apps.py --gpu a100``
(a user-style app file), their predicted pass time is fitted to the measured one
(``tools/validate_analytic.py --fit``).  The validated apps (resnet50, bert) are not among them.
"""

import importlib.util
from pathlib import Path

from bless.build.zoo import REPO_APPS, App


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bless_calibration_{name}", REPO_APPS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_resnet = _load("resnet")
_vgg = _load("vgg")

CONFIG_D = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
"""VGG-16 (Simonyan & Zisserman, ICLR'15, configuration D)."""

APPS = [
    App(
        name="resnet152",
        batch=8,
        model=lambda: _resnet.ResNet((3, 8, 36, 3)),
        inputs=_resnet.images,
        description="ResNet-152, batch 8 (A100 MPS data)",
        source=Path(__file__),
    ),
    App(
        name="vgg16",
        batch=8,
        model=lambda: _vgg.VGG(CONFIG_D),
        inputs=_vgg.images,
        description="VGG-16, batch 8 (A100 MPS data)",
        source=Path(__file__),
    ),
]
