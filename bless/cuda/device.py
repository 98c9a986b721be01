"""One GPU as the driver sees it: its facts, its primary context, and making contexts current.

The primary context is the unrestricted context of every app (all SMs) and
the one that is current on every thread that talks to the backend: calls that
need *a* context (events of the primary context, memory copies, memory
queries) then always have one.  Restricted contexts are made current only
briefly, around the calls that create things in them (:meth:`Device.current`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bless.cuda.driver import Driver, format_version


@dataclass(frozen=True)
class DeviceInfo:
    """What bless needs to know about the GPU."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    memory_bytes: int
    driver_version: int

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def describe(self) -> str:
        return (
            f"{self.name} ({self.arch}, {self.sm_count} SMs, {self.memory_bytes / 2**30:.0f} GiB), "
            f"driver CUDA {format_version(self.driver_version)}"
        )


class Device:
    """A GPU with its primary context retained for the lifetime of this object."""

    def __init__(self, driver: Driver, ordinal: int = 0) -> None:
        self.driver = driver
        cu = driver.cu
        count = int(driver.call("cuDeviceGetCount"))
        if not 0 <= ordinal < count:
            from bless.backend.interface import BackendError

            raise BackendError(f"device {ordinal} does not exist: the driver sees {count} GPU(s) (0..{count - 1})")
        self.handle = driver.call("cuDeviceGet", ordinal)
        attr = cu.CUdevice_attribute
        raw_name = driver.call("cuDeviceGetName", 256, self.handle)
        name = raw_name.split(b"\0", 1)[0].decode() if isinstance(raw_name, bytes) else str(raw_name)
        self.info = DeviceInfo(
            ordinal=ordinal,
            name=name,
            compute_capability=(
                int(
                    driver.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle)
                ),
                int(
                    driver.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle)
                ),
            ),
            sm_count=int(
                driver.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.handle)
            ),
            memory_bytes=int(driver.call("cuDeviceTotalMem", self.handle)),
            driver_version=driver.version(),
        )
        self.primary = driver.call("cuDevicePrimaryCtxRetain", self.handle)
        self._thread = threading.local()
        self.make_current()

    def make_current(self) -> None:
        """Make the primary context current on the calling thread (once per thread)."""
        if not getattr(self._thread, "ready", False):
            self.driver.call("cuCtxSetCurrent", self.primary)
            self._thread.ready = True

    @contextmanager
    def current(self, context: Any) -> Iterator[None]:
        """Run a block with ``context`` current on this thread, then restore the previous one."""
        self.make_current()
        self.driver.call("cuCtxPushCurrent", context)
        try:
            yield
        finally:
            self.driver.call("cuCtxPopCurrent")

    def memory_info(self) -> tuple[int, int]:
        """(free, total) device memory in bytes, as the driver reports it now."""
        self.make_current()
        free, total = self.driver.call("cuMemGetInfo")
        return int(free), int(total)

    def close(self) -> None:
        self.driver.call("cuDevicePrimaryCtxRelease", self.handle)
