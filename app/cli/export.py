"""`trm export NAME[@VERSION] --out DIR` (or `trm export RUN_DIR_OR_TRAINER_DIR --out DIR`): a
trained trm or gbdt as a folder that decides without the service and without torch
(worker/decide/export.py), checked against the service's controller on the run's anchor rows.
Exit 1 on any disagreement, 2 when nothing could be exported.

A name is resolved through the registry (`GET /controllers/{name}`: the live version, or the one
after `@`) to its version's trainer folder, which the registry keeps relative to RUNS_DIR: this
command reads it under `--runs-dir` (default TRM_RUNS_DIR), so it runs on a host that shares the
service's runs folder. A folder given as the argument (an existing folder, or any path with a
`/`) is exported as it is."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli.runs import _fail, add_url
from app.client import ApiCallError, Client
from core.errors import ApiError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="write a trained controller as a folder that decides without the service"
    )
    p.add_argument(
        "target",
        metavar="NAME[@VERSION] | RUN_DIR",
        help="a promoted controller (its live version, or @VERSION), or a run folder "
        "(RUNS_DIR/<id>) or its trainer/ folder",
    )
    p.add_argument("--out", required=True, help="the folder to write (new, empty or an export)")
    p.add_argument(
        "--anchors",
        help="rows to check the export on (default: the run's corpus/anchor.jsonl, else val.jsonl)",
    )
    p.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="where this host sees the service's runs folder, for a NAME (default: TRM_RUNS_DIR)",
    )
    add_url(p)
    p.set_defaults(func=cmd_export)


def is_folder(target: str) -> bool:
    """A path rather than a controller's name: an existing folder, or anything with a slash."""
    return Path(target).is_dir() or "/" in target or "\\" in target


def resolve_name(target: str, url: str | None, runs_dir: Path | None) -> tuple[Path, str, str]:
    """(the trainer folder on this host, its trainer, what it is: `router v2 (trm, run ...)`)
    of a promoted controller. ApiCallError from the registry, ApiError for a bad name,
    ExportError naming the version that is not there or the folder not reachable here."""
    from core.controllers import parse_ref
    from core.settings import get_settings
    from worker.decide.export import ExportError

    name, version = parse_ref(target, None)
    client = Client(url)
    answer = client._json(client.http.get(f"/controllers/{name}"))
    wanted = version or answer["live_version"]
    found = [v for v in answer["versions"] if v["version"] == wanted]
    if not found:
        known = ", ".join(str(v["version"]) for v in answer["versions"])
        raise ExportError("controller", f"{name} has no version {wanted} (it has {known})")
    v = found[0]
    root = Path(runs_dir or get_settings().runs_dir)
    folder = root / v["trainer_dir"]
    what = f"{name} v{v['version']} ({v['trainer']}, run {v['run_id']})"
    if not folder.is_dir():
        raise ExportError(
            "runs_dir",
            f"{what}: its trainer folder {v['trainer_dir']} is not under the runs "
            f"folder here ({root.resolve()}): run trm export on a host that shares the "
            f"service's RUNS_DIR, pass --runs-dir, or export the run folder by its path",
        )
    return folder, v["trainer"], what


def cmd_export(args: argparse.Namespace) -> int:
    from worker.context import StageFailure
    from worker.decide.export import SCORE_TOLERANCE, ExportError, export_controller, find_trainer

    try:
        if is_folder(args.target):
            trainer_dir, trainer = find_trainer(Path(args.target))
        else:
            trainer_dir, trainer, what = resolve_name(args.target, args.url, args.runs_dir)
            print(f"{what}: {trainer_dir}")
        report = export_controller(
            trainer_dir, trainer, Path(args.out), Path(args.anchors) if args.anchors else None
        )
    except (ExportError, StageFailure, ApiError) as exc:
        print(f"trm export: {exc}", file=sys.stderr)
        return 2
    except ApiCallError as exc:
        _fail(exc)
        return 2
    print(
        f"exported {report.trainer} {report.model_hash[:12]} to {report.out_dir} "
        f"({len(report.files)} files)"
    )
    if report.anchors is None:
        print("checked 0 rows: no anchor or val rows beside this model (pass --anchors FILE)")
        return 0
    print(
        f"checked {report.checked} rows of {report.anchors}: largest probability difference "
        f"{report.max_score_diff:.1e} (tolerance {SCORE_TOLERANCE:.0e})"
    )
    if report.ok:
        print("same action on every row")
        return 0
    for d in report.disagreements[:10]:
        print(
            f"  row {d.row}: service {d.service_action!r}, export {d.export_action!r}, "
            f"probabilities differ by {d.score_diff:.1e}",
            file=sys.stderr,
        )
    print(
        f"trm export: {len(report.disagreements)} of {report.checked} rows disagree",
        file=sys.stderr,
    )
    return 1
