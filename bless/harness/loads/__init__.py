"""Request loads, registered by the ``type`` a config names them with.

``closed`` and ``poisson`` are synthetic (:mod:`.kinds`); ``trace`` replays a
real trace or an MMPP (:mod:`.traces`, imported on first use: it reads the
shared data).  A new kind of load is a :class:`Load` subclass or a factory
registered in :data:`LOADS`.
"""

from __future__ import annotations

from typing import Any

from bless.harness.loads.kinds import (
    WORKLOAD_INTERVALS,
    Arrivals,
    ClosedLoop,
    Load,
    Poisson,
)
from bless.registry import Registry

__all__ = ["LOADS", "WORKLOAD_INTERVALS", "Arrivals", "ClosedLoop", "Load", "Poisson", "parse_load"]

LOADS: Registry[Load] = Registry("load type")
LOADS.register("closed")(ClosedLoop)
LOADS.register("poisson")(Poisson)
LOADS.register_lazy("trace", "bless.harness.loads.traces:trace_load")


def parse_load(spec: Any, field: str = "load") -> Load:
    """A load from config: ``"A"``/``"B"``/``"C"``, ``"poisson:RATE"``, or a mapping.

    Mappings: ``{type: closed, interval: 0.5, relative: true, clients: 1}`` or
    ``{type: poisson, rate: 100}`` or ``{type: trace, ...}`` (see :mod:`bless.harness.loads.traces`).
    """
    if isinstance(spec, Load):
        return spec
    if isinstance(spec, str):
        key = spec.strip()
        if key.upper() in WORKLOAD_INTERVALS:
            return ClosedLoop(WORKLOAD_INTERVALS[key.upper()])
        if key.lower().startswith("poisson:"):
            try:
                return Poisson(float(key.split(":", 1)[1]))
            except ValueError:
                pass
        raise ValueError(
            f"{field}: unknown load {spec!r}; use A, B, C (closed loops at 1/3, 2/3, 1 x solo latency), "
            f"'poisson:RATE', or a mapping with a 'type'"
        )
    if isinstance(spec, dict):
        kind = str(spec.get("type", "")).lower()
        if kind not in LOADS.names():
            raise ValueError(f"{field}.type: expected {', '.join(LOADS.names())}, got {spec.get('type')!r}")
        args = {k: v for k, v in spec.items() if k != "type"}
        try:
            return LOADS.create(kind, **args)
        except TypeError as e:
            raise ValueError(f"{field}: bad {kind} load parameters: {e}") from None
    raise ValueError(f"{field}: expected a workload name or a mapping, got {spec!r}")
