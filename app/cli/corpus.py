"""`trm corpus build SPEC.json --out DIR [--dry-run]`: build a corpus on this machine (SPEC §4).

SPEC.json is a corpus spec, or a `train` spec whose `corpus` field is one. Relative source paths
resolve against the spec file's folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

if TYPE_CHECKING:
    from core.schemas.corpus import CorpusSpec

EXIT_BAD_INPUT = 2


class SpecFileError(Exception):
    """A spec file that cannot be used; the message names the file, line and field."""


def register(sub: argparse._SubParsersAction) -> None:
    corpus = sub.add_parser("corpus", help="build training corpora from logs and traces")
    actions = corpus.add_subparsers(dest="corpus_action", required=True, metavar="ACTION")
    build = actions.add_parser(
        "build", help="read, validate, split and export a corpus (manifest.json says what happened)"
    )
    build.add_argument("spec", type=Path, help="corpus spec (or train spec) JSON file")
    build.add_argument("--out", type=Path, required=True, help="folder for the corpus files")
    build.add_argument(
        "--dry-run",
        action="store_true",
        help="read and validate only; write nothing (default: off)",
    )
    build.set_defaults(func=handle_build)


def _loc(parts: tuple[Any, ...]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _line_of(text: str, parts: tuple[Any, ...]) -> int | None:
    """Best-effort line of a field: follow the path's keys through the text in order."""
    pos, line = 0, None
    for part in parts:
        if isinstance(part, str):
            found = text.find(f'"{part}"', pos)
            if found >= 0:
                pos, line = found, text.count("\n", 0, found) + 1
    return line


def load_spec(path: Path) -> CorpusSpec:
    """The corpus spec in `path`, source paths made absolute; raises SpecFileError."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecFileError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    prefix: tuple[Any, ...] = ()
    if isinstance(data, dict) and data.get("kind") == "train" and "corpus" in data:
        data, prefix = data["corpus"], ("corpus",)
    # The spec models load when a spec is read, not for every `trm` call.
    from core.schemas.corpus import CorpusSpec
    from core.schemas.sources import DecisionLogSource
    from core.translate.corpus import looks_like_skill_corpus_spec

    if looks_like_skill_corpus_spec(data):
        raise SpecFileError(
            f"{path}: this is the original skill's corpus spec (train_ratio/shuffle_seed/"
            f"output_dir); translate it first: trm import-spec {path} --out corpus.json"
        )
    try:
        spec = CorpusSpec.model_validate(data)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            parts = prefix + tuple(error["loc"])
            line = _line_of(text, parts)
            where = f"{path}:{line}" if line else str(path)
            lines.append(f"{where}: {_loc(parts) or '(top level)'}: {error['msg']}")
        raise SpecFileError("\n".join(lines)) from exc
    named = [i for i, source in enumerate(spec.sources) if getattr(source, "dataset", None)]
    if named:
        raise SpecFileError(
            f"{path}: sources[{named[0]}].dataset: a data set is on the server, and this builds "
            "from local files: give its path here, or submit the train spec (its dry run "
            "builds the corpus there)"
        )
    base = path.resolve().parent
    sources = [
        source
        if isinstance(source, DecisionLogSource)  # no file: it reads the service's database
        else source.model_copy(update={"path": str((base / source.path).resolve())})
        for source in spec.sources
    ]
    return spec.model_copy(update={"sources": sources})


def _first_lines(reason: dict[str, Any]) -> str:
    spots = [
        f"{entry['file']}:{line}" for entry in reason["first_lines"] for line in entry["lines"]
    ]
    return ", ".join(spots[:3]) + (" ..." if len(spots) > 3 else "")


def summary(manifest: dict[str, Any], out_dir: Path, *, reused: bool) -> str:
    lines = []
    for source in manifest["sources"]:
        lines.append(
            f"  {source['name']:<16} read {source['rows_read']:>8}  kept {source['rows_kept']:>8}"
            f"  invalid {source['rows_invalid']:>6}  duplicates {source['duplicates']:>6}"
        )
        for reason, detail in source["invalid"].items():
            lines.append(f"      {reason:<22} {detail['count']:>6}  at {_first_lines(detail)}")
    split = manifest["split"]
    splits = manifest["splits"]
    lines.append(f"  split by {split['by']} ({split['by_reason']}; {split['val']})")
    lines.append(
        "  "
        + "   ".join(
            f"{name} {splits[name]['rows']} rows/{splits[name]['groups']} groups"
            for name in ("train", "val", "anchor")
        )
        + f"   critic {splits['critic']['rows']} rows"
    )
    for warning in manifest["warnings"]:
        lines.append(f"  warning: {warning}")
    head = "dry run, nothing written" if manifest["dry_run"] else f"written to {out_dir}"
    if reused:
        head = f"already built in {out_dir}, reused"
    lines.insert(0, f"corpus {manifest['corpus_hash'][:16]}  {head}")
    return "\n".join(lines)


def handle_build(args: argparse.Namespace) -> int:
    from worker.corpus import CorpusInputError, build_corpus

    try:
        spec = load_spec(args.spec)
        result = build_corpus(spec, args.out.resolve(), dry_run=args.dry_run)
    except SpecFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except CorpusInputError as exc:
        print(f"error: {args.spec}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(summary(result.manifest, args.out, reused=result.reused))
    return 0
