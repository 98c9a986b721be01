"""What the serving loop keeps per app and per request, and how a request ends.

Shared by the loop (:mod:`bless.serving.server.core`), its inbox
(:mod:`bless.serving.server.inbox`) and the services that answer RPCs.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from bless.core.lifecycle import AppState, Request
from bless.serving.server.errors import ServiceError
from bless.serving.server.spec import AppSpec
from bless.serving.server.stats import AppStats

MODEL_VERSION = "1"
"""The one version every app is served as (OIP's model version, the metrics' ``version`` label)."""


@dataclass(frozen=True)
class Outcome:
    """How a request ended: a status of :data:`bless.serving.server.stats.OUTCOMES` and, if not
    ``succeeded``, the error its RPC answers with."""

    status: str
    error: ServiceError | None = None
    latency: float = math.nan
    queue: float = math.nan
    compute: float = math.nan
    sync_wait: float = math.nan
    """From the end of the last kernel until the host saw it (the rest of its squad)."""

    @property
    def reason(self) -> str:
        """The ``reason`` label it is counted under."""
        return "ok" if self.error is None else self.error.reason


@dataclass(eq=False)
class ServedApp:
    """A registered app: its registration, scheduler state and measurements."""

    spec: AppSpec
    state: AppState
    stats: AppStats
    closing: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pending(self) -> int:
        """Requests queued or running (what ``max_queue`` limits)."""
        return self.stats.pending


@dataclass(frozen=True)
class UnavailableApp:
    """A stored app the server could not bring back at start: listed with why, not served,
    and removable with UnregisterApp (until then its name stays taken)."""

    name: str
    error: str
    spec: AppSpec | None = None
    """None when the stored registration itself could not be read."""


@dataclass(eq=False)
class Job:
    """One inference request in flight: the scheduler's request and how to answer it."""

    request: Request
    served: ServedApp
    answer: Callable[[Outcome], None]
    """Called exactly once, on the loop thread."""
    deadline: float = math.inf
    """The client's deadline on the backend clock (inf: none)."""
    cancelled: ServiceError | None = None
    """Why the client left while the request was on the GPU (it runs to the end, then counts as cancelled)."""
    finished: bool = False
    """The scheduler is done with it (loop thread)."""
    _counted: bool = False
    _count_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def claim(self) -> bool:
        """True exactly once: to whoever counts how the request ended.  The loop and the RPC
        handler race for it when a client leaves as its request finishes."""
        with self._count_lock:
            if self._counted:
                return False
            self._counted = True
            return True
