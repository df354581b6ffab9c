"""`trm export RUN_DIR_OR_TRAINER_DIR --out DIR [--anchors FILE]`: a trained trm or gbdt as a
folder that decides without the service and without torch (worker/decide/export.py), checked
against the service's controller on the run's anchor rows. Exit 1 on any disagreement."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="write a trained controller as a folder that decides without the service"
    )
    p.add_argument("path", help="a run folder (RUNS_DIR/<id>) or its trainer/ folder")
    p.add_argument("--out", required=True, help="the folder to write (new, empty or an export)")
    p.add_argument(
        "--anchors",
        help="rows to check the export on (default: the run's corpus/anchor.jsonl, else val.jsonl)",
    )
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from worker.context import StageFailure
    from worker.decide.export import SCORE_TOLERANCE, ExportError, export_controller, find_trainer

    try:
        trainer_dir, trainer = find_trainer(Path(args.path))
        report = export_controller(
            trainer_dir, trainer, Path(args.out), Path(args.anchors) if args.anchors else None
        )
    except (ExportError, StageFailure) as exc:
        print(f"trm export: {exc}", file=sys.stderr)
        return 2
    print(f"exported {report.trainer} {report.model_hash[:12]} to {report.out_dir} "
          f"({len(report.files)} files)")  # fmt: skip
    if report.anchors is None:
        print("checked 0 rows: no anchor or val rows beside this model (pass --anchors FILE)")
        return 0
    print(f"checked {report.checked} rows of {report.anchors}: largest probability difference "
          f"{report.max_score_diff:.1e} (tolerance {SCORE_TOLERANCE:.0e})")  # fmt: skip
    if report.ok:
        print("same action on every row")
        return 0
    for d in report.disagreements[:10]:
        print(f"  row {d.row}: service {d.service_action!r}, export {d.export_action!r}, "
              f"probabilities differ by {d.score_diff:.1e}", file=sys.stderr)  # fmt: skip
    print(f"trm export: {len(report.disagreements)} of {report.checked} rows disagree",
          file=sys.stderr)  # fmt: skip
    return 1
