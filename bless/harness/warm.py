"""Load a policy's compiled code before a wall clock starts.

The determiner's estimators are numba functions, compiled on their first call and cached on
disk (``cache=True``). With the cache in place the first call loads them in about 0.2 s; on a
machine whose cache is empty it compiles them: 1.6 s on this project's 2-core host, 3.4 s on a
fresh H200's (``tools/gpu_check_results/2026-11-27-h200-3``). On a wall-clock backend that
time fell on the first decision: it held a run's first requests back for 3.4 s, longer than
the isolation experiment's 3 s of arrivals. :func:`warm_up_policy` spends it first, in
virtual time.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

from bless.core.executor import Executor
from bless.core.lifecycle import AppState, Request
from bless.core.policy import Policy
from bless.hw.gpus import GpuSpec
from bless.profiles.synthetic import synthetic_profile
from bless.sim.backend import SimBackend

WARM_UP_REQUESTS = 2
"""Requests per app, all queued at once: the policy schedules squads of the apps together and
a request queued behind another, the paths a co-location takes."""


def warm_up_policy(
    policy: Policy, gpu: str | GpuSpec, mechanism: str | None = None, like: Sequence[AppState] = ()
) -> None:
    """Run a copy of ``policy`` over a few requests of apps like ``like`` on the simulator.

    ``like``: the apps the policy will run (their profiles, quotas, SLOs and priorities; a
    policy may take only some kinds, as ZICO takes training jobs only); none given, two
    synthetic inference apps at half the GPU each (the server, before any app registers).
    A copy of the policy, so the one the caller goes on to use starts unused.
    """
    name = gpu if isinstance(gpu, str) else gpu.name
    if like:
        apps = [a.fresh(i) for i, a in enumerate(like)]
    else:
        apps = [
            AppState(i, f"warm-up-{i}", synthetic_profile(f"warm-up-{i}", gpu=name, n_kernels=8, seed=i), 0.5)
            for i in range(2)
        ]
    backend = SimBackend(gpu, mechanism=mechanism) if mechanism else SimBackend(gpu)
    executor = Executor(backend, copy.deepcopy(policy), apps)
    for n in range(WARM_UP_REQUESTS):
        for app in apps:
            app.submit(Request(n * len(apps) + app.index, app, 0.0))
    while executor.launched or any(a.queue or a.active for a in apps):
        executor.step(math.inf)
    executor.close()
