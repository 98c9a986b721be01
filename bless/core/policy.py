"""The policy interface: a policy decides, the kernel manager executes.

Every sharing policy -- BLESS and the baselines -- is a plug-in with one
method, :meth:`Policy.step`, that looks at the apps' queues and returns a
plain :class:`Decision`: which kernels of which requests to launch into which
context, in what order, and whether the host then waits for all of them
(squad semantics) or goes on reacting to arrivals and completions.  The
runtime loop, the manager and the backend are shared, so comparisons between
policies are like for like.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from bless.backend.interface import KernelTransform
from bless.core.lifecycle import AppState, Request
from bless.hw.gpus import GpuSpec
from bless.registry import Registry


@dataclass(slots=True)
class RequestLaunch:
    """Launch kernels ``[start, start + count)`` of ``request`` into a context.

    ``sm_limit`` None is the app's unrestricted context; otherwise the app's
    context restricted to that many SMs.  ``low_priority``: the unrestricted
    context's low-priority stream.  (Not frozen, like :class:`Decision`: a
    policy makes them at every step, on the host's critical path, where a frozen
    dataclass's construction costs 0.5 us, a slotted one's 0.15; nothing changes
    one once made.)
    """

    request: Request
    start: int
    count: int
    sm_limit: int | None = None
    low_priority: bool = False
    """Into the low-priority stream of the app's unrestricted context (``sm_limit`` None): its
    kernels get only the SMs the other streams' kernels leave (:meth:`Policy.low_priority`)."""
    notify: bool = False
    """The host is told when its last kernel ends (counted in ``Request.chunks_done``), as it is
    for a request's last kernel: a policy launching a long request in chunks launches the next."""


@dataclass(frozen=True)
class SquadEstimate:
    """What a policy predicts for a synchronised squad (recorded beside what it measured)."""

    duration: float
    """Seconds from its first kernel's start to its last kernel's end."""
    restricted: bool
    """Whether it runs (in part) in restricted contexts."""


@dataclass(slots=True)
class Decision:
    """One step of a policy: what to launch, and when to be asked again.  (Read once by the
    executor and never changed; not frozen, for its cost on the critical path, see
    :class:`RequestLaunch`.)"""

    launches: tuple[RequestLaunch, ...] = ()
    launch_of_kernel: tuple[int, ...] | None = None
    """The launch (index into ``launches``) each kernel belongs to, kernels in host launch order;
    None: launch after launch."""
    sync: bool = False
    """Wait for every launched kernel before the next step (a squad)."""
    wake_at: float = math.inf
    """Ask the policy again at this time even if nothing arrives or finishes."""
    estimate: SquadEstimate | None = None
    """The policy's prediction for a squad (``sync``), if it makes one."""


@dataclass(frozen=True)
class IsolatedGroup:
    """Apps an ``isolated`` policy runs together on a GPU (or MIG slice) of their own."""

    apps: tuple[int, ...]
    """Indices (``AppState.index``) of the apps in the group."""
    gpu: GpuSpec
    """The device they share."""
    policy: Policy | None = None
    """The policy that shares it among them; None: a fresh instance of the run's policy."""


class Policy(ABC):
    """A GPU sharing policy."""

    name: ClassVar[str] = "?"
    isolated: ClassVar[bool] = False
    """True if the apps run on GPUs (slices) of their own, grouped by :meth:`isolated_groups` (ISO, MIG)."""

    def setup(self, apps: list[AppState], gpu: GpuSpec) -> None:
        """Called once the apps are deployed, before the first step."""

    def app_gpu(self, app: AppState, gpu: GpuSpec) -> GpuSpec:
        """The GPU an app runs on when ``isolated`` (e.g. a MIG slice)."""
        return gpu

    def isolated_groups(self, apps: list[AppState], gpu: GpuSpec) -> list[IsolatedGroup]:
        """How an ``isolated`` policy splits the apps over devices of their own: by default one app
        per device (:meth:`app_gpu`), as ISO and MIG do; MIG + MPS puts two apps in one slice."""
        return [IsolatedGroup((app.index,), self.app_gpu(app, gpu)) for app in apps]

    def context_limits(self, app: AppState, gpu: GpuSpec) -> list[int | None]:
        """SM limits of the contexts to create for ``app`` at deployment."""
        return [None]

    def shared_partition(self, app: AppState) -> str | None:
        """Name of the SM partition ``app``'s restricted contexts share with other apps (None: their own)."""
        return None

    def low_priority(self, app: AppState) -> bool:
        """Whether ``app``'s unrestricted context also gets a low-priority stream, for launches
        that should run only in the SMs other work leaves."""
        return False

    def best_effort(self, app: AppState, gpu: GpuSpec) -> tuple[KernelTransform, ...] | None:
        """None: ``app`` runs as usual; else it runs best-effort, each kernel transformed as given
        (Tally: its kernels yield to every other app's; the backend must support it)."""
        return None

    @abstractmethod
    def step(self, now: float, apps: list[AppState]) -> Decision | None:
        """Decide what to launch now; None or an empty decision: nothing."""

    def decision_cost(self, decision: Decision) -> float:
        """Host seconds the policy spent deciding ``decision`` (charged on a virtual clock)."""
        return 0.0

    def decide_ahead(self, now: float, apps: list[AppState], running: Decision) -> Decision | None:
        """The decision to launch after the squad ``running``, taken while it runs on the GPU.

        The executor uses it only if no request was activated, finished or
        re-quota'd meanwhile, and decides afresh otherwise; None: always afresh.
        """
        return None

    def on_launch(self, decision: Decision) -> None:
        """The executor launched ``decision``: each request's ``last_launch`` is now its latest
        kernel's launch object (a decision taken ahead may be dropped, never launched)."""

    def on_complete(self, request: Request, now: float) -> None:
        """A request finished (its last kernel ended at ``request.end``)."""

    def describe(self) -> dict[str, Any]:
        """Parameters to record with results."""
        return {"policy": self.name}


POLICIES: Registry[Policy] = Registry("policy")
POLICIES.register_lazy("bless", "bless.policies.bless:BlessPolicy")
POLICIES.register_lazy("unbound", "bless.policies.unbound:UnboundPolicy")
POLICIES.register_lazy("iso", "bless.policies.iso:IsoPolicy")
POLICIES.register_lazy("temporal", "bless.policies.temporal:TemporalPolicy")
POLICIES.register_lazy("mig", "bless.policies.mig:MigPolicy")
POLICIES.register_lazy("gslice", "bless.policies.gslice:GslicePolicy")
POLICIES.register_lazy("reef", "bless.policies.reef:ReefPolicy")
POLICIES.register_lazy("zico", "bless.policies.zico:ZicoPolicy")
POLICIES.register_lazy("migmps", "bless.policies.migmps.policy:MigMpsPolicy")
POLICIES.register_lazy("tally", "bless.policies.tally:TallyPolicy")


def create_policy(name: str, **kwargs: Any) -> Policy:
    return POLICIES.create(name, **kwargs)
