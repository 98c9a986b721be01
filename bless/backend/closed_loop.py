"""Apps run together in closed loops on any backend: how KACE and the MIG + MPS planner profile co-runs.

Each app runs its requests back to back: a request's kernels are launched on one
stream, the last one with ``notify``, and the next request is launched when it
completes.  A run lasts at least ``seconds`` of backend time and until every app
has completed :data:`MIN_REQUESTS` requests.  An app's throughput is
``(n - 1) / (t_n - t_1)`` over its completion times: whole request periods only,
so the start, where all apps begin together, does not bias it.

It goes through the :class:`~bless.backend.interface.Backend` interface only, so
the same profiling run measures a real GPU on the CUDA backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bless.backend.interface import Backend, BackendError
from bless.profiles.format import Profile

MIN_REQUESTS = 4
"""Completions each app needs before a run may stop (three whole periods)."""
TIME_CAP = 50.0
"""A run stops at ``TIME_CAP * seconds`` even if an app is starved (its throughput is then low)."""


@dataclass(frozen=True)
class ClosedLoopRun:
    """One co-run (or solo run): per app, its throughput and the memory it held."""

    throughputs: tuple[float, ...]
    requests: tuple[int, ...]
    memory_bytes: tuple[int, ...]
    virtual_seconds: float
    kernels: int


def run_closed_loops(
    backend: Backend,
    profiles: Sequence[Profile],
    seconds: float,
    *,
    sm_limit: int | None = None,
    shared: str | None = None,
) -> ClosedLoopRun | None:
    """Run the apps together in closed loops on ``backend``; None when they do not fit in its memory.

    Every app gets one context restricted to ``sm_limit`` SMs (None: unrestricted);
    with ``shared`` the apps' contexts are one partition they share (one MPS cap over
    all of them, as inside a MIG instance), else each has its own cap.
    """
    apps, memory = [], []
    try:
        for profile in profiles:
            before = backend.memory_used
            handle = backend.deploy(profile)
            stream = backend.create_stream(backend.create_context(handle, sm_limit, shared=shared))
            apps.append((handle, stream))
            memory.append(backend.memory_used - before)
    except BackendError:
        return None

    def submit(i: int) -> None:
        handle, stream = apps[i]
        last = handle.profile.n_kernels - 1
        for k in range(last + 1):
            backend.launch(stream, handle, k, tag=i, notify=k == last)

    done: list[list[float]] = [[] for _ in apps]
    for i in range(len(apps)):
        submit(i)
    kernels = 0
    while True:
        finished = backend.wait()
        if not finished:
            break  # nothing in flight (cannot happen while every app keeps a request queued)
        for run in finished:
            assert run.end is not None
            done[run.tag].append(run.end)
            kernels += apps[run.tag][0].profile.n_kernels
            submit(run.tag)
        now = backend.now()
        if now >= seconds * TIME_CAP or (now >= seconds and all(len(d) >= MIN_REQUESTS for d in done)):
            break
    elapsed = backend.now()
    return ClosedLoopRun(
        throughputs=tuple(_throughput(d, elapsed) for d in done),
        requests=tuple(len(d) for d in done),
        memory_bytes=tuple(memory),
        virtual_seconds=elapsed,
        kernels=kernels,
    )


def _throughput(completions: list[float], elapsed: float) -> float:
    if len(completions) >= 2 and completions[-1] > completions[0]:
        return (len(completions) - 1) / (completions[-1] - completions[0])
    return len(completions) / elapsed
