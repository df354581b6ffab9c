"""The one table of feature kinds (SPEC §6): how every feature name is spelled and what it means.

A feature name is a kind's prefix and its parts, spelled by the kind's `form`
(`D:<a>|<c>` with a = `A:routes.*.cost`, c = `budget` is `D:A:routes.*.cost|budget`). Code builds
names only through `name(prefix, *parts)`, and `explain(name)` reads any name back into words,
nested names included. `docs/state-rules.md` lists this table (a test checks the two agree).

Placeholders of a form: `<name>` is itself a feature name (explained in turn); the others are
paths in the state (`<a>` an aligned one with the candidate's key as `*`, `<c>` a context one,
`<list>`, `<line>`, `<text>`, `<grid>`, `<dict>`) or small parts (`<k>` the k-th number of an id,
`<piece>`, `<word>`, `<value>`, `<stat>`, `<symbol>`, `<anchor>`, `<dx>`, `<dy>`, `<i>`, `<verb>`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Features = dict[str, float]

Value = Literal["flag", "number"]
Scope = Literal["candidate", "context", "plan"]

_PLACEHOLDER = re.compile(r"<(\w+)>")
NESTED = "name"  # the placeholder that holds another feature name


@dataclass(frozen=True)
class Kind:
    """One kind of feature: `form` spells its names, `meaning` says what one is (with the
    form's placeholders in braces), `value` whether it is a flag (present only when true) or a
    number, `scope` whether it differs per candidate, is the same for all of a row's candidates
    (context), or sums a plan's steps."""

    prefix: str
    form: str
    meaning: str
    example: str
    value: Value
    scope: Scope
    reading: str  # the module that reads it (worker/features/<reading>.py)
    step: bool = False  # read per step of a plan too (plans.py): what a step says of itself

    @property
    def placeholders(self) -> list[str]:
        return _PLACEHOLDER.findall(self.form)


def _row(spelling: tuple[str, str, Value, Scope, str], meaning: str, *, step: bool = False) -> Kind:
    """One row of the table: its spelling (form, example, value, scope, reading), then its
    meaning; the prefix is the form's head (`D` of `D:<name>|<c>`)."""
    form, example, value, scope, reading = spelling
    return Kind(form.split(":", 1)[0], form, meaning, example, value, scope, reading, step)


KINDS: tuple[Kind, ...] = (
    # ids.py: the candidate's own id
    _row(
        ("pos", "pos", "number", "candidate", "ids"),
        "the candidate's place in the row's list, 0..1",
    ),
    _row(
        ("P:<piece>", "P:weather", "flag", "candidate", "ids"),
        "the candidate's id has the word piece {piece}",
        step=True,
    ),
    _row(
        ("N:<k>", "N:0", "number", "candidate", "ids"),
        "the {k}-th number in the candidate's id",
        step=True,
    ),
    _row(
        ("NR:<k>", "NR:0", "number", "candidate", "ids"),
        "the rank of the {k}-th id number among the candidates, 0..1",
    ),
    _row(
        ("NLO:<k>", "NLO:0", "number", "candidate", "ids"),
        "the {k}-th id number less the least among the candidates",
    ),
    _row(
        ("GR:<k>", "GR:1", "number", "candidate", "ids"),
        "the rank of the {k}-th id number among candidates whose ids differ only in it",
    ),
    _row(
        ("GLO:<k>", "GLO:1", "number", "candidate", "ids"),
        "the {k}-th id number less the least among candidates whose ids differ only in it",
    ),
    # aligned.py: the parts of the state about the candidate
    _row(
        ("A:<a>", "A:routes.*.cost", "number", "candidate", "aligned"),
        "the candidate's own number {a}",
        step=True,
    ),
    _row(
        ("R:<a>", "R:routes.*.cost", "number", "candidate", "aligned"),
        "the rank among the candidates (0..1) of the candidate's number {a}",
    ),
    _row(
        ("HI:<a>", "HI:routes.*.cost", "number", "candidate", "aligned"),
        "the candidate's number {a} less the greatest among the candidates",
    ),
    _row(
        ("LO:<a>", "LO:routes.*.cost", "number", "candidate", "aligned"),
        "the candidate's number {a} less the least among the candidates",
    ),
    _row(
        (
            "D:<name>|<c>",
            "D:A:routes.*.ms|request.latency_budget_ms",
            "number",
            "candidate",
            "aligned",
        ),
        "{name}, minus the context number {c}",
        step=True,
    ),
    _row(
        ("GE:<name>|<c>", "GE:N:0|job.release", "number", "candidate", "aligned"),
        "whether {name} is at least the context number {c}",
        step=True,
    ),
    _row(
        ("LEN:<a>", "LEN:routes.*.tools", "number", "candidate", "aligned"),
        "the length of the candidate's own list {a}",
        step=True,
    ),
    _row(
        ("IN:<a>|<c>", "IN:routes.*.tools|request.tool", "number", "candidate", "aligned"),
        "whether the context string {c} is in the candidate's list {a}",
        step=True,
    ),
    _row(
        ("COV:<a>|<c>", "COV:routes.*.tools|request.tools", "number", "candidate", "aligned"),
        "the share of the context list {c} in the candidate's list {a}",
        step=True,
    ),
    _row(
        ("EQ:<a>|<c>", "EQ:machines.*.kind|job.kind", "flag", "candidate", "aligned"),
        "the candidate's string {a} equals the context string {c}",
        step=True,
    ),
    _row(
        ("NAME_IN:<c>", "NAME_IN:request.allowed", "flag", "candidate", "aligned"),
        "a name of the candidate is in the context list {c} or equals the context string",
        step=True,
    ),
    _row(
        ("AT:<line>|<k>:<symbol>", "AT:busy.*|0:#", "flag", "candidate", "cells"),
        "the candidate's line of cells {line} holds {symbol} at its {k}-th id number",
        step=True,
    ),
    _row(
        ("RUN:<line>|<k>:<symbol>", "RUN:busy.*|0:.", "number", "candidate", "cells"),
        "how many cells of the candidate's line {line} hold {symbol} from its {k}-th id number on",
        step=True,
    ),
    # context.py: what is the same for every candidate of the row
    _row(("C:<c>", "C:budget_left", "number", "context", "context"), "the context number {c}"),
    _row(
        ("CS:<c>:<value>", "CS:phase:draining", "flag", "context", "context"),
        "the context string {c} is {value}, or the context list of strings {c} holds it",
    ),
    _row(
        ("L:<list>", "L:jobs", "number", "context", "context"),
        "the length of the context list {list}",
    ),
    _row(
        ("DUP:<list>", "DUP:proposal", "number", "context", "context"),
        "how many items of the context list {list} repeat an earlier one",
    ),
    _row(
        ("LD:<list>|<c>", "LD:proposal|jobs", "number", "context", "context"),
        "the length of the context list {list} less that of {c}",
    ),
    _row(
        ("VD:<list>|<c>:<i>", "VD:goal|pos:0", "number", "context", "context"),
        "item {i} of the context numbers {list} less item {i} of {c}",
    ),
    _row(
        ("IDX:<list>", "IDX:queue", "number", "candidate", "context"),
        "the first place of a name of the candidate in the context list {list}",
    ),
    _row(
        ("IDXE:<list>", "IDXE:history", "number", "candidate", "context"),
        "how far from the end of the context list {list} a name of the candidate last is",
    ),
    # cells.py: a list of equal-length lines read as a grid
    _row(
        (
            "WIN:<grid>@<anchor>:<dx>,<dy>:<symbol>",
            "WIN:map@pos:0,-1:#",
            "flag",
            "context",
            "cells",
        ),
        "the grid {grid} holds {symbol} {dx} columns and {dy} rows from {anchor} (a position in "
        "the context, or `=x` the one cell holding x; `out` past the edge)",
    ),
    _row(
        ("GO:<grid>@<anchor>:<dx>,<dy>:<symbol>", "GO:map@pos:0,0:#", "flag", "candidate", "cells"),
        "the candidate is a move, and the grid {grid} holds {symbol} {dy} cells ahead of and {dx} "
        "cells right of the cell it moves {anchor} into (`0,0`: the cell entered)",
    ),
    _row(
        ("GOD:<grid>@<anchor>|<other>", "GOD:map@pos|goal", "number", "candidate", "cells"),
        "how many steps nearer (-1) or farther (+1) the candidate's move takes {anchor} to "
        "{other} on the grid {grid}",
    ),
    _row(
        ("GOHAS:<grid>@<anchor>|<c>", "GOHAS:map@pos|keys", "flag", "candidate", "cells"),
        "the symbol of the cell the candidate's move takes {anchor} into on the grid {grid} is in "
        "the context string or list {c}",
    ),
    _row(
        (
            "WALK:<grid>@<anchor>|<list>:<symbol>",
            "WALK:map@pos|proposal:#",
            "number",
            "context",
            "cells",
        ),
        "how many steps of the context list of moves {list}, walked on the grid {grid} from "
        "{anchor}, enter {symbol}",
    ),
    _row(
        (
            "WALKD:<grid>@<anchor>|<list>|<other>",
            "WALKD:map@pos|proposal|goal",
            "number",
            "context",
            "cells",
        ),
        "how many steps from {other} the context list of moves {list}, walked on the grid {grid} "
        "from {anchor}, ends",
    ),
    # crossed: a context feature as one candidate sees it
    _row(
        ("X:<name>@<id>", "X:W:request.prompt:prove@strong", "number", "candidate", "context"),
        "{name}, seen by the candidate {id} only (a ranker otherwise reaches a context feature "
        "only through a split on the candidate first)",
    ),
    # text.py: strings of several words
    _row(
        ("W:<text>:<word>", "W:request.prompt:weather", "number", "context", "text"),
        "how often the context text {text} has the word (or pair of words) {word}",
    ),
    _row(
        ("TS:<text>:<stat>", "TS:request.prompt:words", "number", "context", "text"),
        "the statistic {stat} of the context text {text}",
    ),
    _row(
        ("TO:<a>|<c>", "TO:functions.*.description|question", "number", "candidate", "text"),
        "the share of the candidate's text {a} (words weighed by how few candidates have them) "
        "found in the context text {c}",
    ),
    _row(
        ("TC:<a>|<c>", "TC:functions.*|question", "number", "candidate", "text"),
        "the share of the context text {c} (its words some candidate has, weighed) that the "
        "candidate's text {a} has",
    ),
    _row(
        ("TCOS:<a>|<c>", "TCOS:functions.*|question", "number", "candidate", "text"),
        "the cosine of the candidate's text {a} and the context text {c}, words weighed",
    ),
    _row(
        ("TN:<c>", "TN:question", "number", "candidate", "text"),
        "the share of the candidate's id words (weighed) found in the context text {c}",
    ),
    # embed.py: long context texts read by a sentence encoder (a feature space's `text_encoder`)
    _row(
        ("E:<text>:<i>", "E:request.prompt:0", "number", "context", "embed"),
        "component {i} of the sentence encoder's reading of the context text {text}",
    ),
    # plans.py: a plan in the state, read step by step
    _row(("PLEN", "PLEN", "number", "plan", "plans"), "the plan's length less its items'"),
    _row(
        ("PMIN:<name>", "PMIN:D:N:0|release", "number", "plan", "plans"),
        "the least over the plan's steps of: {name}",
    ),
    _row(
        ("PMAX:<name>", "PMAX:A:routes.*.ms", "number", "plan", "plans"),
        "the greatest over the plan's steps of: {name}",
    ),
    _row(
        ("PALL:<name>", "PALL:AT:busy.*|0:.", "number", "plan", "plans"),
        "the share of the plan's steps with: {name}",
    ),
    _row(
        ("PSUM:<a>", "PSUM:routes.*.cost", "number", "plan", "plans"),
        "the plan's total of the steps' number {a}",
    ),
    _row(
        ("PD:<name>|<c>", "PD:PSUM:routes.*.cost|budget", "number", "plan", "plans"),
        "{name}, less the number {c}",
    ),
    _row(
        ("TALLY:<verb>", "TALLY:buy-sell", "number", "plan", "plans"),
        "how many of the plan's steps name the object with {verb} (`*`: any verb; `a-b`: the "
        "difference of two such counts)",
    ),
    _row(
        ("S:<name>|<c>", "S:TALLY:buy-sell|held-target", "number", "plan", "plans"),
        "{name}, plus the object's number {c}",
    ),
    _row(
        ("GAP:<name>|<c>", "GAP:TALLY:*|held-target", "number", "plan", "plans"),
        "{name}, less how far apart the object's two numbers of {c} are",
    ),
    _row(
        ("OMIN:<dict>.*:<name>", "OMIN:assets.*:D:TALLY:sell|held", "number", "plan", "plans"),
        "the least over the objects of {dict} of: {name}",
    ),
    _row(
        ("OMAX:<dict>.*:<name>", "OMAX:assets.*:TALLY:buy", "number", "plan", "plans"),
        "the greatest over the objects of {dict} of: {name}",
    ),
)

BY_PREFIX: dict[str, Kind] = {k.prefix: k for k in KINDS}
_FORMATS = {k.prefix: _PLACEHOLDER.sub("{}", k.form) for k in KINDS}


def prefixes(
    *, reading: str | None = None, value: Value | None = None, scope: Scope | None = None
) -> tuple[str, ...]:
    """The name prefixes (`D:`) of the kinds that match, for `str.startswith`."""
    return tuple(
        f"{k.prefix}:"
        for k in KINDS
        if (reading is None or k.reading == reading)
        and (value is None or k.value == value)
        and (scope is None or k.scope == scope)
        and "<" in k.form
    )


def start(prefix: str) -> str:
    """How the names of the kind `prefix` start (`D:`), for `str.startswith`."""
    return f"{BY_PREFIX[prefix].prefix}:"


# A row spells the same few hundred names per candidate, and rows of one world spell the same
# ones again: remembered, a name costs a lookup, not a format (a quarter of the encoding's time).
# `typed`: 1 and 1.0 spell differently, so they are different keys.
@lru_cache(maxsize=1 << 16, typed=True)
def name(prefix: str, *parts: object) -> str:
    """A feature name of the kind `prefix` from its parts, in the form's order."""
    return _FORMATS[prefix].format(*parts)


def kind_of(feature: str) -> Kind | None:
    head = feature.split(":", 1)[0]
    return BY_PREFIX.get(head)


@lru_cache(maxsize=64)
def _pattern(prefix: str) -> re.Pattern[str]:
    """The kind's form as a regex: a nested name takes all it can (it may hold separators),
    paths the least, the last part the rest."""
    form = BY_PREFIX[prefix].form
    holders = _PLACEHOLDER.findall(form)
    out, rest = "", form
    for i, holder in enumerate(holders):
        before, _, rest = rest.partition(f"<{holder}>")
        greedy = holder == NESTED or i == len(holders) - 1
        out += re.escape(before) + (f"(?P<{holder}>.+)" if greedy else f"(?P<{holder}>.+?)")
    return re.compile(out + re.escape(rest) + "$")


def parse(feature: str) -> tuple[Kind, dict[str, str]] | None:
    """(its kind, its parts by placeholder), or None for a name no kind spells."""
    kind = kind_of(feature)
    if kind is None:
        return None
    found = _pattern(kind.prefix).match(feature)
    if found is None:
        return None
    return kind, found.groupdict()


def _nested(holder: str, value: str) -> bool:
    """Whether a part is itself a feature name: the `<name>` placeholder, or an aligned path
    that is one (a rank's number, `R:TO:functions.*|question`)."""
    return holder == NESTED or (holder == "a" and ":" in value and parse(value) is not None)


# The placeholders that are paths in the state (the module docstring), in no particular order.
PATHS = frozenset({"a", "c", "list", "line", "text", "grid", "dict"})


@lru_cache(maxsize=1 << 16)
def reads(feature: str) -> str:
    """What part of a state a feature reads: its kind and its first path, a nested name's for a
    kind built on one (`WALKD:map` for every walk on the grid at `map`, `PMIN:A:routes.*.cost`
    for a plan's least route cost); the kind alone for one that reads no path (`P`)."""
    parsed = parse(feature)
    if parsed is None:
        return feature.split(":", 1)[0]
    kind, parts = parsed
    for holder in kind.placeholders:
        value = parts[holder]
        if _nested(holder, value):
            return f"{kind.prefix}:{reads(value)}"
        if holder in PATHS:
            return f"{kind.prefix}:{value}"
    return kind.prefix


def explain(feature: str) -> str:
    """A feature name in words (`D:A:routes.*.cost|budget` -> "(the candidate's own number
    `routes.*.cost`), minus the context number `budget`")."""
    parsed = parse(feature)
    if parsed is None:
        return f"{feature} (a name no kind spells)"
    kind, parts = parsed
    words = {}
    for holder, value in parts.items():
        words[holder] = f"({explain(value)})" if _nested(holder, value) else f"`{value}`"
    return kind.meaning.format(**words)


def table() -> str:
    """The kinds as a markdown table (docs/state-rules.md holds this very text)."""
    lines = [
        "| kind | form | meaning | example | value | scope | read by |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in KINDS:
        meaning = k.meaning.format(**{h: f"<{h}>" for h in k.placeholders})
        lines.append(
            f"| `{k.prefix}` | `{k.form}` | {meaning.replace('|', '&#124;')} | `{k.example}` | "
            f"{k.value} | {k.scope}{' (and per plan step)' if k.step else ''} | "
            f"`{k.reading}.py` |"
        )
    return "\n".join(lines) + "\n"
