"""Every path a spec names stays under its root, symlinks resolved: DATA_DIR for data and the
original skill's spec files, MODEL_CACHE for base models. A refusal reads the same for an outside
path that exists and one that does not, and nothing of an outside file comes back. Real API, real
worker, real files."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from core.settings import Settings
from tests.conftest import Service

pytestmark = pytest.mark.parametrize("working_service", ["sqlite"], indirect=True)


@pytest.fixture
def service(working_service: Service) -> Service:
    """Each test here writes files of its own names and looks only at its own answers and
    runs: one API and one worker for all (`working_service`)."""
    return working_service


@pytest.fixture
def settings(working_service: Service) -> Settings:
    return working_service.settings


SECRET = "s3cr3t-value-42"


def refusal(response: httpx.Response, field: str, value: str) -> str:
    """The 422's message for `field`, with the path itself blanked (it is the caller's own)."""
    assert response.status_code == 422, (response.status_code, response.text[:400])
    error = response.json()["error"]
    assert error["details"][0]["field"] == field, error
    assert SECRET not in response.text
    return str(error["message"]).replace(value, "<path>")


def test_a_skill_spec_base_outside_the_data_dir_is_refused_unread_and_tells_no_existence(
    service: Service, settings: Settings
) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    outside = settings.data_dir.parent / "elsewhere"
    outside.mkdir()
    # A base train spec someone else keeps outside DATA_DIR: its keys and values are theirs.
    (outside / "base.json").write_text(json.dumps({"lr": 0.1, SECRET: SECRET}))
    (settings.data_dir / "link.json").symlink_to(outside / "base.json")
    messages = {}
    for value in (
        str(outside / "base.json"),  # exists, absolute
        str(outside / "missing.json"),  # does not exist, absolute
        "../elsewhere/base.json",  # exists, relative
        "../elsewhere/missing.json",  # does not exist, relative
        "link.json",  # a symlink under DATA_DIR to the outside file
    ):
        body = {"max_generalization_gap": 0.3, "base": value}
        response = service.http.post("/runs", params={"format": "skill"}, json=body)
        messages[value] = refusal(response, "base", value)
    assert len(set(messages.values())) == 1, messages
    assert "exist" not in next(iter(messages.values()))


def test_a_qlora_base_model_outside_the_model_cache_is_refused_alike_whether_it_exists(
    service: Service, settings: Settings
) -> None:
    settings.model_cache.mkdir(parents=True, exist_ok=True)
    (settings.data_dir / "rows").mkdir(parents=True, exist_ok=True)
    (settings.data_dir / "rows" / "r.jsonl").write_text(
        json.dumps({"state": {"x": 1}, "tools": ["a", "b"], "action": "a"}) + "\n"
    )
    real = settings.model_cache.parent / "private-model"
    real.mkdir()
    (real / "config.json").write_text("{}")
    (settings.model_cache / "linked").symlink_to(real, target_is_directory=True)
    messages = {}
    for value in (
        str(real),  # exists, absolute
        str(real.parent / "no-such-model"),  # does not exist, absolute
        "../private-model",  # exists, relative to MODEL_CACHE
        "../no-such-model",  # does not exist
        "linked",  # a symlink in MODEL_CACHE to a folder outside it
    ):
        spec = {
            "kind": "train",
            "trainer": "qlora",
            "dry_run": True,
            "qlora": {"base_model": value},
            "corpus": {"sources": [{"type": "jsonl", "name": "r", "path": "rows"}]},
        }
        response = service.http.post("/runs", json=spec)
        messages[value] = refusal(response, "qlora.base_model", value)
    assert len(set(messages.values())) == 1, messages
    # A name in the cache (present or not) is still accepted: the worker looks it up there.
    ok = {**spec, "qlora": {"base_model": "smollm2-135m-instruct"}}
    assert service.http.post("/runs", json=ok).status_code == 202


def test_a_symlink_in_a_folder_source_pointing_outside_yields_no_rows_and_is_reported(
    service: Service, settings: Settings, route_corpus: Path
) -> None:
    folder = settings.data_dir / "route"
    folder.mkdir(parents=True)
    for name in ("train.jsonl", "val.jsonl"):
        (folder / name).write_text((route_corpus / name).read_text())
    secret = settings.data_dir.parent / "private.jsonl"
    rows = [
        {
            "state": {"note": f"{SECRET} {i}"},
            "tools": ["keep", "leak"],
            "action": "leak",
            "meta": {"env": f"private-{i}"},
        }
        for i in range(40)
    ]
    secret.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "leak.jsonl").symlink_to(secret)
    spec = {
        "kind": "train",
        "trainer": "trm",
        "trm": {"hidden": 16, "max_steps": 2},
        "corpus": {"sources": [{"type": "jsonl", "name": "r", "path": "route"}]},
    }
    run = service.submit(spec)
    done = service.wait_status(run["id"], "completed", "failed", timeout=180)
    assert done["status"] == "completed", done.get("failure_reason")
    for name in ("train.jsonl", "val.jsonl", "anchor.jsonl", "critic.jsonl"):
        response = service.http.get(f"/runs/{run['id']}/artifacts/corpus/{name}")
        assert SECRET not in response.text, name
    manifest = service.http.get(f"/runs/{run['id']}/artifacts/corpus/manifest.json").json()
    assert manifest["sources"][0]["links_outside"] == ["leak.jsonl"]
    assert str(secret) not in json.dumps(manifest)  # named by its place, its target never told
    corpus = next(s for s in done["stages"] if s["name"] == "prepare_corpus")["manifest"]
    assert corpus["counters"]["links_outside_skipped"] == 1
    assert any("leak.jsonl" in note and "link" in note for note in corpus["notes"])
