"""The concurrent kernel manager: executes a policy's decision on a backend.

Per app it creates its contexts once, at deployment (one unrestricted, plus
the restricted ones the policy will use), with one stream each.  Executing a
:class:`~bless.core.policy.Decision` it launches kernels in the decided order into
the decided contexts.  Every kernel of a request names the request's previous
kernel as ``after``: in the same stream that is free, across contexts it makes
the new stream wait for the restricted part to finish (and the backend charges
the context switch), so a request's kernels never reorder or overlap.  It
talks to the :class:`~bless.backend.interface.Backend` interface only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bless.backend.interface import Backend, KernelTransform
from bless.core.lifecycle import AppState
from bless.core.policy import Decision


class KernelManager:
    """Launches decisions; owns the apps' contexts and streams."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._streams: dict[tuple[int, int | None, bool], Any] = {}
        """Per (app index, SM limit, low priority): its stream."""
        self._latest: dict[int, Any] = {}
        """Per app index: the launch of its latest kernel, which its next request's first kernel follows
        (a request's kernels are chained, so it ends after every earlier one, a failed request's too)."""
        self.kernels_launched = 0

    def deploy(
        self,
        app: AppState,
        sm_limits: list[int | None],
        shared: str | None = None,
        best_effort: Sequence[KernelTransform] | None = None,
        low_priority: bool = False,
    ) -> None:
        """Deploy ``app`` and pre-create its contexts (unrestricted always included); ``shared``
        names the partition its restricted contexts share with other apps; ``best_effort``
        (one transform per kernel) makes its unrestricted context best-effort (Tally);
        ``low_priority`` gives its unrestricted context a low-priority stream too."""
        app.handle = self.backend.deploy(app.profile, home_sms=app.quota * app.profile.level_sms[-1])
        granted = {}
        for limit in dict.fromkeys([None, *sm_limits]):
            if limit is None and best_effort is not None:
                ctx = self.backend.create_best_effort_context(app.handle, best_effort)
            else:
                ctx = self.backend.create_context(app.handle, limit, shared=None if limit is None else shared)
                if limit is not None:
                    granted[limit] = self.backend.granted_sms(ctx)
            self._streams[(app.index, limit, False)] = self.backend.create_stream(ctx)
            if limit is None and low_priority:
                self._streams[(app.index, None, True)] = self.backend.create_stream(ctx, low_priority=True)
        app.granted_sms = granted

    def undeploy(self, app: AppState) -> None:
        for key in [k for k in self._streams if k[0] == app.index]:
            del self._streams[key]
        self._latest.pop(app.index, None)
        self.backend.undeploy(app.handle)
        app.granted_sms = {}

    def stream(self, app: AppState, sm_limit: int | None, low_priority: bool = False) -> Any:
        try:
            return self._streams[(app.index, sm_limit, low_priority)]
        except KeyError:
            if low_priority:
                raise ValueError(
                    f"app {app.name!r} has no low-priority stream; the policy must ask for it in low_priority()"
                ) from None
            raise ValueError(
                f"app {app.name!r} has no context limited to {sm_limit} SMs; "
                f"the policy must list it in context_limits()"
            ) from None

    def _unfinished_latest(self, app: AppState) -> Any:
        """The launch of ``app``'s latest kernel if it may not have ended yet (None otherwise): its
        next request's first kernel waits for it.  An app's requests share its buffers (one arena
        per app on a GPU), so two of them must not run at once; a dependency already met is not
        passed on, so that it costs nothing."""
        latest = self._latest.get(app.index)
        if latest is None or latest.end is not None:
            return None
        return latest

    def execute(self, decision: Decision) -> list[Any]:
        """Launch every kernel of ``decision``; return the backend's launch objects in order."""
        plans = decision.launches
        if not plans:
            return []
        order = decision.launch_of_kernel
        if order is None:
            order = tuple(i for i, p in enumerate(plans) for _ in range(p.count))
        cursor = [int(p.start) for p in plans]  # a policy may give NumPy integers; a compiled Request holds C ones
        streams = [self.stream(p.request.app, p.sm_limit, p.low_priority) for p in plans]
        launch = self.backend.launch
        latest = self._latest
        launches = []
        for i in order:
            p = plans[i]
            req = p.request
            k = cursor[i]
            if k != req.scheduled:
                raise RuntimeError(
                    f"decision launches kernel {k} of request {req.rid} of {req.app.name!r} "
                    f"but kernel {req.scheduled} is next"
                )
            cursor[i] = k + 1
            notify = k + 1 == req.n_kernels or (p.notify and k + 1 == p.start + p.count)
            after = req.last_launch if k else self._unfinished_latest(req.app)
            req.last_launch = launch(streams[i], req.app.handle, k, after=after, tag=req, notify=notify)
            if k == 0:
                req.first_launch = req.last_launch
            latest[req.app.index] = req.last_launch
            req.scheduled = k + 1
            launches.append(req.last_launch)
        self.kernels_launched += len(order)
        for i, p in enumerate(plans):
            if cursor[i] != p.start + p.count:
                raise RuntimeError(f"decision order launches {cursor[i] - p.start} of {p.count} kernels of a plan")
        return launches
