"""A kernel's demand on the GPU as its profile states it: time alone at each SM count, SMs, DRAM.

The simulated GPU runs an app's kernels from these numbers, and KACE describes
an app by them; reading them in one place keeps the two views of an app the
same.  Each function returns one value per kernel of the profile, in launch
order, copies (``memcpy``) included.
"""

from __future__ import annotations

import math

import numpy as np

from bless.hw.gpus import GpuSpec
from bless.profiles import curves
from bless.profiles.format import KernelDesc, Profile


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


def resident_blocks(desc: KernelDesc, gpu: GpuSpec) -> int:
    """Blocks of ``desc`` one SM holds at once: the tightest of the block, thread, register
    and shared-memory limits (what the profile gives of them)."""
    limit = gpu.max_blocks_per_sm
    threads = desc.threads_per_block
    if threads:
        limit = min(limit, gpu.max_threads_per_sm // threads)
        if desc.registers:
            limit = min(limit, gpu.registers_per_sm // (desc.registers * threads))
    if desc.shared_mem:
        limit = min(limit, gpu.shared_mem_per_sm // desc.shared_mem)
    return max(limit, 1)


def busy_sms(profile: Profile, gpu: GpuSpec) -> np.ndarray:
    """Shape (K,), integers: SMs' worth of capacity each kernel uses running at full speed on
    the :func:`max_sms` it spreads over; what it leaves, other kernels' blocks can use beside
    its own on the same SMs.  0 for copies.

    A kernel leaves room on its SMs only if both readings say so:

    * **residency** -- its blocks on each SM, ``ceil(blocks / max_sms)``, over the blocks one
      SM holds (:func:`resident_blocks`): an SM full of its blocks takes no other kernel's;
    * **throughput** -- its SM-seconds at the profile's smallest level over its SM-seconds
      spread out, ``n1 * t(n1) / (max_sms * t(N))``: a kernel as fast on few SMs, many blocks
      each, as on many needs little of each SM (a kernel that scales ideally reads 1).

    The larger share is the one that binds; the kernel is credited ``ceil(share * max_sms)``.
    The residency reading needs the launch configuration (grid, block, registers, shared
    memory), which profiles measured by ``bless profile --backend cuda`` carry; a kernel
    without it holds all of :func:`max_sms`, whole SMs.  Neither reading alone will do: the
    throughput reading under-states a kernel held back by the memory system or clocks at
    full spread, and the residency reading a latency-bound kernel whose few blocks keep
    their SMs' pipelines busy (``experiments/design_log.md``, item 22, measured against an
    H200).
    """
    spread = max_sms(profile, gpu)
    solo = solo_curves(profile, gpu)
    n1 = int(profile.level_sms[0])
    busy = spread.copy()
    for k, desc in enumerate(profile.kernels):
        m = int(spread[k])
        blocks = desc.blocks
        if m == 0 or blocks is None or not _launch_known(desc):
            continue
        residency = min(1.0, math.ceil(blocks / m) / resident_blocks(desc, gpu))
        throughput = min(1.0, n1 * solo[n1, k] / (m * solo[-1, k]))
        busy[k] = max(1, math.ceil(max(residency, throughput) * m - 1e-9))
    return busy


def block_seconds(profile: Profile, gpu: GpuSpec) -> np.ndarray:
    """Shape (K,): how long one round of each kernel's resident blocks takes at full speed on
    the :func:`max_sms` it spreads over, its time there over its rounds, ``ceil(blocks /
    (resident_blocks * max_sms))``: how long another kernel waits for an SM these blocks fill.
    0 for copies and where the launch configuration is unknown (as :func:`busy_sms` reads it)."""
    spread = max_sms(profile, gpu)
    full = full_gpu_times(profile, gpu)
    out = np.zeros(len(profile.kernels))
    for k, desc in enumerate(profile.kernels):
        m = int(spread[k])
        blocks = desc.blocks
        if m == 0 or blocks is None or not _launch_known(desc):
            continue
        out[k] = full[k] / math.ceil(blocks / (resident_blocks(desc, gpu) * m))
    return out


DRAIN_SHARE = 0.5
"""Share of a round of its resident blocks that a kernel, on average, waits for an SM those
blocks fill (:func:`drain_seconds`).  Half a round: blocks placed one after another as slots
free are, at a random instant, half-way through on average.  Our assumption, not fitted;
checked against an H200 (``experiments/design_log.md``, item 23): BLESS's BERT-base beside
VGG11, four variants, mean |GPU - simulator| of each app's mean over ISO 0.112 / 0.032 /
0.074 / 0.130 without the wait, 0.049 / 0.015 / 0.078 / 0.076 with it (0.031 / 0.022 /
0.062 / 0.010 at a quarter round); nine other pairs at three loads, 0.060 without, 0.038
with (0.042 at a quarter)."""


def drain_seconds(profile: Profile, gpu: GpuSpec) -> np.ndarray:
    """Shape (K,): how long another kernel waits, on average, for an SM that this kernel's
    blocks fill when it needs that SM (:data:`DRAIN_SHARE` of :func:`block_seconds`).  The
    hardware gives SMs to a higher-priority kernel only as the blocks on them end, and a
    kernel with blocks still to place refills every SM another frees, even between two
    kernels of one stream.  0 where the launch configuration is unknown."""
    return DRAIN_SHARE * block_seconds(profile, gpu)


def _launch_known(desc: KernelDesc) -> bool:
    """The profile gives the kernel's whole launch configuration (the occupancy readings need it)."""
    return not (desc.grid is None or desc.block is None or desc.registers is None or desc.shared_mem is None)


def dram_seconds(profile: Profile, full_gpu: np.ndarray) -> np.ndarray:
    """Shape (K,): bytes each kernel moves, as seconds of the GPU's peak DRAM bandwidth.

    ``dram_util`` (the fraction of peak bandwidth the kernel used alone on the
    whole GPU) times its full-GPU time ``full_gpu`` (:func:`full_gpu_times`),
    so no bandwidth constant is needed.  Copies count 0: a copy's traffic goes
    through the copy engine and is not a kernel's DRAM demand.
    """
    util = np.array([0.0 if k.kind == "memcpy" else k.dram_util for k in profile.kernels])
    return util * full_gpu
