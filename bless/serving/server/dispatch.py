"""One inference request from its RPC handler to the scheduler and back.

:func:`run_request` is what an inference handler does once the request is
valid: queue it with the serving core, await the scheduler's outcome, build the
response, and count how the request ended (:class:`~bless.serving.server.jobs.Job`
says who counts what).  Two rules keep one app from stalling the others:

* **Building a large response leaves the event loop.**  The gRPC services of
  every app share one asyncio thread; outputs of tens of MB took it for
  hundreds of ms, during which no other app's answer went out.  Responses over
  :data:`INLINE_ENCODE_BYTES` are built on a small pool of threads
  (:data:`ENCODE_WORKERS`); small ones stay on the loop, where they cost less
  than a thread hand-off and never wait behind a large one.
* **A client that left is not answered.**  Cancelled (or past its deadline)
  while waiting, its request is withdrawn (:meth:`ServingCore.cancel`); past its
  deadline once its response is built, it counts as cancelled, not succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from bless.serving.server.core import ServingCore
from bless.serving.server.errors import DeadlineExceeded
from bless.serving.server.jobs import Outcome, ServedApp

T = TypeVar("T")

INLINE_ENCODE_BYTES = 256 * 2**10
"""Responses up to this many output bytes are built on the event loop: a few hundred
microseconds at most, less than handing them to a thread and back."""
ENCODE_WORKERS = 2
"""Threads building large responses, shared by the servers of a process.  Two, so one
very large response does not hold up the next; more would only contend for the GIL
(generating outputs releases it, copying them does not)."""

_encoders = ThreadPoolExecutor(ENCODE_WORKERS, thread_name_prefix="bless-encode")


def _answerer(loop: asyncio.AbstractEventLoop, fut: asyncio.Future) -> Callable[[Outcome], None]:
    """A callback for the serving loop that settles ``fut`` on the RPC thread's event loop."""

    def settle(outcome: Outcome) -> None:
        if not fut.done():
            fut.set_result(outcome)

    def answer(outcome: Outcome) -> None:
        with contextlib.suppress(RuntimeError):  # the RPC loop is gone: nobody is waiting any more
            loop.call_soon_threadsafe(settle, outcome)

    return answer


async def run_request(
    core: ServingCore,
    served: ServedApp,
    build: Callable[[Outcome], T],
    *,
    output_bytes: int,
    timeout: float | None,
    received: float,
    decode: float,
) -> T:
    """Queue a validated request of ``served``, await it and return ``build(outcome)``.

    ``output_bytes``: the size of the outputs ``build`` makes (where to build them);
    ``timeout``: seconds left until the client's deadline (None: none);
    ``received``: :func:`time.perf_counter` when the RPC arrived; ``decode``: seconds
    spent checking its inputs.  The outcome's error, if any, is raised.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Outcome] = loop.create_future()
    job = core.submit(served, _answerer(loop, fut), timeout)
    try:
        outcome = await fut
    except asyncio.CancelledError:
        core.cancel(job)
        raise
    if outcome.error is not None:
        raise outcome.error  # counted by the serving loop
    encoding = time.perf_counter()
    try:
        if output_bytes <= INLINE_ENCODE_BYTES:
            response = build(outcome)
        else:
            response = await loop.run_in_executor(_encoders, build, outcome)
    except asyncio.CancelledError:
        core.cancel(job)
        raise
    except Exception:
        if job.claim():
            served.stats.counted("failed", "internal")  # building the response failed
        raise
    done = time.perf_counter()
    if core.backend.now() > job.deadline:
        error = DeadlineExceeded("the response was ready after the client's deadline")
        if job.claim():
            served.stats.counted("cancelled", error.reason)
        raise error
    if job.claim():
        served.stats.answered(done - received, outcome.compute, decode, done - encoding)
    return response
