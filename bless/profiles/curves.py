"""Reading a duration curve known at a few SM counts at any other SM count.

Profiles hold each kernel's duration at the 18 partition levels; the simulator,
the ISO targets of quotas that are not a multiple of 1/18 and the determiner all
need values in between.  Kernel time is close to linear in ``1/n`` (work spread
over ``n`` SMs plus a fixed part), so we interpolate linearly in ``1/n`` between
neighbouring levels, extrapolate below the first level with the Amdahl form
``s + p/n`` fitted to the first two levels, and hold the last value above it.
One function serves a single kernel (1-D) and many kernels at once (2-D).
"""

from __future__ import annotations

import numpy as np


def at_sms(level_sms: np.ndarray, values: np.ndarray, n: float) -> np.ndarray | float:
    """Value of ``values`` (levels along axis 0) at ``n`` SMs.

    ``level_sms`` is non-decreasing; ``values`` has shape ``(L,)`` or ``(L, K)``.
    """
    sms = np.asarray(level_sms, dtype=float)
    vals = np.asarray(values, dtype=float)
    if len(sms) > 1 and np.any(sms[1:] == sms[:-1]):
        # Coarse SM granularity (green contexts on Hopper) maps two levels to
        # one SM count; the first measurement at each count stands.
        sms, first = np.unique(sms, return_index=True)
        vals = vals[first]
    if n <= 0:
        raise ValueError(f"SM count must be positive, got {n}")
    if n >= sms[-1]:
        return vals[-1]
    if n < sms[0]:
        return _amdahl_below(sms, vals, n)
    hi = int(np.searchsorted(sms, n, side="left"))
    if sms[hi] == n:
        return vals[hi]
    lo = hi - 1
    w = (1.0 / n - 1.0 / sms[hi]) / (1.0 / sms[lo] - 1.0 / sms[hi])
    return w * vals[lo] + (1.0 - w) * vals[hi]


def _amdahl_below(sms: np.ndarray, vals: np.ndarray, n: float) -> np.ndarray | float:
    a, b = sms[0], sms[1] if len(sms) > 1 else sms[0]
    ta, tb = vals[0], vals[1] if len(vals) > 1 else vals[0]
    if a == b:
        return ta * a / n
    p = (ta - tb) / (1.0 / a - 1.0 / b)
    s = ta - p / a
    extrapolated = s + p / n
    # A curve that does not scale (p <= 0) stays flat; never below the first level.
    return np.maximum(ta, extrapolated)


def dense_curve(level_sms: np.ndarray, values: np.ndarray, sm_count: int) -> np.ndarray:
    """Values at every SM count 0..sm_count (index = SMs; index 0 is +inf).

    Shape ``(sm_count + 1,)`` or ``(sm_count + 1, K)``.  The simulator reads a
    kernel's solo time at its current SM allocation from this table.
    """
    vals = np.asarray(values, dtype=float)
    out = np.empty((sm_count + 1,) + vals.shape[1:], dtype=float)
    out[0] = np.inf
    for n in range(1, sm_count + 1):
        out[n] = at_sms(level_sms, vals, n)
    return out
