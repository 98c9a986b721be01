"""How a kernel's duration grows as its SMs shrink: the SM scaling model.

A kernel measured at ``n_ref`` SMs (usually the whole GPU) takes, at ``n`` SMs::

    t(n) = c + (t_ref - c) * [(1 - phi) * Fc(n) + phi * Fm(n)]

* ``c = min(t_ref, fixed_us)``: launch, ramp-up and tail, which do not scale.
  Kernels under ~10 us are mostly this part and barely scale.
* ``Fc``: the compute/latency part, spread over the SMs the grid can use.  With
  ``B`` blocks and ``k`` blocks resident per SM, a wave of work on ``m`` SMs is
  ``x(m) = B / min(k*m, B)`` block-times; quantisation is partial (several blocks
  share an SM, cuDNN re-picks algorithms), so ``W = q*ceil(x) + (1-q)*x`` and
  ``Fc(n) = (W(n) / W(n_ref))**alpha``.  It is flat once ``k*m >= B``.  Unknown
  grids scale as ``1/n``.  (Measured points and twins may keep falling above
  ``B`` SMs, and :func:`fit_curve` keeps them: under an MPS limit of ``n`` SMs
  fewer than ``n`` blocks start at once.)
* ``Fm``: the DRAM part.  Bandwidth saturates at ``mem_knee_sms`` SMs, so
  ``Fm(n) = max(1, knee/n) / max(1, knee/n_ref)``: memory-bound kernels stop
  gaining at about half the GPU (Habitat, Yu et al., ATC'21, scales memory-bound
  kernels by bandwidth, compute-bound ones by waves).
* ``phi``: how memory-bound the kernel is, a ramp in its DRAM utilisation at the
  reference (``dram_util``, fraction of peak) from ``dram_lo`` to ``dram_hi``.
  Convolution/GEMM kernels have ``phi = 0``: a GEMM streaming weights at 80 % of
  peak still scales with SMs (VGG's classifier does), because each SM's tile
  pipeline, not DRAM, limits it; a fitted ramp for them went to zero.

The constants in :data:`FITTED` were fitted by ``tools/validate_scaling.py --fit``
on the A100 MPS measurements (``../shared/data/calibration/a100_mps_kernels``,
long files of resnet50, resnet152, vgg16, vgg19, mobilenet, inception, every batch,
MPS 20/40/50/60/80 % predicted from 100 %); ``profiles/README.md`` has the
leave-one-model-out errors.  :func:`fit_curve` turns a kernel's measured points
into its 18-level profile curve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KNEE_TOLERANCE = 0.03
"""A kernel 'stops gaining' at the first level within 3 % of its full-GPU time
(the same rule as :func:`bless.build.profiler.estimate_max_sm_share`)."""


@dataclass(frozen=True)
class ScalingParams:
    """The model's global constants (see module docstring)."""

    fixed_us: float
    mem_knee_sms: float
    dram_lo: float
    dram_hi: float
    blocks_per_sm: float
    quantisation: float
    exponent: float

    def as_vector(self) -> np.ndarray:
        return np.array([getattr(self, f) for f in PARAM_NAMES], dtype=float)

    @classmethod
    def from_vector(cls, v) -> ScalingParams:
        return cls(**{f: float(x) for f, x in zip(PARAM_NAMES, v)})


PARAM_NAMES = (
    "fixed_us",
    "mem_knee_sms",
    "dram_lo",
    "dram_hi",
    "blocks_per_sm",
    "quantisation",
    "exponent",
)

FITTED = ScalingParams(
    fixed_us=5.691,
    mem_knee_sms=54.0,
    dram_lo=0.619,
    dram_hi=0.916,
    blocks_per_sm=1.183,
    quantisation=0.555,
    exponent=0.983,
)
"""Fitted on the A100 MPS data named in the module docstring (all six models)."""


@dataclass(frozen=True)
class KernelTraits:
    """What the model needs to know of a kernel besides its reference duration."""

    blocks: int | None = None
    dram_util: float = 0.0
    """DRAM bandwidth used at the reference SM count, fraction of peak."""
    conv_family: bool = False


def predict(t_ref, n: float, traits: KernelTraits, *, n_ref: float = 108, params: ScalingParams = FITTED):
    """Duration at ``n`` SMs of a kernel that takes ``t_ref`` (us, scalar or array) at ``n_ref`` SMs."""
    t = np.asarray(t_ref, dtype=float)
    flat = t.reshape(-1)
    out = predict_many(
        flat,
        n,
        blocks=np.full(flat.size, float(traits.blocks or 0)),
        dram_util=np.full(flat.size, traits.dram_util),
        conv_family=np.full(flat.size, traits.conv_family),
        n_ref=n_ref,
        params=params,
    )
    return float(out[0]) if t.ndim == 0 else out.reshape(t.shape)


def predict_many(
    t_ref: np.ndarray,
    n: float,
    *,
    blocks: np.ndarray,
    dram_util: np.ndarray,
    conv_family: np.ndarray,
    n_ref: float = 108,
    params: ScalingParams = FITTED,
) -> np.ndarray:
    """Vectorised :func:`predict`: arrays over kernels (``blocks`` 0 = unknown grid)."""
    if n <= 0 or n_ref <= 0:
        raise ValueError(f"SM counts must be positive, got n={n}, n_ref={n_ref}")
    p = params
    t_ref = np.asarray(t_ref, dtype=float)
    blocks = np.asarray(blocks, dtype=float)
    fixed = np.minimum(t_ref, abs(p.fixed_us))
    compute = (_waves(blocks, n, p) / _waves(blocks, n_ref, p)) ** p.exponent
    memory = max(1.0, p.mem_knee_sms / n) / max(1.0, p.mem_knee_sms / n_ref)
    ramp = (np.asarray(dram_util, dtype=float) - p.dram_lo) / max(p.dram_hi - p.dram_lo, 1e-3)
    phi = np.where(conv_family, 0.0, np.clip(ramp, 0.0, 1.0))
    return fixed + (t_ref - fixed) * ((1.0 - phi) * compute + phi * memory)


def _waves(blocks: np.ndarray, m: float, p: ScalingParams) -> np.ndarray:
    """Block-times one SM works through on ``m`` SMs (1/m for an unknown grid)."""
    k = max(p.blocks_per_sm, 0.2)
    q = min(max(p.quantisation, 0.0), 1.0)
    known = blocks > 0
    b = np.where(known, blocks, 1.0)
    x = b / np.minimum(k * m, b)
    quantised = q * np.ceil(x - 1e-9) + (1.0 - q) * x
    return np.where(known, quantised, 1.0 / m)


# ------------------------------------------------------------- curve fitting
@dataclass(frozen=True)
class Curve:
    """A kernel's duration at each profile level and the share of SMs it keeps busy."""

    t: np.ndarray
    """Duration (us) alone with ``level_sms[i]`` SMs available, non-increasing in SMs."""
    max_sm_share: float
    """Most SMs it keeps busy at once (occupancy), as a fraction of the GPU; the
    duration curve is not flat from there (see :func:`fit_curve`)."""


def fit_curve(
    level_sms,
    points: dict[float, float],
    traits: KernelTraits,
    *,
    sm_count: int = 108,
    params: ScalingParams = FITTED,
) -> Curve:
    """The 18-level curve through a kernel's measured ``points`` (SMs -> us).

    Measured points are first made non-increasing in SMs (isotonic regression,
    which pools noisy neighbours to their mean); between points the curve is
    linear in ``1/n`` (what the simulator assumes between levels); below the
    lowest point the scaling model extends it from that point.  Above the highest
    point, when it is not the whole GPU (BERT's data stops at 88 SMs), the kernel's
    own trend does: ``a + b/n`` least-squares through its three highest points,
    kept between no gain and linear gain (predicting 108 SMs from 54-88 this way
    is 6.9 % worst-case per pass on the CNN data, the model alone 14 %).

    The curve is **not** flattened at the kernel's block count: under an MPS
    active-thread limit a kernel with ``B <= n`` blocks is still slower at ``n``
    SMs than on the whole GPU when ``B`` exceeds the SMs the limit actually lets
    its blocks start on at once (the A100 data: a 64-block convolution takes
    24.6 us at 108 and 88 SMs but 38.8 us at 66, 54 and 44; 52-block kernels are
    fast at 66 SMs and slow at 54; see ``profiles/README.md``).  Whatever the
    points and the model say above the block count is kept.

    ``max_sm_share`` is occupancy, not a duration rule: the most SMs the kernel
    keeps busy at once, the smaller of its block count and the first level within
    :data:`KNEE_TOLERANCE` of the full-GPU time, as a fraction of the GPU.
    """
    if not points:
        raise ValueError("fit_curve needs at least one measured point")
    sms = np.array(sorted(points), dtype=float)
    vals = _non_increasing(np.array([points[s] for s in sorted(points)], dtype=float))
    levels = np.asarray(level_sms, dtype=float)
    t = np.empty(len(levels))
    for i, n in enumerate(levels):
        if n <= sms[0]:
            t[i] = predict(vals[0], n, traits, n_ref=sms[0], params=params)
        elif n >= sms[-1]:
            t[i] = (
                _extend_up(sms, vals, n) if len(sms) > 1 else predict(vals[-1], n, traits, n_ref=sms[-1], params=params)
            )
        else:
            hi = int(np.searchsorted(sms, n))
            lo = hi - 1
            w = (1.0 / n - 1.0 / sms[hi]) / (1.0 / sms[lo] - 1.0 / sms[hi])
            t[i] = w * vals[lo] + (1.0 - w) * vals[hi]
    t = np.maximum.accumulate(t[::-1])[::-1]  # never faster with fewer SMs
    full = t[-1]
    knee = float(levels[int(np.argmax(t <= full * (1.0 + KNEE_TOLERANCE)))])
    busy = min(knee, float(traits.blocks or sm_count))
    return Curve(t=t, max_sm_share=min(max(busy, 1.0), sm_count) / sm_count)


def _extend_up(sms: np.ndarray, vals: np.ndarray, n: float) -> float:
    """A kernel's own ``a + b/n`` trend beyond its highest measured SM count."""
    x, y = 1.0 / sms[-3:], vals[-3:]
    slope = max(0.0, float(np.polyfit(x, y, 1)[0])) if len(x) > 1 else 0.0
    value = float(y.mean() - slope * x.mean() + slope / n)
    top, hi = float(vals[-1]), float(sms[-1])
    return min(top, max(value, top * hi / n))


def _non_increasing(v: np.ndarray) -> np.ndarray:
    """Isotonic (pool-adjacent-violators) fit of ``v`` that does not increase along the array."""
    blocks: list[list[float]] = []  # [sum, count]
    for x in v:
        blocks.append([x, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return np.concatenate([np.full(int(c), s / c) for s, c in blocks])
