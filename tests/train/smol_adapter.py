"""One SmolLM2 `qlora` adapter trained once per test session, for the tests of the trainer
(tests/train/test_qlora.py: what training changes, the loss, the saved adapter) and of scoring
with a trained adapter (tests/evaluate/test_lm_scoring.py).

Each trained its own (about 50 s and 30 s of an idle 2-core CPU, minutes on a busy one). Now the
first test process that asks trains it under a file lock in the session's shared temporary
folder (pytest-xdist's processes share its parent); the others wait for it and read it. What only
the training process can see of its model (its 4-bit layers, its weights before and after, its
logits) is written down there, in `record.json` and `logits.pt`.

The training is as cheap as still teaches the model to answer with a candidate id: `route` play
logs as short states (two of the request's fields), route tags shared across worlds, 3 steps of 4
rows under 160 tokens (the val loss falls to about a tenth in them), a val loss before and after
on 4 of the val rows, a world (ANCHOR) kept unseen.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from filelock import FileLock

from core.play_files import TRACE_FILE, reasoning_trace_source
from core.schemas.corpus import CorpusSpec
from tests.train.qlora_fixtures import model_cache  # noqa: F401
from worker.corpus import build_corpus
from worker.envs import generate

# ruff: noqa: F811 (the imported model_cache fixture is named as an argument)

ANCHOR = "route-s0-w3"
TRAINING = {
    "max_steps": 3,
    "micro_batch": 4,
    "grad_accum": 1,
    "lr": 2e-3,
    "max_seq_len": 160,
    "eval_every": 3,
    "checkpoint_every": 3,
    "eval_rows": 4,
}
STATE_FIELDS = ["observation.request.prompt_text", "observation.budget_left"]
PROMPT_TOKENS = 96  # the last tokens of the first train row's prompt, for the logits kept


@dataclass(frozen=True)
class SmolAdapter:
    """The trained adapter: `corpus` (messages*.jsonl, anchor.jsonl), `out` (the trainer's folder:
    adapter/, run_meta.json, checkpoints/), the trainer's `result`, and `record`: the per-step and
    eval callbacks, the model's 4-bit layers and LoRA targets, digests of its weights before and
    after training, and the input ids whose logits the trained model gave (`logits.pt`)."""

    corpus: Path
    out: Path
    model_cache: Path
    result: dict[str, Any]
    record: dict[str, Any]

    @property
    def adapter(self) -> Path:
        return self.out / "adapter"

    @property
    def logits(self) -> Path:
        return self.out.parent / "logits.pt"


@pytest.fixture(scope="session")
def smol_adapter(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> SmolAdapter:
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "smol-adapter"
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        if not (root / "record.json").exists():
            train_and_record(root, model_cache)
        saved = json.loads((root / "record.json").read_text())
    return SmolAdapter(
        root / "corpus", root / "trainer", model_cache, saved["result"], saved["record"]
    )


def route_corpus(root: Path) -> Path:
    """`route` play logs (4 worlds x 8 episodes) as short-state action_only chat rows, split by
    world with ANCHOR unseen: 47 train rows, 19 val, 29 anchor, each 118-129 tokens."""
    generate(
        root / "play", families=["route"], worlds=4, episodes=8, seed=0, formats=["reasoning_trace"]
    )
    source = reasoning_trace_source(
        "route", str(root / "play" / TRACE_FILE), STATE_FIELDS, tags=True
    )
    # Every world names the routes its own way; the shared tags make the unseen world readable.
    knobs = {"namespace_normalization": "auto"}
    spec = {
        "sources": [source],
        "contract": "action_only",
        "knobs": knobs,
        "split": {"by": "env", "anchor": [ANCHOR]},
    }
    build_corpus(CorpusSpec.model_validate(spec), root / "corpus")
    return root / "corpus"


def digest(tensor: Any) -> str:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


def is_lora(name: str) -> bool:
    return "lora_" in name


def base_digests(model: Any) -> dict[str, str]:
    """Every non-LoRA weight, the packed 4-bit bytes and their quantization scales included."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    state = {n: digest(t) for n, t in tensors if not is_lora(n)}
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        quant = getattr(weight, "quant_state", None) or getattr(module, "quant_state", None)
        if quant is not None:
            state[name + ".absmax"] = digest(quant.absmax)
    return state


def train_and_record(root: Path, cache: Path) -> None:
    import bitsandbytes as bnb
    from transformers import AutoTokenizer

    from worker.models import lm
    from worker.train import chat_data, qlora
    from worker.train.callbacks import TrainerCallbacks

    corpus = route_corpus(root)
    seen: dict[str, Any] = {}
    build = lm.build_lora_model

    def recording_build(*args: Any) -> Any:
        seen["model"] = model = build(*args)
        seen["lora_before"] = {n: digest(p) for n, p in model.named_parameters() if is_lora(n)}
        seen["base_before"] = base_digests(model)
        return model

    lm.build_lora_model = recording_build
    try:
        callbacks = TrainerCallbacks()
        result = qlora.train(
            TRAINING,
            corpus,
            root / "trainer",
            callbacks,
            seed=0,
            contract="action_only",
            probe=False,
            model_cache=cache,
        )
    finally:
        lm.build_lora_model = build
    model = seen.pop("model").eval()
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    params = dict(model.named_parameters())
    record = {
        **seen,
        "steps": callbacks.steps,
        "evals": callbacks.evals,
        "linear4bit": [
            {
                "quant_type": m.weight.quant_state.quant_type,
                "nested": bool(m.weight.quant_state.nested),
                "dtype": str(m.weight.dtype),
            }
            for m in layers
        ],
        "lora_targets": sorted(
            {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if hasattr(m, "lora_A")}
        ),
        "base_after": base_digests(model),
        "lora_after": {n: digest(p) for n, p in params.items() if is_lora(n)},
        "requires_grad": {n: p.requires_grad for n, p in params.items()},
    }
    tokenizer = AutoTokenizer.from_pretrained(root / "trainer" / "adapter")
    row = chat_data.read_messages(corpus / "messages.jsonl")[0]
    text = tokenizer.apply_chat_template(
        row["messages"][:-1], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    ids = ids[:, -PROMPT_TOKENS:]
    with torch.no_grad():
        torch.save({"input_ids": ids, "logits": model(input_ids=ids).logits}, root / "logits.pt")
    saved = {"result": result, "record": record}
    (root / "record.json").write_text(json.dumps(saved, default=str))
