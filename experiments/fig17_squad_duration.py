"""Fig. 17: how long one kernel squad takes under SEQ, NSP, SP and Semi-SP.

For each two-app pair it builds squads the way BLESS's scheduler does (two
requests at random progress points and ages, ``squad_size`` kernels) and
runs each squad four ways on the simulated A100 (noise on, DRAM interference
and launch costs included):

* SEQ -- the two requests' squad kernels one after the other, each alone on
  the whole GPU (time sharing at squad granularity);
* NSP -- all kernels at once, unrestricted (what UNBOUND does within a squad);
* SP -- each request restricted for all its squad kernels to the determiner's
  best strict split of the 18 partitions;
* Semi-SP -- the same split for the first ``c`` = 50 % of each request's
  kernels, the rest unrestricted (BLESS's default);

and records which one the determiner picks (NSP or Semi-SP).

    .venv/bin/python experiments/fig17_squad_duration.py --squads 40 --seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from estimator_accuracy import (  # the same launches and timing as the estimator check
    decisions,
    measure,
)

from bless.core.determiner import Determiner
from bless.core.lifecycle import AppState, Request
from bless.core.manager import KernelManager
from bless.core.scheduler import Squad, build_squad
from bless.hw.gpus import get_gpu
from bless.profiles.catalog import load_app
from bless.sim.backend import SimBackend

APPS = ("vgg11", "resnet50", "resnet101", "nasnet", "bert")
MODES = ("SEQ", "NSP", "SP", "Semi-SP")
HERE = Path(__file__).resolve().parent


def pairs() -> list[tuple[str, str]]:
    mutual = [(a, b) for i, a in enumerate(APPS) for b in APPS[i + 1 :]]
    return mutual + [(a, a) for a in APPS]


def random_squad(states: list[AppState], rng: np.random.Generator, size: int, rid: int) -> Squad:
    """A squad of two requests at random progress points and ages (what the scheduler would build)."""
    now = 1.0
    reqs = []
    for app in states:
        r = Request(rid + app.index, app, now - float(rng.uniform(0.2, 1.5)) * app.iso_latency)
        r.scheduled = int(rng.integers(0, app.profile.n_kernels - 1))
        reqs.append(r)
    reqs.sort(key=lambda r: r.arrival)
    return build_squad(reqs, now, size)


MODE_KEYS = {
    "SEQ": lambda parts: ("seq",),
    "NSP": lambda parts: ("nsp",),
    "SP": lambda parts: ("split", parts),
    "Semi-SP": lambda parts: ("semi_sp", parts, 0.5),
}
"""Each mode as estimator_accuracy.py names the configuration it launches."""


def run(squads: int, squad_size: int, seed: int, noise: float) -> dict:
    gpu = get_gpu("a100")
    profiles = {a: load_app(a, gpu.name) for a in APPS}
    rng = np.random.default_rng(seed)
    backend = SimBackend(gpu, noise_sigma=noise, seed=seed)
    manager = KernelManager(backend)
    limits = [None, *dict.fromkeys(gpu.sms_for_level(n) for n in range(1, 18))]
    det = Determiner(gpu, switch_cost=backend.host.context_switch)
    rows = []
    t0 = time.perf_counter()
    rid = 0
    for a, b in pairs():
        states = [AppState(0, f"{a}#0", profiles[a], 0.5), AppState(1, f"{b}#1", profiles[b], 0.5)]
        for st in states:
            manager.deploy(st, limits)
        got = 0
        while got < squads:
            rid += 2
            squad = random_squad(states, rng, squad_size, rid)
            if len(squad.entries) < 2:
                continue
            got += 1
            parts, _ = det.best_split(squad)
            measured = {}
            for mode in MODES:
                measured[mode] = measure(manager, decisions(squad, MODE_KEYS[mode](parts), gpu, "mps"))
            picked = det.decide(squad).restricted
            rows.append(
                {
                    "pair": f"{a}+{b}",
                    **measured,
                    "BLESS": measured["Semi-SP" if picked else "NSP"],
                    "restricted": picked,
                }
            )
        for st in states:
            manager.undeploy(st)
    return {
        "rows": rows,
        "wall_seconds": time.perf_counter() - t0,
        "squads_per_pair": squads,
        "squad_size": squad_size,
        "seed": seed,
        "noise_sigma": noise,
    }


def table(res: dict) -> str:
    """Mean squad duration per pair (us) and relative to SEQ."""
    cols = (*MODES, "BLESS")
    lines = [
        "| pair | " + " | ".join(f"{c} (us)" for c in cols) + " | Semi-SP / SEQ | BLESS picks Semi-SP |",
        "|---|" + "---|" * (len(cols) + 2),
    ]
    by_pair: dict[str, list[dict]] = {}
    for r in res["rows"]:
        by_pair.setdefault(r["pair"], []).append(r)
    for pair, rs in [*by_pair.items(), ("**all**", res["rows"])]:
        means = {c: float(np.mean([r[c] for r in rs])) for c in cols}
        share = float(np.mean([r["restricted"] for r in rs]))
        lines.append(
            f"| {pair} | "
            + " | ".join(f"{means[c] * 1e6:.0f}" for c in cols)
            + f" | {means['Semi-SP'] / means['SEQ']:.2f} | {share:.0%} |"
        )
    return "\n".join(lines)


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs_ = list(dict.fromkeys(r["pair"] for r in res["rows"]))
    fig, ax = plt.subplots(figsize=(12, 4))
    w = 0.2
    for j, mode in enumerate(MODES):
        seq = [np.mean([r["SEQ"] for r in res["rows"] if r["pair"] == p]) for p in pairs_]
        ys = [np.mean([r[mode] for r in res["rows"] if r["pair"] == p]) / s for p, s in zip(pairs_, seq)]
        ax.bar(np.arange(len(pairs_)) + (j - 1.5) * w, ys, w, label=mode)
    ax.set_xticks(np.arange(len(pairs_)), pairs_, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("squad duration / SEQ")
    ax.set_title(f"Fig. 17: squad duration ({res['squad_size']} kernels, {res['squads_per_pair']} squads per pair)")
    ax.legend(ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--squads", type=int, default=40, help="squads per pair")
    p.add_argument("--squad-size", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.02)
    p.add_argument("--out", type=Path, default=HERE / "results" / "fig17")
    args = p.parse_args(argv)
    res = run(args.squads, args.squad_size, args.seed, args.noise)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "squads.json").write_text(json.dumps(res, indent=1) + "\n")
    md = table(res)
    (args.out / "table.md").write_text(md + "\n")
    plot(res, args.out / "fig17.png")
    print(md)
    print(f"{len(res['rows'])} squads x {len(MODES)} configurations in {res['wall_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
