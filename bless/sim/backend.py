"""The simulated GPU behind the :class:`~bless.backend.interface.Backend` interface.

Two clocks share one model:

* ``virtual``: the host clock is a number that moves only when the host does
  something (a launch costs ``HostCosts.launch``, a synchronisation waits for
  the device and costs ``HostCosts.sync``); replays run as fast as Python goes.
* ``wall``: the host clock is real time; the engine is advanced up to the
  present before every launch and the host sleeps until simulated kernels
  finish, so a server sees kernels finish in real time.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from bless.backend.interface import LAUNCH_QUEUE, AppHandle, Backend, BackendError, HostCosts, KernelTransform
from bless.backend.trace_events import Placement
from bless.hw.gpus import DEFAULT_GPU, GpuSpec, get_gpu
from bless.hw.interference import InterferenceModel
from bless.hw.sm_sets import GreenHomes, green_overlap, select_groups
from bless.profiles.format import Profile
from bless.sim.engine import Context, Engine, KernelRun, Stream
from bless.sim.kernels import SimApp

_log = logging.getLogger(__name__)

CLOCKS = ("virtual", "wall")
SPIN_SECONDS = 300e-6
"""Wall clock: how long before a deadline the host stops sleeping and polls."""


class SimBackend(Backend):
    """A deterministic simulated GPU (see :mod:`bless.sim.engine` for the model)."""

    name = "sim"

    def __init__(
        self,
        gpu: str | GpuSpec = DEFAULT_GPU,
        *,
        clock: str = "virtual",
        host: HostCosts | None = None,
        interference: InterferenceModel | None = None,
        noise_sigma: float = 0.0,
        seed: int = 0,
        mechanism: str = "mps",
        bandwidth_share: float | None = None,
    ) -> None:
        self.gpu = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
        if bandwidth_share is None:
            bandwidth_share = self.gpu.bandwidth_share
        self.bandwidth_share = bandwidth_share
        """Share of the full GPU's DRAM bandwidth this device has (a MIG slice: less than 1)."""
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
        self.clock = clock
        self.host = host or HostCosts.for_gpu(self.gpu)
        self.mechanism = mechanism
        self.gpu.round_sms(1, mechanism)  # validates the mechanism name
        self.engine = Engine(
            self.gpu.sm_count,
            interference=interference or InterferenceModel.for_gpu(self.gpu.name),
            context_switch=self.host.context_switch,
            event_latency=self.host.event,
            noise_sigma=noise_sigma,
            seed=seed,
            bandwidth_share=bandwidth_share,
        )
        self._host = 0.0
        self._cursor: dict[int, float] = {}
        """Per deployment (by handle): host time its launching thread is busy until."""
        self._completed: list[KernelRun] = []
        self._memory_used = 0
        self._held: dict[int, int] = {}
        """Bytes held per deployment (its own memory plus its contexts)."""
        self._shared: dict[tuple[str, int], tuple[Context, set[int], int]] = {}
        """Shared partitions by (name, SMs): the context, the deployments in it, its memory."""
        self._slots: dict[int, int] = {}
        """Deployment slot per deployment: even slots grow their green SM sets toward the high SMs, odd toward the low."""
        self._homes = GreenHomes(tuple(self.gpu.green_group_sizes()))
        """Where each deployment's green SM sets sit (:mod:`bless.hw.sm_sets`)."""
        self._t0 = time.monotonic()
        self._wake = threading.Event()
        self._faults: dict[tuple[int, int], tuple[int, str]] = {}
        """Armed faults: (deployment, kernel index) -> (launches left to fault, message)."""
        self._transforms: dict[int, tuple[KernelTransform, ...]] = {}
        """Per best-effort context (by id): how each kernel of its app is launched."""

    # ------------------------------------------------------------ apps
    def deploy(self, profile: Profile, *, home_sms: float | None = None) -> AppHandle:
        app = SimApp.from_profile(profile, self.gpu)
        self._allocate(profile.memory_bytes, f"app {profile.app!r}")
        handle = AppHandle(profile.app, profile, app)
        self._held[id(handle)] = profile.memory_bytes
        slot = self._slots[id(handle)] = min(set(range(len(self._slots) + 1)) - set(self._slots.values()))
        if self.mechanism == "green":
            shared = self._homes.place(id(handle), home_sms, from_high=slot % 2 == 1)
            if shared:
                _log.warning(green_overlap(profile.app, shared, self._homes.sizes))
        return handle

    def undeploy(self, app: AppHandle) -> None:
        """Free the app's memory and the memory of every context made for it."""
        self._memory_used -= self._held.pop(id(app), 0)
        self._slots.pop(id(app), None)
        self._homes.release(id(app))
        self._cursor.pop(id(app), None)
        for key, (_, members, cost) in list(self._shared.items()):
            members.discard(id(app))
            if not members:  # the last app of a shared partition frees its context
                self._memory_used -= cost
                del self._shared[key]
        self._faults = {key: armed for key, armed in self._faults.items() if key[0] != id(app)}

    def _allocate(self, nbytes: int, what: str) -> None:
        if self._memory_used + nbytes > self.gpu.memory_bytes:
            free = self.gpu.memory_bytes - self._memory_used
            raise BackendError(
                f"out of GPU memory for {what}: needs {nbytes / 2**20:.0f} MiB, "
                f"{free / 2**20:.0f} MiB free on {self.gpu.name}"
            )
        self._memory_used += nbytes

    @property
    def memory_used(self) -> int:
        """Bytes of the deployed apps and their contexts (each context costs the data file's figure)."""
        return self._memory_used

    def create_context(self, app: AppHandle, sm_limit: int | None, *, shared: str | None = None) -> Context:
        granted = None if sm_limit is None else self.gpu.round_sms(sm_limit, self.mechanism)
        key = None if shared is None or granted is None else (shared, granted)
        partition = self._shared.get(key) if key is not None else None
        if partition is not None:
            partition[1].add(id(app))
            return partition[0]
        cost = self.gpu.context_bytes(self.mechanism)
        self._allocate(cost, f"a context of app {app.name!r}")
        label = f"{shared or app.name}/{'all' if granted is None else granted}"
        if granted is None or self.mechanism != "green":
            ctx = self.engine.create_context(granted, label)
        else:
            # A shared partition takes the high SMs.
            groups = (
                select_groups(self._homes.sizes, granted, from_high=True)
                if key is not None
                else self._homes.groups(id(app), granted)
            )
            ctx = self.engine.create_context(None, label, sm_set=self._green_set(groups))
        if key is not None:
            self._shared[key] = (ctx, {id(app)}, cost)
        else:
            self._held[id(app)] = self._held.get(id(app), 0) + cost
        return ctx

    def create_best_effort_context(self, app: AppHandle, transforms: Sequence[KernelTransform]) -> Context:
        """An unrestricted context whose kernels run best-effort, kernel ``k`` as ``transforms[k]``
        (:mod:`bless.sim.engine`, "Best-effort contexts")."""
        if len(transforms) != len(app.private.kernels):
            raise ValueError(
                f"app {app.name!r} has {len(app.private.kernels)} kernels; give one transform per kernel, "
                f"got {len(transforms)}"
            )
        cost = self.gpu.context_bytes(self.mechanism)
        self._allocate(cost, f"a context of app {app.name!r}")
        self._held[id(app)] = self._held.get(id(app), 0) + cost
        ctx = self.engine.create_context(None, f"{app.name}/best-effort", best_effort=True)
        self._transforms[id(ctx)] = tuple(transforms)
        return ctx

    def _green_set(self, groups: tuple[int, ...]) -> int:
        """The SMs of a green context on ``groups`` of the split (:meth:`GpuSpec.green_group_sizes`):
        the CUDA backend takes its groups with the same code (:mod:`bless.hw.sm_sets`), so a
        GH100's app that grows its sets from the high end gets the 12-SM remainder with its
        groups (64 SMs asked, 68 held)."""
        sizes = self._homes.sizes
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        mask = 0
        for i in groups:
            mask |= ((1 << sizes[i]) - 1) << starts[i]
        return mask

    def granted_sms(self, context: Context) -> int:
        return self.gpu.sm_count if context.sm_limit is None else context.sm_limit

    def placement(self, run: KernelRun) -> Placement:
        """Its stream's context, and the SMs its blocks held last (the engine keeps no history)."""
        ctx = run.stream.context
        granted = self.granted_sms(ctx)
        label = "all SMs" if ctx.sm_limit is None else f"{self.mechanism} {granted} SMs"
        return Placement(label, granted, run.sms)

    def create_stream(self, context: Context, *, low_priority: bool = False) -> Stream:
        return self.engine.create_stream(context, low_priority=low_priority)

    # ------------------------------------------------------------ work
    def launch(
        self,
        stream: Stream,
        app: AppHandle,
        kernel: int,
        *,
        after: KernelRun | None = None,
        tag: Any = None,
        notify: bool = False,
        timed: bool = False,
    ) -> KernelRun:
        # (Wall clock: the model may lag the present here; launches are stamped
        # with their issue time and the model catches up when the host waits.)
        # Each app launches from its own host thread: launches of one app
        # serialise on the launch cost, different apps' launches overlap.  A
        # full stream blocks them all, as it blocks the CUDA backend's one thread.
        if len(stream.ops) + stream.busy >= LAUNCH_QUEUE:
            self._wait_for_room(stream)
        key = id(app)
        issue = max(self._cursor.get(key, 0.0), self.now()) + self.host.launch
        self._cursor[key] = issue
        transforms = self._transforms.get(id(stream.context)) if self._transforms else None
        run = self.engine.launch(
            stream,
            app.private.kernels[kernel],
            issue,
            after=after,
            tag=tag,
            on_done=self._on_notify if notify else None,
            transform=None if transforms is None else transforms[kernel],
        )
        if after is not None and after.error is not None:
            run.error = after.error  # a fault poisons the kernels that depend on it
        elif self._faults:
            self._fault_if_armed(run, app, kernel)
        return run

    def _wait_for_room(self, stream: Stream) -> None:
        """Block the host, as a GPU's driver does, until ``stream`` holds fewer than
        :data:`~bless.backend.interface.LAUNCH_QUEUE` kernels: every app's launches wait."""
        eng = self.engine
        while len(stream.ops) + stream.busy >= LAUNCH_QUEUE:
            target = eng.next_event_time()
            if target == math.inf:
                raise RuntimeError("simulated GPU deadlock: a full stream's kernels can never start")
            if self.clock == "wall":
                self._sleep_until(target)
            eng.run(until=target)
        if self.clock == "virtual":
            self._host = max(self._host, eng.now)

    def inject_fault(self, app: AppHandle, kernel: int = 0, count: int = 1, message: str = "") -> None:
        """Make the next ``count`` launches of kernel ``kernel`` of deployment ``app`` fault.

        The simulator decides every kernel's outcome, so it can.  A faulting
        kernel still runs for its usual time (the model does not abort
        streams); its ``error`` is set and every later kernel launched
        ``after`` it inherits the error, so the request it belongs to ends
        failed (:class:`~bless.harness.replay.Executor` sets ``Request.failed``) and
        other requests and apps are untouched.  For tests and failure drills.
        """
        if count < 1 or kernel < 0:
            raise ValueError(f"need count >= 1 and kernel >= 0, got count={count}, kernel={kernel}")
        self._faults[(id(app), kernel)] = (count, message or f"injected fault in kernel {kernel} of app {app.name!r}")

    def _fault_if_armed(self, run: KernelRun, app: AppHandle, kernel: int) -> None:
        key = (id(app), kernel)
        armed = self._faults.get(key)
        if armed is None:
            return
        left, message = armed
        run.error = message
        if left > 1:
            self._faults[key] = (left - 1, message)
        else:
            del self._faults[key]

    def _on_notify(self, run: KernelRun) -> None:
        self._completed.append(run)
        self.engine.halt()

    def synchronize(self) -> None:
        eng = self.engine
        while not eng.idle:
            before = (eng.now, eng.stats.kernels_done)
            eng.run()  # returns early at each notify completion
            if (eng.now, eng.stats.kernels_done) == before:
                raise RuntimeError("simulated GPU deadlock: launched kernels can never start")
        done = max(self.engine.now, self._host, *self._cursor.values()) + self.host.sync
        if self.clock == "wall":
            self._sleep_until(done)
        self._host = done

    def wait(self, deadline: float = math.inf) -> list[KernelRun]:
        if self.clock == "virtual":
            if not self._completed:
                self.engine.run(until=deadline)
                if not self._completed and deadline != math.inf:
                    self._host = max(self._host, deadline)
            self._host = max(self._host, self.engine.now)
        else:
            self._wake.clear()
            while not self._completed:
                target = min(self.engine.next_event_time(), deadline)
                if target == math.inf:
                    break
                self._sleep_until(target, interruptible=True)
                self._catch_up()
                if self._wake.is_set() or self.now() >= deadline:
                    break
        done, self._completed = self._completed, []
        return done

    def wake(self) -> None:
        self._wake.set()

    def charge_host(self, seconds: float) -> None:
        if self.clock == "virtual":
            self._host += seconds

    # ------------------------------------------------------------ clock
    def now(self) -> float:
        if self.clock == "virtual":
            return self._host
        return time.monotonic() - self._t0

    def _catch_up(self) -> None:
        """Wall clock: advance the model to the present (never launch into the past)."""
        self.engine.run(until=self.now())

    def _sleep_until(self, t: float, interruptible: bool = False) -> None:
        """Sleep, then spin the last stretch: an OS sleep overshoots by ~0.1 ms,
        as much as several kernels, and the runtime acts the moment a squad ends."""
        delay = t - self.now() - SPIN_SECONDS
        if delay > 0:
            if interruptible:
                if self._wake.wait(delay):
                    return
            else:
                time.sleep(delay)
        while self.now() < t:
            if interruptible and self._wake.is_set():
                return
            time.sleep(0)  # yield the GIL to the server's other threads

    def utilisation(self) -> float:
        elapsed = self.engine.now
        if elapsed <= 0:
            return math.nan
        return self.engine.stats.sm_seconds / (elapsed * self.gpu.sm_count)

    def sm_seconds(self) -> float:
        """The model's busy SM-seconds (every SM holding a block counts as busy)."""
        return self.engine.stats.sm_seconds

    def describe(self) -> str:
        return f"simulated {self.gpu.full_name} ({self.clock} clock, {self.mechanism} contexts)"
