"""Seeded synthetic apps: kernel lists with realistic scaling, for tests and benchmarks.

Each kernel gets a block count, a DRAM intensity and a duration curve of the
form ``t(n) = serial + parallel * waves(n) / waves(N)`` with
``waves(n) = ceil(blocks / min(n, blocks))`` (a fixed part plus
work spread over the SMs it can use, with wave quantisation).  Real apps come
from measured data (``profiles/``); these exist so that tests can control
kernel count, length and memory intensity exactly.
"""

from __future__ import annotations

import math

import numpy as np

from bless.hw.gpus import DEFAULT_GPU, N_LEVELS, get_gpu
from bless.profiles.format import KernelDesc, Profile, Provenance


def synthetic_profile(
    app: str = "synthetic",
    *,
    gpu: str = DEFAULT_GPU,
    n_kernels: int = 40,
    mean_us: float = 100.0,
    dram_util: float | tuple[float, float] = (0.05, 0.6),
    seed: int = 0,
    memory_bytes: int = 512 * 2**20,
    memcpy_first: bool = False,
) -> Profile:
    """A deterministic synthetic app profile (see module docstring)."""
    spec = get_gpu(gpu)
    rng = np.random.default_rng(seed)
    levels = np.array(spec.level_sms())
    N = spec.sm_count
    kernels = []
    t = np.empty((N_LEVELS, n_kernels))
    lo, hi = (dram_util, dram_util) if isinstance(dram_util, (int, float)) else dram_util
    for k in range(n_kernels):
        if memcpy_first and k == 0:
            dur = mean_us * 0.5e-6
            kernels.append(KernelDesc(name="memcpy_h2d", kind="memcpy", max_sm_share=1.0))
            t[:, k] = dur
            continue
        blocks = int(rng.choice([32, 64, 80, 108, 216, 432, 1024, 4096]))
        block_threads = int(rng.choice([128, 256, 512]))
        full = float(rng.lognormal(math.log(mean_us), 0.6)) * 1e-6
        serial = full * float(rng.uniform(0.05, 0.25))
        cap = min(N, blocks)
        for li, n in enumerate(levels):
            waves = math.ceil(blocks / min(n, cap)) / math.ceil(blocks / cap)
            t[li, k] = serial + (full - serial) * waves
        kernels.append(
            KernelDesc(
                name=f"{app}_k{k}",
                kind="compute",
                grid=(blocks, 1, 1),
                block=(block_threads, 1, 1),
                registers=int(rng.choice([32, 64, 128])),
                shared_mem=int(rng.choice([0, 16384, 49152])),
                max_sm_share=cap / N,
                dram_util=float(rng.uniform(lo, hi)),
            )
        )
    T = t.sum(axis=1) + 3e-6
    return Profile(
        app=app,
        gpu=spec.name,
        kind="inference",
        batch=1,
        level_sms=tuple(int(x) for x in levels),
        kernels=tuple(kernels),
        t=t,
        T=T,
        memory_bytes=memory_bytes,
        provenance=Provenance(
            method="derived", gpu=spec.name, source=f"bless.profiles.synthetic seed={seed}", model="synthetic"
        ),
    )
