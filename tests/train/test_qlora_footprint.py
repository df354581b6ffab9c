"""The memory a qlora run is admitted with (worker/models/footprint.py) counts what the speed
knobs keep: the layers kept instead of recomputed and the once-dequantized base weights."""

from __future__ import annotations

import json
from pathlib import Path

from core.schemas.train import SPEED_MEMORY_MB
from worker.models.footprint import qlora_footprint

SMOL_SHAPE = {
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "num_attention_heads": 9,
}


def estimate(tmp_path: Path, **knobs: object) -> tuple[int, dict[str, int]]:
    (tmp_path / "smol").mkdir(exist_ok=True)
    (tmp_path / "smol" / "config.json").write_text(json.dumps(SMOL_SHAPE))
    config = {"base_model": "smol", "micro_batch": 8, "max_seq_len": 512, "max_steps": 3, **knobs}
    footprint = qlora_footprint(config, tmp_path / "messages.jsonl", tmp_path)
    assert footprint.bytes is not None
    return footprint.bytes, footprint.parts


def test_the_speed_knobs_memory_is_in_the_estimate_and_off_takes_it_out(tmp_path: Path) -> None:
    # The defaults (`auto`): at most SPEED_MEMORY_MB of kept layers, the dequantized copy.
    fast, parts = estimate(tmp_path)
    lean, lean_parts = estimate(tmp_path, activation_budget_mb=0, dequant_cache="off")
    kept = parts["activations kept (qlora.activation_budget_mb=auto)"]
    copy = parts["dequantized base weights (qlora.dequant_cache=auto)"]
    assert kept == SPEED_MEMORY_MB * 1024**2  # 8 x 512 tokens of 30 layers need more than it
    assert 400 * 1024**2 < copy < 500 * 1024**2  # SmolLM2's linear weights, float32
    assert fast - lean == kept + copy
    assert not any("kept" in k or "dequantized" in k for k in lean_parts)


def test_the_first_run_on_the_built_in_model_is_sized_before_it_is_converted(
    tmp_path: Path,
) -> None:
    """An empty MODEL_CACHE (a fresh worker): the built-in model is converted on first use, and
    its first run is held to the memory check all the same, with the same figure as once it is
    there."""
    config = {
        "base_model": "smollm2-135m-instruct",
        "micro_batch": 8,
        "max_seq_len": 512,
        "max_steps": 3,
    }
    before = qlora_footprint(config, tmp_path / "messages.jsonl", tmp_path / "empty-cache")
    assert before.bytes is not None and before.bytes > 100 * 1024**2
    cache = tmp_path / "cache"
    (cache / "smollm2-135m-instruct").mkdir(parents=True)
    (cache / "smollm2-135m-instruct" / "config.json").write_text(json.dumps(SMOL_SHAPE))
    assert qlora_footprint(config, tmp_path / "messages.jsonl", cache).bytes == before.bytes
