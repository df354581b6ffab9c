"""Readers for the log source kinds (SPEC §4), each turning JSONL lines into normalized `Row`s;
the published data sets' readers are one table in `published.py`, dispatched here.

Every line read ends up in the source's `Tally`: kept, or invalid under a named reason. Reasons:
`bad_json` (not JSON, or not UTF-8), `not_object`, `missing_state` (no state or an empty one),
`missing_tools`, `bad_tools` (an entry without an id), `duplicate_tools`, `missing_action`,
`bad_action`, `action_not_in_tools`, `missing_label`, `bad_label` (not "PICK n"),
`label_out_of_range`, `missing_candidates`, `missing_route`, `bad_route`, `line_too_long` (over
MAX_LINE_BYTES: skipped in pieces, never held in memory, so a file of garbage with no newline
costs no more memory than a good one).

trm_play_root: `<path>/worlds/<world_id>/trm_traces.jsonl`, one row per decision:
    {"episode": 3, "turn": 7, "label": "PICK 1",
     "event": {"encounter_id": "e12", "next_encounter": "e13", "outcome": "ok",
               "metrics": {"desirability": 0.4}, "state": {...decision-relevant fields...},
               "kind": "oracle|suboptimal|invalid|recovery"},
     "latent": {"latent_norm": 1.7},
     "reasoning_interpret_log": {"candidate_scores": [{"opt_id": "north", ...}, ...]}}
- tools = the candidates' `opt_id` (else `action`, `id`, `name`) in the order given.
- "PICK n" is 0-based: n indexes `candidate_scores` from 0. A row may say `"pick_base": 1` (or
  the source may) when its n counts from 1. An n outside the candidates is `label_out_of_range`:
  counted, never clamped.
- state = {encounter_id, metrics, latent_norm, state}: the fields known before the decision
  (entries that are absent are left out). `next_encounter` and `outcome` happen after the pick,
  so they go to meta, never to the state; candidate scores are the old policy's opinion and stay
  out too.
- env = world_id (the row's `world_id`, else the folder name); run = the row's `run`/`run_id`,
  else the source's `run`, else the source name; episode = the row's `episode`.

jsonl normalized: rows `{state, tools, action, meta?}`; env/run/episode from meta (`env` or
`world_id`, `run` or `run_id`, `episode`), else the source name / the line.

jsonl reasoning_trace: state = {last part of each dotted path in `state_fields`: value} (the full
path when two last parts collide; a row whose every state field is absent or empty is
`missing_state`); tools from `tools_field` (else `tools_default`), action from
`action_field` (else `action_default`); `meta_fields` copied into meta.

router_jsonl: state = the `input` object (needs a non-empty `input.prompt_text`); action =
`output.route` (a row without one is `missing_route`, never given a default); tools = the source's
`routes`, else every route seen in the source, sorted; `output` is kept as the `json` contract's
answer, its other fields in meta; env = the row's `env`, else the source name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from core.paths import files_inside
from core.schemas.corpus import CorpusSpec
from core.schemas.sources import JsonlSource, RouterJsonlSource, Source, TrmPlayRootSource
from worker.corpus.errors import CorpusInputError
from worker.corpus.lines import json_lines
from worker.corpus.published import READERS
from worker.corpus.rows import (
    Invalid,
    Row,
    Tally,
    classify,
    family_of,
    state_text,
)
from worker.corpus.rows import compact_json as compact_json  # knobs and rollouts read it here

PLAY_GLOB = "worlds/*/trm_traces.jsonl"
_PICK = re.compile(r"\s*PICK\s+(-?\d+)\s*$", re.IGNORECASE)
_TOOL_ID_KEYS = ("opt_id", "action", "id", "name", "tool")
_MISSING = object()

Progress = Callable[[int], None]


def discover(spec: CorpusSpec) -> list[tuple[list[Path], list[str]]]:
    """(the files each source reads, the names it skipped as links out of its folder); raises
    CorpusInputError for a path that is not there."""
    found: list[tuple[list[Path], list[str]]] = []
    for index, source in enumerate(spec.sources):
        field = f"sources[{index}].path"
        root = Path(source.path)
        published = READERS.get(source.type)
        if published is not None:
            if published.path_must_exist and not root.exists():
                raise CorpusInputError(field, f"{root} does not exist")
            found.append((published.files_of(source, field), []))
            continue
        if not root.exists():
            raise CorpusInputError(field, f"{root} does not exist")
        skipped: list[str] = []
        if isinstance(source, TrmPlayRootSource):
            if not root.is_dir():
                raise CorpusInputError(field, f"{root} is not a folder (trm_play_root wants one)")
            files, skipped = files_inside(root, sorted(root.glob(PLAY_GLOB)))
            if not files:
                raise CorpusInputError(field, f"{root} holds no {PLAY_GLOB}{_links(skipped)}")
        elif root.is_dir():
            listed = sorted(p for p in root.glob("*.jsonl") if p.is_file() or p.is_symlink())
            files, skipped = files_inside(root, listed)
            if not files:
                raise CorpusInputError(field, f"{root} holds no *.jsonl file{_links(skipped)}")
        else:
            files = [root]
        found.append((files, skipped))
    return found


def _links(skipped: list[str]) -> str:
    if not skipped:
        return ""
    return f" inside it ({len(skipped)} link(s) out of the folder skipped: {', '.join(skipped)})"


# A converter turns one parsed line into a Row, or raises Invalid.
Convert = Callable[[dict[str, Any], Path, str, int], Row]


def read_source(source: Source, files: list[Path], tally: Tally, progress: Progress) -> list[Row]:
    published = READERS.get(source.type)
    if published is not None:
        return published.read_rows(source, files, tally, progress)
    root = Path(source.path)
    lines = json_lines(root, files, tally, progress)
    if isinstance(source, TrmPlayRootSource):
        return _convert_all(lines, tally, partial(_play_row, source))
    if isinstance(source, RouterJsonlSource):
        return _read_router(source, lines, tally)
    if not isinstance(source, JsonlSource):  # every other type is a published reader's
        raise TypeError(f"no reader for source type {source.type!r}")
    if source.mode == "normalized":
        return _convert_all(lines, tally, partial(_normalized_row, source))
    return _convert_all(lines, tally, _ReasoningTrace(source))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any, fallback: str) -> str:
    if value is None or value == "":
        return fallback
    return str(value)


def dig(obj: Any, dotted: str) -> Any:
    """The value at a dotted path (`a.b.0.c`), or _MISSING."""
    for part in dotted.split("."):
        if isinstance(obj, dict):
            obj = obj.get(part, _MISSING)
        elif isinstance(obj, list) and part.lstrip("-").isdigit():
            index = int(part)
            obj = obj[index] if -len(obj) <= index < len(obj) else _MISSING
        else:
            return _MISSING
        if obj is _MISSING:
            return _MISSING
    return obj


def tool_ids(value: Any) -> list[str]:
    """Candidate ids from a list of ids or of objects carrying one; raises Invalid."""
    if not isinstance(value, list) or not value:
        raise Invalid("missing_tools")
    ids: list[str] = []
    for entry in value:
        if isinstance(entry, dict):
            entry = next((entry[k] for k in _TOOL_ID_KEYS if entry.get(k) not in (None, "")), None)
        if isinstance(entry, bool) or not isinstance(entry, str | int) or entry == "":
            raise Invalid("bad_tools")
        ids.append(str(entry))
    if len(set(ids)) != len(ids):
        raise Invalid("duplicate_tools")
    return ids


def _action(value: Any, tools: list[str]) -> str:
    if value is None or value == "" or value is _MISSING:
        raise Invalid("missing_action")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Invalid("bad_action")
    action = str(value)
    if action not in tools:
        raise Invalid("action_not_in_tools")
    return action


def _state_text(state: Any) -> tuple[str, Any]:
    """(compact JSON text, object) of a state; raises Invalid for an empty one."""
    return state_text(None if state is _MISSING else state)


Lines = Iterator[tuple[Path, str, int, dict[str, Any]]]


def _convert_all(lines: Lines, tally: Tally, convert: Convert) -> list[Row]:
    rows: list[Row] = []
    for path, label, lineno, obj in lines:
        try:
            row = convert(obj, path, label, lineno)
        except Invalid as bad:
            tally.reject(bad.reason, label, lineno)
            continue
        kind = row.meta.get("kind")
        if kind:
            tally.kinds[kind] = tally.kinds.get(kind, 0) + 1
        rows.append(row)
    return rows


def _play_row(
    source: TrmPlayRootSource, obj: dict[str, Any], path: Path, label: str, lineno: int
) -> Row:
    event = _dict(obj.get("event"))
    latent = _dict(obj.get("latent"))
    parts = (
        ("encounter_id", event.get("encounter_id")),
        ("metrics", event.get("metrics")),
        ("latent_norm", latent.get("latent_norm")),
        ("state", event.get("state", obj.get("state"))),
    )
    state, state_obj = _state_text({k: v for k, v in parts if v not in (None, {}, [], "")})
    log = _dict(obj.get("reasoning_interpret_log"))
    candidates = log.get("candidate_scores")
    if not isinstance(candidates, list) or not candidates:
        raise Invalid("missing_candidates")
    tools = tool_ids(candidates)
    pick = obj.get("label")
    if pick is None or pick == "":
        raise Invalid("missing_label")
    match = _PICK.match(pick) if isinstance(pick, str) else None
    base = obj.get("pick_base", source.pick_base)
    if match is None or base not in (0, 1):
        raise Invalid("bad_label")
    index = int(match.group(1)) - base
    if not 0 <= index < len(tools):
        raise Invalid("label_out_of_range")
    world = _text(obj.get("world_id") or event.get("world_id"), path.parent.name)
    meta_in = _dict(obj.get("meta"))
    kind, negative, recovery = classify(obj, event, meta_in)
    run = _text(obj.get("run", obj.get("run_id")), source.run or source.name)
    episode = _text(obj.get("episode"), f"{label}:{lineno}")
    family = family_of(obj, event, meta_in, env=world)
    meta = _base_meta(source, world, run, label, lineno)
    meta.update(
        world_id=world, episode=obj.get("episode"), turn=obj.get("turn"), family=family, label=pick
    )
    for key in ("next_encounter", "outcome"):
        if event.get(key) is not None:
            meta[key] = event[key]
    if kind:
        meta["kind"] = kind
    tags = event.get("action_tags")
    return Row(
        state,
        state_obj,
        tools,
        tools[index],
        meta,
        source.name,
        world,
        run,
        episode,
        family,
        negative,
        recovery,
        tags=_str_map(tags) if isinstance(tags, dict) else world_tags(path.parent),
    )


def _str_map(value: dict[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str | int | float)}


_WORLD_TAGS: dict[tuple[Path, int], dict[str, str]] = {}


def world_tags(world_dir: Path) -> dict[str, str]:
    """A world's own action tags from its `world.json` (what `namespace_normalization: auto`
    maps ids to); {} when it has none. Read once per file version."""
    path = world_dir / "world.json"
    try:
        key = (path, path.stat().st_mtime_ns)
    except OSError:
        return {}
    if key not in _WORLD_TAGS:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        tags = data.get("action_tags") if isinstance(data, dict) else None
        _WORLD_TAGS[key] = _str_map(tags) if isinstance(tags, dict) else {}
    return _WORLD_TAGS[key]


def _group_fields(
    meta: dict[str, Any], source: str, label: str, lineno: int
) -> tuple[str, str, str]:
    env = _text(meta.get("env") or meta.get("world_id"), source)
    run = _text(meta.get("run") or meta.get("run_id"), source)
    episode = _text(meta.get("episode"), f"{label}:{lineno}")
    return env, run, episode


def _base_meta(source: Source, env: str, run: str, label: str, lineno: int) -> dict[str, Any]:
    return {
        "source_name": source.name,
        "source_type": source.type,
        "env": env,
        "run": run,
        "path": label,
        "line": lineno,
    }


def _finish(
    source: Source,
    extra: dict[str, Any],
    raw: dict[str, Any],
    state: tuple[str, Any],
    tools: list[str],
    action: str,
    label: str,
    lineno: int,
    answer: dict[str, Any] | None = None,
    tags: dict[str, str] | None = None,
) -> Row:
    """A Row from already-validated parts; `extra` is meta from the row, never overwritten."""
    env, run, episode = _group_fields(extra, source.name, label, lineno)
    kind, negative, recovery = classify(raw, _dict(raw.get("event")), extra)
    family = family_of(extra, raw, env=env)
    meta = _base_meta(source, env, run, label, lineno)
    meta["episode"] = extra.get("episode")
    meta["family"] = family
    for key, value in extra.items():
        meta.setdefault(key, value)
    if kind:
        meta["kind"] = kind
    return Row(
        state[0],
        state[1],
        tools,
        action,
        meta,
        source.name,
        env,
        run,
        episode,
        family,
        negative,
        recovery,
        answer=answer,
        tags=tags or {},
    )


def _normalized_row(
    source: JsonlSource, obj: dict[str, Any], path: Path, label: str, lineno: int
) -> Row:
    state = _state_text(obj.get("state", _MISSING))
    tools = tool_ids(obj.get("tools"))
    action = _action(obj.get("action", _MISSING), tools)
    return _finish(source, _dict(obj.get("meta")), obj, state, tools, action, label, lineno)


def _field_keys(paths: list[str]) -> dict[str, str]:
    """Key in the state/meta dict for each dotted path: its last part, unless two collide."""
    last = [path.rsplit(".", 1)[-1] for path in paths]
    return {path: k if last.count(k) == 1 else path for path, k in zip(paths, last, strict=True)}


def _blank(value: Any) -> bool:
    """Absent, null, or empty/whitespace text, or an empty object/list."""
    if isinstance(value, str):
        return not value.strip()
    return value is _MISSING or value is None or value == {} or value == []


class _ReasoningTrace:
    """Converter for `mode: reasoning_trace`: the field mapping resolved once per source."""

    def __init__(self, source: JsonlSource) -> None:
        self.source = source
        self.state_keys = _field_keys(source.state_fields)
        if isinstance(source.meta_fields, dict):
            self.meta_keys = {path: key for key, path in source.meta_fields.items()}
        else:
            self.meta_keys = _field_keys(source.meta_fields)

    def __call__(self, obj: dict[str, Any], path: Path, label: str, lineno: int) -> Row:
        source = self.source
        found = {key: dig(obj, dotted) for dotted, key in self.state_keys.items()}
        if all(_blank(v) for v in found.values()):
            # `{"question": ""}` holds no decision-relevant state: never trained on.
            raise Invalid("missing_state")
        state = _state_text({k: v for k, v in found.items() if v is not _MISSING and v is not None})
        tools_raw = dig(obj, source.tools_field) if source.tools_field else _MISSING
        if tools_raw is _MISSING or tools_raw is None:
            tools_raw = source.tools_default
        tools = tool_ids(tools_raw)
        action_raw = dig(obj, source.action_field) if source.action_field else _MISSING
        if action_raw is _MISSING or action_raw is None:
            action_raw = source.action_default
        action = _action(action_raw, tools)
        extra = {}
        for dotted, key in self.meta_keys.items():
            value = dig(obj, dotted)
            if value is not _MISSING:
                extra[key] = value
        tags = dig(obj, source.tags_field) if source.tags_field else _MISSING
        pairs = (
            dict(zip(tools, map(str, tags), strict=True))
            if isinstance(tags, list) and len(tags) == len(tools)
            else None
        )
        return _finish(source, extra, obj, state, tools, action, label, lineno, tags=pairs)


def _read_router(source: RouterJsonlSource, lines: Lines, tally: Tally) -> list[Row]:
    """Two passes: the candidate routes (unless the spec lists them) are all routes seen."""
    staged: list[tuple[dict[str, Any], Path, str, int]] = []
    for path, label, lineno, obj in lines:
        route = _dict(obj.get("output")).get("route")
        prompt = _dict(obj.get("input")).get("prompt_text")
        if route is None or route == "":
            tally.reject("missing_route", label, lineno)
        elif not isinstance(route, str):
            tally.reject("bad_route", label, lineno)
        elif not isinstance(prompt, str) or not prompt.strip():
            tally.reject("missing_state", label, lineno)
        else:
            staged.append((obj, path, label, lineno))
    if source.routes:
        routes = list(source.routes)
    else:
        routes = sorted({obj["output"]["route"] for obj, *_ in staged})
    convert = partial(_router_row, source, routes, frozenset(routes))
    return _convert_all(_restage(staged), tally, convert)


def _restage(
    staged: list[tuple[dict[str, Any], Path, str, int]],
) -> Lines:
    for obj, path, label, lineno in staged:
        yield path, label, lineno, obj


def _router_row(
    source: RouterJsonlSource,
    routes: list[str],
    route_set: frozenset[str],
    obj: dict[str, Any],
    path: Path,
    label: str,
    lineno: int,
) -> Row:
    state = _state_text(obj["input"])
    output = obj["output"]
    route = output["route"]
    if route not in route_set:
        raise Invalid("action_not_in_tools")
    extra = dict(_dict(obj.get("meta")))
    for key in ("env", "run", "run_id", "episode"):
        if key in obj:
            extra.setdefault(key, obj[key])
    if obj.get("id") is not None:
        extra.setdefault("episode", obj["id"])
    for key, value in output.items():
        if key not in ("route", "rationale"):
            extra.setdefault(key, value)
    return _finish(source, extra, obj, state, routes, route, label, lineno, dict(output))
