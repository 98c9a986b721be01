"""What keeps BLESS from the lower bound and from ISO: the same runs with the simulated GPU's
contention term off, then with no host costs either.

``bless bound`` (bless/harness/bound.py) leaves out interference and host costs; BLESS's mean
latency is 1.44x it on average over the inference experiments (``results/headline.md``), and
every app at or below ISO fails in Fig. 13 with exponential think times, Fig. 15 and a few
pairs of Fig. 14.  This re-runs BLESS and UNBOUND on every cell of those experiments under
three sets of GPU constants, to say how much of each gap those two parts of the simulated GPU
make:

* as calibrated: ``bless/hw/a100.toml``;
* no contention term: the interference coefficient at 0 (a kernel is no longer slowed by the
  others' DRAM demand; the saturation term, which caps DRAM at its peak, stays);
* and no host costs: launch, synchronisation, context switch and event at 0, and BLESS's
  decision (``decide_per_launch``) at 0.

The constants are changed as data, through ``$BLESS_GPU_DATA_PATH`` (bless/hw/costs.py), so the
simulated GPU and BLESS's own pricing (its interference stretch, the determiner's kernel walk)
read the same numbers, as they do with the shipped file.  Per experiment: each policy's mean
latency over the bound (the mean over its cells, as the headline), and BLESS's worst app over
its ISO target.

    python experiments/bound_gap.py > experiments/results/bound_gap.md   # ~8 min on 2 cores
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import tomllib
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bless.hw.costs import DATA_PATH, data_files, gpu_constants

HERE = Path(__file__).parent
EXPERIMENTS = ("fig13", "fig13_exp", "fig14", "fig15_4apps", "fig15_8apps", "fig16", "workload_d", "slo")
"""The inference experiments the headline's bound row averages (``paper.py``)."""
POLICIES = ("bless", "unbound")
GPU = "a100"
VARIANTS: dict[str, dict[str, float]] = {
    "as calibrated": {},
    "no contention term": {"interference.bandwidth": 0.0},
    "no contention, no host costs": {
        "interference.bandwidth": 0.0,
        **{f"host.{key}": 0.0 for key in ("launch", "sync", "context_switch", "event")},
    },
}
"""Each variant's changes to the GPU's data file, by ``section.key``."""


def variant_file(changes: dict[str, float], out: Path) -> Path:
    """The shipped data file with ``changes`` (each marked an assumption of this study) written
    to ``out/<gpu>.toml``."""
    doc = tomllib.loads(data_files()[GPU].read_text())
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        entry = {k: v for k, v in doc[section][key].items() if k not in ("source", "assumption")}
        entry.update(value=value, assumption="experiments/bound_gap.py: switched off to measure its part")
        doc[section][key] = entry
    lines = []
    for section, entries in doc.items():
        lines.append(f"[{section}]")
        for key, entry in entries.items():
            fields = ", ".join(f"{k} = {json.dumps(v)}" for k, v in entry.items())
            lines.append(f"{key} = {{ {fields} }}")
        lines.append("")
    path = out / f"{GPU}.toml"
    path.write_text("\n".join(lines))
    return path


def use_data(directory: str) -> None:
    """Worker initializer: this process reads its GPU data from ``directory`` first (a forked
    worker may have inherited the constants its parent had read: they are read again)."""
    os.environ[DATA_PATH] = directory
    gpu_constants.cache_clear()


def cells() -> list[tuple[str, dict[str, Any]]]:
    """(experiment, run config) of each cell of :data:`EXPERIMENTS` for each of :data:`POLICIES`."""
    from bless.harness.sweep import load_sweep

    return [
        (name, {**cell, "policy": policy})
        for name in EXPERIMENTS
        for cell in load_sweep(HERE / f"{name}.yaml").configs_without("policy")  # the policy dimension: ours
        for policy in POLICIES
    ]


def measure(job: tuple[str, dict[str, Any], bool]) -> tuple[str, str, float, float]:
    """One cell: its policy, mean latency over the bound, worst app's mean over its ISO target."""
    from bless.harness.bound import bound_for_config
    from bless.harness.config import config_from_dict
    from bless.harness.loads import parse_load
    from bless.harness.run import run_config

    name, raw, free_host = job
    policy = raw["policy"]
    if free_host and policy == "bless":
        raw = {**raw, "policy": {"name": "bless", "decide_per_launch": 0.0}}
    cfg = config_from_dict(raw)
    result = run_config(cfg)
    mean = sum(a.mean for a in result.apps) / len(result.apps)
    closed = all(parse_load(a.load, "load").closed for a in cfg.apps)
    worst = result.worst_over_iso if closed else math.nan
    return name, policy, mean / bound_for_config(cfg).mean, worst


def main() -> int:
    jobs = cells()
    table: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for variant, changes in VARIANTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            variant_file(changes, Path(tmp))
            free_host = any(k.startswith("host.") for k in changes)
            with ProcessPoolExecutor(2, initializer=use_data, initargs=(tmp,)) as pool:
                for name, policy, ratio, worst in pool.map(measure, [(n, c, free_host) for n, c in jobs], chunksize=4):
                    table[name, policy, variant].append((ratio, worst))
        print(f"{variant}: done", file=sys.stderr, flush=True)
    names = list(VARIANTS)
    print("Simulated A100, every cell of each experiment; mean latency / lower bound (mean over the cells),")
    print("BLESS's worst app's mean over its ISO target in parentheses where every app runs a closed loop")
    print("(an open loop's ISO run queues, so T[quota] is not its target; `experiments/bound_gap.py`).\n")
    head = " | ".join(f"{p.upper()}, {v}" for v in names for p in POLICIES)
    print(f"| experiment | {head} |")
    print("|---|" + "---|" * (len(names) * len(POLICIES)))
    means: dict[tuple[str, str], list[float]] = defaultdict(list)
    for name in EXPERIMENTS:
        row = []
        for variant in names:
            for policy in POLICIES:
                got = table[name, policy, variant]
                ratio = sum(r for r, _ in got) / len(got)
                means[policy, variant].append(ratio)
                worst = max(w for _, w in got)
                worst_md = f" ({worst:.3f})" if policy == "bless" and not math.isnan(worst) else ""
                row.append(f"{ratio:.3f}{worst_md}")
        print(f"| {name} | " + " | ".join(row) + " |")
    print(
        "| **mean** | "
        + " | ".join(f"{sum(means[p, v]) / len(means[p, v]):.3f}" for v in names for p in POLICIES)
        + " |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
