"""Partner-selection policies: given a target workload's candidate partners, pick one.

Pure functions over :class:`Candidate` lists (the paper's Figs. 4-5 compare
them; KACE artifact ``utils/predictor.py``):

* **KACE** / **Xu et al.**: the candidate whose pair a model predicts the
  highest throughput sum for;
* **MEMCAP**: the partner with the smallest memory footprint;
* **SM%**: the partner with the highest SM busy percentage;
* **MEM%**: the partner with the lowest memory busy percentage;
* **Best-rule**: whichever of the three rules scored best offline, on the
  training pairs (:func:`best_rule`);
* **Random**: not a pick but its expectation, the mean over all candidates;
* **Oracle**: the candidate with the highest measured throughput sum.

Ties go to the first candidate in the given order, so results are reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Candidate:
    """One possible partner of the target workload."""

    partner: str
    features: Mapping[str, float]
    """The partner's own (solo) features, by F column."""
    measured: float = math.nan
    """The pair's measured throughput sum (nan when not measured)."""
    predicted: Mapping[str, float] = field(default_factory=dict)
    """The pair's predicted throughput sum, by model name."""


@dataclass(frozen=True)
class Rule:
    """A rule of thumb: the partner with the highest (or lowest) value of one feature."""

    name: str
    column: str
    highest: bool

    def pick(self, candidates: Sequence[Candidate]) -> int:
        values = np.array([c.features[self.column] for c in candidates])
        return int(np.argmax(values) if self.highest else np.argmin(values))


def rules(memory: str, sm_busy: str, memory_busy: str) -> tuple[Rule, ...]:
    """The paper's three rule-based policies, reading the given F columns."""
    return (
        Rule("MEMCAP", memory, highest=False),
        Rule("SM%", sm_busy, highest=True),
        Rule("MEM%", memory_busy, highest=False),
    )


def pick_predicted(candidates: Sequence[Candidate], model: str) -> int:
    """KACE (or any model): the highest predicted throughput sum."""
    return int(np.argmax([c.predicted[model] for c in candidates]))


def pick_oracle(candidates: Sequence[Candidate]) -> int:
    """The highest measured throughput sum."""
    return int(np.argmax([c.measured for c in candidates]))


def score(candidates: Sequence[Candidate], pick: int) -> float:
    """The picked pair's measured throughput sum relative to the Oracle's."""
    return _relative(candidates, candidates[pick].measured)


def random_score(candidates: Sequence[Candidate]) -> float:
    """A random pick's expected score: the mean measured sum relative to the Oracle's."""
    return _relative(candidates, float(np.mean([c.measured for c in candidates])))


def _relative(candidates: Sequence[Candidate], value: float) -> float:
    best = candidates[pick_oracle(candidates)].measured
    return value / best if best > 0 else 1.0  # all zero: every pick is as good as the best


def rule_score(rule: Rule, groups: Sequence[Sequence[Candidate]]) -> float:
    """A rule's mean score over candidate groups (one group per target)."""
    scores = [score(g, rule.pick(g)) for g in groups if g]
    return float(np.mean(scores)) if scores else math.nan


def best_rule(candidate_rules: Sequence[Rule], groups: Sequence[Sequence[Candidate]]) -> Rule:
    """The rule that scores best on ``groups`` (the training pairs); ties to the first."""
    scores = [rule_score(r, groups) for r in candidate_rules]
    if all(math.isnan(s) for s in scores):
        return candidate_rules[0]
    return candidate_rules[int(np.nanargmax(scores))]
