"""``bless kace evaluate|fit|rank|generate``: KACE colocation prediction on plain CSV files."""

from __future__ import annotations

import argparse
import os

from bless.cli import make_console
from bless.colocation.kace import CORRELATION_GRID, MIN_CORRELATION
from bless.hw.gpus import DEFAULT_GPU


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "kace",
        help="predict how well two workloads co-run (KACE, SoCC'24): evaluate, fit, rank, generate data",
        description="KACE colocation prediction on CSV files: F (workload + numeric features) and "
        "P (workload1,workload2,throughput1,throughput2).",
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    ev = verbs.add_parser("evaluate", help="pick partners with every policy; throughput sums relative to Oracle")
    _data_args(ev)
    ev.add_argument("--train-frac", type=float, default=0.2, help="fraction of pairs to train on (default 0.2)")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--repeats", type=int, default=1, help="random splits to average over (default 1)")
    ev.add_argument("--unseen", action="store_true", help="hold out every pair of the target workload from training")
    ev.add_argument("--memcap-column", help="F column for MEMCAP (default memory_mib or memcap)")
    ev.add_argument("--sm-column", help="F column for SM%% (default sm_busy_pct or sm%%)")
    ev.add_argument("--mem-column", help="F column for MEM%% (default memory_busy_pct or mem%%)")
    ev.set_defaults(func=run_evaluate)

    fit = verbs.add_parser("fit", help="train KACE on all pairs and write a model file")
    _data_args(fit)
    fit.add_argument("--out", required=True, help="model file to write (JSON)")
    fit.set_defaults(func=run_fit)

    rank = verbs.add_parser("rank", help="rank candidate partners of a target by predicted throughput sum")
    rank.add_argument("--model", required=True, help="model file from `bless kace fit`")
    rank.add_argument("--features", required=True, help="F: CSV with a workload column and the model's features")
    rank.add_argument("--target", required=True)
    rank.add_argument("--candidates", nargs="+", required=True)
    rank.set_defaults(func=run_rank)

    a100 = verbs.add_parser(
        "from-a100", help="write F and P from the real A100 MPS pairs in the shared data (ResNet50 beside ResNet50)"
    )
    a100.add_argument("--out", required=True, help="directory for features.csv and pairs.csv")
    a100.add_argument(
        "--solo",
        choices=("own", "full"),
        default="own",
        help="throughputs relative to the workload alone under its own MPS limit (default) or on the whole GPU",
    )
    a100.set_defaults(func=run_from_a100)

    gen = verbs.add_parser("generate", help="co-run every pair of profiled apps on the simulator; write F and P")
    gen.add_argument("--gpu", default=DEFAULT_GPU)
    gen.add_argument("--out", required=True, help="directory for features.csv, pairs.csv, generate.json")
    gen.add_argument("--seconds", type=float, default=2.0, help="virtual seconds per run (default 2)")
    gen.add_argument("--apps", nargs="+", help="profiled apps (default: every profile for the GPU)")
    gen.add_argument("--synthetic", type=int, metavar="N", help="use N seeded synthetic apps instead of profiles")
    gen.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all cores)")
    gen.set_defaults(func=run_generate)


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--features", required=True, help="F: CSV with a workload column and numeric feature columns")
    p.add_argument("--pairs", required=True, help="P: CSV with workload1,workload2,throughput1,throughput2")
    p.add_argument(
        "--normalised",
        action="store_true",
        help="P's throughputs are already relative to solo (the default when F has no solo_throughput column)",
    )
    p.add_argument(
        "--min-correlation",
        type=float,
        help="KACE drops pair features less correlated with the target than this (default: chosen by 5-fold "
        f"cross-validation on the training pairs among {', '.join(map(str, CORRELATION_GRID))}; "
        f"the paper fixes {MIN_CORRELATION})",
    )
    p.add_argument(
        "--ridge",
        type=float,
        help="KACE's ridge penalty on z-scored features (default: chosen by cross-validation on the training "
        "pairs; 0 is the paper's least squares: --min-correlation 0.2 --ridge 0 is the paper's model)",
    )


def _note_relative(data) -> None:
    if data.relative_to_solo:
        print(
            f"note: {data.features.source} has no solo_throughput column; the throughputs in the pairs file "
            "are taken as relative to each workload's solo throughput and summed as given"
        )


# ------------------------------------------------------------------ evaluate
def run_evaluate(args: argparse.Namespace) -> int:
    from rich.table import Table

    from bless.colocation import kace_data
    from bless.colocation.kace_eval import EvalConfig, evaluate

    data = kace_data.load(args.features, args.pairs, normalised=args.normalised)
    _note_relative(data)
    config = EvalConfig(
        train_frac=args.train_frac,
        seed=args.seed,
        repeats=args.repeats,
        unseen=args.unseen,
        min_correlation=args.min_correlation,
        ridge=args.ridge,
        rule_columns={"MEMCAP": args.memcap_column, "SM%": args.sm_column, "MEM%": args.mem_column},
    )
    result = evaluate(data, config, pairs_source=args.pairs)
    mode = "unseen targets" if args.unseen else "seen targets"
    table = Table(
        title=f"Throughput sum of the picked partner / Oracle's ({mode}; {len(data.pairs)} pairs, "
        f"{result.training_pairs} trained on, seed {args.seed}, {args.repeats} repeat(s))"
    )
    table.add_column("target", no_wrap=True)
    for policy in result.policies:
        table.add_column(policy, justify="right")
    for target, row in zip(result.targets, result.scores):
        table.add_row(target, *(_cell(v) for v in row))
    table.add_section()
    table.add_row("average", *(_cell(v) for v in result.average), style="bold")
    if args.repeats > 1:
        table.add_row("± over repeats", *(f"{v:.3f}" for v in result.spread))
    console = make_console(min_width=max(map(len, result.targets)) + 11 * len(result.policies) + 8)
    console.print(table)
    for name, err in result.errors.items():
        console.print(
            f"{name}: predicted vs measured throughput sum on evaluated pairs: MAE {err.mae:.3f}, R² {err.r2:.3f}"
        )
    fits = result.fits
    if result.best_rules:
        console.print(
            "Best-rule (chosen on training pairs): "
            + ", ".join(f"{k} {v}/{fits}" for k, v in result.best_rules.most_common())
        )
    console.print(
        "KACE |r| cut-off and ridge penalty (chosen by CV on training pairs unless given): "
        + ", ".join(f"|r|>={r:g} ridge {a:.3g}: {v}/{fits}" for (r, a), v in result.kace_choices.most_common())
    )
    console.print("KACE features kept: " + ", ".join(f"{k} {v}/{fits}" for k, v in result.kace_columns.most_common()))
    if result.interpolating_fits:
        console.print(
            f"note: {result.interpolating_fits} of {result.fits} KACE fits had no more training pairs than "
            "coefficients (an exact fit): its predicted values for new pairs are unreliable; "
            "measure more pairs or raise --train-frac"
        )
    for rule, why in result.missing_rules.items():
        console.print(f"{rule} left out: {why} (name the column with --{_rule_flag(rule)}-column)")
    return 0


def _cell(v: float) -> str:
    return "-" if v != v else f"{v:.3f}"


def _rule_flag(rule: str) -> str:
    return {"MEMCAP": "memcap", "SM%": "sm", "MEM%": "mem"}[rule]


# ------------------------------------------------------------------ fit / rank
def run_fit(args: argparse.Namespace) -> int:
    from bless.colocation import kace_data
    from bless.colocation.kace import KaceModel, pair_matrix

    data = kace_data.load(args.features, args.pairs, normalised=args.normalised)
    _note_relative(data)
    x = pair_matrix(data.features, [(p.workload1, p.workload2) for p in data.pairs])
    model = KaceModel.fit(x, data.throughput_sums, data.features.columns, args.min_correlation, args.ridge)
    path = model.save(args.out)
    print(
        f"KACE model trained on {len(data.pairs)} pairs (|r| >= {model.min_correlation:g}, ridge {model.ridge:.3g}), "
        f"using {', '.join(model.inputs.selected_names)}; written to {path}"
    )
    return 0


def run_rank(args: argparse.Namespace) -> int:
    import numpy as np
    from rich.table import Table

    from bless.colocation.kace import KaceModel
    from bless.colocation.kace_data import read_features

    model = KaceModel.load(args.model)
    table = read_features(args.features)
    for name in (args.target, *args.candidates):
        table.index(name)  # a clear error for an unknown workload
    predicted = model.predict_pairs(table, [(args.target, c) for c in args.candidates])
    out = Table(title=f"Partners for {args.target}, best first")
    out.add_column("rank", justify="right")
    out.add_column("partner")
    out.add_column("predicted throughput sum", justify="right")
    for rank, i in enumerate(np.argsort(-predicted, kind="stable"), 1):
        out.add_row(str(rank), args.candidates[i], f"{predicted[i]:.3f}")
    make_console().print(out)
    return 0


# ------------------------------------------------------------------ from-a100
def run_from_a100(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bless.colocation.kace_a100 import convert
    from bless.colocation.kace_data import write_features, write_pairs
    from bless.shared_data import shared_file

    dataset = "the A100 MPS pair and kernel data (see ../shared/data/README.md)"
    pairs_dir = shared_file("colocation/a100_mps_pairs/corun_resnet50.csv", dataset).parent
    kernels_dir = shared_file("calibration/a100_mps_kernels/resnet50_kernels_aligned.csv.gz", dataset).parent
    table, pairs = convert(pairs_dir, kernels_dir, args.solo)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    f, p = write_features(out / "features.csv", table), write_pairs(out / "pairs.csv", pairs)
    print(f"{len(table.workloads)} workloads, {len(pairs)} pairs (solo: {args.solo}); wrote {f} and {p}")
    return 0


# ------------------------------------------------------------------ generate
def run_generate(args: argparse.Namespace) -> int:
    from bless.colocation.kace_generate import generate, synthetic_apps, write
    from bless.profiles.catalog import list_apps, load_app

    if args.synthetic:
        profiles = synthetic_apps(args.synthetic, args.gpu)
        source = f"bless.profiles.synthetic, {args.synthetic} seeded apps"
    else:
        names = args.apps or list_apps(args.gpu)
        if not names:
            raise ValueError(f"no profiles for {args.gpu}; pass --synthetic N to use synthetic apps")
        profiles = [load_app(n, args.gpu) for n in names]
        source = "profiles: " + ", ".join(f"{p.app} ({p.provenance.method}: {p.provenance.source})" for p in profiles)
    result = generate(profiles, args.gpu, args.seconds, jobs=max(1, args.jobs))
    provenance = {
        "tool": "bless kace generate",
        "gpu": args.gpu,
        "seconds": args.seconds,
        "apps": [p.app for p in profiles],
        "source": source,
        "method": "simulated GPU (bless.sim), full sharing, closed loops",
    }
    f, p = write(result, args.out, provenance)
    n = len(profiles)
    print(
        f"{n} apps, {len(result.pairs)} pairs ({len(result.absent)} did not fit in memory), "
        f"{result.kernels:,} kernels simulated in {result.wall_seconds:.1f} s wall with {args.jobs} job(s)"
    )
    for col, why in result.dropped_columns.items():
        print(f"  column {col} left out: {why}")
    print(f"wrote {f} and {p}")
    return 0
