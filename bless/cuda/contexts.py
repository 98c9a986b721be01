"""SM-restricted contexts: green contexts or MPS execution affinity, behind one pool interface.

A pool hands out one :class:`ExecContext` per distinct SM set and caches it:
contexts are shared by the apps of the process where sharing changes nothing
(an app's memory lives in a VMM arena every context can reach, see
:mod:`bless.cuda.memory`): green contexts of the same SM groups are the same
SMs, so the two apps of a split at 18 levels cost at most 34 green contexts
(each further app's sets start from a home of its own: at most 17 more).  An MPS affinity
context's limit binds all its kernels together, so each app (or shared
partition, ``Backend.create_context``) has its own per SM count.  ``sm_limit``
None (or the whole GPU) is the primary context.

* **Green contexts** (driver 12.4+, no daemon).  The device's SMs are split
  once with ``cuDevSmResourceSplitByCount`` into groups of the architecture's
  minimum (8 SMs on Hopper, 2 on Ampere); each app has a home, the groups
  nearest its quota's SMs apart from the other apps' homes, and a level is the
  run of groups nearest its SM count from the home's edge, growing toward the
  high end for even app slots and toward the low end for odd ones
  (:mod:`bless.hw.sm_sets`, which the simulator uses too): the two apps of a
  split hold the two ends, and apps whose quotas fit the GPU get disjoint
  SMs at their quotas however many there are.  The split's
  remainder (SMs left over by its symmetrical groups) is the last group where
  the driver merges it with others; where it does not, restricted contexts
  hold at most the grouped SMs (``GpuSpec.green_groupable_sms``) and two apps
  whose counts add up to more share a group.
* **MPS** (needs the MPS control daemon, see :mod:`bless.cuda.mps`).  One
  ``cuCtxCreate`` context per SM count with a ``CU_EXEC_AFFINITY_TYPE_SM_COUNT``
  affinity; the driver rounds the count up, so the granted count is read
  back with ``cuCtxGetExecAffinity``.

Either way :attr:`ExecContext.sm_count` is what the hardware granted.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from bless.backend.interface import BackendError
from bless.cuda.device import Device
from bless.cuda.driver import (
    GREEN_CONTEXT_DRIVER,
    GREEN_STREAM_DRIVER,
    CudaError,
    format_version,
)
from bless.hw.sm_sets import GreenHomes, green_overlap, select_groups

_log = logging.getLogger(__name__)

MECHANISMS = ("auto", "green", "mps")


@dataclass(eq=False)
class ExecContext:
    """A CUDA context and the SMs it may use."""

    handle: Any
    """The CUcontext (for a green context: the CUcontext made from it)."""
    sm_count: int
    """SMs granted by the hardware."""
    mechanism: str
    """primary, green or mps."""
    label: str
    green: Any = None
    """The CUgreenCtx of a green context."""
    groups: tuple[int, ...] = ()
    """Indices of the SM groups a green context is made of."""

    @property
    def restricted(self) -> bool:
        return self.mechanism != "primary"


def choose_mechanism(requested: str, driver_version: int, has_green_api: bool) -> str:
    """green or mps: ``auto`` takes green contexts when the driver has them, else MPS."""
    if requested not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {requested!r}")
    green_ok = driver_version >= GREEN_CONTEXT_DRIVER and has_green_api
    if requested == "auto":
        return "green" if green_ok else "mps"
    if requested == "green" and not green_ok:
        raise BackendError(
            f"green contexts need a CUDA 12.4+ driver and bindings that have them; this driver is "
            f"CUDA {format_version(driver_version)}: use mechanism mps (start the daemon with `bless mps start`)"
        )
    return requested


class ContextPool(ABC):
    """Restricted contexts by SM count, created on first use and shared by every app."""

    mechanism: str = "?"

    def __init__(self, device: Device) -> None:
        self.device = device
        self.driver = device.driver
        self.primary = ExecContext(device.primary, device.info.sm_count, "primary", "all SMs")
        self._contexts: dict[Any, ExecContext] = {}
        self._priorities: tuple[int, int] | None = None
        """The device's (lowest, highest) stream priority, once read."""

    def place(self, owner: Hashable, app: str, home_sms: float | None, slot: int) -> None:
        """App ``app`` (``owner``) deployed in ``slot`` whose quota promises ``home_sms`` SMs:
        where contexts are fixed SM sets, it gets its home among them (a warning where the
        home must share SMs with other apps')."""

    def release(self, owner: Hashable) -> None:
        """``owner`` was undeployed: its home, if any, is free (its contexts stay pooled)."""

    def context(
        self, sm_limit: int | None, slot: int = 0, shared: str | None = None, owner: Hashable | None = None
    ) -> ExecContext:
        """The context for ``sm_limit`` SMs (None: all) for the app ``owner`` in deployment slot
        ``slot``, or for the apps of the shared partition ``shared`` (see ``Backend.create_context``)."""
        if sm_limit is None or sm_limit >= self.device.info.sm_count:
            return self.primary
        key = self._key(int(sm_limit), slot, shared, owner)
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = self._contexts[key] = self._create(key)
        return ctx

    @property
    def contexts(self) -> list[ExecContext]:
        """Every restricted context created so far."""
        return list(self._contexts.values())

    def create_stream(self, ctx: ExecContext, low_priority: bool = False) -> Any:
        """A non-blocking stream in ``ctx``, at the highest stream priority, or the lowest if
        ``low_priority``: the block scheduler dispatches pending blocks of higher-priority
        streams first (CUDA C++ Programming Guide, "Stream Priorities").  The default
        priority is the lowest, so ordinary streams are made at the highest, all alike."""
        flags = self.driver.cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        with self.device.current(ctx.handle):
            priority = self.stream_priority(low_priority)
            return self.driver.call("cuStreamCreateWithPriority", flags, priority)

    def stream_priority(self, low_priority: bool) -> int:
        """The device's lowest stream priority, or its highest (``cuCtxGetStreamPriorityRange``,
        read once, with a context current)."""
        if self._priorities is None:
            least, greatest = self.driver.call("cuCtxGetStreamPriorityRange")
            self._priorities = (int(least), int(greatest))
        return self._priorities[0 if low_priority else 1]

    def close(self) -> None:
        for ctx in self._contexts.values():
            self._destroy(ctx)
        self._contexts.clear()

    @abstractmethod
    def _key(self, sm_limit: int, slot: int, shared: str | None, owner: Hashable | None) -> Any:
        """What identifies the context for this request (equal keys share one context)."""

    @abstractmethod
    def _create(self, key: Any) -> ExecContext: ...

    @abstractmethod
    def _destroy(self, ctx: ExecContext) -> None: ...


class GreenContextPool(ContextPool):
    """Green contexts made of unions of SM groups from one split of the device."""

    mechanism = "green"

    def __init__(self, device: Device, min_sms: int) -> None:
        super().__init__(device)
        drv, cu = self.driver, self.driver.cu
        sm_type = cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
        whole = drv.call("cuDeviceGetDevResource", device.handle, sm_type)
        most = int(whole.sm.smCount) // min_sms
        groups, count, remainder = drv.call("cuDevSmResourceSplitByCount", most, whole, 0, min_sms)
        self.groups = list(groups)[: int(count)]
        if not self.groups:
            raise BackendError(
                f"cuDevSmResourceSplitByCount made no group of {min_sms} SMs on {device.info.name}; use mechanism mps"
            )
        self.remainder_merged = int(remainder.sm.smCount) > 0 and self._merges(self.groups[-1], remainder)
        """Whether the split's remainder is the last group (a GH100's 12 SMs beside 15 groups of 8)."""
        if self.remainder_merged:
            self.groups.append(remainder)
        self.sizes = [int(g.sm.smCount) for g in self.groups]
        self.homes = GreenHomes(tuple(self.sizes))
        """Where each deployed app's contexts sit among the groups."""
        self._sm_type = sm_type
        self._whole = whole

    def _merges(self, group: Any, remainder: Any) -> bool:
        """Whether the driver makes one descriptor of a group and the split's remainder.

        The split makes symmetrical groups only, so SMs are left over where the
        GPCs differ; where the remainder merges, the high end of the group list
        starts with it and the two apps of a split can hold every SM between them.
        """
        try:
            self.driver.call("cuDevResourceGenerateDesc", [group, remainder], 2)
        except CudaError:
            return False
        return True

    def place(self, owner: Hashable, app: str, home_sms: float | None, slot: int) -> None:
        shared = self.homes.place(owner, home_sms, from_high=slot % 2 == 1)
        if shared:
            _log.warning(green_overlap(app, shared, self.sizes))

    def release(self, owner: Hashable) -> None:
        self.homes.release(owner)

    def _key(self, sm_limit: int, slot: int, shared: str | None, owner: Hashable | None) -> tuple[int, ...]:
        # Equal SM groups are the same SMs, so apps on them may as well share the context;
        # a shared partition takes the high groups, an app its sets from its home.
        if shared is not None:
            return select_groups(self.sizes, sm_limit, from_high=True)
        return self.homes.groups(owner, sm_limit)

    def _create(self, key: tuple[int, ...]) -> ExecContext:
        drv, cu = self.driver, self.driver.cu
        own_split = False
        try:
            desc = drv.call("cuDevResourceGenerateDesc", [self.groups[i] for i in key], len(key))
        except CudaError as e:
            if len(key) == 1 or e.code not in (1, 915):
                raise
            # Drivers that cannot merge groups (12.4 takes one resource per descriptor):
            # one group of the union's size from a split of its own; its SMs may overlap other levels'.
            own, _count, _rest = drv.call(
                "cuDevSmResourceSplitByCount", 1, self._whole, 0, sum(self.sizes[i] for i in key)
            )
            desc = drv.call("cuDevResourceGenerateDesc", [own[0]], 1)
            own_split = True
        flags = cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM
        green = drv.call("cuGreenCtxCreate", desc, self.device.handle, flags)
        try:
            handle = drv.call("cuCtxFromGreenCtx", green)
            granted = int(drv.call("cuGreenCtxGetDevResource", green, self._sm_type).sm.smCount)
        except BackendError:
            drv.call("cuGreenCtxDestroy", green)
            raise
        label = f"green {granted} SMs " + ("(own split)" if own_split else f"(groups {key[0]}..{key[-1]})")
        return ExecContext(handle, granted, "green", label, green=green, groups=key)

    def create_stream(self, ctx: ExecContext, low_priority: bool = False) -> Any:
        if ctx.green is not None and self.device.info.driver_version >= GREEN_STREAM_DRIVER:
            flags = self.driver.cu.CUstream_flags.CU_STREAM_NON_BLOCKING
            with self.device.current(ctx.handle):
                priority = self.stream_priority(low_priority)
            return self.driver.call("cuGreenCtxStreamCreate", ctx.green, flags, priority)
        # 12.4 drivers: a stream created while the green context is current belongs to it.
        return super().create_stream(ctx, low_priority)

    def _destroy(self, ctx: ExecContext) -> None:
        self.driver.call("cuGreenCtxDestroy", ctx.green)


def create_affinity_context(device: Device, sm_count: int) -> Any:
    """``cuCtxCreate`` with an SM-count execution affinity; the new context is left current.

    cuda-bindings 12.x exposes the call as ``cuCtxCreate_v3(params, n, flags, dev)``;
    13.x as ``cuCtxCreate(CUctxCreateParams, flags, dev)`` (the v4 entry point).
    """
    drv, cu = device.driver, device.driver.cu
    param = cu.CUexecAffinityParam()
    param.type = cu.CUexecAffinityType.CU_EXEC_AFFINITY_TYPE_SM_COUNT
    param.param.smCount.val = sm_count
    if drv.has("cuCtxCreate_v3"):
        return drv.call("cuCtxCreate_v3", [param], 1, 0, device.handle)
    params = cu.CUctxCreateParams()
    params.execAffinityParams = [param]
    params.numExecAffinityParams = 1
    return drv.call("cuCtxCreate", params, 0, device.handle)


class MpsContextPool(ContextPool):
    """One MPS client context per app (or shared partition) and SM count (``CU_EXEC_AFFINITY_TYPE_SM_COUNT``)."""

    mechanism = "mps"

    def _key(self, sm_limit: int, slot: int, shared: str | None, owner: Hashable | None) -> tuple[int, int | str]:
        # An affinity context's SMs are its own: two apps in one context would share its
        # limit, so each app (or shared partition) has its own context per SM count.
        return sm_limit, slot if shared is None else shared

    def _create(self, key: tuple[int, int | str]) -> ExecContext:
        sm_limit = key[0]
        drv, cu = self.driver, self.driver.cu
        self.device.make_current()
        handle = create_affinity_context(self.device, sm_limit)
        try:
            affinity = drv.call("cuCtxGetExecAffinity", cu.CUexecAffinityType.CU_EXEC_AFFINITY_TYPE_SM_COUNT)
            granted = int(affinity.param.smCount.val)
        except BackendError:
            drv.call("cuCtxPopCurrent")
            drv.call("cuCtxDestroy", handle)
            raise
        drv.call("cuCtxPopCurrent")
        return ExecContext(handle, granted, "mps", f"MPS {granted} SMs (asked {sm_limit})")

    def _destroy(self, ctx: ExecContext) -> None:
        self.driver.call("cuCtxDestroy", ctx.handle)


def make_pool(mechanism: str, device: Device, min_green_sms: int) -> ContextPool:
    """The pool for a resolved mechanism (``green`` or ``mps``)."""
    if mechanism == "green":
        return GreenContextPool(device, min_green_sms)
    if mechanism == "mps":
        return MpsContextPool(device)
    raise ValueError(f"mechanism must be green or mps here, got {mechanism!r}")
