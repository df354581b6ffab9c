"""What a leaf of the state is read as: a number, a short string, a list of strings as a set and
in order, a list of lines as a grid, a string of several words as text."""

from __future__ import annotations

import math
from typing import Any

from worker.features.cells import Grid
from worker.features.text import Text

Value = float | str | frozenset[str] | tuple[str, ...] | Grid | Text


def number_of(value: Any) -> float | None:
    """A JSON number (bools as 0/1) as a float; None for anything else, NaN and infinities."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None
