"""The `routellm` corpus source: RouteLLM's evaluation labels as rows (Ong et al. 2024).

A checkout of lm-sys/RouteLLM holds, under `routellm/evals/`:
- `mmlu/responses/mmlu_<subject>.csv` (57 files): `prompt`, then one column per model saying
  whether it answered right (`True`/`False`);
- `gsm8k/gsm8k_responses.csv`: the same two columns, then both models' responses;
- `<benchmark>/contaminated_prompts.jsonl`: `{"eval_prompt": ...}`, prompts RouteLLM's own
  evaluation drops because its router training data holds them.

One row per prompt:
    state  = {"prompt": <text>, "models": [{"name": "weak", "price": 0.24},
                                           {"name": "strong", "price": 24.7}]}
    tools  = ["weak", "strong"]
    action = "strong" when the strong model is right and the weak one wrong, else "weak"
env = `mmlu-<subject>` or `gsm8k` (what anchors name); the benchmark, the subject and both
models' correctness go to meta (the routing metric reads them), never to the state.

Every CSV record read lands in the source's Tally: kept, or invalid under a reason:
`missing_state` (an empty prompt), `bad_label` (a correctness cell that is not true/false),
`bad_csv_row` (a record with the wrong number of fields), `contaminated` (dropped as RouteLLM
drops it). Line numbers are the record's first physical line (prompts span lines). A file that
cannot be read as this table at all (not UTF-8, a header without the model columns, a quote left
open) is refused with a CorpusInputError naming the file and line.

The bench built on these rows (its anchors, metric and baselines) is worker/external/routellm.py.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core.schemas.sources import RouteLlmSource
from worker.corpus.errors import CorpusInputError
from worker.corpus.rows import Invalid, Row, Tally, env_family

WEAK_MODEL = "mistralai/Mixtral-8x7B-Instruct-v0.1"
STRONG_MODEL = "gpt-4-1106-preview"
TOOLS = ["weak", "strong"]
MMLU_GLOB = "mmlu/responses/mmlu_*.csv"
GSM8K_FILE = "gsm8k/gsm8k_responses.csv"
CONTAMINATED = "contaminated_prompts.jsonl"
_TRUE = frozenset({"true", "1", "1.0"})
_FALSE = frozenset({"false", "0", "0.0"})

# GSM8K's responses run to a few KiB; the csv module's default cap is 128 KiB a field.
csv.field_size_limit(min(sys.maxsize, 1 << 28))

_compact = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode


def evals_folder(path: Path) -> Path | None:
    """The folder holding `mmlu/` and `gsm8k/`: `path` itself, its `evals/`, or its
    `routellm/evals/` (a checkout's root); None when none of them does."""
    for folder in (path, path / "evals", path / "routellm" / "evals"):
        if (folder / "mmlu").is_dir() or (folder / "gsm8k").is_dir():
            return folder
    return None


def files_of(source: RouteLlmSource, field: str) -> list[Path]:
    """The CSV files the source reads, MMLU's subjects sorted; CorpusInputError naming `field`
    for a path that holds none of them."""
    root = Path(source.path)
    evals = evals_folder(root)
    if evals is None:
        raise CorpusInputError(
            field,
            f"{root} holds no RouteLLM evaluation data: give a checkout of lm-sys/RouteLLM (its "
            "root or its routellm/evals folder, the one holding mmlu/ and gsm8k/)",
        )
    files: list[Path] = []
    for benchmark in source.benchmarks:
        found = sorted(evals.glob(MMLU_GLOB)) if benchmark == "mmlu" else [evals / GSM8K_FILE]
        found = [path for path in found if path.is_file()]
        if not found:
            wanted = MMLU_GLOB if benchmark == "mmlu" else GSM8K_FILE
            raise CorpusInputError(field, f"{evals} holds no {wanted} (benchmark {benchmark!r})")
        if source.drop_contaminated and not (evals / benchmark / CONTAMINATED).is_file():
            raise CorpusInputError(
                field,
                f"{evals / benchmark / CONTAMINATED} is missing: RouteLLM's evaluation drops "
                "those prompts; restore the file or set drop_contaminated: false",
            )
        files += found
    return files


def contaminated_prompts(path: Path) -> frozenset[str]:
    """The `eval_prompt`s of a contaminated_prompts.jsonl; CorpusInputError naming the line
    of one that is not such an object."""
    prompts: set[str] = set()
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            prompt = obj.get("eval_prompt") if isinstance(obj, dict) else None
            if not isinstance(prompt, str):
                raise CorpusInputError(
                    str(path), f"line {lineno}: want a JSON object with a string eval_prompt"
                )
            prompts.add(prompt)
    return frozenset(prompts)


def read_rows(
    source: RouteLlmSource, files: list[Path], tally: Tally, progress: Callable[[int], None]
) -> list[Row]:
    """Every record of `files` as a Row or a tallied reason (see the module docstring)."""
    evals = evals_folder(Path(source.path)) or Path(source.path)
    state_models = [
        {"name": "weak", "price": source.weak_price},
        {"name": "strong", "price": source.strong_price},
    ]
    dropped: dict[str, frozenset[str]] = {}
    rows: list[Row] = []
    for path in files:
        benchmark = "gsm8k" if path.name == Path(GSM8K_FILE).name else "mmlu"
        if source.drop_contaminated and benchmark not in dropped:
            dropped[benchmark] = contaminated_prompts(evals / benchmark / CONTAMINATED)
        skip = dropped.get(benchmark, frozenset())
        subject = path.stem.removeprefix("mmlu_") if benchmark == "mmlu" else None
        env = f"mmlu-{subject}" if subject else "gsm8k"
        label = path.relative_to(evals).as_posix()
        tally.files.append(label)
        progress(path.stat().st_size)
        for lineno, record in _records(path, tally):
            tally.rows_read += 1
            try:
                prompt, weak_right, strong_right = _fields(record)
            except Invalid as bad:
                tally.reject(bad.reason, label, lineno)
                continue
            if prompt in skip:
                tally.reject("contaminated", label, lineno)
                continue
            state = {"prompt": prompt, "models": state_models}
            action = "strong" if strong_right and not weak_right else "weak"
            meta: dict[str, Any] = {
                "source_name": source.name,
                "source_type": source.type,
                "env": env,
                "run": source.name,
                "path": label,
                "line": lineno,
                "benchmark": benchmark,
                "weak_correct": weak_right,
                "strong_correct": strong_right,
            }
            if subject:
                meta["subject"] = subject
            rows.append(
                Row(
                    _compact(state),
                    state,
                    list(TOOLS),
                    action,
                    meta,
                    source.name,
                    env,
                    source.name,
                    f"{label}:{lineno}",
                    env_family(env),
                    False,
                    False,
                )
            )
    return rows


def _records(path: Path, tally: Tally) -> Iterator[tuple[int, list[str]]]:
    """(first physical line, fields) of each record after a header that names both models; a
    record of the wrong width comes as []; blank lines are counted, not yielded."""
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle, strict=True)
            header = next(reader, None)
            if header is None or header[:3] != ["prompt", WEAK_MODEL, STRONG_MODEL]:
                raise CorpusInputError(
                    str(path),
                    f"line 1: want the header prompt,{WEAK_MODEL},{STRONG_MODEL} (RouteLLM's "
                    f"columns), got {','.join(header or [])[:200]!r}",
                )
            while True:
                start = reader.line_num + 1
                record = next(reader, None)
                if record is None:
                    return
                if not record:
                    tally.blank_lines += 1
                    continue
                yield start, record if len(record) == len(header) else []
    except csv.Error as bad:
        raise CorpusInputError(
            str(path), f"line {reader.line_num}: not a CSV record ({bad}); fix or restore the file"
        ) from None
    except UnicodeDecodeError as bad:
        raise CorpusInputError(
            str(path), f"not UTF-8 text ({bad.reason} at byte {bad.start}); restore the file"
        ) from None


def _fields(record: list[str]) -> tuple[str, bool, bool]:
    """(prompt, weak right, strong right); raises Invalid."""
    if not record:
        raise Invalid("bad_csv_row")
    prompt = record[0]
    if not prompt.strip():
        raise Invalid("missing_state")
    return prompt, _truth(record[1]), _truth(record[2])


def _truth(cell: str) -> bool:
    value = cell.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise Invalid("bad_label")
