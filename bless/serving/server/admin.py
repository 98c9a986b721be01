"""The admin API ``bless.admin.v1.AdminService``: apps, quotas, statistics.

Mutating calls need ``authorization: Bearer <token>`` metadata
(:class:`~bless.serving.server.security.AuthGuard` checks it and slows guessing); reads
do not, so they show no server file paths.
Commands run on the serving loop (:mod:`bless.serving.server.core`), so an app is
admitted, deployed and persisted between two squads, never during one.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import grpc

from bless.serving.api import ADMIN_SERVICE, admin
from bless.serving.server.core import ServingCore
from bless.serving.server.jobs import ServedApp, UnavailableApp
from bless.serving.server.rpc import generic_handler
from bless.serving.server.security import AuthGuard
from bless.serving.server.spec import (
    check_name,
    load_profile_for,
    min_quota,
    parse_app_spec,
    quota_value,
    shown_profile,
)
from bless.serving.server.stats import Summary


def _tensors(specs) -> list[tuple[str, str, list[int]]]:
    return [(t.name, t.datatype, list(t.shape)) for t in specs]


def _summary(target: Any, s: Summary) -> None:
    target.count = s.count
    target.mean_seconds = s.mean
    target.p50_seconds = s.p50
    target.p90_seconds = s.p90
    target.p99_seconds = s.p99
    target.max_seconds = s.max


class AdminService:
    def __init__(self, core: ServingCore, guard: AuthGuard) -> None:
        self.core = core
        self._guard = guard
        self._min_quota = min_quota(core.gpu, core.policy.mechanism)

    def handler(self) -> grpc.GenericRpcHandler:
        return generic_handler(
            ADMIN_SERVICE,
            {
                "RegisterApp": self.register_app,
                "UnregisterApp": self.unregister_app,
                "SetQuota": self.set_quota,
                "ListApps": self.list_apps,
                "GetStats": self.get_stats,
                "ResetStats": self.reset_stats,
                "InjectFault": self.inject_fault,
            },
        )

    async def _authorize(self, context: Any, method: str) -> None:
        header = dict(context.invocation_metadata() or ()).get("authorization", "")
        await self._guard.authorize(header, context.peer(), method)

    # ------------------------------------------------------------ views
    def app_info(self, served: ServedApp) -> Any:
        spec, state = served.spec, served.state
        T = admin.TensorSpec
        return admin.AppInfo(
            name=spec.name,
            profile=shown_profile(spec.profile),
            quota=state.quota,
            memory_bytes=state.profile.memory_bytes,
            slo_seconds=state.slo or 0.0,
            iso_latency_seconds=state.iso_latency,
            solo_latency_seconds=float(state.profile.T[-1]),
            kernels=state.profile.n_kernels,
            inputs=[T(name=t.name, datatype=t.datatype, shape=t.shape) for t in spec.inputs],
            outputs=[T(name=t.name, datatype=t.datatype, shape=t.shape) for t in spec.outputs],
            state="unregistering" if served.closing else "ready",
            max_queue=self.core.max_queue,
            priority=state.priority,
        )

    def unavailable_info(self, app: UnavailableApp) -> Any:
        info = admin.AppInfo(name=app.name, state="unavailable", error=app.error)
        if app.spec is not None:
            info.profile = shown_profile(app.spec.profile)
            info.quota = app.spec.quota
        return info

    def gpu_info(self) -> Any:
        core = self.core
        return admin.GpuInfo(
            name=core.gpu.name,
            backend=core.backend.describe(),
            sm_count=core.gpu.sm_count,
            memory_bytes=core.gpu.memory_bytes,
            memory_used_bytes=core.backend.memory_used,
            max_restricted_level=core.policy.max_level,
            squad_size=core.policy.squad_size,
            split_ratio=core.policy.split_ratio,
        )

    # ------------------------------------------------------------ mutating
    async def register_app(self, request: Any, context: Any) -> Any:
        await self._authorize(context, "RegisterApp")
        spec = parse_app_spec(
            request.name,
            request.profile,
            request.quota,
            request.memory_bytes,
            request.slo,
            _tensors(request.inputs),
            _tensors(request.outputs),
            self._min_quota,
            request.priority,
        )
        profile = await asyncio.to_thread(load_profile_for, spec, self.core.gpu.name)
        admission, served = await asyncio.wrap_future(self.core.register(spec, profile, request.dry_run))
        notes = ([admission.reason] if admission.reason else []) + [f"warning: {w}" for w in admission.warnings]
        reason = "; ".join(notes)
        response = admin.RegisterAppResponse(admission=admin.Admission(accepted=admission.accepted, reason=reason))
        if served is not None:
            response.app.CopyFrom(self.app_info(served))
        return response

    async def unregister_app(self, request: Any, context: Any) -> Any:
        await self._authorize(context, "UnregisterApp")
        check_name(request.name)
        if self.core.forget_unavailable(request.name):
            return admin.UnregisterAppResponse()
        aborted = await asyncio.wrap_future(self.core.unregister(request.name))
        return admin.UnregisterAppResponse(aborted_requests=aborted)

    async def set_quota(self, request: Any, context: Any) -> Any:
        await self._authorize(context, "SetQuota")
        check_name(request.name)
        quota = quota_value(request.quota, minimum=self._min_quota)
        served = await asyncio.wrap_future(self.core.set_quota(request.name, quota))
        return admin.SetQuotaResponse(app=self.app_info(served))

    async def reset_stats(self, request: Any, context: Any) -> Any:
        await self._authorize(context, "ResetStats")
        self.core.stats.reset()
        return admin.ResetStatsResponse()

    async def inject_fault(self, request: Any, context: Any) -> Any:
        await self._authorize(context, "InjectFault")
        check_name(request.name)
        await asyncio.wrap_future(self.core.inject_fault(request.name, request.kernel, request.count))
        return admin.InjectFaultResponse()

    # ------------------------------------------------------------ reads
    async def list_apps(self, request: Any, context: Any) -> Any:
        apps = [self.app_info(a) for a in self.core.apps()] + [
            self.unavailable_info(a) for a in self.core.unavailable()
        ]
        return admin.ListAppsResponse(apps=apps, gpu=self.gpu_info())

    async def get_stats(self, request: Any, context: Any) -> Any:
        core = self.core
        stats = core.stats
        apps = [core.lookup(request.name)] if request.name else core.apps()
        window = time.monotonic() - stats.window_start
        response = admin.GetStatsResponse(window_seconds=window)
        for served in apps:
            w = served.stats.window(served.state.target)
            a = response.apps.add(
                name=served.name,
                quota=w.quota,
                received=w.received,
                queued=w.queued,
                running=w.running,
                iso_latency_seconds=served.state.iso_latency,
                slo_seconds=served.state.slo or 0.0,
                target_violation_rate=w.target_violation_rate,
                throughput_rps=w.counts["succeeded"] / window if window > 0 else math.nan,
                behind_quota=w.behind_quota,
                **w.counts,
            )
            _summary(a.latency, w.latency)
            _summary(a.queue, w.queue)
            _summary(a.compute, w.compute)
        squads = stats.squads.window()
        g = response.gpu
        g.gpu.CopyFrom(self.gpu_info())
        g.utilisation = stats.gpu.utilisation
        g.squads = squads.count
        g.squad_mean_seconds = squads.durations.mean
        g.squad_p99_seconds = squads.durations.p99
        g.restricted_share = squads.restricted_share
        g.kernels = squads.kernels
        g.uptime_seconds = time.monotonic() - stats.started
        return response
