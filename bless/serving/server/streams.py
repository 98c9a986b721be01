"""Answering a bidirectional stream's requests concurrently, in completion order.

Triton's ModelStreamInfer runs each request of a stream as a request of its own;
a client matches answers to requests by ``id``.  Both the single-GPU server and
the cluster's front end serve it this way, through :func:`answer_concurrently`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

Request = TypeVar("Request")
Answer = TypeVar("Answer")

_END = object()
"""Marks the end of the answer queue."""


async def answer_concurrently(
    requests: AsyncIterator[Request], answer: Callable[[Request], Awaitable[Answer]]
) -> AsyncIterator[Answer]:
    """``answer(request)`` for every request, all running at once, yielded as each finishes.

    ``answer`` must not raise for a failed request (it answers the failure instead): an
    exception there, or in reading ``requests``, fails the whole stream.  The stream ends
    once the client has closed its side and every request is answered; leaving it early
    (the client cancelled) cancels the requests still running."""
    answers: asyncio.Queue = asyncio.Queue()
    running: set[asyncio.Task] = set()

    async def run(request: Request) -> None:
        answers.put_nowait(await answer(request))

    async def read() -> None:
        try:
            async for request in requests:
                task = asyncio.create_task(run(request))
                running.add(task)
                task.add_done_callback(running.discard)
            await asyncio.gather(*running)
        finally:
            answers.put_nowait(_END)

    reader = asyncio.create_task(read())
    try:
        while (item := await answers.get()) is not _END:
            yield item
        await reader  # a failure reading the request stream fails the RPC
    finally:
        reader.cancel()
        for task in list(running):
            task.cancel()
