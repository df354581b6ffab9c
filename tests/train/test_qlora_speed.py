"""The qlora trainer's speed paths compute what the plain 4-bit, fully checkpointed path
computes, and the run says which paths ran. A tiny config-built Llama: seconds, not minutes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

# ruff: noqa: F811 (pytest fixtures imported above are named as test arguments)
from core.schemas.train import SPEED_MEMORY_MB
from tests.train.qlora_fixtures import TINY_LLAMA, model_cache, qlora_corpus  # noqa: F401
from worker.models import lm
from worker.train import chat_data, qlora, qlora_parts
from worker.train.callbacks import TrainerCallbacks

pytestmark = pytest.mark.timeout(300)
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj"]}


def loss_and_grads(model, batch) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = qlora_parts.answer_loss(model, batch, torch.device("cpu"))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.item(), grads


def first_batch(model_cache: Path, corpus: Path) -> dict:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_cache / TINY_LLAMA)
    rows = chat_data.read_messages(corpus / "messages.jsonl")[:3]
    examples = chat_data.encode(tokenizer, rows, 256).examples
    return chat_data.collate(examples, [[0], [1, 2]], tokenizer.pad_token_id or 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dequantized_copy_and_fewer_checkpoints_train_the_same_gradients(
    model_cache, qlora_corpus, dtype
):
    """The frozen weights dequantized once, and layers left uncheckpointed, give the loss and the
    LoRA gradients of the 4-bit path that dequantizes on every call and recomputes every layer;
    the adapter trained on the fast path is the one the slow path would train."""
    torch.manual_seed(0)
    model = lm.build_lora_model(model_cache / TINY_LLAMA, LORA, torch.device("cpu"), dtype)
    model.train()
    with torch.no_grad():  # as after some training: fresh LoRA B is zero, A would get no gradient
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    batch = first_batch(model_cache, qlora_corpus)
    loss, grads = loss_and_grads(model, batch)
    assert grads and all(g.abs().sum() > 0 for g in grads.values())

    held = lm.dequantize_frozen(model, dtype)
    assert held == lm.dense_bytes(model, dtype) > 0
    assert lm.checkpoint_within(model, 10**12, batch["input_ids"].numel(), dtype) == 0
    fast_loss, fast_grads = loss_and_grads(model, batch)

    assert fast_loss == pytest.approx(loss, rel=1e-5)
    assert fast_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(fast_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_activation_budget_leaves_the_layers_that_fit_uncheckpointed(model_cache):
    model = lm.build_lora_model(model_cache / TINY_LLAMA, LORA, torch.device("cpu"), torch.float32)
    layers = model.get_base_model().get_decoder().layers
    per_layer = lm.activation_bytes_per_token(model, torch.float32) * 1024
    assert lm.checkpoint_within(model, 0, 1024, torch.float32) == len(layers)
    assert all(layer.gradient_checkpointing for layer in layers)
    assert lm.checkpoint_within(model, per_layer, 1024, torch.float32) == len(layers) - 1
    assert [layer.gradient_checkpointing for layer in layers] == [False, True]


@pytest.mark.parametrize(
    ("speed", "expected"),
    [
        (
            {"activation_budget_mb": 0, "dequant_cache": "off"},
            {"gradient_checkpointing": "2 of 2 layers", "dequant_cache": "off"},
        ),
        (
            {"activation_budget_mb": 4096, "dequant_cache": "on"},
            {"gradient_checkpointing": "0 of 2 layers", "dequant_cache": "on"},
        ),
        # `auto` in float32: no copy (the matmuls dominate), all the speed memory to activations
        (
            {},
            {
                "gradient_checkpointing": "0 of 2 layers",
                "dequant_cache": "off",
                "activation_budget_mb": SPEED_MEMORY_MB,
            },
        ),
        # `auto` in bf16 on a CPU: the copy, and what it leaves of the speed memory
        (
            {"compute_dtype": "bfloat16"},
            {
                "gradient_checkpointing": "0 of 2 layers",
                "dequant_cache": "on",
                "activation_budget_mb": SPEED_MEMORY_MB - 1,
                "compute_dtype": "bfloat16",
            },
        ),
    ],
)
def test_run_meta_says_which_speed_paths_ran(model_cache, qlora_corpus, tmp_path, speed, expected):
    config = {
        "base_model": TINY_LLAMA,
        "micro_batch": 2,
        "grad_accum": 1,
        "max_seq_len": 128,
        "max_steps": 2,
        "compute_dtype": "float32",
        **speed,
    }
    result = qlora.train(
        config,
        qlora_corpus,
        tmp_path,
        TrainerCallbacks(),
        seed=0,
        contract="action_only",
        probe=False,
        model_cache=model_cache,
    )
    resolved = json.loads((tmp_path / "run_meta.json").read_text())["resolved"]
    assert resolved["compute_dtype"] == expected.get("compute_dtype", "float32")
    if "activation_budget_mb" in expected:  # the tiny model's copy is under a MiB
        assert resolved["activation_budget_mb"] == expected["activation_budget_mb"]
    assert resolved["gradient_checkpointing"] == expected["gradient_checkpointing"]
    assert resolved["dequant_cache"].startswith(expected["dequant_cache"])
    assert resolved["attention"] == "sdpa"
    assert resolved["threads"] == torch.get_num_threads()
    assert result["kernels"]["gradient_checkpointing"] == expected["gradient_checkpointing"]
    assert result["steps"] == 2 and result["final_loss"] > 0


def test_unknown_compute_dtype_is_refused():
    from pydantic import ValidationError

    from core.schemas.train import QloraTrainerConfig

    with pytest.raises(ValidationError):
        QloraTrainerConfig.model_validate({"compute_dtype": "float16"})
    with pytest.raises(ValidationError):
        QloraTrainerConfig.model_validate({"activation_budget_mb": -1})


def test_bench_names_the_cpu_and_its_fast_path_flags():
    from bench.machine import CPU_FLAGS, cpu_kind

    kind = cpu_kind()
    for flag in CPU_FLAGS:
        assert f"{flag}+" in kind or f"{flag}-" in kind
    flags = Path("/proc/cpuinfo").read_text()
    assert ("avx512_bf16+" in kind) == (" avx512_bf16" in flags)
