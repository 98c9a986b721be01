"""Run configuration: a YAML file (or dict) describing one co-location run.

Example::

    name: r50-bert-B
    gpu: a100             # GPU model
    backend: sim          # sim (default) or cuda
    policy: bless         # or {name: bless, squad_size: 50, split_ratio: 0.5}
    squad_size: 50        # shorthands for the bless policy's parameters
    split_ratio: 0.5
    duration: 10          # seconds of arrivals (virtual time on the simulator)
    warmup: 0.5           # requests arriving earlier are not measured
    seed: 0
    noise: 0.02           # per-kernel multiplicative noise (lognormal sigma), 0 = off
    apps:
      - app: resnet50     # profile name (bless apps list) or path to a profile .json
        quota: 50%        # 0.5, "50%" or "1/2"
        load: B           # A | B | C | poisson:RATE | {type: closed|poisson|trace, ...}
        slo: 2x           # optional: seconds, "25ms", or a multiple of the ISO latency
        priority: best-effort   # optional: latency-critical (default) or best-effort

Every field is checked; an error names the field (``apps[1].quota``) and what
to write instead.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from bless.core.lifecycle import BEST_EFFORT, LATENCY_CRITICAL, PRIORITIES
from bless.documents import is_integer, is_number, load_document
from bless.hw.gpus import DEFAULT_GPU

POLICY_SHORTHANDS = ("squad_size", "split_ratio", "determiner", "pacing")
TOP_LEVEL = {
    "name",
    "gpu",
    "backend",
    "mechanism",
    "policy",
    "duration",
    "warmup",
    "seed",
    "noise",
    "apps",
    "admission",
    *POLICY_SHORTHANDS,
}


class ConfigError(ValueError):
    """A run configuration is invalid; the message names the field."""


@dataclass(frozen=True)
class AppSpec:
    app: str
    quota: float
    load: Any
    slo: str | float | None = None
    priority: str = LATENCY_CRITICAL
    """``latency-critical`` or ``best-effort`` (:data:`bless.core.lifecycle.PRIORITIES`)."""


@dataclass(frozen=True)
class RunConfig:
    apps: tuple[AppSpec, ...]
    name: str = "run"
    gpu: str = DEFAULT_GPU
    backend: str = "sim"
    mechanism: str | None = None
    """SM restriction mechanism; None: the backend's own choice (mps on the simulator)."""
    policy: str = "bless"
    policy_params: dict[str, Any] = field(default_factory=dict)
    duration: float = 10.0
    warmup: float = 0.5
    seed: int = 0
    noise: float = 0.0
    admission: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    """The validated input, for results files and sweeps."""


def parse_quota(value: Any, where: str) -> float:
    """0.5, "50%", "1/2" -> 0.5; rejects anything outside (0, 1]."""
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, (int, float)):
            q = float(value)
        elif isinstance(value, str) and value.strip().endswith("%"):
            q = float(value.strip()[:-1]) / 100.0
        elif isinstance(value, str):
            q = float(Fraction(value.strip()))
        else:
            raise ValueError
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"{where}: expected a share of the GPU like 0.5, '50%' or '1/2', got {value!r}") from None
    if not 0 < q <= 1:
        raise ConfigError(f"{where}: quota must be in (0, 1] (a share of the SMs), got {value!r}")
    return q


def parse_seconds(value: Any, where: str) -> float:
    """3, 3.5, "25ms", "250us", "2s" -> seconds."""
    if is_number(value):
        return float(value)
    if isinstance(value, str):
        v = value.strip().lower()
        for suffix, scale in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
            if v.endswith(suffix):
                try:
                    return float(v[: -len(suffix)]) * scale
                except ValueError:
                    break
    raise ConfigError(f"{where}: expected seconds like 2.5, '25ms' or '250us', got {value!r}")


def resolve_slo(spec: str | float | None, iso_latency: float, where: str) -> float | None:
    """An SLO in seconds; "2x" means twice the ISO latency."""
    if spec is None:
        return None
    if isinstance(spec, str) and spec.strip().lower().endswith("x"):
        try:
            factor = float(spec.strip()[:-1])
        except ValueError:
            raise ConfigError(f"{where}: expected a multiple of the ISO latency like '2x', got {spec!r}") from None
        if not (math.isfinite(factor) and factor > 0):
            raise ConfigError(f"{where}: the SLO multiple must be a finite positive number, got {spec!r}")
        return factor * iso_latency
    slo = parse_seconds(spec, where)
    if not (math.isfinite(slo) and slo > 0):
        raise ConfigError(f"{where}: the SLO must be a finite positive number of seconds, got {spec!r}")
    return slo


def _number(raw: dict, key: str, default: float, lo: float, hi: float = math.inf) -> float:
    v = raw.get(key, default)
    if not is_number(v) or not lo <= v <= hi:
        raise ConfigError(f"{key}: expected a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _mechanism(value: Any) -> str | None:
    if value is None or value in ("mps", "green"):
        return value
    raise ConfigError(f"mechanism: expected mps or green (or leave it out for the backend's choice), got {value!r}")


def check_priority(priority: str | None, has_slo: bool, where: str = "") -> str:
    """A priority class (latency-critical when None), checked against the app's SLO: a
    best-effort app has no latency target.  ``where`` prefixes the field names (``apps[0].``)."""
    priority = priority or LATENCY_CRITICAL
    if priority not in PRIORITIES:
        raise ConfigError(f"{where}priority: expected {' or '.join(PRIORITIES)} (or leave it out), got {priority!r}")
    if priority == BEST_EFFORT and has_slo:
        raise ConfigError(
            f"{where}slo: a best-effort app has no latency target; drop the slo or make it latency-critical"
        )
    return priority


def parse_priority(app: dict[str, Any], where: str) -> str:
    """An app's priority class (``apps[i].priority``), checked as :func:`check_priority` does."""
    return check_priority(app.get("priority"), app.get("slo") is not None, f"{where}.")


def config_from_dict(raw: Any) -> RunConfig:
    """Validate a parsed config mapping."""
    if not isinstance(raw, dict):
        raise ConfigError("the config must be a mapping with at least an 'apps' list")
    unknown = sorted(set(raw) - TOP_LEVEL)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key; known keys: {', '.join(sorted(TOP_LEVEL))}")
    apps_raw = raw.get("apps")
    if not isinstance(apps_raw, list) or not apps_raw:
        raise ConfigError("apps: expected a non-empty list of {app, quota, load}")
    apps = []
    for i, a in enumerate(apps_raw):
        where = f"apps[{i}]"
        if not isinstance(a, dict):
            raise ConfigError(f"{where}: expected a mapping with app, quota and load")
        extra = sorted(set(a) - {"app", "quota", "load", "slo", "priority"})
        if extra:
            raise ConfigError(f"{where}.{extra[0]}: unknown key; use app, quota, load, slo, priority")
        if not isinstance(a.get("app"), str) or not a["app"]:
            raise ConfigError(f"{where}.app: expected an app name or a profile path")
        if "quota" not in a:
            raise ConfigError(f"{where}.quota: missing; give the app's share of the GPU, e.g. 0.5")
        quota = parse_quota(a["quota"], f"{where}.quota")
        if "load" not in a:
            raise ConfigError(f"{where}.load: missing; e.g. B (closed loop at 2/3 x solo latency) or poisson:100")
        slo = a.get("slo")
        if slo is not None and not (isinstance(slo, str) and slo.strip().lower().endswith("x")):
            parse_seconds(slo, f"{where}.slo")
        apps.append(AppSpec(a["app"], quota, a["load"], slo, parse_priority(a, where)))
    total = sum(a.quota for a in apps)
    if total > 1 + 1e-9:
        raise ConfigError(f"apps[*].quota: quotas add up to {total:.0%} of the GPU; they must not exceed 100 %")
    policy = raw.get("policy", "bless")
    params: dict[str, Any] = {}
    if isinstance(policy, dict):
        params = {k: v for k, v in policy.items() if k != "name"}
        policy = policy.get("name")
    if not isinstance(policy, str) or not policy:
        raise ConfigError("policy: expected a policy name (e.g. bless) or {name: ..., params}")
    for key in POLICY_SHORTHANDS:
        if key in raw:
            params.setdefault(key, raw[key])
    duration = _number(raw, "duration", 10.0, 1e-6)
    warmup = _number(raw, "warmup", min(0.5, duration / 10), 0.0)
    if warmup >= duration:
        raise ConfigError(f"warmup: must be shorter than duration ({duration} s), got {warmup}")
    seed = raw.get("seed", 0)
    if not is_integer(seed):
        raise ConfigError(f"seed: expected an integer, got {seed!r}")
    admission = raw.get("admission", {}) or {}
    if not isinstance(admission, dict):
        raise ConfigError("admission: expected a mapping with kace_model, min_throughput_sum, action")
    unknown = sorted(set(admission) - {"kace_model", "min_throughput_sum", "action"})
    if unknown:
        raise ConfigError(f"admission.{unknown[0]}: unknown key; use kace_model, min_throughput_sum, action")
    return RunConfig(
        apps=tuple(apps),
        name=str(raw.get("name", "run")),
        gpu=str(raw.get("gpu", DEFAULT_GPU)),
        backend=str(raw.get("backend", "sim")),
        mechanism=_mechanism(raw.get("mechanism")),
        policy=policy,
        policy_params=params,
        duration=duration,
        warmup=warmup,
        seed=seed,
        noise=_number(raw, "noise", 0.0, 0.0, 1.0),
        admission=admission,
        raw=copy.deepcopy(raw),
    )


def read_yaml(path: str | Path) -> Any:
    """A YAML file's contents; a missing or malformed file is a :class:`ConfigError` naming it."""
    return load_document(path, lambda raw: raw, ConfigError, "config", syntax="yaml")


def load_config(path: str | Path) -> RunConfig:
    return load_document(path, config_from_dict, ConfigError, "config", syntax="yaml")
