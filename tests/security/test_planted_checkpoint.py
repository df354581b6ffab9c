"""A token holder plants a checkpoint (with a pickled trainer state that would run code when
unpickled) into a queued train run through the artifact upload; the worker that then trains the
run neither loads it nor resumes from it (issue: uploaded checkpoints were unpickled on workers).
Real API, real worker, real files."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from core.schemas.corpus import CorpusSpec
from core.settings import Settings
from tests.conftest import Service
from worker.corpus import build_corpus
from worker.models.feature_space import FeatureSpace
from worker.models.rows import read_rows
from worker.models.trm import build, save_model
from worker.train import checkpoints
from worker.train.trm import DEFAULTS, RESUMABLE_CHANGES

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


class Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (Path.touch, (self.marker,))


def plant(service: Service, run_id: str, path: str, body: bytes) -> None:
    """The upload route no longer takes it (tests/security/test_upload_lockdown.py); whatever
    else could write into the run directory, the trainer must still not trust it."""
    sha = hashlib.sha256(body).hexdigest()
    response = service.http.put(
        f"/runs/{run_id}/artifacts/{path}", content=body, headers={"X-Content-SHA256": sha}
    )
    assert response.status_code == 403, response.text
    target = service.settings.run_dir(run_id) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(body)


def test_a_planted_pickled_checkpoint_is_never_unpickled_or_resumed_from(
    service: Service, settings: Settings, route_corpus: Path, tmp_path: Path
) -> None:
    data = settings.data_dir / "route"
    data.mkdir(parents=True)
    for name in ("train.jsonl", "val.jsonl"):
        (data / name).write_text((route_corpus / name).read_text())
    spec = {
        "kind": "train",
        "trainer": "trm",
        "trm": {"hidden": 16, "max_steps": 4, "checkpoint_every": 2},
        "corpus": {"sources": [{"type": "jsonl", "name": "r", "path": "route"}]},
    }
    run = service.submit(spec)  # no worker yet: it stays queued while we plant
    # The attacker rebuilds the corpus the run will build (it is deterministic) to forge the
    # checkpoint's fingerprint, so the trainer takes the planted folder for its own.
    corpus = tmp_path / "corpus"
    build_corpus(CorpusSpec.model_validate(service.run(run["id"])["spec"]["corpus"]), corpus)
    config = {**DEFAULTS, **spec["trm"], "seed": 0}  # type: ignore[dict-item]
    fingerprint = checkpoints.fingerprint(
        config, RESUMABLE_CHANGES, [corpus / "train.jsonl", corpus / "val.jsonl"]
    )
    marker = tmp_path / "pwned"
    folder = "trainer/checkpoints/step-000002"
    meta = {"step": 2, "fingerprint": fingerprint, "best": {"accuracy": 1.0, "epoch": 0}}
    payload = io.BytesIO()
    torch.save(Payload(str(marker)), payload)  # what torch.load(weights_only=False) runs
    plant(service, run["id"], f"{folder}/trainer_state.pt", payload.getvalue())
    plant(service, run["id"], f"{folder}/checkpoint.json", json.dumps(meta).encode())
    plant(service, run["id"], f"{folder}/trainer_state.json", b'{"optimizer": {}}')
    # A complete, loadable model beside it, so nothing else stops the trainer first.
    space = FeatureSpace.fit(read_rows(corpus / "train.jsonl"))
    for file in save_model(tmp_path / "forged", build(space, config), space, {"config": config}):
        plant(service, run["id"], f"{folder}/{file.name}", file.read_bytes())
    service.start_worker()
    done = service.wait_status(run["id"], "completed", "failed", timeout=180)
    assert done["status"] == "completed", done.get("failure_reason")
    assert not marker.exists()
    trainer = next(s for s in done["stages"] if s["name"] == "launch_trainer")["manifest"]
    assert "resumed_from_step" not in trainer["counters"]
    assert any("step-000002: not a checkpoint this run saved" in n for n in trainer["notes"])
    # The trainer's own checkpoint later took the folder's name; the planted pickle is gone.
    assert not (settings.run_dir(run["id"]) / folder / "trainer_state.pt").exists()
