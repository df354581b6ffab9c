"""Fixtures for the qlora tests: a small real corpus (route play logs through the corpus builder),
the built-in SmolLM2 converted once per session, and a tiny config-built Llama for fast checks.

Set TRM_TEST_MODEL_CACHE to a folder to keep the converted SmolLM2 between test sessions.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from filelock import FileLock

from core.schemas.corpus import CorpusSpec
from worker.corpus import build_corpus
from worker.envs import generate
from worker.models.base_model import BUILTIN, resolve_base_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TINY_LLAMA = "tiny-llama"


@pytest.fixture(scope="session")
def qlora_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`route` family, 3 worlds x 4 episodes, action_only chat rows: about 20 train, 10 val."""
    root = tmp_path_factory.mktemp("qlora-route")
    generate(root / "play", families=["route"], worlds=3, episodes=4, seed=0)
    source = {"type": "trm_play_root", "name": "route", "path": str(root / "play")}
    spec = CorpusSpec.model_validate({"sources": [source], "contract": "action_only"})
    build_corpus(spec, root / "corpus")
    return root / "corpus"


def converted_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The session's MODEL_CACHE (TRM_TEST_MODEL_CACHE keeps one) with the built-in SmolLM2
    converted once, shared by pytest-xdist's workers: the cache and the model's folder."""
    kept = os.environ.get("TRM_TEST_MODEL_CACHE")
    if kept:
        cache = Path(kept)
    else:
        base = tmp_path_factory.getbasetemp()
        cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "models"
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache) + ".lock"):
        return cache, resolve_base_model(BUILTIN, cache)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A MODEL_CACHE holding the converted SmolLM2 and a tiny random Llama with its tokenizer."""
    cache, smol = converted_cache(tmp_path_factory)
    with FileLock(str(cache) + ".lock"):
        if not (cache / TINY_LLAMA / "config.json").exists():
            write_tiny_llama(smol, cache / TINY_LLAMA)
    return cache


def write_tiny_llama(tokenizer_from: Path, out: Path) -> None:
    """A 2-layer Llama (hidden 64) with SmolLM2's tokenizer and chat template, random weights."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
