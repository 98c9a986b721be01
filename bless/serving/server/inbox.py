"""The messages RPC handlers post to the serving loop (:mod:`bless.serving.server.core`).

One frozen dataclass per kind.  The loop keeps one table keyed by the
message's type with two handlers each: what running it does, and what
failing it does when the loop shuts down with messages still waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from bless.serving.server.jobs import Job


@dataclass(frozen=True)
class Submit:
    """Queue an admitted request with the scheduler."""

    job: Job


@dataclass(frozen=True)
class Cancel:
    """The client gave up on a request: drop it if it has not started."""

    job: Job


@dataclass(frozen=True)
class Unregister:
    """Remove an app; ``done`` resolves, with the number of queued requests aborted, once it is gone."""

    name: str
    done: Future[int]


@dataclass(frozen=True)
class Call:
    """Run ``body`` on the loop thread (admin commands); ``done`` gets its result or error."""

    body: Callable[[], Any]
    done: Future


Message = Submit | Cancel | Unregister | Call
