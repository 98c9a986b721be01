"""Evaluate partner selection the way the KACE paper does (its Figs. 4-5).

Train on a random fraction of the measured pairs; then, for every target
workload, its candidates are the pairs with it that were *not* trained on (the
artifact predicts on its testing set).  Each policy picks one candidate; its
score is the picked pair's measured throughput sum over the best candidate's
(the Oracle), so 1.0 is perfect.  Scores are averaged per target over repeats
(new random split each), then over targets.

Besides KACE and Xu et al.'s random forest, **Linear** is plain least squares
on every pair feature (no |r| filter, no penalty): what KACE's selection and
fit have to beat to be worth having.

``unseen``: for each target, every pair with it is removed from the training
sample, and all of its pairs are candidates; one model per target.

What the paper reports (V100, 21 workloads, MPS at 100 %): averaged over the
21 targets of its Fig. 5, KACE 0.906, Xu et al. 0.813, MEMCAP 0.785 of Oracle
(means of the artifact's ``reproduce_figures/21workload.csv``); the abstract
says KACE is "within 10 % of ... an offline-optimal oracle" and beats rule-based
and prediction-based policies by 16 % and 11 % on average.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from bless.colocation import kace_policies as pol
from bless.colocation.kace import (
    MIN_CORRELATION,
    MIN_TRAINING_PAIRS,
    ForestModel,
    KaceModel,
    pair_matrix,
)
from bless.colocation.kace_data import ColocationData, DataError, FeatureTable

KACE = "KACE"
FOREST = "Xu RF"
LINEAR = "Linear"
"""Plain least squares on every pair feature (no selection, no penalty): the baseline KACE must beat."""
BEST_RULE = "Best-rule"
RANDOM = "Random"
ORACLE = "Oracle"

RULE_COLUMN_DEFAULTS = {
    "MEMCAP": ("memory_mib", "memcap"),
    "SM%": ("sm_busy_pct", "sm%"),
    "MEM%": ("memory_busy_pct", "mem%"),
}
"""F columns each rule reads when not told: this project's names, then the KACE artifact's."""


@dataclass(frozen=True)
class EvalConfig:
    train_frac: float = 0.2
    seed: int = 0
    repeats: int = 1
    unseen: bool = False
    min_correlation: float | None = None
    """KACE's |r| cut-off; None: chosen by cross-validation on the training pairs."""
    ridge: float | None = None
    """KACE's ridge penalty; None: chosen by cross-validation (0.2 and 0.0: the paper's model)."""
    rule_columns: dict[str, str | None] = field(default_factory=dict)
    """Rule name -> F column to read (None: the defaults above)."""


@dataclass(frozen=True)
class PredictionError:
    """How far a model's predicted throughput sums were from the measured ones."""

    mae: float
    r2: float


@dataclass(frozen=True, eq=False)
class Evaluation:
    targets: tuple[str, ...]
    policies: tuple[str, ...]
    scores: np.ndarray
    """Shape (targets, policies): score averaged over repeats (nan: never had candidates)."""
    average: np.ndarray
    """Per policy: mean over targets."""
    spread: np.ndarray
    """Per policy: standard deviation over repeats of the per-repeat average."""
    training_pairs: int
    """Training pairs of one model (the first one fitted)."""
    best_rules: Counter
    """How often each rule was the offline Best-rule."""
    kace_columns: Counter
    """How often each F column was kept by KACE's correlation filter."""
    kace_choices: Counter
    """How often KACE used each (|r| cut-off, ridge penalty)."""
    interpolating_fits: int
    """KACE fits with no more training pairs than coefficients (an exact fit: values
    predicted for new pairs are unreliable, though their order may still be right)."""
    fits: int
    errors: dict[str, PredictionError]
    missing_rules: dict[str, str]
    """Rules left out, with the reason."""


def resolve_rule_columns(table: FeatureTable, chosen: dict[str, str | None]) -> tuple[list[pol.Rule], dict[str, str]]:
    """The rules F can support, and why the others are left out."""
    found: dict[str, str] = {}
    missing: dict[str, str] = {}
    for name, defaults in RULE_COLUMN_DEFAULTS.items():
        column = chosen.get(name)
        if column is not None:
            if column not in table.columns:
                raise DataError(
                    f"{table.source}: row 1: no column {column!r} for the {name} rule; "
                    f"columns: {', '.join(table.columns)}"
                )
            found[name] = column
            continue
        column = next((c for c in defaults if c in table.columns), None)
        if column is None:
            missing[name] = f"no column {' or '.join(repr(c) for c in defaults)} in {table.source}"
        else:
            found[name] = column
    all_rules = pol.rules(found.get("MEMCAP", ""), found.get("SM%", ""), found.get("MEM%", ""))
    return [r for r in all_rules if r.name in found], missing


def training_size(n_pairs: int, train_frac: float, source: str) -> int:
    """Pairs to train on; a clear error when that is too few or leaves nothing to test."""
    if not 0 < train_frac < 1:
        raise DataError(f"--train-frac must be between 0 and 1 (exclusive), got {train_frac}")
    n_train = round(train_frac * n_pairs)
    if n_train < MIN_TRAINING_PAIRS:
        raise DataError(
            f"{source}: {n_pairs} pairs; --train-frac {train_frac} leaves {n_train} for training, "
            f"fewer than the {MIN_TRAINING_PAIRS} a fit needs; measure more pairs or raise --train-frac"
        )
    if n_train >= n_pairs:
        raise DataError(f"{source}: --train-frac {train_frac} leaves no pair of the {n_pairs} to evaluate on")
    return n_train


Pair = tuple[str, str]
ModelFactory = Callable[[FeatureTable, Sequence[Pair], np.ndarray, int], object]
"""(F, training pairs, their throughput sums, seed) -> a fitted model with ``predict_pairs(F, pairs)``."""


def evaluate(
    data: ColocationData,
    config: EvalConfig,
    pairs_source: str = "pairs",
    extra_models: Mapping[str, ModelFactory] | None = None,
) -> Evaluation:
    """Score every policy per target (see the module docstring).

    ``extra_models`` adds model-driven policies (name -> factory), fitted on the
    same training pairs and scored on the same candidates as KACE.
    """
    extra = dict(extra_models or {})
    if config.repeats < 1:
        raise DataError(f"--repeats must be at least 1, got {config.repeats}")
    table = data.features
    rules, missing = resolve_rule_columns(table, config.rule_columns)
    policies = (KACE, FOREST, LINEAR, *extra, *[r.name for r in rules], *([BEST_RULE] if rules else []), RANDOM, ORACLE)
    n = len(data.pairs)
    n_train = training_size(n, config.train_frac, pairs_source)
    x: list[Pair] = [(p.workload1, p.workload2) for p in data.pairs]
    y = data.throughput_sums
    targets = tuple(w for w in table.workloads if any(p.involves(w) for p in data.pairs))
    rng = np.random.default_rng(config.seed)
    per_repeat = np.full((config.repeats, len(targets), len(policies)), np.nan)
    state = _Tally()
    for r in range(config.repeats):
        train = rng.permutation(n)[:n_train]
        if config.unseen:
            for ti, target in enumerate(targets):
                held = np.array([i for i in train if not data.pairs[i].involves(target)])
                if len(held) < MIN_TRAINING_PAIRS:
                    raise DataError(
                        f"{pairs_source}: holding out {target!r} leaves {len(held)} training pairs, fewer than "
                        f"{MIN_TRAINING_PAIRS}; raise --train-frac or measure more pairs"
                    )
                candidates_idx = [i for i, p in enumerate(data.pairs) if p.involves(target)]
                models = _fit(table, x, y, held, candidates_idx, config, state, config.seed + r, extra)
                best = _best_rule(rules, data, table, held, targets, state)
                per_repeat[r, ti] = _scores(data, table, target, candidates_idx, x, models, rules, best, policies)
        else:
            in_train = set(train.tolist())
            rest = [i for i in range(n) if i not in in_train]
            models = _fit(table, x, y, train, rest, config, state, config.seed + r, extra)
            best = _best_rule(rules, data, table, train, targets, state)
            for ti, target in enumerate(targets):
                candidates_idx = [i for i in rest if data.pairs[i].involves(target)]
                if candidates_idx:
                    per_repeat[r, ti] = _scores(data, table, target, candidates_idx, x, models, rules, best, policies)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a target without candidates in a repeat is nan
        scores = np.nanmean(per_repeat, axis=0)
        average = np.nanmean(scores, axis=0)
        spread = np.nanstd(np.nanmean(per_repeat, axis=1), axis=0)
    return Evaluation(
        targets=targets,
        policies=policies,
        scores=scores,
        average=average,
        spread=spread,
        training_pairs=state.training_pairs or n_train,
        best_rules=state.best_rules,
        kace_columns=state.kace_columns,
        kace_choices=state.kace_choices,
        interpolating_fits=state.interpolating_fits,
        fits=state.fits,
        errors={name: state.error(name) for name in (KACE, FOREST, LINEAR, *extra)},
        missing_rules=missing,
    )


# ------------------------------------------------------------------ helpers
@dataclass
class _Tally:
    """What the evaluation notes along the way, for the report under the table."""

    training_pairs: int = 0
    best_rules: Counter = field(default_factory=Counter)
    kace_columns: Counter = field(default_factory=Counter)
    kace_choices: Counter = field(default_factory=Counter)
    interpolating_fits: int = 0
    fits: int = 0
    predicted: dict[str, list[float]] = field(default_factory=dict)
    measured: list[float] = field(default_factory=list)

    def error(self, model: str) -> PredictionError:
        p, m = np.array(self.predicted[model]), np.array(self.measured)
        if not len(m):
            return PredictionError(math.nan, math.nan)
        ss = ((m - m.mean()) ** 2).sum()
        r2 = 1 - ((m - p) ** 2).sum() / ss if ss > 0 else math.nan
        return PredictionError(float(np.abs(p - m).mean()), float(r2))


def _fit(
    table: FeatureTable,
    pairs: Sequence[Pair],
    y: np.ndarray,
    train,
    evaluated,
    config: EvalConfig,
    state: _Tally,
    seed: int,
    extra: Mapping[str, ModelFactory],
) -> dict[str, object]:
    """Fit every model on ``train``; note their errors on the ``evaluated`` pairs."""
    train_pairs = [pairs[i] for i in train]
    x = pair_matrix(table, train_pairs)
    kace = KaceModel.fit(x, y[train], table.columns, config.min_correlation, config.ridge)
    forest_r = MIN_CORRELATION if config.min_correlation is None else config.min_correlation
    forest = ForestModel.fit(x, y[train], table.columns, seed=seed, min_correlation=forest_r)
    linear = KaceModel.fit(x, y[train], table.columns, min_correlation=0.0, ridge=0.0)
    state.training_pairs = state.training_pairs or len(train)
    state.kace_columns.update(kace.inputs.selected_names)
    state.kace_choices[(kace.min_correlation, kace.ridge)] += 1
    state.fits += 1
    state.interpolating_fits += kace.exact_fit
    models: dict[str, object] = {KACE: kace, FOREST: forest, LINEAR: linear}
    models.update({name: factory(table, train_pairs, y[train], seed) for name, factory in extra.items()})
    evaluated_pairs = [pairs[i] for i in evaluated]
    for name, model in models.items():
        state.predicted.setdefault(name, []).extend(model.predict_pairs(table, evaluated_pairs).tolist())
    state.measured.extend(y[evaluated].tolist())
    return models


def _candidates(
    data: ColocationData, table: FeatureTable, target: str, idx: Sequence[int], predicted
) -> list[pol.Candidate]:
    out = []
    for j, i in enumerate(idx):
        partner = data.pairs[i].partner_of(target)
        row = table.values[table.index(partner)]
        out.append(
            pol.Candidate(
                partner=partner,
                features=dict(zip(table.columns, row.tolist())),
                measured=float(data.throughput_sums[i]),
                predicted={name: float(v[j]) for name, v in predicted.items()},
            )
        )
    return out


def _best_rule(rules, data: ColocationData, table: FeatureTable, train, targets, state: _Tally) -> pol.Rule | None:
    """Best-rule, chosen offline: the rule that picks best among the training pairs."""
    if not rules:
        return None
    groups = []
    for target in targets:
        idx = [i for i in train if data.pairs[i].involves(target)]
        if idx:
            groups.append(_candidates(data, table, target, idx, {}))
    best = pol.best_rule(rules, groups)
    state.best_rules[best.name] += 1
    return best


def _scores(data, table, target, idx, x, models, rules, best, policies) -> np.ndarray:
    """Every policy's score for one target among the candidate pairs ``idx``."""
    predicted = {name: m.predict_pairs(table, [x[i] for i in idx]) for name, m in models.items()}
    cands = _candidates(data, table, target, idx, predicted)
    row = {
        **{name: pol.score(cands, pol.pick_predicted(cands, name)) for name in models},
        RANDOM: pol.random_score(cands),
        ORACLE: 1.0,
    }
    for rule in rules:
        row[rule.name] = pol.score(cands, rule.pick(cands))
    if best is not None:
        row[BEST_RULE] = row[best.name]
    return np.array([row[p] for p in policies])
