"""The primehub benches on a local JSONL export of a verifiers environment's results, through the
real API and worker: the scores come from that file, and a missing file is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.benches.menu import load_entry
from core.settings import Settings
from tests.conftest import Service
from tests.evaluate.results_export import EXPECTED, write_export

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
BENCHES = ("primehub-envs", "primehub-baseline")


@SQLITE_ONLY
def test_primehub_benches_score_a_results_export_and_name_a_missing_one(
    service: Service, settings: Settings
) -> None:
    runs = {}
    for name in BENCHES:
        anchors = load_entry(name)["anchor_worlds"]
        write_export(Path(settings.data_dir) / "exports" / f"{name}.jsonl", anchors)
        body = {"results_jsonl": f"exports/{name}.jsonl"}
        response = service.http.post(f"/benches/{name}", json=body)
        assert response.status_code == 202, response.text
        runs[name] = response.json()["id"]
    missing = service.http.post(
        "/benches/primehub-envs", json={"results_jsonl": "exports/gone.jsonl"}
    )  # refused at submit, not a run that fails after its turn in the queue
    assert missing.status_code == 422, missing.text
    assert missing.json()["error"]["details"][0]["field"] == "results_jsonl"
    assert (
        str(Path(settings.data_dir).resolve() / "exports" / "gone.jsonl")
        in missing.json()["error"]["message"]
    )
    service.start_worker()

    for name, run_id in runs.items():
        done = service.wait_status(run_id, "completed", "failed", timeout=300)
        assert done["status"] == "completed", done
        card = service.http.get(f"/runs/{run_id}/artifacts/scorecard.json").json()
        for side in ("router", "baseline"):  # both `none`: the same untrained controller
            scores = card[side]
            assert scores["anchor_score"] == EXPECTED["anchor_score"]
            assert scores["train_score"] == EXPECTED["train_score"]
            assert scores["generalization_gap"] == EXPECTED["generalization_gap"]
            assert scores["n"]["anchor"] == EXPECTED["n_anchor"]
            for rate in ("failure_rate", "recovery_rate"):
                assert scores[rate] == EXPECTED[rate]
                assert scores["scores"][rate]["source"] == "tagged_rows"  # no rollouts of an export
            per_world = {
                w.split("-")[0]: v["anchor_score"]["value"] for w, v in scores["per_world"].items()
            }
            assert per_world == EXPECTED["per_world"]
            assert set(scores["per_world"]) <= set(load_entry(name)["anchor_worlds"])
        assert card["delta"]["anchor_score"]["value"] == 0.0
        samples = service.http.get(f"/runs/{run_id}/artifacts/samples.jsonl").text.splitlines()
        assert len(samples) == 2 * EXPECTED["n_anchor"]  # one per anchor row and side
        listed = service.http.get(f"/runs/{run_id}/artifacts").json()["artifacts"]
        manifests = [
            a["path"]
            for a in listed
            if a["path"].endswith("/manifest.json") and "/corpus-" in a["path"]
        ]
        assert manifests  # the anchor corpus built from the export, with its accounting
        corpus = service.http.get(f"/runs/{run_id}/artifacts/{manifests[0]}").json()
        assert corpus["invalid"] == {"action_not_in_tools": EXPECTED["invalid_rows"]}
