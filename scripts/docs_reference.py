"""Writes docs/reference/{api,specs,cli,settings}.md from the code, so the reference cannot drift:
the API from the FastAPI app's OpenAPI, the spec fields from the run specs' JSON Schemas, the CLI
from `trm --help` and every verb's `--help`, the settings from `core/settings.py`.

    .venv/bin/python scripts/docs_reference.py           # write the four pages
    .venv/bin/python scripts/docs_reference.py --check   # write nothing; exit 1 if any is stale

tests/docs/test_reference.py runs the check in the suite.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import sys
import tempfile
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "reference"
# argparse wraps help at the terminal's width: fixed, so the page reads the same everywhere.
COLUMNS = "100"
HEADER = "<!-- Written by scripts/docs_reference.py from the code; do not edit by hand. -->\n"


def _cell(text: Any) -> str:
    """One Markdown table cell: no newlines, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# ---------------------------------------------------------------------------------------- API


def _openapi() -> dict[str, Any]:
    from app.main import create_app
    from core.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            database_url=f"sqlite:///{tmp}/reference.db",
            runs_dir=Path(tmp) / "runs",
            data_dir=Path(tmp) / "data",
        )
        return create_app(settings).openapi()


def _schema_name(schema: dict[str, Any]) -> str:
    """A short type name for a request or response body schema."""
    if "$ref" in schema:
        return "`" + str(schema["$ref"]).rsplit("/", 1)[-1] + "`"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(_schema_name(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if schema.get("type") == "array":
        return f"list of {_schema_name(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def api_page() -> str:
    spec = _openapi()
    lines = [
        "# API reference\n",
        HEADER,
        f"{spec['info']['title']} {spec['info']['version']}: every route the API serves, from its "
        "OpenAPI document (`GET /openapi.json` on a running service, behind the token like "
        "every route but `/healthz`; `/docs` renders it). Errors are always "
        '`{"error": {"code", "message", "details"}}`; a 422 names the bad field. The spec '
        "fields a `POST /runs` body takes are in [spec fields](specs.md).\n",
    ]
    tags: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            tag = (op.get("tags") or [path.strip("/").split("/")[0] or "root"])[0]
            tags.setdefault(tag, []).append((method.upper(), path, op))
    lines.append("| route | what it does |\n|---|---|")
    for tag in sorted(tags):
        for method, path, op in tags[tag]:
            anchor = f"{method.lower()}-{path}".replace("/", "-").strip("-")
            anchor = "".join(c for c in anchor if c.isalnum() or c == "-").lower()
            lines.append(f"| [`{method} {path}`](#{anchor}) | {_cell(op.get('summary', ''))} |")
    lines.append("")
    for tag in sorted(tags):
        lines.append(f"## {tag}\n")
        for method, path, op in tags[tag]:
            anchor = f"{method.lower()}-{path}".replace("/", "-").strip("-")
            anchor = "".join(c for c in anchor if c.isalnum() or c == "-").lower()
            lines.append(f"### `{method} {path}` {{#{anchor}}}\n")
            if op.get("description"):
                lines.append(op["description"].strip() + "\n")
            elif op.get("summary"):
                lines.append(op["summary"].strip() + "\n")
            params = op.get("parameters", [])
            if params:
                lines.append("| parameter | in | required | type | description |")
                lines.append("|---|---|---|---|---|")
                for p in params:
                    schema = p.get("schema", {})
                    about = p.get("description", schema.get("description", ""))
                    lines.append(
                        f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                        f"| {_cell(_schema_name(schema))} | {_cell(about)} |"
                    )
                lines.append("")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                lines.append(f"Body ({media}): {_schema_name(content.get('schema', {}))}\n")
            responses = op.get("responses", {})
            if responses:
                shown = []
                for code, resp in responses.items():
                    schema = next(iter(resp.get("content", {}).values()), {}).get("schema")
                    what = _cell(resp.get("description", ""))
                    if schema:
                        what += f" ({_schema_name(schema)})"
                    shown.append(f"`{code}` {what}")
                lines.append("Responses: " + "; ".join(shown) + "\n")
    names = sorted(spec.get("components", {}).get("schemas", {}))
    lines.append("## Schemas\n")
    lines.append(
        "The bodies above by name (the full JSON Schemas are in `/openapi.json`; the run "
        "specs' fields are listed in [spec fields](specs.md)): "
        + ", ".join(f"`{n}`" for n in names)
        + ".\n"
    )
    return "\n".join(lines)


# -------------------------------------------------------------------------------- spec fields


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        merged = {**defs[name], **{k: v for k, v in schema.items() if k != "$ref"}}
        return merged, name
    return schema, None


def _type_of(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    schema, name = _resolve(schema, defs)
    if name and "enum" not in schema:
        return name
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type_of(s, defs) for s in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(schema.get('items', {}), defs)}"
    if kind == "object" and "additionalProperties" in schema and "properties" not in schema:
        extra = schema["additionalProperties"]
        value = _type_of(extra, defs) if isinstance(extra, dict) else "any"
        return f"map of {value}"
    return str(kind)


def _bounds(schema: dict[str, Any]) -> str:
    marks = {
        "minimum": "≥",
        "exclusiveMinimum": ">",
        "maximum": "≤",
        "exclusiveMaximum": "<",
        "minLength": "length ≥",
        "maxLength": "length ≤",
        "minItems": "items ≥",
        "maxItems": "items ≤",
        "pattern": "matches",
    }
    found = []
    for s in [schema, *schema.get("anyOf", [])]:
        for key, mark in marks.items():
            if key in s:
                value = f"`{s[key]}`" if key == "pattern" else s[key]
                found.append(f"{mark} {value}")
    return ", ".join(found)


def _objects_inside(schema: dict[str, Any], defs: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(suffix, definition name) of each object a field holds: itself, `[]` for list items,
    `.*` for map values, through nullable unions."""
    schema, name = _resolve(schema, defs)
    if name and "properties" in defs.get(name, {}):
        yield "", name
        return
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key, []):
            yield from _objects_inside(option, defs)
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        for suffix, inner in _objects_inside(schema["items"], defs):
            yield "[]" + suffix, inner
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for suffix, inner in _objects_inside(extra, defs):
            yield ".*" + suffix, inner


def _fields(
    obj: dict[str, Any], defs: dict[str, Any], prefix: str, seen: tuple[str, ...]
) -> Iterator[str]:
    required = set(obj.get("required", []))
    for field, raw in obj.get("properties", {}).items():
        path = f"{prefix}{field}"
        schema, _ = _resolve(raw, defs)
        default = json.dumps(schema["default"]) if "default" in schema else ""
        if field in required:
            default = "required"
        yield (
            f"| `{path}` | {_cell(_type_of(raw, defs))} | {_cell(default)} "
            f"| {_cell(_bounds(schema))} | {_cell(schema.get('description', ''))} |"
        )
        inside = [(suffix, name) for suffix, name in _objects_inside(raw, defs) if name not in seen]
        for suffix, name in inside:
            if len(inside) > 1:
                doc = _cell(defs[name].get("description", ""))
                yield f"| *`{path}{suffix}` as `{name}`:* | | | | {doc} |"
            yield from _fields(defs[name], defs, f"{path}{suffix}.", (*seen, name))


def specs_page() -> str:
    from core.schemas.specs import SPEC_MODELS

    lines = [
        "# Spec fields\n",
        HEADER,
        "Every field a run spec (`POST /runs`, `trm submit FILE`) takes, by kind, from the "
        "specs' JSON Schemas (`specs/schemas/*.json`, which `trm schemas` writes from the same "
        "models). Unknown keys are refused with a 422 naming them. `a.b` is field `b` of object "
        "`a`; `a[]` an item of list `a`; `a.*` a value of map `a`.\n",
    ]
    for kind, model in SPEC_MODELS.items():
        schema = model.model_json_schema()
        defs = schema.get("$defs", {})
        lines.append(f"## `{kind}`\n")
        doc = (model.__doc__ or "").strip()
        if doc:
            lines.append(" ".join(doc.split()) + "\n")
        lines.append("| field | type | default | bounds | description |")
        lines.append("|---|---|---|---|---|")
        lines.extend(_fields(schema, defs, "", (model.__name__,)))
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- CLI


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _walk(parser: argparse.ArgumentParser, words: list[str]) -> Iterator[tuple[str, str]]:
    yield " ".join(words), parser.format_help()
    for name, child in _subparsers(parser):
        yield from _walk(child, [*words, name])


def cli_page() -> str:
    from app.cli import build_parser

    parser = build_parser()
    lines = [
        "# CLI reference\n",
        HEADER,
        "`trm --help` and every verb's `--help`, as the installed `trm` prints them.\n",
    ]
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        commands = list(_walk(parser, ["trm"]))
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    lines.append(", ".join(f"[`{words}`](#{words.replace(' ', '-')})" for words, _ in commands))
    lines.append("")
    for words, text in commands:
        lines.append(f"## `{words}` {{#{words.replace(' ', '-')}}}\n")
        lines.append("```text\n" + text.rstrip() + "\n```\n")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- settings


def _comments_by_field(source: str, class_name: str) -> dict[str, str]:
    """The comment lines right above each field of `class_name`, and its trailing comment."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    comments: dict[int, str] = {}  # whole-line comments
    trailing: dict[int, str] = {}  # a comment after code on its line
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.line.lstrip().startswith("#"):
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type == tokenize.COMMENT:
            trailing[tok.start[0]] = tok.string.lstrip("#").strip()
    out: dict[str, str] = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in comments:
            above.insert(0, comments[line])
            line -= 1
        if node.end_lineno in trailing:
            above.append(trailing[node.end_lineno])
        out[node.target.id] = " ".join(above)
    return out


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, Path):
        return f"`{value}`"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


BOUND_MARKS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("max_length", "length ≤"))


def settings_page() -> str:
    from core import settings as module

    cls = module.Settings
    notes = _comments_by_field(Path(module.__file__).read_text(), "Settings")
    prefix = cls.model_config.get("env_prefix", "")
    lines = [
        "# Settings\n",
        HEADER,
        f"One settings object (`core/settings.py`), read from the environment (prefix "
        f"`{prefix}`) or a `.env` file in the folder a process starts in. Every process of a "
        "deployment (API, workers, decision process) should read the same values. Relative "
        "paths are relative to that folder. The client verbs also read `TRM_URL` (the API they "
        "talk to) and `TRM_API_TOKEN` ([CLI](cli.md)).\n",
        "| variable | type | default | bounds | what it does |",
        "|---|---|---|---|---|",
    ]
    for name, field in cls.model_fields.items():
        kind = getattr(field.annotation, "__name__", None) or str(field.annotation)
        kind = kind.replace("pathlib.", "").replace("pydantic.types.", "")
        bounds = ", ".join(
            f"{mark} {getattr(m, attr)}"
            for m in field.metadata
            for attr, mark in BOUND_MARKS
            if getattr(m, attr, None) is not None
        )
        # The field's description; the comment above it only where it has none (a comment
        # heading a group of fields belongs to no one field).
        what = field.description or notes.get(name, "")
        lines.append(
            f"| `{prefix}{name.upper()}` | {_cell(kind)} | {_cell(_default(field.default))} "
            f"| {_cell(bounds)} | {_cell(what)} |"
        )
    lines.append("")
    return "\n".join(lines)


PAGES = {
    "api.md": api_page,
    "specs.md": specs_page,
    "cli.md": cli_page,
    "settings.md": settings_page,
}


def render() -> dict[str, str]:
    return {name: page().rstrip() + "\n" for name, page in PAGES.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--out", type=Path, default=OUT, help="the folder written")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print("stale (run .venv/bin/python scripts/docs_reference.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
