"""Execute a :class:`~bless.harness.config.RunConfig`: build the backend, policy and apps, run."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from bless.backend.interface import Backend, create_backend
from bless.backend.trace_events import TraceRecorder
from bless.colocation.advisor import ColocationGate
from bless.core.lifecycle import AppState
from bless.core.policy import POLICIES, IsolatedGroup, Policy
from bless.harness.config import ConfigError, RunConfig, resolve_slo
from bless.harness.loads import Load, parse_load
from bless.harness.replay import Replay
from bless.harness.results import RunResult
from bless.harness.warm import warm_up_policy
from bless.hw.gpus import GpuSpec, get_gpu
from bless.profiles.catalog import load_app
from bless.profiles.format import Profile


def group_seed(cfg: RunConfig, group: IsolatedGroup) -> int:
    """The seed of an isolated group's replay: its first app's, so one app per group (ISO,
    MIG) replays with ``cfg.seed + i``, as each app alone always has."""
    return cfg.seed + group.apps[0]


def make_policy(cfg: RunConfig, mechanism: str = "mps") -> Policy:
    factory = POLICIES.get(cfg.policy)
    accepted = set(inspect.signature(factory).parameters)
    for key in cfg.policy_params:
        if key not in accepted:
            raise ConfigError(
                f"policy.{key}: policy {cfg.policy!r} has no parameter {key!r}; "
                f"it takes: {', '.join(sorted(accepted)) or 'none'}"
            )
    params = dict(cfg.policy_params)
    if "mechanism" in accepted:
        params.setdefault("mechanism", mechanism)
    return factory(**params)


def make_backend(cfg: RunConfig, gpu: GpuSpec, seed_offset: int = 0):
    chosen = {} if cfg.mechanism is None else {"mechanism": cfg.mechanism}
    if cfg.backend == "sim":
        return create_backend(
            "sim", gpu=gpu, clock="virtual", noise_sigma=cfg.noise, seed=cfg.seed + seed_offset, **chosen
        )
    return create_backend(cfg.backend, gpu=gpu.name, **chosen)


def app_states(cfg: RunConfig, profiles: list[Profile]) -> list[AppState]:
    """One AppState per configured app; repeated apps get ``#2``, ``#3`` suffixes."""
    states = []
    seen: dict[str, int] = {}
    for i, (spec, profile) in enumerate(zip(cfg.apps, profiles)):
        seen[profile.app] = seen.get(profile.app, 0) + 1
        name = profile.app if seen[profile.app] == 1 else f"{profile.app}#{seen[profile.app]}"
        state = AppState(i, name, profile, spec.quota, priority=spec.priority)
        state.slo = resolve_slo(spec.slo, state.iso_latency, f"apps[{i}].slo")
        states.append(state)
    return states


def trace_recorder(backend: Backend) -> TraceRecorder:
    """A timeline recorder that reads where kernels ran from ``backend``'s launch objects."""
    return TraceRecorder(backend.placement)


def _run_replay(
    cfg: RunConfig,
    backend: Backend,
    gpu: GpuSpec,
    policy: Policy,
    apps: list[AppState],
    loads: list[Load],
    *,
    seed: int,
    progress: Callable[[float], None] | None = None,
    trace: bool = False,
) -> RunResult:
    """Replay ``apps`` under ``policy`` on ``backend`` for the configured time; on a wall-clock
    backend the policy's compiled code is loaded first (:mod:`bless.harness.warm`)."""
    if cfg.backend != "sim":
        warm_up_policy(policy, gpu, backend.mechanism, like=apps)
    runtime = Replay(
        backend,
        policy,
        apps,
        loads,
        duration=cfg.duration,
        warmup=cfg.warmup,
        seed=seed,
        progress=progress,
        trace=trace_recorder(backend) if trace else None,
    )
    return runtime.run()


def run_config(cfg: RunConfig, progress: Callable[[float], None] | None = None, *, trace: bool = False) -> RunResult:
    """Run one configured co-location and return what it measured.

    With ``trace`` the result carries the run's timeline (``RunResult.trace``).
    """
    gpu = get_gpu(cfg.gpu)
    policy = make_policy(cfg, cfg.mechanism or "mps")
    profiles = [load_app(a.app, gpu.name) for a in cfg.apps]
    apps = app_states(cfg, profiles)
    notes = check_colocation(cfg, apps)
    loads = [parse_load(a.load, f"apps[{i}].load") for i, a in enumerate(cfg.apps)]
    if not policy.isolated:
        backend = make_backend(cfg, gpu)
        policy = make_policy(cfg, backend.mechanism)
        result = _run_replay(cfg, backend, gpu, policy, apps, loads, seed=cfg.seed, progress=progress, trace=trace)
        result.notes.extend(notes)
        return result
    # Isolated policies (ISO, MIG, MIG + MPS): each group of apps on a GPU (slice) of its own.
    groups = policy.isolated_groups(apps, gpu)
    order = [i for g in groups for i in g.apps]  # the apps as the merged result lists them
    if sorted(order) != [a.index for a in apps]:
        raise ValueError(f"policy {cfg.policy!r} placed apps {sorted(order)}, not each of the {len(apps)} apps once")
    parts = []
    for n, group in enumerate(groups):
        first = group.apps[0]
        members = [apps[i].fresh(k) for k, i in enumerate(group.apps)]
        backend = make_backend(cfg, group.gpu, seed_offset=first)
        group_policy = group.policy or make_policy(cfg, backend.mechanism)
        group_loads = [loads[i] for i in group.apps]
        parts.append(
            _run_replay(
                cfg, backend, group.gpu, group_policy, members, group_loads, seed=group_seed(cfg, group), trace=trace
            )
        )
        if progress is not None:
            progress((n + 1) / len(groups))
    result = RunResult.merge(parts, policy.describe(), gpu.name)
    by_index = dict(zip(order, result.apps))
    result.apps = [by_index[a.index] for a in apps]  # back in config order
    result.notes.extend(notes)
    return result


def check_colocation(cfg: RunConfig, apps: list[AppState]) -> list[str]:
    """Consult the KACE gate (``admission`` settings) as if the apps registered in order.

    Returns the warnings; raises :class:`ConfigError` when the gate rejects an app.
    """
    try:
        gate = ColocationGate.from_settings(cfg.admission)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if gate is None:
        return []
    notes = []
    for i, app in enumerate(apps):
        rejected, warnings = gate.judge(app.name, app.profile, [(a.name, a.profile) for a in apps[:i]])
        if rejected:
            raise ConfigError(f"apps[{i}]: admission rejected {app.name!r}: {'; '.join(rejected)}")
        notes += [f"admission warning: {w}" for w in warnings]
    return notes
