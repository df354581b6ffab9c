"""`trm import-spec FILE [--out OUT.json]`: translate the original skill's spec files to ours.

Each kind of file the skill wrote has a detector here (its corpus spec today; the hill-climb and
bench specs join as further entries of DETECTORS). A translation prints a warning for every key
ignored or whose meaning changed and an error for every path that does not exist; with an error,
nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2

Translation = tuple[dict[str, Any], list[str], list[str]]


@dataclass(frozen=True)
class Detector:
    name: str
    matches: Callable[[Any], bool]
    translate: Callable[[dict[str, Any], Path, argparse.Namespace], Translation]
    # Our model the result must validate against, named for messages.
    target: str
    validate: Callable[[dict[str, Any]], Any]


def _corpus_matches(data: Any) -> bool:
    from worker.corpus.upstream import looks_like_skill_corpus_spec

    return looks_like_skill_corpus_spec(data)


def _corpus_translate(data: dict[str, Any], base: Path, args: argparse.Namespace) -> Translation:
    from worker.corpus.upstream import translate_corpus_spec

    return translate_corpus_spec(data, base, split_by=args.split_by)


def _corpus_validate(data: dict[str, Any]) -> Any:
    from app.schemas.corpus import CorpusSpec

    return CorpusSpec.model_validate(data)


def _run_spec_validate(data: dict[str, Any]) -> Any:
    from app.schemas.specs import RUN_SPEC

    return RUN_SPEC.validate_python(data)


def _search_detectors() -> list[Detector]:
    from worker.hillclimb import upstream

    return [
        Detector(
            "routerBench spec",
            upstream.looks_like_skill_routerbench_spec,
            upstream.translate_routerbench_spec,
            "RunSpec",
            _run_spec_validate,
        ),
        Detector(
            "hill-climb spec",
            upstream.looks_like_skill_search_spec,
            upstream.translate_search_spec,
            "HillclimbSpec",
            _run_spec_validate,
        ),
    ]


DETECTORS: list[Detector] = [
    Detector("corpus spec", _corpus_matches, _corpus_translate, "CorpusSpec", _corpus_validate),
    *_search_detectors(),
]


def _upstream_detectors() -> list[Detector]:
    """The skill's router training spec and PrimeHub bench specs (worker/upstream/)."""
    from worker.upstream import benches, training

    return [
        Detector(
            "PrimeHub bench spec",
            benches.looks_like_skill_primehub_spec,
            benches.translate_primehub_spec,
            "RunSpec",
            _run_spec_validate,
        ),
        Detector(
            "router training spec",
            training.looks_like_skill_training_spec,
            training.translate_training_spec,
            "RunSpec",
            _run_spec_validate,
        ),
    ]


DETECTORS += _upstream_detectors()


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "import-spec", help="translate a spec file of the original skill into ours"
    )
    parser.add_argument("file", type=Path, help="the skill's spec file (JSON)")
    parser.add_argument("--out", type=Path, help="where to write our spec (default: stdout)")
    parser.add_argument(
        "--split-by",
        choices=("env", "run", "episode", "row"),
        help="corpus specs: split level (default: SPEC §4's rule; `row` keeps a row split)",
    )
    parser.set_defaults(func=handle_import)


def handle_import(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    path: Path = args.file
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        print(f"error: {path}: cannot read ({exc.strerror})", file=sys.stderr)
        return EXIT_BAD_INPUT
    except json.JSONDecodeError as exc:
        print(f"error: {path}:{exc.lineno}: not valid JSON ({exc.msg})", file=sys.stderr)
        return EXIT_BAD_INPUT
    detector = next((d for d in DETECTORS if d.matches(data)), None)
    if detector is None:
        kinds = ", ".join(d.name for d in DETECTORS)
        print(
            f"error: {path}: not a spec file of the original skill we know ({kinds})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    translated, warnings, errors = detector.translate(data, path.resolve().parent, args)
    for warning in warnings:
        print(f"warning: {path}: {warning}", file=sys.stderr)
    if not errors:
        try:
            detector.validate(translated)
        except ValidationError as exc:
            errors = [f"{detector.target}: {e['loc']}: {e['msg']}" for e in exc.errors()]
    if errors:
        for error in errors:
            print(f"error: {path}: {error}", file=sys.stderr)
        print(f"{len(errors)} error(s); nothing written", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = json.dumps(translated, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
        print(f"{detector.name} translated: {args.out} ({len(warnings)} warning(s))")
    else:
        sys.stdout.write(text)
    return 0
