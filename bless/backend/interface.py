"""The backend interface: what the kernel manager and the profiler may ask of a GPU.

Everything above this interface (scheduler, determiner, manager, profiler,
baseline policies) is the same code on the simulated GPU and on a real one.
The interface is deliberately close to the CUDA driver model:

* an app is *deployed* once (its kernels loaded, its memory allocated);
* *contexts* are created once per app, unrestricted (``sm_limit=None``) or
  restricted to a number of SMs (MPS execution affinity or a green context);
* *streams* belong to a context and run their launches in order;
* a launch may name another launch it must follow (``after``): this orders a
  request's kernels across contexts (CUDA: an event recorded after ``after``
  and waited on by the new stream);
* the host can *synchronize* (wait for everything) or *wait* for the next
  completion of a launch marked ``notify`` (CUDA: event queries).

Times are seconds on the backend's clock (:meth:`Backend.now`).  A launch
object exposes ``tag``, ``start`` and ``end`` (``None`` until known).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bless.backend.trace_events import Placement
from bless.hw.costs import gpu_constants
from bless.hw.gpus import GpuSpec, get_gpu
from bless.profiles.format import Profile
from bless.registry import Registry

LAUNCH_QUEUE = 530
"""Kernels a CUDA stream holds launched and not yet finished before the next launch into it
blocks the host until one ends.  Measured on an H200 (driver 580.159.04, CUDA 13.0) by
``tools/gpu_check.py``'s "launch queue depth" check: the 531st launch of a ~360 us kernel into
one stream waited 336 us for one to end (``tools/gpu_check_results/2026-11-27-h200-2``).  A user
on NVIDIA's developer forum saw about 1000 with a short kernel ("CUDA stream are blocked when
launch lots of kernels (>1000)", 2018; GPU and driver not given), so the depth varies with the
GPU and driver, and may with the kernel's arguments (our assumption).  The CUDA backend
launches every app's kernels from one host thread, so a full stream holds up every app's
launches; the simulator blocks its host there the same way."""


@dataclass(frozen=True)
class HostCosts:
    """Host-side costs a simulated backend charges, in seconds.

    No defaults here: a GPU's figures live in its data file, each with its
    source or marked an assumption (``bless/hw/<gpu>.toml``); use
    :meth:`for_gpu`, or all four fields for an explicit setting.
    """

    launch: float
    """Host time to launch one kernel (cuLaunchKernel)."""
    sync: float
    """Host time to synchronise at the end of a squad."""
    context_switch: float
    """Idle time of a request whose next kernel goes to another context."""
    event: float
    """Latency of a cross-stream dependency within one context."""

    @classmethod
    def for_gpu(cls, gpu: GpuSpec | str) -> HostCosts:
        """The ``[host]`` figures of ``gpu``'s data file."""
        name = gpu.name if isinstance(gpu, GpuSpec) else get_gpu(gpu).name
        return gpu_constants(name).build("host", cls)


TRANSFORMS = ("none", "slice", "preempt")
"""How a best-effort kernel can be made to give the GPU back (Tally, ASPLOS'25, §4)."""


@dataclass(frozen=True)
class KernelTransform:
    """How one best-effort kernel is launched so that it yields the GPU quickly.

    Tally (Zhao et al., "Tally: Non-Intrusive Performance Isolation for
    Concurrent Deep Learning Workloads", ASPLOS'25) transforms best-effort
    kernels: *slicing* launches a kernel's blocks as several smaller kernels,
    *preemption* runs them as persistent thread blocks that check a flag
    between blocks.  Either way the kernel can stop only at ``chunks`` points
    (after each slice, after each wave of blocks); a kernel asked to yield
    finishes its current chunk first, which is the wait a latency-critical
    kernel sees.
    """

    mechanism: str
    """``none`` (launched as is), ``slice`` or ``preempt``."""
    chunks: int
    """Points where it can yield, evenly spaced in its work: slices, or block waves."""
    chunk_cost: float = 0.0
    """Seconds each chunk adds to the kernel alone (a slice's launch and tail, a wave's flag checks)."""
    resume_cost: float = 0.0
    """Seconds before a yielded kernel runs again once it may (a persistent kernel's relaunch)."""

    def __post_init__(self) -> None:
        if self.mechanism not in TRANSFORMS:
            raise ValueError(f"mechanism must be one of {', '.join(TRANSFORMS)}, got {self.mechanism!r}")
        if self.chunks < 1 or (self.mechanism == "none" and self.chunks != 1):
            raise ValueError(f"chunks must be >= 1 (exactly 1 for 'none'), got {self.chunks}")
        if not (self.chunk_cost >= 0 and self.resume_cost >= 0):
            raise ValueError(f"chunk_cost and resume_cost must be >= 0 s, got {self.chunk_cost}, {self.resume_cost}")


@dataclass(frozen=True, eq=False)
class AppHandle:
    """A deployed app: its profile plus whatever the backend loaded for it."""

    name: str
    profile: Profile
    private: Any = None


class BackendError(RuntimeError):
    """The backend cannot do what was asked (no GPU, out of memory, ...)."""


class Launched(Protocol):
    """What a backend's launch object tells the executor once the kernel has finished."""

    tag: Any
    """What the caller attached at launch (the executor: the request)."""
    start: float | None
    end: float | None
    """Host-clock seconds; None until the backend has resolved them, which it does for a
    finished kernel at the latest when the host next waits on it (a policy reads ``end`` to
    see how far a request's kernels really are)."""
    error: str | None
    """Why the kernel failed, or None.  The request it belongs to ends failed."""


class Backend(ABC):
    """One GPU, real or simulated.

    Abstract: what every backend must do for the runtime to run at all.  The
    rest has a default only where the default is a true answer for a backend
    that cannot do better (``nan`` for a statistic it cannot measure, an error
    for a fault it cannot inject).
    """

    name: str = "?"
    gpu: GpuSpec
    mechanism: str
    """How its restricted contexts limit SMs: ``"mps"`` (execution affinity) or ``"green"``
    (green contexts).  Callers build policies for it, so their partitions round as the
    backend's contexts do."""

    @abstractmethod
    def deploy(self, profile: Profile, *, home_sms: float | None = None) -> AppHandle:
        """Load an app's kernels and allocate its memory.  ``home_sms``: the SMs its quota
        promises, where the kernel manager knows it; a backend whose restricted contexts are
        fixed SM sets (green contexts) lays each app's sets out from a home of that many SMs
        apart from the other apps' (:mod:`bless.hw.sm_sets`)."""

    @abstractmethod
    def undeploy(self, app: AppHandle) -> None:
        """Release an app's contexts and memory."""

    @property
    @abstractmethod
    def memory_used(self) -> int:
        """Bytes of device memory this backend holds now: its apps and their contexts.

        Admission adds a new app's needs to this, so it must count everything the
        backend allocated, not what it was asked for."""

    @abstractmethod
    def create_context(self, app: AppHandle, sm_limit: int | None, *, shared: str | None = None) -> Any:
        """A context for ``app``: unrestricted (None) or limited to ``sm_limit`` SMs.

        Restricted contexts created under one ``shared`` name (and SM count) are one
        partition: the apps in it share its SMs, together never more, as REEF's
        best-effort apps share what the real-time app's quota leaves.  Without it
        each app's context has its own limit (MPS caps may then overlap)."""

    @abstractmethod
    def granted_sms(self, context: Any) -> int:
        """SMs the context may use, as the hardware granted them (rounding included)."""

    @abstractmethod
    def placement(self, run: Any) -> Placement:
        """Where a launched kernel ran, as far as the backend knows (for timelines)."""

    @abstractmethod
    def create_stream(self, context: Any, *, low_priority: bool = False) -> Any:
        """An in-order stream in ``context``; ``low_priority``: its kernels get only the SMs
        that kernels of ordinary streams leave (CUDA stream priorities)."""

    @abstractmethod
    def launch(
        self,
        stream: Any,
        app: AppHandle,
        kernel: int,
        *,
        after: Any = None,
        tag: Any = None,
        notify: bool = False,
        timed: bool = False,
    ) -> Launched:
        """Launch kernel number ``kernel`` of ``app`` on ``stream`` (asynchronous)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until every launched kernel has finished."""

    @abstractmethod
    def wait(self, deadline: float = math.inf) -> Sequence[Launched]:
        """Block until a ``notify`` launch finishes or ``deadline``; return the finished ones."""

    @abstractmethod
    def now(self) -> float:
        """The host clock in seconds."""

    def charge_host(self, seconds: float) -> None:
        """The host computed for ``seconds`` (a policy's decision).  Real time
        passes by itself on a real clock; a virtual clock must be told."""

    def wake(self) -> None:
        """Interrupt a :meth:`wait` from another thread (new work arrived)."""

    def create_best_effort_context(self, app: AppHandle, transforms: Sequence[KernelTransform]) -> Any:
        """An unrestricted context whose kernels run *best-effort* (Tally's scheduling).

        Its kernels start only while no kernel of an ordinary context is running
        or ready, one best-effort kernel at a time; kernel ``k`` of ``app`` runs
        as ``transforms[k]`` says and yields at its next chunk when an ordinary
        kernel becomes ready.  Only a backend that can transform kernels does
        this; the default says so rather than pretend."""
        raise BackendError(
            f"{self.describe()} cannot run best-effort contexts (Tally's kernel slicing and preemption); "
            f"the simulated GPU (backend sim) can"
        )

    def context_bytes(self, mechanism: str) -> int:
        """Device memory one context restricted by ``mechanism`` costs on this backend
        (here: the GPU's data file; a backend that measures it overrides this)."""
        return self.gpu.context_bytes(mechanism)

    def utilisation(self) -> float:
        """Fraction of SM-time busy since the backend started (nan if unknown)."""
        return math.nan

    def sm_seconds(self) -> float:
        """Busy SM-seconds since the backend started: the sum over SMs of the time each ran
        a block (nan if unknown).  Its rate over the SM count is the utilisation now,
        which a server exports next to :meth:`utilisation`, the average since start."""
        return math.nan

    def inject_fault(self, app: AppHandle, kernel: int = 0, count: int = 1, message: str = "") -> None:
        """Make the next ``count`` launches of kernel ``kernel`` of deployment ``app`` fault,
        failing only the requests they belong to (failure drills and tests).

        Only a backend that controls its kernels' outcome can do this; the default
        says so rather than pretend."""
        raise BackendError(f"{self.describe()} cannot inject faults; the simulated GPU (backend sim) can")

    def close(self) -> None:
        """Release everything."""

    def describe(self) -> str:
        return f"{self.name} backend on {self.gpu.full_name}"


BACKENDS: Registry[Backend] = Registry("backend")
BACKENDS.register_lazy("sim", "bless.sim.backend:SimBackend")
BACKENDS.register_lazy("cuda", "bless.cuda.backend:CudaBackend")


def create_backend(name: str, **kwargs: Any) -> Backend:
    """Create a backend by registered name (``sim``, ``cuda``)."""
    return BACKENDS.create(name, **kwargs)
