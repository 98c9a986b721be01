"""KACE at admission time: should this app share the GPU with those?

A fitted KACE model (``bless kace fit``) predicts the throughput sum of two
apps co-running (each one's throughput relative to running alone, summed).
A sum below 1 means the pair gets less done together than one app alone;
below a configurable threshold the new app is warned about or rejected.  The
features of an app come from its profile and its solo throughput, computed
here the way ``bless kace generate`` measures them (a lone request back to
back takes ``T[100%]``, so solo throughput is ``1 / T[100%]``).

Settings (the ``admission`` section of a run config or server config)::

    admission:
      kace_model: models/kace.json     # from `bless kace fit`
      min_throughput_sum: 1.0          # predicted sum below this is flagged
      action: warn                     # or reject
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bless.colocation.kace import KaceModel, SoloRun, app_features
from bless.colocation.kace_data import FeatureTable
from bless.documents import is_number
from bless.hw.gpus import get_gpu
from bless.profiles.format import Profile

SETTINGS = ("kace_model", "min_throughput_sum", "action")
ACTIONS = ("warn", "reject")


def feature_table(apps: Sequence[tuple[str, Profile]], mechanism: str = "mps") -> FeatureTable:
    """KACE features of named apps, one row each (solo throughput from the profile).

    An app's memory counts one context under ``mechanism``; the default is what
    ``bless kace generate`` measures (its simulated GPU's contexts are MPS ones),
    so the features match those a model was fitted on.
    """
    rows = []
    for _, profile in apps:
        gpu = get_gpu(profile.gpu)
        solo = SoloRun(1.0 / float(profile.T[-1]), profile.memory_bytes + gpu.context_bytes(mechanism))
        rows.append(app_features(profile, solo, gpu))
    columns = tuple(sorted(set.intersection(*(set(r) for r in rows))))
    values = np.array([[r[c] for c in columns] for r in rows], dtype=float)
    return FeatureTable(tuple(name for name, _ in apps), columns, values, "app profiles")


def rank(
    model: KaceModel, target: tuple[str, Profile], candidates: Sequence[tuple[str, Profile]]
) -> list[tuple[str, float]]:
    """Candidates by predicted throughput sum with ``target``, best first."""
    table = feature_table([target, *candidates])
    sums = model.predict_pairs(table, [(target[0], name) for name, _ in candidates])
    return sorted(zip((name for name, _ in candidates), map(float, sums)), key=lambda x: -x[1])


@dataclass(frozen=True)
class ColocationGate:
    """Flags a new app whose predicted throughput sum with a registered app is too low."""

    model: KaceModel
    min_throughput_sum: float = 1.0
    reject: bool = False
    """False: warn and admit anyway; True: reject."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None, where: str = "admission") -> ColocationGate | None:
        """A gate from the admission settings, or None when no ``kace_model`` is named."""
        settings = dict(settings or {})
        if not settings.get("kace_model"):
            extra = [k for k in ("min_throughput_sum", "action") if k in settings]
            if extra:
                raise ValueError(f"{where}.{extra[0]}: set {where}.kace_model to a `bless kace fit` model file first")
            return None
        threshold = settings.get("min_throughput_sum", 1.0)
        if not is_number(threshold) or not threshold > 0:
            raise ValueError(f"{where}.min_throughput_sum: expected a positive number, got {threshold!r}")
        action = settings.get("action", "warn")
        if action not in ACTIONS:
            raise ValueError(f"{where}.action: expected warn or reject, got {action!r}")
        return cls(KaceModel.load(settings["kace_model"]), float(threshold), action == "reject")

    def judge(self, name: str, profile: Profile, others: Sequence[tuple[str, Profile]]) -> tuple[list[str], list[str]]:
        """(reasons to reject, warnings) for ``name`` joining ``others``."""
        if not others:
            return [], []
        flagged = [
            f"KACE predicts a throughput sum of {s:.2f} for {name!r} next to {other!r} "
            f"(below {self.min_throughput_sum:g}: together they would do less than "
            f"{self.min_throughput_sum:g}x what one does alone)"
            for other, s in rank(self.model, (name, profile), others)
            if s < self.min_throughput_sum
        ]
        return (flagged, []) if self.reject else ([], flagged)
