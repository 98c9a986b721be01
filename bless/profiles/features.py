"""A kernel's demand on the GPU as its profile states it: time alone at each SM count, SMs, DRAM.

The simulated GPU runs an app's kernels from these numbers, and KACE describes
an app by them; reading them in one place keeps the two views of an app the
same.  Each function returns one value per kernel of the profile, in launch
order, copies (``memcpy``) included.
"""

from __future__ import annotations

import numpy as np

from bless.hw.gpus import GpuSpec
from bless.profiles import curves
from bless.profiles.format import Profile


def solo_curves(profile: Profile, gpu: GpuSpec) -> np.ndarray:
    """Shape (N + 1, K): kernel k's duration alone with n SMs available, n = 0..N.

    A compute kernel's column is its profile curve read at every SM count
    (:func:`bless.profiles.curves.dense_curve`; row 0 is +inf), made
    non-increasing in SMs -- a kernel is never slower with more SMs available,
    whatever measurement noise says -- and **not** flattened from
    :func:`max_sms` on: that is how many SMs the kernel occupies, while a
    kernel can still run faster with more available (measured under MPS: a
    64-block convolution is 1.58x slower at 66 SMs than at 88).  A copy runs
    on the copy engine and takes its full-GPU time at every count, 0 included.
    """
    if profile.gpu != gpu.name:
        raise ValueError(
            f"profile {profile.app!r} is for {profile.gpu}, not {gpu.name}; "
            f"use a profile made for {gpu.name} (bless profile {profile.app} --gpu {gpu.name})"
        )
    solo = curves.dense_curve(np.array(profile.level_sms), profile.t, gpu.sm_count)
    copy = profile.memcpy_mask()
    solo[:, copy] = solo[-1, copy]
    solo[1:] = np.minimum.accumulate(solo[1:], axis=0)
    return solo


def full_gpu_times(profile: Profile, gpu: GpuSpec) -> np.ndarray:
    """Shape (K,): each kernel's duration alone on the whole GPU.

    The last row of :func:`solo_curves`, so the least time at any SM count,
    which is the level-18 time unless noise made a smaller level faster.
    """
    return solo_curves(profile, gpu)[-1]


def max_sms(profile: Profile, gpu: GpuSpec) -> np.ndarray:
    """Shape (K,), integers: most SMs each kernel keeps busy; 0 for copies (copy engine)."""
    return np.array(
        [0 if k.kind == "memcpy" else k.max_sms(gpu.sm_count) for k in profile.kernels],
        dtype=np.int64,
    )


def dram_seconds(profile: Profile, full_gpu: np.ndarray) -> np.ndarray:
    """Shape (K,): bytes each kernel moves, as seconds of the GPU's peak DRAM bandwidth.

    ``dram_util`` (the fraction of peak bandwidth the kernel used alone on the
    whole GPU) times its full-GPU time ``full_gpu`` (:func:`full_gpu_times`),
    so no bandwidth constant is needed.  Copies count 0: a copy's traffic goes
    through the copy engine and is not a kernel's DRAM demand.
    """
    util = np.array([0.0 if k.kind == "memcpy" else k.dram_util for k in profile.kernels])
    return util * full_gpu
