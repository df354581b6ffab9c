"""A row's texts as hashed terms crossed with each candidate: what the trm's linear text part
(`wide`, worker/models/trm.py) reads beside its features.

The feature space keeps a word only where enough train rows and worlds show it (`MIN_SHARE`,
`MIN_ENVS`, `MAX_WORDS`): the rare words and pairs of words that tell one prompt from another
are left out. Here every word and pair of neighbouring words of the state's texts is kept,
hashed with the candidate's id into one of `buckets` weights (the config's `wide_buckets`,
default `BUCKETS`): `(candidate, term) -> crc32 % buckets`. A term's value is its sublinear
count, 1 + log(count), the row's values scaled to unit length (as a TF-IDF row is): a linear
model over them is a logistic regression on the texts, one weight vector per candidate, fitted
with a penalty (worker/train/trm_wide.py). A candidate never seen in training has no weights
(its terms hash to weights no train row moved, which stay 0).

Two readings (the config's `wide_reading`; a model records the one it was trained with):
- **2** (new models): the words as `text.py` cuts them (lower case, numbers as `#`) with the
  stopwords kept, and one term more per candidate, `BIAS`, of value 1: its own intercept.
  Routing prompts of subjects never trained on (docs/quality.md), the part alone ranks them as
  well as TF-IDF + logistic regression this way, and far worse by reading 1: how a question is
  asked (`which of the`, `not`) is in its stopwords, and without an intercept the common words'
  weights carry the base rate.
- **1**: `text.py`'s words, stopwords left out, no bias term.

Standard library only: an exported controller computes the same terms (numpy_trm.py).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.features.context import leaves, parse_state
from worker.features.text import Text, every_word, read, with_pairs

BUCKETS = 1 << 18  # weights of the linear part: about 1 MB of float32
SEPARATOR = "\x1f"  # between a candidate's id and a term in the hashed key
# How a model's part reads its rows (its config's `wide_reading`; a config without one: 1).
READING = 2
READINGS = (1, 2)
BIAS = "\x00"  # reading 2: the term every candidate has once, value 1 (its own intercept)


@dataclass(frozen=True)
class Terms:
    """One candidate's hashed terms: bucket ids and their values (unit length together)."""

    ids: list[int]
    values: list[float]


def reading_of(config: Mapping[str, Any]) -> int:
    """How a model's config says its part reads a row: a config from before `wide_reading`, by
    reading 1 (what it was trained with)."""
    return int(config.get("wide_reading") or 1)


def text_counts(state_text: str, reading: int = READING) -> dict[str, int]:
    """Every text of the state read as one: its words' and neighbouring pairs' counts (reading
    1: `text.py`'s words, stopwords left out; 2: every word)."""
    texts = [v.raw for _, v in leaves(parse_state(state_text)) if isinstance(v, Text)]
    if not texts:
        return {}
    joined = "\n".join(texts)
    return read(joined).counts if reading == 1 else with_pairs(every_word(joined))


def wide_terms(
    state_text: str, tools: list[str], buckets: int = BUCKETS, reading: int = READING
) -> list[Terms]:
    """The hashed terms of each candidate of the row (see the module's docstring)."""
    if reading not in READINGS:
        raise ValueError(f"wide_reading {reading}: want one of {list(READINGS)}")
    counts = text_counts(state_text, reading)
    values = {term: 1.0 + math.log(n) for term, n in counts.items()}
    norm = math.sqrt(math.fsum(v * v for v in values.values())) or 1.0
    out = []
    for tool in tools:
        merged: dict[int, float] = {}
        for term in sorted(values):
            key = zlib.crc32(f"{tool}{SEPARATOR}{term}".encode()) % buckets
            merged[key] = merged.get(key, 0.0) + values[term] / norm
        if reading >= 2:
            key = zlib.crc32(f"{tool}{SEPARATOR}{BIAS}".encode()) % buckets
            merged[key] = merged.get(key, 0.0) + 1.0
        out.append(Terms(list(merged), list(merged.values())))
    return out
