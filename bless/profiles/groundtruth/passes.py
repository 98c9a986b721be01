"""One app's kernels as measured or derived points, before they become profile curves.

A :class:`KernelSeries` holds a kernel's descriptors and its durations at the SM
counts we know (measured, taken from a measured twin, or derived); a
:class:`PassData` is the launch-ordered list for one request.  The derivations
(batch interpolation, VGG11, training) map PassData to PassData, and
:mod:`bless.profiles.groundtruth.assemble` turns one into a profile.

Each kernel carries a one-letter ``source`` code (see :data:`SOURCE_CODES`) so a
profile can say, kernel by kernel, where its levels came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bless.profiles.groundtruth import mps
from bless.profiles.groundtruth.calibrate import TwinLibrary, twin_key
from bless.profiles.groundtruth.names import short_name
from bless.profiles.groundtruth.ops import is_conv_family
from bless.profiles.groundtruth.scaling import KernelTraits

SOURCE_CODES = {
    "m": "measured at every MPS level as this very kernel",
    "r": "measured at every MPS level; where cuDNN/cuBLAS ran other kernels for this operator, "
    "this kernel's share of their measured time",
    "t": "measured at full GPU; reduced levels from a measured twin (same name, grid, block) in another model",
    "s": "measured at full GPU; reduced levels from the scaling model",
    "f": "training forward kernel: the inference kernel's curve (BN scaled to training mode)",
    "b": "training backward kernel: a measured backward/forward ratio times the forward kernel's curve",
    "o": "optimizer / gradient-zeroing kernel: bytes over the measured A100 elementwise bandwidth",
    "c": "host-device copy over PCIe (no SM use)",
}


@dataclass(frozen=True)
class KernelSeries:
    """A kernel's descriptors and its duration (us) at the SM counts we know."""

    name: str
    points: dict[int, float]
    source: str
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    dram_util: float = 0.0
    registers: int | None = None
    shared_mem: int | None = None
    kind: str = "compute"
    category: str = ""
    """Operator category (``conv``, ``bn``, ``relu``...) where a derivation needs it."""

    @property
    def blocks(self) -> int | None:
        return None if self.grid is None else self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def conv_family(self) -> bool:
        return is_conv_family(self.name)

    @property
    def traits(self) -> KernelTraits:
        return KernelTraits(blocks=self.blocks, dram_util=self.dram_util, conv_family=self.conv_family)

    def scaled(self, factor: float, **changes) -> KernelSeries:
        """The same kernel with every point multiplied by ``factor``."""
        return replace(self, points={s: v * factor for s, v in self.points.items()}, **changes)


@dataclass(frozen=True)
class PassData:
    """One request of ``model`` at ``batch``: kernels in launch order and where they came from."""

    model: str
    batch: int
    kernels: tuple[KernelSeries, ...]
    files: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())


def from_mps(model: str, batch: int) -> PassData:
    """A measured pass of the A100 MPS data (full-GPU-only kernels get source ``s``; see :func:`with_twins`)."""
    p = mps.load_pass(model, batch)
    multi = len(p.sms) > 1
    kernels = tuple(
        KernelSeries(
            name=k.name,
            points={s: v / 1e3 for s, v in zip(p.sms, k.t_ns) if v is not None},
            source=("m" if all(k.same) else "r") if multi else "s",
            grid=k.grid,
            block=k.block,
            dram_util=k.dram_pct / 100,
        )
        for k in p.kernels
    )
    note = (
        f"{model} batch {batch}: measured at MPS {', '.join(f'{x} %' for x in p.levels)} "
        f"(SMs {', '.join(map(str, p.sms))}); one pass = the mean of the file's two identical passes"
    )
    return PassData(model, batch, kernels, (f"{mps.DATA_DIR}/{p.source}",), (note,))


def with_twins(pd: PassData, twins: TwinLibrary) -> PassData:
    """Give every full-GPU-only kernel the reduced-level points of its measured twin, where one exists."""
    kernels = []
    hits = 0
    for k in pd.kernels:
        ratios = twins.lookup(twin_key(k.name, k.grid, k.block)) if set(k.points) == {108} else None
        if ratios is None:
            kernels.append(k)
            continue
        hits += 1
        full = k.points[108]
        points = {**{s: full * float(r) for s, r in zip(twins.sms, ratios)}, 108: full}
        kernels.append(replace(k, points=points, source="t"))
    if not hits:
        return pd
    note = (
        f"{hits} of {len(pd.kernels)} full-GPU-only kernels take their reduced levels from measured twins "
        f"(same name, grid, block) in {', '.join(twins.models)}"
    )
    return replace(pd, kernels=tuple(kernels), notes=pd.notes + (note,))


def with_launch_resources(pd: PassData, table: dict) -> PassData:
    """Registers per thread and static shared memory for kernels seen, same name and grid, in the
    A100 kineto traces (``table`` from :func:`bless.profiles.groundtruth.kineto.launch_resources`)."""
    kernels = []
    for k in pd.kernels:
        found = table.get((short_name(k.name), k.grid)) if k.grid else None
        kernels.append(k if found is None else replace(k, registers=found[0], shared_mem=found[1]))
    return replace(pd, kernels=tuple(kernels))
