"""An exported controller decides without the service and without torch: the exported decide.py,
run in a fresh `python -I` that can import nothing of the project, gives the service's action on
every anchor row with probabilities within 1e-4; `trm export` says how many rows it checked and
fails on a disagreement."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.numpy import load_file, save_file

from app.cli import main as trm_main
from tests.decide.conftest import TinyRun
from tests.decide.test_controller import anchor_rows
from worker.decide import numpy_trm
from worker.decide.controller import load_controller
from worker.decide.export import (
    ExportError,
    check_export,
    export_controller,
    read_rows,
    run_exported,
)
from worker.models import trm

# The exported decide.py's process: the project and torch refused, the export's folder alone on
# the path (an editable install would otherwise let it import the project even under -I).
ISOLATED = """
import runpy, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in ('worker', 'core', 'app', 'trm_mcp', 'torch'):
            raise ImportError('the export imported ' + name)
sys.meta_path.insert(0, Refuse())
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name='__main__')
finally:
    print(sorted(m for m in sys.modules if m.partition('.')[0] in ('torch', 'worker', 'core')),
          file=sys.stderr)
"""


@pytest.mark.parametrize("which", ["trm_run", "gbdt_run"])
def test_an_export_decides_as_the_service_does_in_a_bare_python(which, request, tmp_path):
    run: TinyRun = request.getfixturevalue(which)
    out = tmp_path / "export"
    report = export_controller(run.trainer_dir, run.trainer, out)

    rows = anchor_rows(run)
    assert report.ok and report.checked == len(rows) > 10
    assert report.anchors == run.corpus / "anchor.jsonl"
    manifest = json.loads((out / "manifest.json").read_text())
    controller = load_controller(run.trainer_dir, run.trainer)
    assert manifest["trainer"] == run.trainer and manifest["model_hash"] == controller.model_hash
    assert "decide.py" in {f["path"] for f in manifest["files"]}
    assert not list(out.rglob("*.pkl")) and not list(out.rglob("*.pt"))

    # The folder moved elsewhere still decides: only it is on the path.
    moved = tmp_path / "elsewhere" / "controller"
    moved.parent.mkdir()
    out.rename(moved)
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text(
        "".join(json.dumps({"state": json.loads(r.state), "tools": r.tools}) + "\n" for r in rows)
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", ISOLATED, str(moved / "decide.py"), "--rows", str(rows_file)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(moved)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"  # no torch, nothing of the project
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    service = controller.decide(rows)
    assert [a["action"] for a in answers] == [d.action for d in service]
    for answer, decision in zip(answers, service, strict=True):
        assert answer["scores"] == pytest.approx(decision.scores, abs=1e-4)
        assert answer["margin"] == pytest.approx(decision.margin, abs=1e-4)


def test_trm_export_prints_the_rows_checked_and_fails_on_a_disagreement(
    trm_run: TinyRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export"
    assert trm_main(["export", str(trm_run.root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = len(anchor_rows(trm_run))
    assert f"checked {rows} rows" in printed and "same action on every row" in printed

    # A changed weight (the manifest updated to match, as a careless edit would) disagrees: the
    # scoring head negated ranks every row the other way round.
    weights = out / "model.safetensors"
    tensors = load_file(weights)
    tensors["score.weight"] = -tensors["score.weight"]
    save_file(tensors, weights)
    blob = weights.read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == "model.safetensors":
            entry["sha256"] = hashlib.sha256(blob).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest))
    controller = load_controller(trm_run.trainer_dir, "trm")
    _, disagreements = check_export(out, controller, read_rows(trm_run.corpus / "anchor.jsonl"))
    assert sum(d.service_action != d.export_action for d in disagreements) >= rows // 2


def test_an_export_refuses_files_changed_after_it_was_written(gbdt_run: TinyRun, tmp_path):
    out = tmp_path / "export"
    export_controller(gbdt_run.trainer_dir, "gbdt", out)
    (out / "model.txt").write_text((out / "model.txt").read_text() + "\n")
    rows = anchor_rows(gbdt_run)[:1]
    with pytest.raises(ExportError, match="model.txt: changed since export"):
        run_exported(out, rows)


def test_what_cannot_be_exported_is_refused_with_the_reason(
    gbdt_run: TinyRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ExportError, match="qlora export is not supported yet"):
        export_controller(tmp_path, "qlora", tmp_path / "out")
    # A space that reads texts with the sentence encoder needs torch and the model: refused,
    # where it would decide without those columns.
    embedded = tmp_path / "embedded"
    shutil.copytree(gbdt_run.trainer_dir, embedded)
    space = json.loads((embedded / "features.json").read_text())
    (embedded / "features.json").write_text(json.dumps({**space, "text_encoder": "smollm2"}))
    with pytest.raises(ExportError, match="export one trained with text_encoder 'tokens'"):
        export_controller(embedded, "gbdt", tmp_path / "out-embedded")
    assert not (tmp_path / "out-embedded").exists()
    assert trm_main(["export", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no trained controller" in capsys.readouterr().err
    # The numpy forward is a port of one version of the torch model: a new version needs a new
    # port (and this test says so).
    assert numpy_trm.FORMAT == trm.FORMAT
