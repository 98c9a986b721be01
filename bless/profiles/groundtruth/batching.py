"""A request at a batch size nobody measured: operator-by-operator interpolation between two batches.

Each operator's time at each SM count is linear in the batch between the two
measured batches (beyond the larger one, the same line extended: on a saturated
GPU an operator's work grows in proportion to the batch).  The kernel list and
descriptors are those of the measured batch nearest the target; an operator's
interpolated time is shared among its kernels in proportion to their times at
that batch.  Operators are aligned as in :mod:`bless.profiles.groundtruth.ops`.  Interpolated
kernels get their source code in upper case (``M`` = measured points, interpolated).
"""

from __future__ import annotations

from dataclasses import replace

from bless.profiles.groundtruth.ops import align, operators
from bless.profiles.groundtruth.passes import PassData


def interpolate(a: PassData, b: PassData, batch: int) -> PassData:
    """``a`` and ``b`` measured at two batches of the same model; the pass at ``batch``."""
    if a.model != b.model or a.batch == b.batch:
        raise ValueError("interpolate needs two passes of one model at two different batches")
    if a.batch > b.batch:
        a, b = b, a
    if batch < a.batch:
        raise ValueError(f"batch {batch} is below the smaller measured batch {a.batch}; not extrapolating down")
    w = (batch - a.batch) / (b.batch - a.batch)
    base, other = (a, b) if abs(batch - a.batch) <= abs(batch - b.batch) else (b, a)
    groups = align(operators([k.name for k in base.kernels]), operators([k.name for k in other.kernels]))
    kernels = list(base.kernels)
    unmatched = 0
    for base_idx, other_idx in groups:
        common = (
            set.intersection(
                *(set(kernels[i].points) for i in base_idx), *(set(other.kernels[j].points) for j in other_idx)
            )
            if other_idx
            else set()
        )
        if not common:
            unmatched += 1
            continue
        new_points = {i: {} for i in base_idx}
        for s in sorted(common):
            t_base = sum(base.kernels[i].points[s] for i in base_idx)
            t_other = sum(other.kernels[j].points[s] for j in other_idx)
            t_a, t_b = (t_base, t_other) if base is a else (t_other, t_base)
            total = max(t_a + w * (t_b - t_a), min(t_a, t_b))
            for i in base_idx:
                share = base.kernels[i].points[s] / t_base if t_base > 0 else 1 / len(base_idx)
                new_points[i][s] = total * share
        for i in base_idx:
            lost_reduced = len(new_points[i]) == 1 < len(kernels[i].points)
            source = "s" if lost_reduced else kernels[i].source
            kernels[i] = replace(kernels[i], points=new_points[i], source=source.upper())
    how = "interpolated" if batch <= b.batch else "extrapolated"
    note = (
        f"batch {batch} {how} operator by operator, linear in batch between measured batches {a.batch} and "
        f"{b.batch}; kernel list and descriptors of batch {base.batch}"
        + (f"; {unmatched} operators without a counterpart kept batch {base.batch}'s times" if unmatched else "")
    )
    return PassData(
        model=a.model,
        batch=batch,
        kernels=tuple(kernels),
        files=tuple(dict.fromkeys(a.files + b.files)),
        notes=a.notes + b.notes + (note,),
    )
