"""The paper's multi-task scheduler: build a kernel squad from the active requests.

BLESS's default is deadline pacing (:mod:`bless.core.deadline_pacing`); this rule is
the ``pacing: paper`` variant, kept for the ablation and the paper's squad experiments.

Each active request has an isolated schedule: at its quota n%, its first k
kernels would be done ``tau[n%][k-1]`` seconds after it started.  Its progress
is compared with the time it has actually had:

* ``P_e = tau[n%][k] / T[n%]`` -- how far along its isolated schedule the
  scheduled kernels take it (k = kernels scheduled so far);
* ``P_r = t_e / target`` -- how much of its latency budget has elapsed
  (``t_e`` since arrival; ``target`` = T[n%], or the SLO when one is set).

We compare ``P_e / P_r`` and give the next kernel to the request with the
*smallest* ratio: it has been given the least work for the time it has
waited, i.e. it lags furthest behind its isolated schedule.  (Comparing
``P_r / P_e`` and taking the largest is the same order, but a request with
nothing scheduled yet has ``P_e = 0``; the ratio we use is then simply 0, the
most urgent, with no division by zero.)  With the SLO as target, a request
with a tight SLO ages faster and is served sooner.

Taking a kernel advances that request's ``tau``, so repeatedly taking the
most lagging request is a K-way merge of each request's increasing sequence of
keys ``prefix[k + m] / c`` (``c = T[n%] * t_e / target``).  The squad ends at
``S`` kernels or right after a request's last kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bless.core.lifecycle import Request

MIN_ELAPSED = 1e-9
"""Elapsed time of a request that arrived this instant (avoids 0/0)."""


@dataclass(frozen=True)
class SquadEntry:
    """The kernels ``[start, start + count)`` of one request."""

    request: Request
    start: int
    count: int
    sm_limit: int | None = None
    """The context they run in when the scheduler chose it (deadline pacing); None: unrestricted."""

    @property
    def completes_request(self) -> bool:
        return self.start + self.count == self.request.n_kernels


@dataclass(frozen=True)
class Squad:
    """A scheduler decision: which kernels of which requests run together."""

    entries: tuple[SquadEntry, ...]
    entry_of_kernel: tuple[int, ...]
    """The entry each kernel belongs to, kernels in the order the scheduler chose them."""

    @property
    def size(self) -> int:
        return len(self.entry_of_kernel)


def build_squad(requests: list[Request], now: float, squad_size: int, pacing: bool = True) -> Squad:
    """Pick up to ``squad_size`` kernels from ``requests`` (the active ones).

    Requests are taken in the given order on ties (pass them oldest first).
    ``pacing=False`` is the ablation without the multi-task scheduler: kernels
    are taken round-robin, one per request in turn, ignoring quotas and age.
    """
    if squad_size < 1:
        raise ValueError(f"squad_size must be >= 1, got {squad_size}")
    live = [r for r in requests if r.remaining > 0]
    if not live:
        return Squad((), ())
    keys = []
    takes = []
    for r in live:
        app = r.app
        elapsed = now - r.arrival
        c = app.iso_latency * (elapsed if elapsed > MIN_ELAPSED else MIN_ELAPSED) / app.target
        m = min(squad_size, r.remaining)
        takes.append(m)
        keys.append(app.prefix[r.scheduled : r.scheduled + m] / c if pacing else np.arange(m, dtype=float))
    if len(live) == 1:
        owners = np.zeros(takes[0], dtype=np.int64)
    else:
        owner_of = np.repeat(np.arange(len(live)), takes)
        owners = owner_of[np.argsort(np.concatenate(keys), kind="stable")[:squad_size]]
    counts = [0] * len(live)
    cut = len(owners)
    for pos, j in enumerate(owners.tolist()):
        counts[j] += 1
        if counts[j] == live[j].remaining:
            cut = pos + 1
            break
    order = owners[:cut].tolist()
    used = sorted(set(order))
    index = {j: i for i, j in enumerate(used)}
    entries = tuple(SquadEntry(live[j], live[j].scheduled, counts[j]) for j in used)
    return Squad(entries, tuple(index[j] for j in order))
