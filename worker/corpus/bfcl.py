"""The `bfcl` corpus source: the Berkeley Function Calling Leaderboard's questions (Patil et al.,
BFCL v4) as rows: which offered function to call, or none.

Data: `BFCL_v4_<category>.json` (one JSON object a line: `id`, `question` (turns of
`{role, content}` messages), `function` (the functions offered: `name`, `description`,
`parameters`)) and `possible_answer/BFCL_v4_<category>.json` (`id`, `ground_truth`: the calls a
right answer makes), in the source's `path` (a checkout's `bfcl_eval/data`, or a folder above it;
left out, the installed bfcl-eval package's data: core/schemas/sources.py `BfclSource`).

One row per question:
    state  = {"question": <the user turns' text, one line each>,
              "functions": [{"name": ..., "description": ..., "parameters": {...}}, ...]}
    tools  = the functions' names in the order offered, then NO_CALL (`no_call`)
    action = the function the possible answer calls; NO_CALL on `irrelevance` rows
NO_CALL is every row's extra candidate, "call none of these", so abstaining is a decision the
controller learns and is scored on. Names stay as BFCL spells them (`math.factorial`): a
candidate lines up with its `functions` item by `name`. env = the set of function names offered
(`fns-<sha256 of the sorted names, 12 hex>`; many rows share a set), so a split by env never puts
one set in two splits; run and family = the category, episode = the row id; meta keeps
`category` and `id`. Every line read is counted in the source's Tally (`kinds`: rows per
category). A line that is not such a row (not JSON, a field missing or mistyped, two functions of
one name, an answer that is not exactly one call of an offered function, no answer for a
question) is refused with a CorpusInputError naming the file and line: BFCL's files are curated,
so a bad line means a damaged copy, not a row to skip.

The bench built on these rows is worker/external/bfcl.py (the corpus builder imports this
module, so it must not import the builder).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from core.schemas.sources import BfclSource
from worker.corpus.errors import CorpusInputError
from worker.corpus.rows import Row, Tally

NO_CALL = "no_call"
ABSTAIN_CATEGORIES = frozenset({"irrelevance", "live_irrelevance"})
_DATA_HOMES = ("", "data", "bfcl_eval/data", "berkeley-function-call-leaderboard/bfcl_eval/data")
_compact = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode


def data_folder(path: Path) -> Path | None:
    """The folder holding BFCL_v4_*.json: `path` itself or a known place under it."""
    for home in _DATA_HOMES:
        folder = path / home if home else path
        if any(folder.glob("BFCL_v4_*.json")):
            return folder
    return None


def answer_file(folder: Path, category: str) -> Path:
    return folder / "possible_answer" / f"BFCL_v4_{category}.json"


def files_of(source: BfclSource, field: str) -> list[Path]:
    """The question files the source reads, one per category; CorpusInputError naming `field`
    for a folder without them (or without a category's answers)."""
    folder = data_folder(Path(source.path))
    if folder is None:
        raise CorpusInputError(
            field,
            f"{source.path} holds no BFCL_v4_*.json: give BFCL's data folder (bfcl_eval/data of "
            "a checkout of ShishirPatil/gorilla, or of `pip install --no-deps bfcl-eval`)",
        )
    files = []
    for category in source.categories:
        wanted = [folder / f"BFCL_v4_{category}.json"]
        if category not in ABSTAIN_CATEGORIES:
            wanted.append(answer_file(folder, category))
        for path in wanted:
            if not path.is_file():
                raise CorpusInputError(field, f"{path} is missing (category {category!r})")
        files.append(wanted[0])
    return files


def _refuse(path: Path, lineno: int, what: str) -> CorpusInputError:
    return CorpusInputError(str(path), f"line {lineno}: {what}; restore the file from BFCL")


def _json_lines(path: Path, progress: Callable[[int], None]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; refuses one that is not JSON."""
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            progress(len(raw))
            if not raw.strip():
                continue
            try:
                yield lineno, json.loads(raw)
            except ValueError as bad:
                raise _refuse(path, lineno, f"not JSON ({bad})") from None


def called_functions(path: Path, progress: Callable[[int], None]) -> dict[str, str]:
    """id -> the one function its possible answer calls."""
    called: dict[str, str] = {}
    for lineno, obj in _json_lines(path, progress):
        truth = obj.get("ground_truth") if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
            raise _refuse(path, lineno, "want an object with a string id")
        if not (
            isinstance(truth, list)
            and len(truth) == 1
            and isinstance(truth[0], dict)
            and len(truth[0]) == 1
        ):
            raise _refuse(path, lineno, "ground_truth must be exactly one call ([{name: args}])")
        called[obj["id"]] = next(iter(truth[0]))
    return called


def _question(obj: dict[str, Any], path: Path, lineno: int) -> str:
    turns = obj.get("question")
    if not isinstance(turns, list) or not all(isinstance(turn, list) for turn in turns):
        raise _refuse(path, lineno, "question must be a list of turns (lists of messages)")
    said = []
    for turn in turns:
        for message in turn:
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
            ):
                raise _refuse(path, lineno, "a question message wants a string role and content")
            if message["role"] == "user":
                said.append(message["content"])
    if not any(text.strip() for text in said):
        raise _refuse(path, lineno, "the question has no user message")
    return "\n".join(said)


def _functions(obj: dict[str, Any], path: Path, lineno: int) -> list[dict[str, Any]]:
    offered = obj.get("function")
    if not isinstance(offered, list):
        raise _refuse(path, lineno, "function must be a list of functions")
    functions = []
    for item in offered:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise _refuse(path, lineno, "every function wants a non-empty string name")
        description = item.get("description", "")
        parameters = item.get("parameters", {})
        if not isinstance(description, str) or not isinstance(parameters, dict):
            raise _refuse(
                path,
                lineno,
                f"function {name!r}: description must be a string and parameters an object",
            )
        functions.append({"name": name, "description": description, "parameters": parameters})
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names) or NO_CALL in names:
        raise _refuse(path, lineno, f"function names must be unique and not {NO_CALL!r}")
    return functions


def function_set(names: Sequence[str]) -> str:
    """The env of a row: its set of function names (order and repeats do not matter)."""
    digest = hashlib.sha256("\n".join(sorted(set(names))).encode()).hexdigest()
    return f"fns-{digest[:12]}"


def read_rows(
    source: BfclSource, files: list[Path], tally: Tally, progress: Callable[[int], None]
) -> list[Row]:
    """Every question of `files` as a Row (see the module docstring); a bad line is refused."""
    folder = files[0].parent if files else Path(source.path)
    rows: list[Row] = []
    for path in files:
        category = path.stem.removeprefix("BFCL_v4_")
        tally.files.append(path.name)
        called: dict[str, str] = {}
        if category not in ABSTAIN_CATEGORIES:
            answers = answer_file(folder, category)
            tally.files.append(answers.relative_to(folder).as_posix())
            called = called_functions(answers, progress)
        for lineno, obj in _json_lines(path, progress):
            tally.rows_read += 1
            rows.append(_line_row(source, path, lineno, obj, category, called))
            tally.kinds[category] = tally.kinds.get(category, 0) + 1
    return rows


def _line_row(
    source: BfclSource, path: Path, lineno: int, obj: Any, category: str, called: dict[str, str]
) -> Row:
    """The question on line `lineno` of `path` as a Row, its action the function the answer
    calls (`called`, by id), or no call in an abstaining category; a bad line is refused."""
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise _refuse(path, lineno, "want an object with a string id")
    row_id = obj["id"]
    question = _question(obj, path, lineno)
    functions = _functions(obj, path, lineno)
    tools = [f["name"] for f in functions] + [NO_CALL]
    if category in ABSTAIN_CATEGORIES:
        action = NO_CALL
    elif row_id not in called:
        raise _refuse(path, lineno, f"no possible answer has id {row_id!r}")
    elif called[row_id] not in tools[:-1]:
        raise _refuse(path, lineno, f"the answer calls {called[row_id]!r}, which is not offered")
    else:
        action = called[row_id]
    env = function_set(tools[:-1])
    state_obj = {"question": question, "functions": functions}
    meta = {
        "source_name": source.name,
        "source_type": source.type,
        "env": env,
        "run": category,
        "episode": row_id,
        "family": category,
        "path": path.name,
        "line": lineno,
        "category": category,
        "id": row_id,
    }
    return Row(
        _compact(state_obj),
        state_obj,
        tools,
        action,
        meta,
        source.name,
        env,
        category,
        row_id,
        category,
        False,
        False,
    )
