"""Replay many apps on a cluster in virtual time: place them, then one simulated replay per GPU.

The placement decision is pure (:func:`bless.cluster.placement.place`), and
the GPUs of a cluster do not interfere, so a cluster replay needs no Ray: each
app is placed in the config's order by the chosen policy (exactly as the
controller would place registrations arriving in that order), then each GPU's
apps run in one virtual-time replay on the simulated GPU
(:func:`bless.harness.run.run_config`, the same run as ``bless run``), and the
per-GPU results are joined into per-app and per-cluster numbers.  Every app
also runs once alone under ISO (its quota's SMs, no neighbour) on the same
arrivals, the reference its mean latency is judged against.

A config (YAML)::

    name: placement-demo
    gpu: a100
    gpus: 4                  # GPUs in the cluster
    policy: first-fit        # placement: first-fit | best-fit-memory | colocation
    serving: bless           # the policy each GPU serves with (a run config's ``policy``)
    duration: 4              # seconds of arrivals (virtual), warmup, seed, noise: as in a run config
    warmup: 0.5
    seed: 0
    noise: 0.02
    apps:
      - {app: resnet50, quota: 1/3, slo: 2x,
         load: {type: trace, trace: twitter, start: 3600, length: 600, duration: 4, load: 0.2}}
      - {name: bert-b, app: bert, quota: 1/4, load: B}

Apps get unique names (``name``, else the profile name with ``-2``, ``-3``
for repeats; the server's name rules).  A trace load without its own ``seed`` gets one fixed per app
(the run's seed x 1000 + the app's index), so an app sees the same arrivals on
whichever GPU it lands and in its ISO run: policies differ only by placement.
"""

from __future__ import annotations

import copy
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bless.cluster.placement import POLICIES, GpuState, PlacedApp, place, with_app
from bless.core.lifecycle import LATENCY_CRITICAL
from bless.documents import is_integer, load_document
from bless.harness.config import AppSpec, ConfigError, config_from_dict, parse_priority, parse_quota
from bless.harness.results import AppResult, RunResult
from bless.harness.run import run_config
from bless.hw.gpus import DEFAULT_GPU
from bless.profiles.catalog import load_app
from bless.serving.server.spec import NAME

TOP_LEVEL = {
    "name",
    "description",
    "gpu",
    "gpus",
    "policy",
    "serving",
    "duration",
    "warmup",
    "seed",
    "noise",
    "mechanism",
    "apps",
}
RUN_KEYS = ("duration", "warmup", "seed", "noise", "mechanism")
"""Keys passed on to every GPU's run config unchanged."""


@dataclass(frozen=True, kw_only=True)
class ClusterApp(AppSpec):
    """One app of a cluster replay: a run config's app (``app`` is a profile name or path), named."""

    name: str


@dataclass(frozen=True)
class ClusterConfig:
    apps: tuple[ClusterApp, ...]
    gpus: int
    name: str = "cluster"
    gpu: str = DEFAULT_GPU
    policy: str = "first-fit"
    serving: Any = "bless"
    run: dict[str, Any] = field(default_factory=dict)
    """duration, warmup, seed, noise, mechanism: as given (defaults are the run config's)."""

    @property
    def seed(self) -> int:
        return int(self.run.get("seed", 0))


def cluster_config_from_dict(raw: Any) -> ClusterConfig:
    """Validate a parsed cluster replay config (errors name the field)."""
    if not isinstance(raw, dict):
        raise ConfigError("the cluster replay config must be a mapping with gpus and apps")
    unknown = sorted(set(raw) - TOP_LEVEL)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key; known keys: {', '.join(sorted(TOP_LEVEL))}")
    gpus = raw.get("gpus")
    if not is_integer(gpus) or gpus < 1:
        raise ConfigError(f"gpus: expected the number of GPUs (at least 1), got {gpus!r}")
    policy = raw.get("policy", "first-fit")
    if policy not in POLICIES:
        raise ConfigError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    apps_raw = raw.get("apps")
    if not isinstance(apps_raw, list) or not apps_raw:
        raise ConfigError("apps: expected a non-empty list of {app, quota, load}")
    apps: list[ClusterApp] = []
    seen: dict[str, int] = {}
    names: set[str] = set()
    seed = raw.get("seed", 0)
    for i, a in enumerate(apps_raw):
        where = f"apps[{i}]"
        if not isinstance(a, dict):
            raise ConfigError(f"{where}: expected a mapping with app, quota and load")
        extra = sorted(set(a) - {"name", "app", "quota", "load", "slo", "priority"})
        if extra:
            raise ConfigError(f"{where}.{extra[0]}: unknown key; use name, app, quota, load, slo, priority")
        if not isinstance(a.get("app"), str) or not a["app"]:
            raise ConfigError(f"{where}.app: expected an app name or a profile path")
        if "load" not in a:
            raise ConfigError(f"{where}.load: missing; e.g. B or {{type: trace, trace: twitter, ...}}")
        quota = parse_quota(a.get("quota"), f"{where}.quota")
        base = Path(a["app"]).stem
        seen[base] = seen.get(base, 0) + 1
        name = str(a.get("name") or (base if seen[base] == 1 else f"{base}-{seen[base]}"))
        if not NAME.fullmatch(name):
            raise ConfigError(
                f"{where}.name: app names are 1-64 letters, digits, '_', '.' or '-' starting with a letter or digit "
                f"(as the server registers them), got {name!r}"
            )
        if name in names:
            raise ConfigError(f"{where}.name: {name!r} is already used; app names must be unique")
        names.add(name)
        load = copy.deepcopy(a["load"])
        if isinstance(load, dict) and str(load.get("type", "")).lower() == "trace" and "seed" not in load:
            load["seed"] = int(seed) * 1000 + i
        apps.append(ClusterApp(a["app"], quota, load, a.get("slo"), parse_priority(a, where), name=name))
    cfg = ClusterConfig(
        apps=tuple(apps),
        gpus=gpus,
        name=str(raw.get("name", "cluster")),
        gpu=str(raw.get("gpu", DEFAULT_GPU)),
        policy=policy,
        serving=raw.get("serving", "bless"),
        run={k: raw[k] for k in RUN_KEYS if k in raw},
    )
    # Validate the per-GPU run settings once, on the first app alone.
    gpu_run_config(cfg, "check", [cfg.apps[0]])
    return cfg


def load_cluster_config(path: str | Path) -> ClusterConfig:
    return load_document(path, cluster_config_from_dict, ConfigError, "cluster replay config", syntax="yaml")


def _app_dict(a: ClusterApp) -> dict[str, Any]:
    out = {"app": a.app, "quota": a.quota, "load": copy.deepcopy(a.load)}
    if a.slo is not None:
        out["slo"] = a.slo
    if a.priority != LATENCY_CRITICAL:
        out["priority"] = a.priority
    return out


def gpu_run_config(cfg: ClusterConfig, gpu_id: str, apps: list[ClusterApp], serving: Any = None):
    """The run config of one GPU: its apps, the cluster's run settings, the serving policy."""
    raw = {
        "name": f"{cfg.name}-{gpu_id}",
        "gpu": cfg.gpu,
        "policy": copy.deepcopy(cfg.serving if serving is None else serving),
        **copy.deepcopy(cfg.run),
        "apps": [_app_dict(a) for a in apps],
    }
    return config_from_dict(raw)


# ---------------------------------------------------------------- placement
@dataclass(frozen=True)
class ClusterPlacement:
    policy: str
    gpus: tuple[tuple[str, tuple[str, ...]], ...]
    """(gpu id, names of its apps in placement order), every GPU of the cluster in order."""
    unplaced: dict[str, str]
    """Apps no GPU could take, with why."""
    why: dict[str, str]

    def gpu_of(self) -> dict[str, str]:
        return {name: gid for gid, names in self.gpus for name in names}

    @property
    def gpus_used(self) -> int:
        return sum(1 for _, names in self.gpus if names)


def _slo_text(slo: str | float | None) -> str:
    if slo is None:
        return ""
    return slo if isinstance(slo, str) else f"{float(slo)}"


def place_apps(cfg: ClusterConfig, policy: str | None = None, **place_kwargs) -> ClusterPlacement:
    """Place every app in the config's order by ``policy`` (default: the config's)."""
    policy = policy or cfg.policy
    gpus = [GpuState(f"gpu{i}", cfg.gpu) for i in range(cfg.gpus)]
    unplaced: dict[str, str] = {}
    why: dict[str, str] = {}
    for a in cfg.apps:
        placed = PlacedApp(a.name, load_app(a.app, cfg.gpu), a.quota, _slo_text(a.slo))
        answer = place(placed, gpus, policy, **place_kwargs)
        why[a.name] = answer.why
        if answer.gpu_id is None:
            unplaced[a.name] = answer.why
            continue
        i = next(k for k, g in enumerate(gpus) if g.gpu_id == answer.gpu_id)
        gpus[i] = with_app(gpus[i], placed)
    layout = tuple((g.gpu_id, tuple(p.name for p in g.apps)) for g in gpus)
    return ClusterPlacement(policy, layout, unplaced, why)


# ---------------------------------------------------------------- replay
@dataclass
class AppOutcome:
    name: str
    gpu_id: str | None
    result: AppResult | None
    """None: the app was not placed."""
    iso: AppResult | None = None
    """The app alone under ISO on the same arrivals."""

    def row(self) -> dict[str, Any]:
        r, iso = self.result, self.iso
        mean = r.mean if r is not None else math.nan
        iso_mean = iso.mean if iso is not None else math.nan
        return {
            "app": self.name,
            "gpu": self.gpu_id or "unplaced",
            "quota": r.quota if r else math.nan,
            "load": r.load if r else "",
            "requests": r.completed if r else 0,
            "mean_ms": mean * 1e3,
            "p99_ms": r.percentile(99) * 1e3 if r else math.nan,
            "iso_mean_ms": iso_mean * 1e3,
            "vs_iso": mean / iso_mean if iso_mean > 0 else math.nan,
            "target_ms": r.iso_latency * 1e3 if r else math.nan,
            "vs_target": mean / r.iso_latency if r else math.nan,
            "slo_ms": r.slo * 1e3 if r and r.slo is not None else math.nan,
            "slo_violation_rate": r.slo_violation_rate if r else math.nan,
            "iso_slo_violation_rate": iso.slo_violation_rate if iso else math.nan,
        }


@dataclass
class ClusterResult:
    config: ClusterConfig
    placement: ClusterPlacement
    gpus: dict[str, RunResult]
    """Per used GPU, its replay."""
    apps: list[AppOutcome]
    """In the config's order, every app exactly once."""

    def app_rows(self) -> list[dict[str, Any]]:
        return [{"policy": self.placement.policy, **a.row()} for a in self.apps]

    def gpu_rows(self) -> list[dict[str, Any]]:
        rows = []
        for gid, names in self.placement.gpus:
            run = self.gpus.get(gid)
            rows.append(
                {
                    "policy": self.placement.policy,
                    "gpu": gid,
                    "apps": " ".join(names),
                    "quota": sum(a.quota for a in self.config.apps if a.name in names),
                    "mean_latency_ms": run.summary()["mean_latency_ms"] if run else math.nan,
                    "latency_deviation_ms": run.latency_deviation * 1e3 if run else math.nan,
                    "utilisation": run.utilisation if run else 0.0,
                    "kernels": run.kernels if run else 0,
                }
            )
        return rows

    def summary(self) -> dict[str, Any]:
        """Per cluster: GPUs used, means over the placed apps, violations."""
        placed = [a for a in self.apps if a.result is not None and a.result.completed]
        rows = [a.row() for a in placed]
        served = sum(a.result.completed for a in placed)
        violated = sum(int(np.sum(a.result.latencies > a.result.slo)) for a in placed if a.result.slo is not None)
        with_slo = sum(a.result.completed for a in placed if a.result.slo is not None)
        return {
            "policy": self.placement.policy,
            "gpus": self.config.gpus,
            "gpus_used": self.placement.gpus_used,
            "apps": len(self.apps),
            "unplaced": len(self.placement.unplaced),
            "requests": served,
            "mean_latency_ms": float(np.mean([r["mean_ms"] for r in rows])) if rows else math.nan,
            "mean_vs_iso": float(np.mean([r["vs_iso"] for r in rows])) if rows else math.nan,
            "max_vs_iso": float(np.max([r["vs_iso"] for r in rows])) if rows else math.nan,
            "apps_above_iso": sum(1 for r in rows if r["vs_iso"] > 1.01),
            "mean_vs_target": float(np.mean([r["vs_target"] for r in rows])) if rows else math.nan,
            "slo_violation_rate": violated / with_slo if with_slo else math.nan,
            "apps_violating_slo": sum(1 for r in rows if r["slo_violation_rate"] > 0.01),
        }


def _run(job: tuple[str, Any]) -> tuple[str, RunResult]:
    key, cfg = job
    result = run_config(cfg)
    result.trace = None
    return key, result


def _run_all(jobs: list[tuple[str, Any]], workers: int) -> dict[str, RunResult]:
    if workers <= 1 or len(jobs) <= 1:
        return dict(_run(j) for j in jobs)
    # spawn, not fork (as bless sweep): a fork inherits the parent's threads' locks
    with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn")) as pool:
        return dict(pool.map(_run, jobs))


def iso_config(cfg: ClusterConfig, app: ClusterApp):
    """The app alone under ISO, on the same arrivals (its ISO reference)."""
    return gpu_run_config(cfg, f"iso-{app.name}", [app], serving="iso")


def replay_cluster(
    cfg: ClusterConfig,
    policies: list[str] | None = None,
    *,
    workers: int = 1,
    iso: bool = True,
    **place_kwargs,
) -> list[ClusterResult]:
    """Place and replay ``cfg`` once per placement policy (default: the config's).

    All the GPU replays of all the policies (and the ISO references, shared by
    the policies) run in one pool of ``workers`` processes; results do not
    depend on ``workers``.
    """
    policies = policies or [cfg.policy]
    by_name = {a.name: a for a in cfg.apps}
    placements = [place_apps(cfg, p, **place_kwargs) for p in policies]
    jobs: list[tuple[str, Any]] = []
    for pl in placements:
        for gid, names in pl.gpus:
            if names:
                jobs.append((f"{pl.policy}/{gid}", gpu_run_config(cfg, gid, [by_name[n] for n in names])))
    if iso:
        jobs += [(f"iso/{a.name}", iso_config(cfg, a)) for a in cfg.apps]
    runs = _run_all(jobs, workers)
    out = []
    for pl in placements:
        gpus = {gid: runs[f"{pl.policy}/{gid}"] for gid, names in pl.gpus if names}
        per_app: dict[str, AppOutcome] = {}
        for gid, names in pl.gpus:
            if not names:
                continue
            # run_config keeps the config's order: the i-th result is the i-th app placed there
            for name, res in zip(names, gpus[gid].apps, strict=True):
                per_app[name] = AppOutcome(name, gid, res)
        apps = []
        for a in cfg.apps:
            outcome = per_app.get(a.name, AppOutcome(a.name, None, None))
            if iso:
                outcome.iso = runs[f"iso/{a.name}"].apps[0]
            apps.append(outcome)
        out.append(ClusterResult(cfg, pl, gpus, apps))
    return out


# ---------------------------------------------------------------- output
def _write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    import csv

    keys = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return path


def _f(v: float, digits: int = 2, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v * 100:.{digits}f} %" if pct else f"{v:.{digits}f}"


def summary_table(results: list[ClusterResult]) -> str:
    """Markdown: one row per placement policy."""
    lines = [
        "| placement | GPUs used | unplaced | mean latency (ms) | mean / ISO run | worst / ISO run "
        "| mean / ISO target T[quota] | SLO violations | apps > 1 % SLO violations |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r.summary()
        lines.append(
            f"| {s['policy']} | {s['gpus_used']} of {s['gpus']} | {s['unplaced']} | {_f(s['mean_latency_ms'], 1)} "
            f"| {_f(s['mean_vs_iso'])} | {_f(s['max_vs_iso'])} | {_f(s['mean_vs_target'])} "
            f"| {_f(s['slo_violation_rate'], 1, pct=True)} | {s['apps_violating_slo']} |"
        )
    return "\n".join(lines)


def gpu_table(results: list[ClusterResult]) -> str:
    lines = [
        "| placement | GPU | apps | quota | mean latency (ms) | deviation over T[quota] (ms) | utilisation |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for g in r.gpu_rows():
            lines.append(
                f"| {g['policy']} | {g['gpu']} | {g['apps'] or '(none)'} | {_f(g['quota'] * 100, 0)} % "
                f"| {_f(g['mean_latency_ms'], 1)} | {_f(g['latency_deviation_ms'], 1)} | {_f(g['utilisation'])} |"
            )
    return "\n".join(lines)


def app_table(results: list[ClusterResult]) -> str:
    """Markdown: one row per app, per policy its GPU, mean (ms), mean / ISO run and SLO violations."""
    head = "| app | quota | ISO run mean (ms) | " + " | ".join(
        f"{r.placement.policy}: GPU, mean ms, / ISO, SLO viol." for r in results
    )
    lines = [head + " |", "|---|---|---|" + "---|" * len(results)]
    rows = [r.app_rows() for r in results]
    for i, a in enumerate(results[0].apps):
        first = rows[0][i]
        cells = [
            f"{row[i]['gpu']}, {_f(row[i]['mean_ms'], 1)}, {_f(row[i]['vs_iso'])}, "
            f"{_f(row[i]['slo_violation_rate'], 0, pct=True)}"
            for row in rows
        ]
        quota = a.result.quota if a.result else math.nan
        lines.append(
            f"| {a.name} | {_f(quota * 100, 0)} % | {_f(first['iso_mean_ms'], 1)} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def plot_results(results: list[ClusterResult], path: Path, title: str) -> Path:
    """Per app: mean latency / ISO run, one bar per placement policy; per policy: GPUs used and violations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [a.name for a in results[0].apps]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(results)
    for j, r in enumerate(results):
        ys = [row["vs_iso"] for row in r.app_rows()]
        ax.bar(np.arange(len(names)) + (j - (len(results) - 1) / 2) * width, ys, width, label=r.placement.policy)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(names)), names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("mean latency / ISO run (same arrivals)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    sums = [r.summary() for r in results]
    x = np.arange(len(results))
    ax2.bar(x - 0.2, [s["gpus_used"] for s in sums], 0.4, label="GPUs used", color="tab:gray")
    ax2.set_ylabel("GPUs used")
    ax3 = ax2.twinx()
    ax3.bar(x + 0.2, [100 * s["slo_violation_rate"] for s in sums], 0.4, label="SLO violations %", color="tab:red")
    ax3.set_ylabel("SLO violations (% of requests)", color="tab:red")
    ax2.set_xticks(x, [s["policy"] for s in sums], rotation=20, fontsize=8)
    ax2.set_title("per placement policy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_results(results: list[ClusterResult], out: Path, title: str = "", plot: bool = True) -> list[Path]:
    """apps.csv, gpus.csv, summary.csv, table.md (and ``<out name>.png``) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        _write_csv(out / "apps.csv", [row for r in results for row in r.app_rows()]),
        _write_csv(out / "gpus.csv", [row for r in results for row in r.gpu_rows()]),
        _write_csv(out / "summary.csv", [r.summary() for r in results]),
    ]
    table = out / "table.md"
    table.write_text(
        "\n\n".join(
            [
                f"# {title or results[0].config.name}",
                "Per placement policy (means over the placed apps; SLO violations over all their requests):",
                summary_table(results),
                "Per GPU:",
                gpu_table(results),
                "Per app (GPU, mean latency ms, mean / the app's ISO run on the same arrivals, SLO violations):",
                app_table(results),
            ]
        )
        + "\n"
    )
    paths.append(table)
    if plot:
        paths.append(plot_results(results, out / f"{out.name}.png", title or results[0].config.name))
    return paths


# ---------------------------------------------------------------- live
@dataclass
class LiveResult:
    """A replay against a running cluster's front end (wall clock): per app, as its clients saw it."""

    placements: dict[str, str]
    """App -> GPU id, as the cluster placed it (its own placement policy)."""
    rejected: dict[str, str]
    """Apps the cluster did not admit, with why."""
    rows: list[dict[str, Any]]
    """Per app: ``bless.serving.client.replay.ReplayResult.summary()`` plus ``gpu``, ``quota``, ``iso_ms``."""
    wall_seconds: float

    def gpu_rows(self) -> list[dict[str, Any]]:
        by_gpu: dict[str, list[dict[str, Any]]] = {}
        for r in self.rows:
            by_gpu.setdefault(r["gpu"], []).append(r)
        return [
            {
                "gpu": g,
                "apps": " ".join(r["app"] for r in rows),
                "quota": sum(r["quota"] for r in rows),
                "mean_ms": float(np.nanmean([r["mean_ms"] for r in rows])),
                "ok": sum(r["ok"] for r in rows),
                "sent": sum(r["sent"] for r in rows),
            }
            for g, rows in sorted(by_gpu.items())
        ]


def replay_live(
    cfg: ClusterConfig, address: str, *, token: str | None = None, register: bool = True, timeout: float = 60.0
) -> LiveResult:
    """Drive the cluster front end at ``address`` with the config's loads for its duration.

    With ``register`` each app is registered first (the cluster places it by
    its own policy; needs the admin ``token``); apps it rejects are left out.
    The loads are the config's, seeded as in the virtual-time replay.
    """
    from bless.harness.loads import parse_load
    from bless.serving.client import AppLoad
    from bless.serving.client import replay as client_replay
    from bless.serving.client.client import BlessClient

    admin = BlessClient(address, token=token)
    rejected: dict[str, str] = {}
    try:
        if register:
            for a in cfg.apps:
                r = admin.register(a.name, a.app, a.quota, slo=_slo_text(a.slo), priority=a.priority)
                if not r.admission.accepted:
                    rejected[a.name] = r.admission.reason
        info = {app.name: app for app in admin.apps().apps}
    finally:
        admin.close()
    apps = [a for a in cfg.apps if a.name in info and a.name not in rejected]
    loads = [AppLoad(a.name, parse_load(copy.deepcopy(a.load), f"apps[{i}].load")) for i, a in enumerate(apps)]
    duration = float(cfg.run.get("duration", 10.0))
    result = client_replay(address, loads, duration, seed=cfg.seed, timeout=timeout)
    summary = {row["app"]: row for row in result.summary()}
    rows = []
    for a in apps:
        row = summary.get(a.name, {"app": a.name, "sent": 0, "ok": 0, "mean_ms": math.nan})
        rows.append(
            {**row, "gpu": info[a.name].gpu, "quota": a.quota, "iso_ms": info[a.name].iso_latency_seconds * 1e3}
        )
    return LiveResult({a.name: info[a.name].gpu for a in apps}, rejected, rows, result.wall_seconds)
