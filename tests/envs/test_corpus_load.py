"""Play logs from worker/envs load through the real corpus builder: nothing invalid, every row
accounted for, and the noisy share (invalid and suboptimal picks) routed to critic.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.schemas.corpus import CorpusSpec
from worker.corpus import build_corpus
from worker.envs import generate

FAMILIES = ["route", "grid", "rebalance", "schedule", "verify"]
FORMATS = ["trm_play_root", "router_jsonl", "reasoning_trace"]
NEGATIVE_KINDS = ("invalid", "suboptimal")


def corpus_of(out: Path, sources: list[dict], tmp: Path) -> tuple[dict, list[dict]]:
    resolved = [dict(s, path=str((out / s["path"]).resolve())) for s in sources]
    spec = CorpusSpec.model_validate({"sources": resolved, "dedupe": False})
    result = build_corpus(spec, tmp / "corpus")
    critic = [
        json.loads(line) for line in (tmp / "corpus" / "critic.jsonl").read_text().splitlines()
    ]
    return result.manifest, critic


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_generated_logs_build_with_no_invalid_rows(tmp_path: Path, noise: float) -> None:
    out = tmp_path / "logs"
    made = generate(
        out, families=FAMILIES, worlds=3, episodes=8, seed=5, noise=noise, formats=FORMATS
    )
    manifest, critic = corpus_of(out, made.manifest["sources"], tmp_path)
    play_rows = sum(w["rows"] for w in made.manifest["per_world"])
    by_source = {s["name"]: s for s in manifest["sources"]}
    assert all(s["rows_invalid"] == 0 for s in by_source.values()), by_source
    assert all(s["rows_read"] == s["rows_kept"] for s in by_source.values())
    play = next(s for s in manifest["sources"] if s["type"] == "trm_play_root")
    assert play["rows_read"] == play_rows
    noisy = sum(w["kinds"].get(k, 0) for w in made.manifest["per_world"] for k in NEGATIVE_KINDS)
    play_negatives = [
        r
        for r in critic
        if r["meta"].get("source_type") == "trm_play_root"
        and r["meta"].get("critic_reason") == "negative"
    ]
    assert len(play_negatives) == noisy
    if noise == 0.0:
        assert noisy == 0
    else:
        assert noisy > 0
        assert {r["meta"].get("kind") for r in play_negatives} <= set(NEGATIVE_KINDS)
