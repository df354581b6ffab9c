"""What a controller answers for one row: the action, each candidate's probability, the margin and
whether it abstains. The service's controller (`controller.py`) and an exported one (`decide.py`
of an export) both build their answers here, so the two agree by construction.

Only the standard library: an export ships this file as it is (`export.py`).

- **Probabilities**: a softmax over the row's candidates of the model's scores (a trm's logits, a
  gbdt's ranking scores, an LM's log-likelihoods), so margins of every trainer read alike.
- **Margin**: the best probability less the second best; 1.0 for a row of one candidate.
- **Abstain**: `margin < abstain_margin` (never without a threshold). The action is still given:
  the caller decides what an abstention means (a fallback, a person), and a log of abstentions
  shows what the controller would have done.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    """`action` is the best candidate (ties go to the earlier one), given for every row read,
    abstaining or not; `scores` its probabilities in the row's order."""

    action: str | None
    scores: list[float]
    margin: float
    abstain: bool


def decision(
    tools: Sequence[str], scores: Sequence[float], abstain_margin: float | None
) -> Decision:
    """One row's decision from the model's raw scores for its candidates."""
    probs = softmax(scores)
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    margin = probability_margin(probs)
    abstain = abstain_margin is not None and margin < abstain_margin
    return Decision(tools[best], probs, margin, abstain)


def softmax(scores: Sequence[float]) -> list[float]:
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = math.fsum(weights)
    return [w / total for w in weights]


def probability_margin(probs: Sequence[float]) -> float:
    """The best probability less the second best; 1.0 with one candidate."""
    if len(probs) < 2:
        return 1.0
    first, second = sorted(probs, reverse=True)[:2]
    return first - second


def check_margin(abstain_margin: float | None) -> float | None:
    """`abstain_margin` when it is None or a probability difference (0..1), else ValueError."""
    if abstain_margin is not None and not 0.0 <= abstain_margin <= 1.0:
        raise ValueError(f"abstain_margin: {abstain_margin} is not within 0..1")
    return abstain_margin
