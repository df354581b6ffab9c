"""A trained controller as a folder that decides without the service and without torch
(`trm export`), checked against the service's own controller on the run's anchor rows.

The folder (`standalone.py` is its `decide.py`; docs/export.md for users):

    decide.py  manifest.json  features.json
    model.safetensors config.json (trm) | model.txt (gbdt)       the trained files, byte for byte
    trm_decide/  features/*.py encoding.py numpy_trm.py decision.py

The shipped sources are this project's own files, their imports pointed at `trm_decide`: the
encoder is `worker/features/` and `worker/models/encoding.py` as they are, the trm runs
`numpy_trm.py` (the torch forward, step for step) and answers are made by `decision.py`, as the
service's are. Nothing is pickled: weights are safetensors or LightGBM's text.

**The check**: the exported `decide.py` runs in a fresh `python -I` with every import of the
project and of torch refused, on the anchor rows (`<run>/corpus/anchor.jsonl`, val.jsonl when a
corpus holds no anchors, or the file given); on every row its action must be the service
controller's and each probability within `SCORE_TOLERANCE`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import worker.features
from core.rundir import (
    ANCHOR_ROWS,
    CORPUS,
    FEATURES,
    GBDT_MODEL,
    TRAINER,
    TRM_CONFIG,
    TRM_MODEL,
    VAL_ROWS,
    sha256_file,
    write_json_atomic,
)
from worker.decide import decision, numpy_trm, standalone
from worker.decide.controller import Controller, DecideRow, load_controller
from worker.decide.decision import Decision
from worker.models import encoding

SCORE_TOLERANCE = 1e-4  # the most an exported probability may differ from the service's
CHECK_TIMEOUT_S = 600
DECIDE = "decide.py"
MODEL_FILES = {"trm": (TRM_MODEL, TRM_CONFIG, FEATURES), "gbdt": (GBDT_MODEL, FEATURES)}
REQUIRES = {"trm": ["numpy"], "gbdt": ["numpy", "lightgbm"]}
# Module -> its place in the export; the first part of each dotted name is rewritten to the second.
REWRITES = (
    ("worker.features", f"{standalone.PACKAGE}.features"),
    ("worker.models.encoding", f"{standalone.PACKAGE}.encoding"),
    ("worker.decide.numpy_trm", f"{standalone.PACKAGE}.numpy_trm"),
    ("worker.decide.decision", f"{standalone.PACKAGE}.decision"),
)
# What the exported decide.py may not import: the check refuses these in its child.
REFUSED = ("worker", "core", "app", "trm_mcp", "torch")
# The check's child: refuse the project and torch (an editable install would otherwise find
# them even under -I), then run decide.py as a script.
GUARD = f"""
import runpy, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in {REFUSED!r}:
            raise ImportError('an exported controller imports ' + name)
        return None
sys.meta_path.insert(0, Refuse())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


class ExportError(ValueError):
    """An export that cannot be made: `field` names what to change (`trainer`, `out`, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Disagreement:
    """A row on which the export and the service's controller differ."""

    row: int
    service_action: str | None
    export_action: str | None
    score_diff: float


@dataclass(frozen=True)
class ExportReport:
    """What `export_controller` wrote and what its check found. `anchors` is the file checked
    (None when there was none: `checked` is 0 then)."""

    out_dir: Path
    trainer: str
    model_hash: str
    files: list[str]
    anchors: Path | None
    checked: int
    max_score_diff: float
    disagreements: list[Disagreement] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.disagreements


def find_trainer(path: Path) -> tuple[Path, str]:
    """(the trainer folder, its trainer) for a run folder or a trainer folder."""
    path = Path(path)
    folder = path / TRAINER if (path / TRAINER).is_dir() else path
    if (folder / TRM_MODEL).is_file():
        return folder, "trm"
    if (folder / GBDT_MODEL).is_file():
        return folder, "gbdt"
    if (folder / "adapter").is_dir():
        return folder, "qlora"
    raise ExportError(
        "path",
        f"{path}: no trained controller (a run folder whose trainer/ holds "
        f"{TRM_MODEL} or {GBDT_MODEL}, or such a trainer/ folder)",
    )


def _texts_read_as_words(trainer_dir: Path) -> None:
    """An export reads texts as words alone (numpy): a space that also reads them with a
    sentence encoder (`text_encoder` other than tokens) would lose those columns there."""
    try:
        reads = json.loads((trainer_dir / FEATURES).read_text()).get("text_encoder", "tokens")
    except (OSError, ValueError, AttributeError):
        return  # a missing or unreadable features.json is the export's own error, further on
    if reads != "tokens":
        raise ExportError(
            "trainer",
            f"this controller reads its texts with {reads!r} (a frozen language model under "
            "torch), which an export cannot carry: export one trained with text_encoder "
            "'tokens'",
        )


def export_controller(
    trainer_dir: Path, trainer: str, out_dir: Path, anchors_path: Path | None = None
) -> ExportReport:
    """Write the export of the controller in `trainer_dir` to `out_dir` (a new or empty folder,
    or an earlier export, which is replaced whole), then check it on the anchor rows."""
    # Absolute: the check runs decide.py from a temporary folder of its own.
    trainer_dir, out_dir = Path(trainer_dir).resolve(), Path(out_dir).resolve()
    if trainer == "qlora":
        raise ExportError(
            "trainer",
            "qlora export is not supported yet (an adapter decides only on its 4-bit "
            "base model, under torch); export a trm or gbdt controller",
        )
    if trainer not in MODEL_FILES:
        raise ExportError("trainer", f"{trainer!r} is not one of {', '.join(MODEL_FILES)}")
    _texts_read_as_words(trainer_dir)
    earlier = (out_dir / standalone.MANIFEST).is_file()
    if out_dir.exists() and any(out_dir.iterdir()) and not earlier:
        raise ExportError("out", f"{out_dir} is not empty and holds no earlier export")
    controller = load_controller(trainer_dir, trainer)
    anchors = anchors_path or default_anchors(trainer_dir)
    rows = read_rows(anchors) if anchors else []

    staging = out_dir.parent / f".{out_dir.name}.{uuid.uuid4().hex[:8]}"
    try:
        files = write_export(staging, trainer_dir, trainer, controller.model_hash)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    max_diff, disagreements = check_export(out_dir, controller, rows)
    return ExportReport(
        out_dir, trainer, controller.model_hash, files, anchors, len(rows), max_diff, disagreements
    )


def write_export(out: Path, trainer_dir: Path, trainer: str, model_hash: str) -> list[str]:
    """The export's files in `out`; the manifest last. Their paths, relative to `out`."""
    package = out / standalone.PACKAGE
    (package / "features").mkdir(parents=True)
    for name in MODEL_FILES[trainer]:
        shutil.copyfile(trainer_dir / name, out / name)
    ship(Path(standalone.__file__), out / DECIDE)
    (package / "__init__.py").write_text('"""An exported controller\'s own code."""\n')
    for module in (encoding, numpy_trm, decision):
        ship(Path(str(module.__file__)), package / Path(str(module.__file__)).name)
    for source in sorted(Path(str(worker.features.__file__)).parent.glob("*.py")):
        ship(source, package / "features" / source.name)
    space = json.loads((trainer_dir / FEATURES).read_text())
    model_format = (
        json.loads((trainer_dir / TRM_CONFIG).read_text()).get("format")
        if trainer == "trm"
        else "lightgbm-text"
    )
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    write_json_atomic(
        out / standalone.MANIFEST,
        {
            "format": standalone.FORMAT,
            "trainer": trainer,
            "model_hash": model_hash,
            "model_format": model_format,
            "features_format": space.get("format"),
            "features": FEATURES,
            "weights": MODEL_FILES[trainer][0],
            "config": TRM_CONFIG if trainer == "trm" else None,
            "package": standalone.PACKAGE,
            "requires": REQUIRES[trainer],
            "source": str(trainer_dir),
            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": [
                {"path": f, "sha256": sha256_file(out / f), "bytes": (out / f).stat().st_size}
                for f in files
            ],
        },
    )
    return [*files, standalone.MANIFEST]


def ship(source: Path, target: Path) -> None:
    """Copy a source file into the export, its imports of the project pointed at the export's
    package; one that still imports the project (or torch) is refused."""
    text = source.read_text(encoding="utf-8")
    for old, new in REWRITES:
        text = text.replace(f"from {old} import", f"from {new} import")
        text = text.replace(f"from {old}.", f"from {new}.").replace(
            f"import {old}", f"import {new}"
        )
    for line in text.splitlines():
        words = line.split()
        imports = words[:1] in (["from"], ["import"]) and len(words) > 1
        if imports and words[1].partition(".")[0] in REFUSED:
            raise ExportError("source", f"{source}: {line.strip()!r} cannot be shipped")
    target.write_text(text, encoding="utf-8")


def default_anchors(trainer_dir: Path) -> Path | None:
    """The run's anchor rows, or its val rows when the corpus holds no anchors; None if
    neither (a trainer folder outside a run)."""
    corpus = Path(trainer_dir).parent / CORPUS
    for name in (ANCHOR_ROWS, VAL_ROWS):
        path = corpus / name
        if path.is_file() and path.stat().st_size > 0:
            return path
    return None


def read_rows(path: Path) -> list[DecideRow]:
    """Rows with a state (text, or an object serialized as the corpus does) and tools."""
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            state, tools = row["state"], row["tools"]
        except (ValueError, KeyError, TypeError):
            raise ExportError(
                "anchors", f"{path} line {n}: not a row with state and tools"
            ) from None
        rows.append(DecideRow(state if isinstance(state, str) else json.dumps(state), tools))
    return rows


def check_export(
    out_dir: Path, controller: Controller, rows: list[DecideRow]
) -> tuple[float, list[Disagreement]]:
    """(the largest probability difference, the rows that disagree) between the exported
    decide.py, run apart from the project, and the service's controller."""
    if not rows:
        return 0.0, []
    # The reference is the policy's own forward (torch for a trm), not the numpy forward that a
    # small call of the controller runs: that is the very code the export ships.
    states, tools = [r.state for r in rows], [list(r.tools) for r in rows]
    scores = controller.policy.scores_batch(states, tools)
    margin = controller.abstain_margin
    service = [decision.decision(t, s, margin) for t, s in zip(tools, scores, strict=True)]
    exported = run_exported(out_dir, rows)
    if len(exported) != len(rows):
        raise ExportError("out", f"the export answered {len(exported)} of {len(rows)} rows")
    largest, disagreements = 0.0, []
    for i, (mine, theirs) in enumerate(zip(service, exported, strict=True)):
        diff = max(abs(a - b) for a, b in zip(mine.scores, theirs.scores, strict=True))
        largest = max(largest, diff)
        if mine.action != theirs.action or diff > SCORE_TOLERANCE:
            disagreements.append(Disagreement(i, mine.action, theirs.action, diff))
    return largest, disagreements


def run_exported(out_dir: Path, rows: list[DecideRow]) -> list[Decision]:
    """The exported decide.py's answers to `rows`, from a fresh `python -I` that can import
    neither the project nor torch (only the export folder on its PYTHONPATH); `-B` leaves no
    bytecode in the export."""
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        rows_file.write_text(
            "".join(json.dumps({"state": r.state, "tools": r.tools}) + "\n" for r in rows)
        )
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(out_dir)}
        command = [
            sys.executable,
            "-I",
            "-B",
            "-c",
            GUARD,
            str(out_dir / DECIDE),
            "--rows",
            str(rows_file),
        ]
        done = subprocess.run(
            command,
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0:
        raise ExportError("out", f"the exported {DECIDE} failed: {done.stderr.strip()[-2000:]}")
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [Decision(a["action"], a["scores"], a["margin"], a["abstain"]) for a in answers]
