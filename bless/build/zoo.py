"""Model definitions: the apps bless can compile, found by name or file path.

An app file is a plain Python file that defines ``APPS``, a list of
:class:`App`.  The files in the repository's ``apps/`` directory (and in each
directory of ``$BLESS_APPS_PATH``) are loaded by path with importlib: they are
not an installed package, and a user's own file works the same way::

    # my_model.py
    import torch
    from bless.build.zoo import App

    class Tiny(torch.nn.Module): ...

    APPS = [App(name="tiny", batch=8, model=Tiny, inputs=lambda b: (torch.randn(b, 64),))]

``bless apps build my_model.py --gpu h100`` then compiles it.  Importing this
module does not import torch: app files are loaded on demand.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from bless.shared_data import shipped_dirs

SHIPPED_APPS = shipped_dirs("apps")
"""The shipped model definitions."""
DEFAULT_SEED = 0


@dataclass(frozen=True)
class App:
    """One model at one input shape: what to build, profile and train."""

    name: str
    batch: int
    model: Callable[[], Any]
    """Builds the ``torch.nn.Module`` (weights random; seeded by :func:`instantiate`)."""
    inputs: Callable[[int], tuple]
    """``inputs(batch)``: example input tensors of the forward pass."""
    loss: Callable[[Any, int], Any] | None = None
    """``loss(output, batch)``: scalar training loss (default: mean of the output)."""
    train_batch: int | None = None
    """Batch of one training iteration (default: ``batch``)."""
    description: str = ""
    source: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"App.name: expected letters, digits and '_', got {self.name!r}")
        if not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"App.batch of {self.name!r}: expected a positive integer, got {self.batch!r}")
        if not callable(self.model) or not callable(self.inputs):
            raise ValueError(f"App {self.name!r}: model and inputs must be callables (model(), inputs(batch))")

    @property
    def training_batch(self) -> int:
        return self.train_batch or self.batch


def instantiate(app: App, *, seed: int = DEFAULT_SEED, train: bool = False):
    """The app's module with seeded random weights, in eval (or train) mode."""
    import torch

    torch.manual_seed(seed)
    module = app.model()
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"App {app.name!r}: model() must return a torch.nn.Module, got {type(module).__name__}")
    return module.train(train)


def example_inputs(app: App, batch: int | None = None, *, seed: int = DEFAULT_SEED) -> tuple:
    import torch

    torch.manual_seed(seed + 1)
    inputs = app.inputs(batch or app.batch)
    if not isinstance(inputs, tuple) or not inputs:
        raise ValueError(f"App {app.name!r}: inputs(batch) must return a non-empty tuple of tensors")
    return inputs


def training_loss(app: App, output, batch: int):
    """The scalar loss of one training step (the app's own, else the output's mean)."""
    if app.loss is not None:
        return app.loss(output, batch)
    first = output[0] if isinstance(output, (tuple, list)) else output
    return first.float().mean()


def images(batch: int, size: int = 224) -> tuple:
    """Random ``batch x 3 x size x size`` images: the input of the image classifiers."""
    import torch

    return (torch.randn(batch, 3, size, size),)


def cross_entropy(logits, batch: int):
    """Classification loss against fixed random labels (seeded, so every iteration is alike)."""
    import torch

    labels = torch.randint(0, logits.shape[-1], (batch,), generator=torch.Generator().manual_seed(0))
    return torch.nn.functional.cross_entropy(logits, labels)


def training_step(app: App, module, inputs: tuple, optimizer) -> float:
    """One SGD iteration: forward, loss, backward, optimizer step (what a training app runs)."""
    optimizer.zero_grad(set_to_none=True)
    loss = training_loss(app, module(*inputs), inputs[0].shape[0])
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def sgd(module, lr: float = 0.01, momentum: float = 0.9):
    """The optimizer of the training apps: SGD with momentum, one foreach step per iteration."""
    import torch

    return torch.optim.SGD(module.parameters(), lr=lr, momentum=momentum)


# ------------------------------------------------------------------ finding apps
def app_dirs() -> list[Path]:
    """``$BLESS_APPS_PATH`` directories, then the shipped ``apps/``."""
    dirs = [Path(p).expanduser() for p in os.environ.get("BLESS_APPS_PATH", "").split(os.pathsep) if p]
    dirs.extend(SHIPPED_APPS)
    return [d for d in dirs if d.is_dir()]


def load_file(path: str | Path) -> list[App]:
    """Every :class:`App` a file defines (its ``APPS`` list)."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"app file {path} does not exist")
    module = _import(path)
    apps = getattr(module, "APPS", None)
    if not isinstance(apps, (list, tuple)) or not apps or not all(isinstance(a, App) for a in apps):
        raise ValueError(f"{path}: an app file must define APPS, a non-empty list of bless.build.zoo.App")
    return [a if a.source else _with_source(a, path) for a in apps]


def available() -> dict[str, App]:
    """Every app defined in the app directories, by name (earlier directories win)."""
    found: dict[str, App] = {}
    for d in app_dirs():
        for path in sorted(d.glob("*.py")):
            if path.name.startswith("_"):
                continue
            for app in load_file(path):
                found.setdefault(app.name, app)
    return found


def find(name_or_path: str) -> list[App]:
    """The apps meant by a name (``resnet50``) or a file path (``my_model.py``: all its apps)."""
    if name_or_path.endswith(".py") or os.sep in name_or_path:
        return load_file(name_or_path)
    apps = available()
    if name_or_path not in apps:
        known = ", ".join(sorted(apps)) or "none"
        raise ValueError(
            f"unknown app {name_or_path!r}; defined apps: {known}; or give the path of a .py file that defines APPS"
        )
    return [apps[name_or_path]]


def is_defined(name_or_path: str) -> bool:
    try:
        find(name_or_path)
    except (ValueError, FileNotFoundError):
        return False
    return True


def _with_source(app: App, path: Path) -> App:
    from dataclasses import replace

    return replace(app, source=path)


def _import(path: Path) -> ModuleType:
    """Load ``path`` as a private module (``bless_app_<stem>``); files next to it can be imported."""
    name = f"bless_app_{path.stem}"
    cached = sys.modules.get(name)
    if cached is not None and getattr(cached, "__file__", None) == str(path):
        return cached
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        sys.modules.pop(name, None)
        raise ValueError(
            f"{path}: imports {e.name!r}, which is not installed here; the shipped apps need the "
            "apps extra (pip install 'bless[apps]': torch and TVM)"
        ) from e
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module
