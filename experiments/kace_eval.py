"""KACE partner selection against the Oracle, on real A100 pairs and on simulator pairs.

Builds every data set in KACE's CSV format (F and P) into ``--data`` and runs
:func:`bless.colocation.kace_eval.evaluate` -- what ``bless kace evaluate``
runs -- with the policies it always reports (KACE, Xu et al.'s random forest,
plain linear least squares, the rules, Random, Oracle) plus diagnostic
variants of KACE, then writes the table to ``experiments/kace.md``:

    python experiments/kace_eval.py            # about 3 minutes on 2 cores

Data sets:

* ``a100-own`` / ``a100-full``: the real A100 MPS pairs (``bless kace from-a100``;
  throughputs relative to solo under the workload's own MPS limit / on the
  whole GPU);
* ``sim-profiles``: ``bless kace generate --gpu a100`` (the 10 profiled A100
  apps, 55 pairs);
* ``sim-syn21``: ``bless kace generate --gpu a100 --synthetic 21`` (21 apps,
  231 pairs: the paper's count);
* ``+noise10``: the same F with 10 columns of seeded Gaussian noise added: a
  wide feature table, as a profiler's, in which some metrics carry nothing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from bless.colocation import kace_data
from bless.colocation.kace import MIN_CORRELATION, KaceModel, pair_matrix
from bless.colocation.kace_eval import EvalConfig, ModelFactory, evaluate

ROOT = Path(__file__).resolve().parent
PAPER = {"KACE": 0.906, "Xu RF": 0.813, "MEMCAP": 0.785}
"""V100, 21 workloads, the means of the artifact's reproduce_figures/21workload.csv (see kace_eval)."""


class _Fixed:
    """A KACE variant with some of its choices fixed (the rest by CV), for the diagnosis columns."""

    def __init__(self, min_correlation, ridge):
        self.args = (min_correlation, ridge)

    def __call__(self, table, pairs, y, seed):
        return KaceModel.fit(pair_matrix(table, pairs), y, table.columns, *self.args)


class _ConcatOneOrder:
    """Least squares on [features of workload1, features of workload2], pairs in their file order."""

    def __init__(self, table, pairs, y, seed):
        from sklearn.linear_model import LinearRegression

        self.model = LinearRegression().fit(self._x(table, pairs), y)

    @staticmethod
    def _x(table, pairs):
        return np.hstack([table.values[[table.index(p[i]) for p in pairs]] for i in (0, 1)])

    def predict_pairs(self, table, pairs):
        return self.model.predict(self._x(table, pairs))


VARIANTS: dict[str, ModelFactory] = {
    "KACE paper": _Fixed(MIN_CORRELATION, 0.0),
    "|r| CV, LS": _Fixed(None, 0.0),
    "all, ridge CV": _Fixed(0.0, None),
    "concat 1 order": _ConcatOneOrder,
}
"""KACE paper: |r| >= 0.2 and least squares (the artifact); |r| CV, LS: only the cut-off chosen
by CV; all, ridge CV: every feature, only the penalty chosen by CV; concat 1 order: a pair as its
two workloads' features side by side, one order (not symmetric in the pair)."""


def build(data: Path, seconds: float, jobs: int) -> dict[str, Path]:
    from bless.cli import main

    out = {}
    for solo in ("own", "full"):
        d = data / f"a100-{solo}"
        if main(["kace", "from-a100", "--solo", solo, "--out", str(d)]) != 0:
            sys.exit(f"could not build {d}")
        out[d.name] = d
    for name, extra in (("sim-profiles", []), ("sim-syn21", ["--synthetic", "21"])):
        d = data / name
        if not (d / "pairs.csv").exists():
            args = ["kace", "generate", "--gpu", "a100", "--out", str(d), "--seconds", str(seconds)]
            if main([*args, "--jobs", str(jobs), *extra]) != 0:
                sys.exit(f"could not build {d}")
        out[name] = d
    for name in ("a100-own", "a100-full", "sim-syn21"):
        src, d = out[name], data / f"{name}+noise10"
        d.mkdir(parents=True, exist_ok=True)
        t = kace_data.read_features(src / "features.csv")
        noise = np.random.default_rng(7).normal(size=(len(t.workloads), 10))
        cols = t.columns + tuple(f"noise{i}" for i in range(10))
        kace_data.write_features(
            d / "features.csv", kace_data.FeatureTable(t.workloads, cols, np.hstack([t.values, noise]))
        )
        shutil.copy(src / "pairs.csv", d / "pairs.csv")
        out[d.name] = d
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT / "results" / "kace"), help="where the F/P data sets go")
    ap.add_argument("--out", default=str(ROOT / "kace.md"))
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--train-frac", type=float, default=0.2)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    sets = build(Path(args.data), args.seconds, args.jobs)
    runs = [(name, False) for name in sets] + [("a100-own", True), ("a100-full", True)]
    rows = []
    for name, unseen in runs:
        data = kace_data.load(sets[name] / "features.csv", sets[name] / "pairs.csv")
        config = EvalConfig(
            train_frac=args.train_frac,
            repeats=args.repeats,
            unseen=unseen,
            rule_columns={"MEM%": "memory_busy_pct"} if name.startswith("a100") else {},
        )
        ev = evaluate(data, config, pairs_source=name, extra_models=VARIANTS)
        rows.append((name + (" unseen" if unseen else ""), len(data.pairs), ev))
        print(f"{rows[-1][0]}: " + ", ".join(f"{p} {a:.3f}" for p, a in zip(ev.policies, ev.average)), flush=True)
    policies = ["KACE", "KACE paper", "Linear", "Xu RF", *VARIANTS.keys() - {"KACE paper"}]
    policies += ["MEMCAP", "SM%", "MEM%", "Best-rule", "Random", "Oracle"]
    policies = list(dict.fromkeys(policies))
    lines = [
        "# KACE: partner picked / Oracle's throughput sum",
        "",
        f"Written by `python experiments/kace_eval.py` ({args.repeats} random splits per cell, "
        f"{args.train_frac:.0%} of pairs trained on, seed 0; {time.perf_counter() - t0:.0f} s).  "
        "Each cell: mean over targets of the picked partner's measured throughput sum over the best "
        "candidate's, averaged over splits, ± the standard deviation over splits of the per-split mean "
        "(`bless kace evaluate --repeats 30`).  '-': the data set has no column for that rule.",
        "",
        "| data set (pairs) | " + " | ".join(p.replace("|", "\\|") for p in policies) + " |",
        "|---|" + "---:|" * len(policies),
        "| paper, V100 (21 workloads) | "
        + " | ".join(f"{PAPER[p]:.3f}" if p in PAPER else "" for p in policies).replace("KACE paper", "")
        + " |",
    ]
    for label, n, ev in rows:
        cells = []
        for p in policies:
            if p not in ev.policies:
                cells.append("-")
                continue
            i = ev.policies.index(p)
            cells.append(f"{ev.average[i]:.3f} ± {ev.spread[i]:.3f}")
        lines.append(f"| {label} ({n}) | " + " | ".join(cells) + " |")
    lines += ["", "KACE's |r| cut-off and ridge penalty, as chosen by cross-validation on the training pairs:", ""]
    for label, _, ev in rows:
        top = ", ".join(f"|r|>={r:g} ridge {a:.3g} {v}x" for (r, a), v in ev.kace_choices.most_common(3))
        lines.append(f"- {label}: {top} (of {ev.fits} fits)")
    Path(args.out).write_text("\n".join(lines) + "\n" + _notes())
    print(f"wrote {args.out}")
    return 0


def _notes() -> str:
    return (ROOT / "kace_notes.md").read_text() if (ROOT / "kace_notes.md").exists() else ""


if __name__ == "__main__":
    sys.exit(main())
