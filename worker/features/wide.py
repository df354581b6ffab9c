"""A row's texts as hashed terms crossed with each candidate: what the trm's linear text part
(`wide`, worker/models/trm.py) reads beside its features.

The feature space keeps a word only where enough train rows and worlds show it (`MIN_SHARE`,
`MIN_ENVS`, `MAX_WORDS`): the rare words and pairs of words that tell one prompt from another
are left out. Here every word and pair of neighbouring words of the state's texts (`text.py`'s
reading: lower case, numbers as `#`, a few stopwords out) is kept, hashed with the candidate's
id into one of `BUCKETS` weights: `(candidate, term) -> crc32 % BUCKETS`. A term's value is its
sublinear count, 1 + log(count), the row's values scaled to unit length (as a TF-IDF row is):
a linear model over them is a logistic regression on the texts, one weight vector per candidate,
fitted with a strong penalty (worker/train/trm.py). A candidate never seen in training has no
weights (its terms hash to weights no train row moved, which stay 0).

Standard library only: an exported controller computes the same terms (numpy_trm.py).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from worker.features.context import leaves, parse_state
from worker.features.text import Text, read

BUCKETS = 1 << 18  # weights of the linear part: about 1 MB of float32
SEPARATOR = "\x1f"  # between a candidate's id and a term in the hashed key


@dataclass(frozen=True)
class Terms:
    """One candidate's hashed terms: bucket ids and their values (unit length together)."""

    ids: list[int]
    values: list[float]


def text_counts(state_text: str) -> dict[str, int]:
    """Every text of the state read as one: its words' and neighbouring pairs' counts."""
    texts = [v.raw for _, v in leaves(parse_state(state_text)) if isinstance(v, Text)]
    return read("\n".join(texts)).counts if texts else {}


def wide_terms(state_text: str, tools: list[str], buckets: int = BUCKETS) -> list[Terms]:
    """The hashed terms of each candidate of the row (see the module's docstring)."""
    counts = text_counts(state_text)
    values = {term: 1.0 + math.log(n) for term, n in counts.items()}
    norm = math.sqrt(math.fsum(v * v for v in values.values())) or 1.0
    out = []
    for tool in tools:
        merged: dict[int, float] = {}
        for term in sorted(values):
            key = zlib.crc32(f"{tool}{SEPARATOR}{term}".encode()) % buckets
            merged[key] = merged.get(key, 0.0) + values[term] / norm
        out.append(Terms(list(merged), list(merged.values())))
    return out
