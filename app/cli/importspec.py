"""`trm import-spec FILE [--out OUT.json]`: translate the original skill's spec files to ours.

The detectors and translations are `core.translate`'s (the API's `POST /runs?format=skill` uses
the same). A translation prints a warning for every key ignored or whose meaning changed and an
error for every path that does not exist; with an error, nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2


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
    # The translations and spec models load for this verb, not for every `trm` call.
    from core.translate import detect, unknown_file_message, validation_errors

    path: Path = args.file
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        print(f"error: {path}: cannot read ({exc.strerror})", file=sys.stderr)
        return EXIT_BAD_INPUT
    except json.JSONDecodeError as exc:
        print(f"error: {path}:{exc.lineno}: not valid JSON ({exc.msg})", file=sys.stderr)
        return EXIT_BAD_INPUT
    detector = detect(data)
    if detector is None:
        print(f"error: {path}: {unknown_file_message()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    translated, warnings, errors = detector.translate(
        data, path.resolve().parent, split_by=args.split_by
    )
    for warning in warnings:
        print(f"warning: {path}: {warning}", file=sys.stderr)
    if not errors:
        errors = validation_errors(detector, translated)
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
