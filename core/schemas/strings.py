"""Values a client may send that no database we run on can store, found before anything is
written: a NUL character (Postgres text and JSON refuse `\\u0000`), a lone UTF-16 surrogate
(`\\ud800`: not encodable as UTF-8), `NaN`/`Infinity` (Python's JSON parser takes them; JSON and
Postgres' jsonb do not), and integers outside 64 bits (the worker hands spec numbers to numpy and
torch, and a column holds at most 64 bits).

Without this check such a value reached the group commit of `POST /runs`, whose one transaction
then failed for every run that happened to arrive with it.
"""

from __future__ import annotations

import math
from typing import Any

from core.errors import ApiError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def string_problem(text: str) -> str | None:
    """Why `text` cannot be stored (None: it can)."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate (such as \\ud800), which is not valid Unicode"
    return None


def value_problems(value: Any, path: str = "", limit: int = 20) -> list[dict[str, str]]:
    """Every unstorable value (and key) in a parsed JSON document, with its field path in the
    form the API's 422s use (`corpus.sources[0].path`); at most `limit` of them."""
    found: list[dict[str, str]] = []
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack and len(found) < limit:
        where, node = stack.pop()
        problem: str | None = None
        if isinstance(node, str):
            problem = string_problem(node)
        elif isinstance(node, bool) or node is None:
            pass
        elif isinstance(node, int):
            if not INT64_MIN <= node <= INT64_MAX:
                problem = "integer outside the 64-bit range"
        elif isinstance(node, float):
            if not math.isfinite(node):
                problem = f"{node} is not a JSON number"
        elif isinstance(node, dict):
            for key, item in reversed(list(node.items())):
                child = f"{where}.{key}" if where else str(key)
                key_problem = string_problem(str(key))
                if key_problem:
                    # The key itself is unprintable: name its parent and say it is a key.
                    found.append({"field": where or "body", "message": f"a key {key_problem}"})
                    continue
                stack.append((child, item))
        elif isinstance(node, list):
            for i in reversed(range(len(node))):
                stack.append((f"{where}[{i}]", node[i]))
        if problem:
            found.append({"field": where or "body", "message": problem})
    return found


def refuse_unstorable(value: Any, path: str = "") -> None:
    """A 422 naming the field of the first unstorable value, all of them in `details`."""
    problems = value_problems(value, path)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ApiError(
            422,
            "validation_error",
            f"{first['field']}: {first['message']}{more}",
            [{**p, "type": "unstorable_value"} for p in problems],
        )
