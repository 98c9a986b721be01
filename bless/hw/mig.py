"""MIG placement rules: which sets of GPU instances fit one GPU, and where they start.

A hardware fact every layer needs -- the MIG baseline (:mod:`bless.policies.mig`)
checks its slices with it, the MIG + MPS planner (:mod:`bless.policies.migmps`)
enumerates the layouts it may choose from -- so it lives beside the GPU specs.
An instance of a profile occupies ``memory_slices`` consecutive memory slices
from one of its allowed start positions (``MigProfile.placements``, from
``nvidia-smi mig -lgipp``); instances may not overlap, and together they may
hold at most the GPU's compute slices.
"""

from __future__ import annotations

from itertools import combinations_with_replacement

from bless.hw.gpus import GpuSpec, MigProfile


def place(profiles: list[MigProfile], slots: int) -> list[int] | None:
    """Start slot of each instance in a valid placement, or None if none exists."""
    order = sorted(range(len(profiles)), key=lambda i: -profiles[i].memory_slices)
    starts = [0] * len(profiles)
    used = [False] * slots

    def fit(n: int) -> bool:
        if n == len(order):
            return True
        i = order[n]
        p = profiles[i]
        for s in p.placements:
            span = range(s, s + p.memory_slices)
            if s + p.memory_slices <= slots and not any(used[j] for j in span):
                for j in span:
                    used[j] = True
                starts[i] = s
                if fit(n + 1):
                    return True
                for j in span:
                    used[j] = False
        return False

    return starts if fit(0) else None


def compute_slices(gpu: GpuSpec) -> int:
    """Compute slices (GPCs) MIG can hand out on ``gpu`` (7 on the A100)."""
    return max((p.compute_slices for p in gpu.mig_profiles), default=0)


def fits(profiles: list[MigProfile], gpu: GpuSpec) -> list[int] | None:
    """Start slots of ``profiles`` on ``gpu`` if the GPU accepts them together, else None."""
    if sum(p.compute_slices for p in profiles) > compute_slices(gpu):
        return None
    return place(profiles, gpu.mig_memory_slices)


def layouts(gpu: GpuSpec, count: int) -> list[tuple[MigProfile, ...]]:
    """Every multiset of ``count`` instances ``gpu`` accepts together (profiles in ``gpu.mig_profiles`` order)."""
    return [c for c in combinations_with_replacement(gpu.mig_profiles, count) if fits(list(c), gpu) is not None]
