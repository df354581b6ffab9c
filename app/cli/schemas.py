"""`trm schemas`: write the JSON Schemas of the run specs (SPEC §3.3) to specs/schemas/."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schemas", help="write the run specs' JSON Schemas")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("specs/schemas"),
        help="the folder written (default: specs/schemas)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; fail if the files on disk are stale (default: off)",
    )
    p.set_defaults(func=cmd_schemas)


def schema_files() -> dict[str, str]:
    from core.schemas.specs import RUN_SPEC, SPEC_MODELS  # for this verb, not every `trm` call

    files = {"run-spec.schema.json": RUN_SPEC.json_schema()}
    for kind, model in SPEC_MODELS.items():
        files[f"{kind}.schema.json"] = model.model_json_schema()
    return {
        name: json.dumps(schema, indent=2, sort_keys=True) + "\n" for name, schema in files.items()
    }


def cmd_schemas(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, text in schema_files().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print("stale (run `trm schemas`): " + ", ".join(stale))
        return 1
    return 0
