"""A qlora version decides through its language model on the CPU (no GPU needed: bitsandbytes'
CPU path), and its controller says in every answer that it is slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.rundir import ADAPTER, RUN_META
from core.settings import get_settings
from tests.train.qlora_fixtures import TINY_LLAMA, model_cache  # noqa: F401
from worker.decide.controller import DecideRow, load_controller
from worker.models.base_model import resolve_base_model

ROWS = [
    DecideRow('{"request": {"intent": "summarize", "tokens": 900}}', ["TRM_ONLY", "LLM_DIRECT"]),
    DecideRow('{"request": {"intent": "extract", "tokens": 40}}', ["LLM_DIRECT", "TRM_ONLY"]),
]


def test_a_qlora_version_decides_on_the_cpu_and_says_it_is_slow(
    model_cache: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transformers import AutoTokenizer

    from worker.models import lm

    # A trainer folder as a qlora train run leaves it: a LoRA adapter (fresh, not trained:
    # the mechanics are the point) on the tiny Llama, and the run's answer contract.
    base_dir = resolve_base_model(TINY_LLAMA, model_cache)
    device, dtype = lm.device_and_dtype()
    lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    model = lm.build_lora_model(base_dir, lora, device, dtype, gradient_checkpointing=False)
    trainer_dir = tmp_path / "trainer"
    lm.save_adapter(
        trainer_dir / ADAPTER, model, AutoTokenizer.from_pretrained(base_dir), TINY_LLAMA
    )
    (trainer_dir / RUN_META).write_text(json.dumps({"contract": "action_only"}))
    monkeypatch.setenv("TRM_MODEL_CACHE", str(model_cache))
    get_settings.cache_clear()
    try:
        controller = load_controller(trainer_dir, "qlora", abstain_margin=0.1)
    finally:
        get_settings.cache_clear()

    decisions = controller.decide(ROWS)
    assert [d.action in row.tools for d, row in zip(decisions, ROWS, strict=True)] == [True] * 2
    for d in decisions:
        assert len(d.scores) == 2 and abs(sum(d.scores) - 1.0) < 1e-9
    assert controller.note is not None and controller.note.startswith("slow")
    assert ("the CPU" if device.type == "cpu" else "a GPU") in controller.note
