"""Completion times of one server that serves jobs one at a time, in arrival order.

Two readers: the lower bound's per-app queue, each request alone on the whole GPU (:mod:`bless.harness.bound`), and
a run's measure of what an open-loop app was due (:class:`bless.harness.results.AppResult`):
its requests' ends in the ISO run of the same arrivals, where each takes its ISO latency (the
deadlines deadline pacing gives them).
"""

from __future__ import annotations

import numpy as np


def fcfs_completions(arrivals: np.ndarray, size: float) -> np.ndarray:
    """When each job of ``size`` seconds arriving at ``arrivals`` (sorted) ends, served one at a
    time in arrival order: ``C_j = max(r_j, C_{j-1}) + size``.

    Raises ValueError naming ``arrivals`` or ``size`` for unsorted or non-finite arrivals or a
    negative size.
    """
    r = np.asarray(arrivals, dtype=float)
    if r.ndim != 1 or not np.all(np.isfinite(r)) or np.any(np.diff(r) < 0):
        raise ValueError("arrivals: expected sorted, finite arrival times")
    if not size >= 0:
        raise ValueError(f"size: expected non-negative seconds, got {size}")
    j = np.arange(len(r))
    # C_j = max_{i <= j} (r_i + (j - i + 1) * size).
    return np.maximum.accumulate(r - j * size) + (j + 1) * size
