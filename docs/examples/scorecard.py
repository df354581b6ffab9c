"""Prints the headline of a scorecard.json read from stdin: the model's anchor score, and each
reference's with the paired difference model − reference and McNemar's p.

    .venv/bin/trm artifact RUN scorecard.json | .venv/bin/python docs/examples/scorecard.py
"""

from __future__ import annotations

import json
import sys
from typing import Any


def score(block: dict[str, Any] | None) -> str:
    if not block or block.get("value") is None:
        return "-"
    low, high = block.get("ci95") or (None, None)
    interval = f" [{low:.3f}, {high:.3f}]" if low is not None else ""
    return f"{block['value']:.3f}{interval} (n={block.get('n', '-')})"


def main() -> None:
    card = json.load(sys.stdin)
    # A bench's own model is under `router`; a train run's scores are at the top.
    scores = (card.get("router") or card).get("scores") or {}
    print(f"model      anchor {score(scores.get('anchor_score'))}")
    if "baseline_anchor_score" in card:
        print(f"untrained  anchor {card['baseline_anchor_score']}")
    for name, ref in (card.get("references") or {}).items():
        delta, p = ref.get("delta") or {}, (ref.get("mcnemar") or {}).get("p_value")
        line = f"{name:10} anchor {score(ref.get('anchor_score'))}  model - {name} {score(delta)}"
        print(f"{line}  McNemar p={p}")


if __name__ == "__main__":
    main()
