"""Long context texts read by a sentence encoder (SPEC §6): the `E:` feature kind.

Words (`text.py`) carry only what the training rows' own vocabulary says; an unseen subject's
prompt shares few of them. A frozen language model reads a text as meaning: its hidden states,
pooled and projected to `E:<text>:<i>` for i < the encoder's dimensions, one set per context text
of at least `MIN_WORDS` words (the groups `text.py` reads: list indices left out), the same for
every candidate of the row, and crossed with the candidate (`X:E:...@<id>`) as words are.

This module only finds the texts and names the numbers (stdlib, as the rest of this package): the
encoder itself (torch, the model's weights, the cache of vectors by text) is
`worker/models/sentence.py`, and a feature space asks for it by its `text_encoder` knob
(`worker/models/feature_space.py`). A space without that knob never reads this kind.
"""

from __future__ import annotations

from collections.abc import Sequence

from worker.features import aligned as al
from worker.features import context as cx
from worker.features import ids
from worker.features.kinds import Features, name
from worker.features.text import MAX_CONTEXT_TEXTS, Text, text_path, words

MIN_WORDS = 8  # a context text shorter than this is left to its words


def long_texts(state_text: str, tools: list[str]) -> dict[str, str]:
    """The row's context texts of at least `MIN_WORDS` words by group path (`prompt`,
    `messages.content`), each group's strings joined by lines, the first `MAX_CONTEXT_TEXTS`
    in the state's order: what `row_features` reads as the context's texts (the candidates'
    aligned parts left out)."""
    state = cx.parse_state(state_text)
    names = [ids.names_of(t) for t in tools]
    roots: set[str] = set()
    for tool_names, parts in zip(names, al.aligned_parts(state, names), strict=True):
        for path, _ in parts:
            concrete = al.concrete_root(state, path, tool_names)
            if concrete:
                roots.add(concrete)
    grouped: dict[str, list[str]] = {}
    for path, value in cx.context_leaves(state, roots):
        if isinstance(value, Text):
            grouped.setdefault(text_path(path), []).append(value.raw)
    joined = {path: "\n".join(raws) for path, raws in grouped.items()}
    kept = {path: text for path, text in joined.items() if len(words(text)) >= MIN_WORDS}
    return dict(list(kept.items())[:MAX_CONTEXT_TEXTS])


def embedding_features(vectors: dict[str, Sequence[float]], tools: list[str]) -> list[Features]:
    """Per candidate: `E:<text>:<i>` of each text's vector (the same for every candidate), and
    with few candidates each also as `X:E:<text>:<i>@<id>`, as the candidate sees it (a ranker of
    one candidate at a time reaches a context number only through it; see `context.crossed`)."""
    shared = {
        name("E", path, i): float(v)
        for path, vector in vectors.items()
        for i, v in enumerate(vector)
    }
    out = []
    for tool in tools:
        mine = dict(shared)
        if len(tools) <= cx.MAX_CROSSED_CANDIDATES:
            low = tool.lower()
            mine.update({name("X", key, low): value for key, value in shared.items()})
        out.append(mine)
    return out
