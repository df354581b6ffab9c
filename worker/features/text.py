"""Text in a state read as words (SPEC §6): a prompt to route, a question to match with each
tool's description.

A string is **text** when it holds several words or is longer than `SHORT` characters (a short
single word stays a string: an id, a category, a line of cells). Text is read as lower-case word
tokens (letters, two or more; every number is the one token `#`), a few stopwords left out, and
the pairs of neighbouring words. Texts are grouped by their path without list indices
(`messages.0.content` and `messages.1.content` are one text, `messages.content`).

- **Context text** (the same for every candidate): `W:<text>:<word>` how often a word or a pair
  of words occurs, and `TS:<text>:<stat>` a few statistics (`words`, `numbers`, `digits` and
  `upper` as shares of the characters, `questions`, `lines`).
- **A candidate's text**: the words of its aligned parts (every key and string of the function
  whose `name` is the candidate: its description, its parameters' names and descriptions), one
  bag under the aligned root (`functions.*`) and one per aligned text directly under it
  (`functions.*.description`); a text deeper down (`functions.*.parameters.properties.loc.
  description`) counts in the root's bag only, as its path holds keys each tool names its own
  way (a bag per such path is a column per parameter name, seen with few tools); and the words
  of its own id (`get_weather` -> get, weather; `getWeather` too).
- **Matches**, per candidate text `<a>` and context text `<c>`, every word weighed by how few of
  the row's candidates have it (a word every candidate's text holds says nothing; the weights are
  the row's own, so tools never seen in training are matched as well): `TO:<a>|<c>` the share of
  the candidate's weighed words found in the context text, `TC:<a>|<c>` the share of the context
  words any candidate has that this one has, `TCOS:<a>|<c>` the cosine of the weighed bags, and
  `TN:<c>` the share of the candidate's weighed name words found in the context text. They are
  numbers of the candidate, ranked among the candidates like its aligned numbers (`R:`, `HI:`,
  `LO:`), so the best match is recognisable whatever the tools are called.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from worker.features.kinds import Features, name

SHORT = 64  # a string up to this long and of one word is a string, not text
MAX_TOKENS = 2048  # words of a text that are read (the rest only count in its statistics)
MAX_CONTEXT_TEXTS = 4  # context texts a candidate's texts are compared with
NUMBER = "#"  # the token of every number in a text
STOPWORDS = frozenset(
    (
        "the",
        "an",
        "of",
        "to",
        "in",
        "and",
        "or",
        "is",
        "are",
        "be",
        "for",
        "on",
        "with",
        "at",
        "by",
        "it",
        "as",
        "from",
        "this",
        "that",
    )
)

_TOKEN = re.compile(r"[^\W\d_]{2,}|\d+(?:[.,]\d+)*")
_SPACE = re.compile(r"\s")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


@dataclass(frozen=True)
class Text:
    """A string of the state read as text (a leaf value beside numbers, strings and sets)."""

    raw: str


@dataclass(frozen=True)
class Reading:
    """A text's word counts (words and neighbouring pairs) and statistics."""

    counts: dict[str, int]
    stats: dict[str, float]
    bag: frozenset[str]  # its words with a plural `s` taken off, for matching


def is_text(value: str) -> bool:
    """Several words, or a string too long to be an id."""
    if len(value) > SHORT:
        return True
    return bool(_SPACE.search(value.strip())) and len(_TOKEN.findall(value)) >= 2


def text_path(path: str) -> str:
    """The path a text is grouped under: its list indices left out."""
    return ".".join(p for p in path.split(".") if not p.isdigit()) or "text"


@lru_cache(maxsize=1 << 16)
def words(text: str) -> tuple[str, ...]:
    """The text's word tokens, lower case: numbers as `#`, stopwords left out."""
    out = []
    for token in _TOKEN.findall(text.lower())[:MAX_TOKENS]:
        if token[0].isdigit():
            out.append(NUMBER)
        elif token not in STOPWORDS:
            out.append(token)
    return tuple(out)


def every_word(text: str) -> tuple[str, ...]:
    """The text's word tokens as `words` reads them, stopwords kept (`not`, `which of the`
    say how a question is asked)."""
    return tuple(
        NUMBER if token[0].isdigit() else token
        for token in _TOKEN.findall(text.lower())[:MAX_TOKENS]
    )


def with_pairs(tokens: tuple[str, ...]) -> dict[str, int]:
    """How often each token and each pair of neighbouring tokens occurs."""
    counts = Counter(tokens)
    counts.update(f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False))
    return dict(counts)


@lru_cache(maxsize=1 << 14)
def read(text: str) -> Reading:
    """A text read once however many rows and candidates show it."""
    tokens = words(text)
    counts = with_pairs(tokens)
    chars = max(1, len(text))
    letters = sum(c.isalpha() for c in text)
    stats = {
        "words": float(len(_TOKEN.findall(text))),
        "numbers": float(tokens.count(NUMBER)),
        "digits": sum(c.isdigit() for c in text) / chars,
        "upper": sum(c.isupper() for c in text) / max(1, letters),
        "questions": float(text.count("?")),
        "lines": float(text.count("\n") + 1),
    }
    return Reading(counts, stats, frozenset(_stem(t) for t in tokens if t != NUMBER))


def name_words(tool: str) -> frozenset[str]:
    """The words of a candidate's id (`get_weather`, `getWeather` -> get, weather)."""
    return frozenset(_stem(t) for t in words(_CAMEL.sub(" ", tool)) if t != NUMBER)


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def context_texts(texts: Iterable[tuple[str, Text]]) -> dict[str, Reading]:
    """The context's texts by group path, each group read as one text."""
    grouped: dict[str, list[str]] = {}
    for path, text in texts:
        grouped.setdefault(text_path(path), []).append(text.raw)
    return {path: read("\n".join(raws)) for path, raws in grouped.items()}


def context_features(readings: dict[str, Reading]) -> Features:
    """`W:` and `TS:` of the context texts (the same for every candidate)."""
    out: Features = {}
    for path, reading in readings.items():
        for word, count in reading.counts.items():
            out[name("W", path, word)] = float(count)
        for stat, value in reading.stats.items():
            out[name("TS", path, stat)] = value
    return out


def aligned_bags(parts: list[tuple[str, Any]]) -> dict[str, frozenset[str]]:
    """A candidate's aligned parts as bags of words: all of a part's keys and strings under its
    root (`functions.*`), and each of its texts one key under the root under its own path
    (`functions.*.description`; deeper texts are in the root's bag only)."""
    bags: dict[str, set[str]] = {}
    for root, sub in parts:
        everything = bags.setdefault(root, set())
        for path, text in _strings(sub, root):
            bag = read(text).bag
            everything |= bag
            grouped = text_path(path)
            if is_text(text) and "." not in grouped[len(root) + 1 :]:
                bags.setdefault(grouped, set()).update(bag)
    return {path: frozenset(bag) for path, bag in bags.items() if bag}


def _strings(node: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, str(key)
            yield from _strings(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node[:64]):
            yield from _strings(value, f"{path}.{i}")
    elif isinstance(node, str):
        yield path, node


def match_features(
    contexts: dict[str, Reading], bags: list[dict[str, frozenset[str]]], tools: list[str]
) -> list[Features]:
    """`TO:`, `TC:`, `TCOS:` and `TN:` of each candidate (see the module's docstring); their
    ranks among the candidates are added by the caller."""
    out: list[Features] = [{} for _ in tools]
    texts = list(contexts.items())[:MAX_CONTEXT_TEXTS]
    if not texts:
        return out
    paths = sorted({p for mine in bags for p in mine})
    for apath in paths:
        column = [mine.get(apath, frozenset()) for mine in bags]
        weight = _weights(column)
        for cpath, reading in texts:
            for f, bag in zip(out, column, strict=True):
                if bag:
                    f.update(_match(bag, reading.bag, column, weight, apath, cpath))
    own = [name_words(t) for t in tools]
    weight = _weights(own)
    for cpath, reading in texts:
        for f, bag in zip(out, own, strict=True):
            total = math.fsum(weight[w] for w in bag)
            if total > 0:
                f[name("TN", cpath)] = math.fsum(weight[w] for w in bag & reading.bag) / total
    return out


# Sums over sets of words are `math.fsum`: exact, so the same whatever order a set iterates in
# (it changes with each process's string hashing); a model's features are the same every run.


def _weights(bags: list[frozenset[str]]) -> dict[str, float]:
    """Each word's weight in the row: log(candidates / candidates whose bag has it), 0 for a word
    every candidate has; with one candidate every word weighs 1."""
    n = len(bags)
    df = Counter(w for bag in bags for w in bag)
    if n <= 1:
        return {w: 1.0 for w in df}
    return {w: math.log(n / k) for w, k in df.items()}


def _match(
    bag: frozenset[str],
    context: frozenset[str],
    column: list[frozenset[str]],
    weight: dict[str, float],
    apath: str,
    cpath: str,
) -> Features:
    own = math.fsum(weight[w] for w in bag)
    shared = bag & context
    hit = math.fsum(weight[w] for w in shared)
    anyone = frozenset().union(*column) & context
    reachable = math.fsum(weight[w] for w in anyone)
    # Cosine of the weighed bags: the context's words weigh as the candidates' do; words no
    # candidate has weigh 0 (the context's length alone does not lower it).
    norm = math.sqrt(math.fsum(weight[w] ** 2 for w in bag)) * math.sqrt(
        math.fsum(weight[w] ** 2 for w in anyone)
    )
    squares = math.fsum(weight[w] ** 2 for w in shared)
    return {
        name("TO", apath, cpath): hit / own if own > 0 else 0.0,
        name("TC", apath, cpath): hit / reachable if reachable > 0 else 0.0,
        name("TCOS", apath, cpath): squares / norm if norm else 0.0,
    }
