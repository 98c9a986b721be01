"""The co-location interference model's constants: how much a kernel slows when others pull on DRAM.

The simulated GPU applies the model (its form, with the saturation term beside
it, is in :mod:`bless.sim.engine`); the determiner and BLESS's deadline pacing
price squads with the same constants, so they live here, with the hardware,
where neither has to import the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import numpy as np

from bless.hw.costs import gpu_constants


@dataclass(frozen=True)
class InterferenceModel:
    """Coefficients of the co-location interference term: a running kernel stretches by
    ``1 + bandwidth x`` the DRAM bandwidth the other running kernels demand (its form, and
    the saturation term beside it, in ``bless/sim/engine.py``).  The simulated GPU applies it;
    the determiner and BLESS's deadline pacing price with it."""

    bandwidth: float = 0.0
    """Stretch per unit of the DRAM bandwidth (fraction of peak) the other running kernels demand."""

    @overload
    def stretch(self, own: float, total: float) -> float: ...
    @overload
    def stretch(self, own: np.ndarray, total: np.ndarray) -> np.ndarray: ...
    def stretch(self, own, total):
        """How much a kernel slows when it demands ``own`` of the peak DRAM bandwidth and all
        the running kernels, itself included, demand ``total``: the saturation factor times the
        contention factor (their reasons in ``bless/sim/engine.py``).  1 for a kernel alone.

        The reference form: estimates over whole requests call it; the simulated GPU's event
        loop and the determiner's compiled kernel walk write it out in their hot loops.
        ``tests/test_interference.py`` holds the event loop to it, and
        ``tests/test_determiner.py`` the walk's estimates to squads run on the simulated GPU.
        Arrays work elementwise (the fluid estimates of ``experiments/overlap_feasibility.py``
        price millions of ways of sharing the GPU at once)."""
        return (1.0 + np.minimum(own, 1.0) * np.maximum(total - 1.0, 0.0)) * (1.0 + self.bandwidth * (total - own))

    @classmethod
    def for_gpu(cls, gpu: str) -> InterferenceModel:
        """The fitted constants of GPU model ``gpu`` (``bless/hw/<gpu>.toml``, with their source)."""
        return gpu_constants(gpu).build("interference", cls)
