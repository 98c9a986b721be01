"""What the serving loop keeps per app and per request, and how a request ends.

Shared by the loop (:mod:`bless.serving.server.core`), its inbox
(:mod:`bless.serving.server.inbox`) and the services that answer RPCs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from bless.core.lifecycle import AppState, Request
from bless.serving.server.errors import ServiceError
from bless.serving.server.spec import AppSpec
from bless.serving.server.stats import AppStats


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
    cancelled: bool = False
    finished: bool = False
