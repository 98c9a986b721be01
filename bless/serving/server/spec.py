"""What a client registers: an app's name, profile, quota, memory, SLO and tensors.

:class:`AppSpec` is validated once, when it comes in (errors name the field),
and is what the state store keeps, so a restart rebuilds the same app.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from bless.core.lifecycle import LATENCY_CRITICAL
from bless.harness.config import ConfigError, check_priority, parse_quota, resolve_slo
from bless.hw.gpus import GpuSpec
from bless.profiles.catalog import load_app
from bless.profiles.format import Profile, ProfileError
from bless.serving.server.errors import InvalidArgument
from bless.serving.server.tensors import TensorSpec, parse_specs

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class AppSpec:
    name: str
    profile: str
    """As given: a catalog name or a profile path on the server."""
    quota: float
    memory_bytes: int
    """0: the profile's own."""
    slo: str
    """As given ("" none, "25ms", "2x"); a multiple follows the ISO latency when the quota changes."""
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    priority: str = LATENCY_CRITICAL
    """Its priority class (:data:`bless.core.lifecycle.PRIORITIES`)."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["inputs"] = [t.to_dict() for t in self.inputs]
        d["outputs"] = [t.to_dict() for t in self.outputs]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AppSpec:
        return cls(
            name=d["name"],
            profile=d["profile"],
            quota=float(d["quota"]),
            memory_bytes=int(d["memory_bytes"]),
            slo=d["slo"],
            inputs=tuple(TensorSpec.from_dict(t) for t in d["inputs"]),
            outputs=tuple(TensorSpec.from_dict(t) for t in d["outputs"]),
            priority=d.get("priority", LATENCY_CRITICAL),  # stores written before priorities had none
        )

    def with_quota(self, quota: float) -> AppSpec:
        return dataclasses.replace(self, quota=quota)


def check_name(name: str, field: str = "name") -> str:
    if not NAME.fullmatch(name or ""):
        raise InvalidArgument(
            f"{field}: app names are 1-64 letters, digits, '_', '.' or '-' starting with a letter or digit, got {name!r}"
        )
    return name


def min_quota(gpu: GpuSpec, mechanism: str) -> float:
    """The smallest quota ``gpu`` can honour: partition level 1, as ``mechanism`` rounds it.
    BLESS restricts contexts by level, so a smaller share has no context to run in and its
    ISO latency would be extrapolated beyond the profile."""
    return gpu.sms_for_level(1, mechanism) / gpu.sm_count


def quota_value(text: str, field: str = "quota", minimum: float = 0.0) -> float:
    """A quota from "50%", "0.5" or "1/2", at least ``minimum``."""
    if not text:
        raise InvalidArgument(f"{field}: missing; give a share of the SMs like '50%', '0.5' or '1/2'")
    try:
        q = parse_quota(text, field)
    except ConfigError as e:
        raise InvalidArgument(str(e)) from None
    if q < minimum:
        least = math.ceil(minimum * 1000) / 10  # in percent, rounded up so that it is accepted
        raise InvalidArgument(
            f"{field}: {text!r} is below the GPU's smallest partition ({minimum:.2%} of the SMs); give at least '{least:g}%'"
        )
    return q


def slo_seconds(slo: str, iso_latency: float, field: str = "slo") -> float | None:
    """ "25ms", "0.025" (seconds) or "2x" (of the ISO latency) in seconds; "" is none."""
    try:
        value: str | float = float(slo)
    except ValueError:
        value = slo
    try:
        return resolve_slo(value if slo else None, iso_latency, field)
    except ConfigError as e:
        raise InvalidArgument(str(e)) from None


def parse_app_spec(
    name: str,
    profile: str,
    quota: str,
    memory_bytes: int,
    slo: str,
    inputs: list[tuple[str, str, list[int]]],
    outputs: list[tuple[str, str, list[int]]],
    min_quota: float = 0.0,
    priority: str = "",
) -> AppSpec:
    """Validate a registration; every error names its field."""
    check_name(name)
    if not profile:
        raise InvalidArgument(
            "profile: missing; give a profile name (profiles/<gpu>/<name>.json in the catalog) or a profile .json path on the server"
        )
    q = quota_value(quota, minimum=min_quota)
    slo_seconds(slo, 1.0)  # syntax only; resolved against the ISO latency on deployment
    try:
        priority = check_priority(priority, bool(slo))
    except ConfigError as e:
        raise InvalidArgument(str(e)) from None
    return AppSpec(
        name,
        profile,
        q,
        int(memory_bytes),
        slo,
        parse_specs(inputs, "inputs"),
        parse_specs(outputs, "outputs"),
        priority,
    )


def shown_profile(profile: str) -> str:
    """The profile as unauthenticated readers see it: a catalog name as is, a path on the
    server as its file name only (paths tell a stranger the server's layout and user)."""
    return profile.replace("\\", "/").rsplit("/", 1)[-1]


def load_profile_for(spec: AppSpec, gpu: str) -> Profile:
    """The app's profile on ``gpu``, named after the app, with the declared memory when one is given."""
    try:
        profile = load_app(spec.profile, gpu)
    except (ValueError, ProfileError) as e:
        raise InvalidArgument(f"profile: {e}") from None
    # Named after the app: the backend keys launch threads and faults by this name,
    # so two apps of one profile stay apart.
    return dataclasses.replace(profile, app=spec.name, memory_bytes=spec.memory_bytes or profile.memory_bytes)
