"""What the decision-time encoder (worker/decide/fast_encode.py) compiles: the feature space
format whose assembly it re-states, the kinds it places and how their names split, and why a
space is left to the general encoder."""

from __future__ import annotations

from collections.abc import Iterator

from worker.models.feature_space import FORMAT as SPACE_FORMAT
from worker.models.feature_space import FeatureSpace

FORMAT = "trm-features/6"  # the feature space format whose assembly this module re-states
MATCHES = ("TO:", "TC:", "TCOS:", "TN:")
CROSSED = ("W:", "WIN:")  # context.crossed's kinds
# Kinds whose names are split into parts here; the rest (cells, grids, lists, plans, id ranks)
# are looked up by their full name from the general code's own dicts.
SPLIT = {
    "D": "|",
    "GE": "|",
    "IN": "|",
    "COV": "|",
    "EQ": "|",
    "TO": "|",
    "TC": "|",
    "TCOS": "|",
    "W": ":",
    "TS": ":",
    "X": "@",
}
SINGLE = ("A", "R", "HI", "LO", "LEN", "C", "P", "N", "NAME_IN", "IDX", "IDXE")
# The kinds this module places (the table's kinds when it was written): a kind added to the
# table later is encoded by the general encoder until it is placed here too.
KNOWN = frozenset(
    (
        "pos",
        "P",
        "N",
        "NR",
        "NLO",
        "GR",
        "GLO",
        "A",
        "R",
        "HI",
        "LO",
        "D",
        "GE",
        "LEN",
        "IN",
        "COV",
        "EQ",
        "NAME_IN",
        "AT",
        "RUN",
        "C",
        "CS",
        "L",
        "DUP",
        "LD",
        "VD",
        "IDX",
        "IDXE",
        "WIN",
        "X",
        "W",
        "TS",
        "TO",
        "TC",
        "TCOS",
        "TN",
        "PLEN",
        "PMIN",
        "PMAX",
        "PALL",
        "PSUM",
        "PD",
        "TALLY",
        "S",
        "OMIN",
        "OMAX",
        "GO",
        "GOD",
        "GOHAS",
        "WALK",
        "WALKD",
    )
)


def unsupported(space: FeatureSpace) -> str | None:
    """Why the general encoder must encode this space throughout, or None."""
    if SPACE_FORMAT != FORMAT:
        return f"the feature space format is {SPACE_FORMAT}; this encoder was written for {FORMAT}"
    # A space that reads more than `row_features` (a sentence encoder's `E:` of its texts).
    reads = getattr(space, "text_encoder", "tokens")
    if reads != "tokens":
        return f"the space reads its texts with {reads!r}, not only as words"
    unknown = sorted({n.partition(":")[0] for n in space.names} - KNOWN)
    if unknown:
        return f"feature kinds it does not compile: {', '.join(unknown)}"
    return None


def splits(body: str, sep: str) -> Iterator[tuple[str, str]]:
    """(before, after) at each `sep` in `body`: every way a name's parts may be read, a part
    possibly holding the separator itself (a path with `:` or `|` in it)."""
    at = body.find(sep)
    while at != -1:
        yield body[:at], body[at + 1 :]
        at = body.find(sep, at + 1)
