"""An app's device memory: one VMM arena that every context of the process can use.

An app's kernels run in up to 18 contexts (its unrestricted one and the
restricted ones of the levels it uses), and all of them must see the same
weights and activations.  ``cuMemAlloc`` memory belongs to the context that
allocated it, so bless allocates each app's buffers with the virtual memory
management API instead: ``cuMemCreate`` (physical memory on the device),
``cuMemAddressReserve`` + ``cuMemMap`` (one virtual range, process wide) and
``cuMemSetAccess`` (read-write for the device), which makes the range usable
from every context on that device, MPS and green contexts alike.
``tools/gpu_check.py`` verifies this on the GPU (a kernel in a restricted
context reads what one in the primary context wrote).

Buffers are laid out in the arena at 256-byte aligned offsets (the alignment
``cudaMalloc`` guarantees, which vectorised kernels rely on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bless.backend.interface import BackendError
from bless.cuda.device import Device

BUFFER_ALIGN = 256


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def layout(sizes: Sequence[int], align: int = BUFFER_ALIGN) -> tuple[list[int], int]:
    """Offsets of buffers of ``sizes`` bytes packed at ``align``-byte boundaries, and the total."""
    offsets, cursor = [], 0
    for size in sizes:
        if size < 0:
            raise ValueError(f"buffer size must be >= 0, got {size}")
        offsets.append(cursor)
        cursor = round_up(cursor + max(size, 1), align)
    return offsets, cursor


@dataclass(eq=False)
class Arena:
    """A mapped VMM range: ``base`` is its device address, ``size`` its mapped bytes."""

    device: Device
    handle: Any
    base: int
    size: int

    @classmethod
    def allocate(cls, device: Device, nbytes: int, what: str = "an arena") -> Arena:
        """Create, reserve, map and open ``nbytes`` (rounded to the VMM granularity) for the device."""
        drv, cu = device.driver, device.driver.cu
        device.make_current()
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device.info.ordinal
        granularity = int(
            drv.call(
                "cuMemGetAllocationGranularity",
                prop,
                cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        )
        size = round_up(max(nbytes, 1), granularity)
        free = device.memory_info()[0]
        if size > free:
            raise BackendError(
                f"out of GPU memory for {what}: needs {size / 2**20:.0f} MiB, "
                f"{free / 2**20:.0f} MiB free on {device.info.name}"
            )
        handle = drv.call("cuMemCreate", size, prop, 0)
        undo = [lambda: drv.call("cuMemRelease", handle)]
        try:
            ptr = drv.call("cuMemAddressReserve", size, 0, 0, 0)
            undo.append(lambda: drv.call("cuMemAddressFree", ptr, size))
            drv.call("cuMemMap", ptr, size, 0, handle, 0)
            undo.append(lambda: drv.call("cuMemUnmap", ptr, size))
            access = cu.CUmemAccessDesc()
            access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = device.info.ordinal
            access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            drv.call("cuMemSetAccess", ptr, size, [access], 1)
        except BackendError:
            for step in reversed(undo):
                step()
            raise
        return cls(device, handle, int(ptr), size)

    def write(self, offset: int, host: Any, nbytes: int) -> None:
        """Copy ``nbytes`` from a host address (an int, e.g. ``array.ctypes.data``)."""
        self._check(offset, nbytes)
        self.device.make_current()
        self.device.driver.call("cuMemcpyHtoD", self.base + offset, host, nbytes)

    def read(self, offset: int, host: Any, nbytes: int) -> None:
        """Copy ``nbytes`` into a host address."""
        self._check(offset, nbytes)
        self.device.make_current()
        self.device.driver.call("cuMemcpyDtoH", host, self.base + offset, nbytes)

    def zero(self, offset: int, nbytes: int) -> None:
        self._check(offset, nbytes)
        self.device.make_current()
        self.device.driver.call("cuMemsetD8", self.base + offset, 0, nbytes)

    def _check(self, offset: int, nbytes: int) -> None:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError(f"bytes {offset}..{offset + nbytes} are outside the {self.size}-byte arena")

    def free(self) -> None:
        drv = self.device.driver
        drv.call("cuMemUnmap", self.base, self.size)
        drv.call("cuMemAddressFree", self.base, self.size)
        drv.call("cuMemRelease", self.handle)
