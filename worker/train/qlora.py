"""The `qlora` trainer (SPEC §6): a LoRA adapter on a 4-bit NF4 causal LM, config in, adapter out.

Read it top to bottom: the model (4-bit base, LoRA on top, the loss), then `train`, the loop,
then the loop's small parts. The data (chat rows -> token ids with labels on the assistant's
answer only, packed into sequences; what happens to rows over `max_seq_len`) is in
`chat_data.py`; checkpoints (atomic, newest wins, shared with `trm`) in `checkpoints.py`. The
service plugs in through `TrainerCallbacks`: `on_step` after every optimizer step,
`should_stop()` at every step boundary (cancel, shutdown, budget: save a checkpoint, return),
`on_eval`, `on_checkpoint`.

Choices that matter for speed and memory, each for a reason:
- The loss is computed on the assistant tokens only, so the vocabulary projection (`lm_head`) runs
  on those positions only instead of on every token; a controller's answer is a few tokens.
- Rows are packed into sequences of `max_seq_len` (several rows per sequence, each attending only
  to itself through reset position ids) or, with `packing: false`, grouped by length; either way
  almost no compute goes to padding.
- Gradient checkpointing is on: the activations of a 30-layer model at 8 x 256 tokens would
  otherwise dominate memory, for about a third more compute.
- Compute in bf16 where the hardware has it (CUDA, and CPUs with AVX512-BF16), with the LoRA
  weights, norms, embeddings and the loss in float32.
- Tensors of 2 MB and more are allocated in transparent huge pages (`memory.py`): freed
  activations go back for reuse without the page-fault cost of returning them to the system.
- A resumed run is the uninterrupted one: the checkpoint holds the adapter, the optimizer and
  scheduler state and the RNG, and the data order is a function of (seed, epoch) only.
"""

from __future__ import annotations

import json
import math
import platform
import resource
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from core.rundir import sha256_file
from core.schemas.train import QloraTrainerConfig
from worker.context import StageFailure
from worker.train import checkpoints
from worker.train.base_model import resolve_base_model
from worker.train.callbacks import TrainerCallbacks
from worker.train.chat_data import IGNORE, collate, encode, plan_epoch, read_messages
from worker.train.memory import Rss, lean_allocator, peak_vram, reset_peak_vram

# The spec's defaults, plus `max_seconds`, which the stage may pass from the run's budget.
DEFAULTS: dict[str, Any] = {**QloraTrainerConfig().model_dump(), "max_seconds": None}
# Keys that may change between attempts without invalidating a checkpoint (the OOM retry).
RESUMABLE_CHANGES = ("micro_batch", "grad_accum", "eval_every", "checkpoint_every", "max_seconds")
EVAL_ROWS = 256  # a fixed sample of val rows; eval is a signal, not the scorecard
WARMUP_FRACTION = 0.03
ADAPTER, RUN_META, ADAPTER_FILE = "adapter", "run_meta.json", "adapter_model.safetensors"


# ---- model -------------------------------------------------------------------------------------
def device_and_dtype() -> tuple[torch.device, torch.dtype]:
    """CUDA computes in bf16 (fp16 where bf16 is missing); a CPU in bf16 where it has bf16 dot
    products in hardware (AVX512-BF16: 1.8x the tokens/s of float32 on this machine's CPU), else
    in float32 (bf16 in software is slower than float32)."""
    if torch.cuda.is_available():
        bf16 = torch.cuda.is_bf16_supported()
        return torch.device("cuda"), torch.bfloat16 if bf16 else torch.float16
    bf16 = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
    return torch.device("cpu"), torch.bfloat16 if bf16 else torch.float32


def load_4bit(base_dir: Path, device: torch.device, dtype: torch.dtype) -> Any:
    """The base model with every linear layer but the output head in 4-bit NF4, double quant;
    the rest (embeddings, norms, output head) in float32, as `prepare_model_for_kbit_training`
    leaves them for training, so that a reloaded adapter computes what the trained model did."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=dtype,
    )
    model = AutoModelForCausalLM.from_pretrained(
        base_dir, quantization_config=quant, dtype=dtype, device_map={"": device}
    )
    for module in model.modules():
        # On CPUs with AVX512-BF16, bitsandbytes repacks the 4-bit weights for a bf16 kernel on
        # the first forward in eval mode, and keeps them so. That kernel has no backward (training
        # after an eval would silently lose the gradient through the base weights) and rounds
        # differently (a reloaded adapter would not reproduce the trained logits). Never repack.
        if hasattr(module, "support_avx512bf16_for_cpu"):
            setattr(module, "support_avx512bf16_for_cpu", False)  # noqa: B010
    for param in model.parameters():
        if param.dtype in (torch.float16, torch.bfloat16) and type(param).__name__ != "Params4bit":
            param.data = param.data.float()
    return model


def build_model(base_dir: Path, cfg: dict[str, Any], device: torch.device, dtype: torch.dtype):
    """4-bit base, frozen, with fresh LoRA adapters on `target_modules` (trainable, float32)."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    model = prepare_model_for_kbit_training(
        load_4bit(base_dir, device, dtype),
        use_gradient_checkpointing=True,
        gradient_checkpointing_kwargs={"use_reentrant": False},
    )
    lora = LoraConfig(
        r=cfg["r"],
        lora_alpha=cfg["alpha"],
        lora_dropout=cfg["dropout"],
        target_modules=cfg["target_modules"],
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def load_adapter(adapter_dir: Path, model_cache: Path) -> tuple[Any, Any]:
    """A saved adapter on its 4-bit base, in eval mode, with the tokenizer saved beside it."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    adapter_dir = Path(adapter_dir)
    base_name = json.loads((adapter_dir / "adapter_config.json").read_text())[
        "base_model_name_or_path"
    ]
    base_dir = resolve_base_model(base_name, Path(model_cache))
    device, dtype = device_and_dtype()
    model = PeftModel.from_pretrained(load_4bit(base_dir, device, dtype), adapter_dir)
    has_tokenizer = (adapter_dir / "tokenizer_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(adapter_dir if has_tokenizer else base_dir)
    return model.eval(), tokenizer


def answer_loss(model: Any, batch: dict[str, Any], device: torch.device) -> torch.Tensor:
    """Summed cross-entropy over the labelled (assistant) tokens; the output head runs on those
    positions only."""
    causal_lm = model.get_base_model()
    hidden = causal_lm.get_decoder()(
        input_ids=batch["input_ids"].to(device),
        position_ids=batch["position_ids"].to(device),
        use_cache=False,
    ).last_hidden_state
    targets = batch["labels"][:, 1:].to(device)
    keep = targets != IGNORE
    logits = causal_lm.get_output_embeddings()(hidden[:, :-1][keep])
    return F.cross_entropy(logits.float(), targets[keep], reduction="sum")


@torch.no_grad()
def evaluate(model, examples, sequences, micro_batch, pad_id, device) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(sequences), micro_batch):
        batch = collate(examples, sequences[i : i + micro_batch], pad_id)
        total += answer_loss(model, batch, device).item()
        count += batch["label_tokens"]
    model.train()
    return total / max(count, 1)


def save_adapter(out_dir: Path, model, tokenizer, base_model: str) -> Path:
    """`adapter/`: the LoRA weights, its config naming the base model as the spec did (so
    `load_adapter` resolves it through MODEL_CACHE wherever that is), and the tokenizer."""

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        config_path = folder / "adapter_config.json"
        adapter_config = json.loads(config_path.read_text())
        adapter_config["base_model_name_or_path"] = base_model
        config_path.write_text(json.dumps(adapter_config, indent=2) + "\n")

    return checkpoints.write_folder(out_dir / ADAPTER, write)


def save_lora(model: Any, folder: Path) -> None:
    """The LoRA weights alone: a checkpoint's model part (the base model never changes)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    lora = get_peft_model_state_dict(model)
    save_file({k: v.detach().cpu().contiguous() for k, v in lora.items()}, folder / ADAPTER_FILE)


def load_lora(model: Any, folder: Path) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(folder / ADAPTER_FILE))


# ---- the loop ----------------------------------------------------------------------------------
def train(
    config: dict[str, Any],
    corpus_dir: Path,
    out_dir: Path,
    callbacks: TrainerCallbacks,
    *,
    seed: int,
    contract: str,
    probe: bool,
    model_cache: Path,
) -> dict[str, Any]:
    """Train on `corpus_dir/messages.jsonl` (eval on `messages_val.jsonl`); write `out_dir/adapter/`
    and `out_dir/run_meta.json`; resume from the newest checkpoint in `out_dir/checkpoints/`.
    `seed` is the run's (it wins over `config["seed"]`); `probe` trains exactly one micro-batch."""
    from transformers import AutoTokenizer

    started = time.time()
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise StageFailure("bad_input", f"qlora config: unknown key {unknown[0]!r}")
    cfg = {**DEFAULTS, **config, "seed": seed}
    corpus_dir, out_dir = Path(corpus_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device, dtype = device_and_dtype()
    reset_peak_vram()
    allocator = lean_allocator()
    rss = Rss()

    base_dir = resolve_base_model(cfg["base_model"], Path(model_cache))
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    train_path, val_path = corpus_dir / "messages.jsonl", corpus_dir / "messages_val.jsonl"
    train_rows = read_messages(train_path)
    if not train_rows:
        raise StageFailure(
            "bad_input", f"{train_path} has no rows: check the corpus (corpus/manifest.json)"
        )
    encoded = encode(tokenizer, train_rows, cfg["max_seq_len"])
    val_encoded = encode(tokenizer, read_messages(val_path)[:EVAL_ROWS], cfg["max_seq_len"])
    examples, val = encoded.examples, val_encoded.examples
    if not examples:
        raise StageFailure(
            "bad_input",
            f"no row of {train_path.name} fits qlora.max_seq_len={cfg['max_seq_len']} with its "
            f"whole answer; the longest row is {encoded.longest} tokens: raise max_seq_len",
        )
    lengths = [len(e.ids) for e in examples]
    val_sequences = plan_epoch([len(e.ids) for e in val], cfg["max_seq_len"], True, seed, -1)

    micro, accum = int(cfg["micro_batch"]), 1 if probe else int(cfg["grad_accum"])
    per_step = micro * accum  # sequences per optimizer step: the OOM retry keeps it
    plans: dict[int, list[list[int]]] = {}

    def plan(epoch: int) -> list[list[int]]:
        if epoch not in plans:
            plans[epoch] = plan_epoch(lengths, cfg["max_seq_len"], cfg["packing"], seed, epoch)
        return plans[epoch]

    def steps_in_epoch(epoch: int) -> int:
        return math.ceil(len(plan(epoch)) / per_step)

    total = int(cfg["max_steps"] or sum(steps_in_epoch(e) for e in range(int(cfg["epochs"]))))
    total = 1 if probe else total

    torch.manual_seed(seed)  # the LoRA init (a resume restores the RNG from its checkpoint)
    model = build_model(base_dir, cfg, device, dtype)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(trainable, cfg["lr"], device)
    warmup = max(1, round(WARMUP_FRACTION * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, warmup, total))

    fingerprint = checkpoints.fingerprint(cfg, RESUMABLE_CHANGES, [train_path])
    counters = {"step": 0, "rows_trained": 0, "tokens_trained": 0, "label_tokens_trained": 0}
    resume = None if probe else checkpoints.resume_point(out_dir, fingerprint)
    resumed_from = None
    if resume is not None:  # the adapter, optimizer, scheduler and RNG as they were at its step
        load_lora(model, resume)
        state = checkpoints.load(resume, optimizer, scheduler)
        counters, resumed_from = {k: state[k] for k in counters}, state["step"]

    evals: list[dict[str, Any]] = []

    def run_eval(step: int) -> None:
        if val and not probe:
            loss = evaluate(model, val, val_sequences, micro, pad_id, device)
            evals.append({"step": step, "loss": loss})
            callbacks.on_eval(step, loss=loss)

    def checkpoint() -> None:
        step, lora = counters["step"], partial(save_lora, model)
        meta = {**counters, "fingerprint": fingerprint, "total_steps": total, "config": cfg}
        path = checkpoints.save(out_dir, step, lora, optimizer, scheduler, meta)
        callbacks.on_checkpoint(step, path)

    if resumed_from is None:
        run_eval(0)
    step_losses: list[float] = []
    stopped_by, last_saved = None, resumed_from
    session_tokens, session_seconds = 0, 0.0
    while counters["step"] < total:
        stopped_by = callbacks.should_stop()
        if not stopped_by and cfg["max_seconds"] and time.time() - started >= cfg["max_seconds"]:
            stopped_by = "budget"
        if stopped_by:
            break
        step_started = time.time()
        epoch, index = locate(counters["step"], steps_in_epoch)
        sequences = plan(epoch)[index * per_step : (index + 1) * per_step]
        if probe:
            sequences = sequences[:micro]
        batches = [
            collate(examples, sequences[i : i + micro], pad_id)
            for i in range(0, len(sequences), micro)
        ]
        label_tokens = sum(b["label_tokens"] for b in batches)
        step_loss = 0.0
        for batch in batches:
            loss = answer_loss(model, batch, device) / max(label_tokens, 1)
            rss.sample()
            loss.backward()
            step_loss += loss.item()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        rss.sample()

        tokens = sum(b["tokens"] for b in batches)
        seconds = time.time() - step_started
        session_tokens += tokens
        session_seconds += seconds
        counters["step"] += 1
        counters["rows_trained"] += sum(b["rows"] for b in batches)
        counters["tokens_trained"] += tokens
        counters["label_tokens_trained"] += label_tokens
        step_losses.append(step_loss)
        step = counters["step"]
        callbacks.on_step(
            step, total, loss=step_loss, lr=lr, tokens_per_s=tokens / max(seconds, 1e-9),
            tokens=tokens, seconds=seconds, epoch=epoch,
            tokens_trained=counters["tokens_trained"],  # the run's `max_tokens` budget reads it
        )  # fmt: skip
        if probe:
            continue
        if step % cfg["eval_every"] == 0 or step == total:
            run_eval(step)
        if step % cfg["checkpoint_every"] == 0 or step == total:
            checkpoint()
            last_saved = step
    if stopped_by and counters["step"] > 0 and last_saved != counters["step"] and not probe:
        checkpoint()

    adapter = save_adapter(out_dir, model, tokenizer, cfg["base_model"])
    trained = (session_tokens, session_seconds)
    result = {
        **{k: counters[k] for k in ("rows_trained", "tokens_trained", "label_tokens_trained")},
        "steps": counters["step"], "total_steps": total, "stopped_by": stopped_by,
        "resumed_from_step": resumed_from, "optimizer_state_step": optimizer_step_count(optimizer),
        "final_loss": step_losses[-1] if step_losses else None,
        "first_loss": step_losses[0] if step_losses else None,
        "eval_loss": evals[-1]["loss"] if evals else None, "evals": evals,
        "rows_truncated": encoded.truncated, "rows_dropped": encoded.dropped,
        "data": {"max_seq_len": cfg["max_seq_len"], "train": encoded.counts(),
                 "val": val_encoded.counts()},
        "tokens_per_s": trained[0] / trained[1] if trained[1] else None,
        "seconds": time.time() - started,
        "peak_rss_bytes": rss.peak,
        "peak_rss_process_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_vram_bytes": peak_vram(),
        "device": device.type, "compute_dtype": str(dtype).removeprefix("torch."),
        "allocator": allocator,
        "trainable_params": sum(p.numel() for p in trainable),
    }  # fmt: skip
    meta = run_meta(cfg, result, contract, base_dir, corpus_dir, train_path, val_path, probe)
    meta_path = out_dir / RUN_META
    meta_path.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    newest = checkpoints.list_checkpoints(out_dir)[-1:]
    result["artifacts"] = [str(adapter), str(meta_path), *map(str, newest)]
    return result


# ---- the loop's small parts --------------------------------------------------------------------
def make_optimizer(params: list[torch.nn.Parameter], lr: float, device: torch.device):
    """AdamW; on CUDA bitsandbytes' paged 8-bit AdamW (its state pages out instead of OOMing)."""
    if device.type == "cuda":
        import bitsandbytes as bnb

        return bnb.optim.PagedAdamW8bit(params, lr=lr, weight_decay=0.0)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def locate(step: int, steps_in_epoch) -> tuple[int, int]:
    """(epoch, step within it) of global `step`; past the configured epochs (a `max_steps` longer
    than `epochs`) the data keeps cycling in fresh epochs."""
    epoch = 0
    while step >= steps_in_epoch(epoch):
        step, epoch = step - steps_in_epoch(epoch), epoch + 1
    return epoch, step


def optimizer_step_count(optimizer) -> int | None:
    return next((int(st["step"]) for st in optimizer.state.values() if "step" in st), None)


def run_meta(cfg, result, contract, base_dir, corpus_dir, train_path, val_path, probe) -> dict:
    import bitsandbytes
    import peft
    import transformers

    manifest = corpus_dir / "manifest.json"
    corpus_hash = json.loads(manifest.read_text()).get("corpus_hash") if manifest.exists() else None
    return {
        "trainer": "qlora",
        "hyperparameters": cfg,
        "resolved": {
            "base_model_dir": str(base_dir), "device": result["device"],
            "quantization": "4-bit nf4, double quant (bitsandbytes)",
            "compute_dtype": result["compute_dtype"], "gradient_checkpointing": True,
            "allocator": result["allocator"],
            "optimizer": "PagedAdamW8bit" if result["device"] == "cuda" else "AdamW",
            "schedule": f"linear warmup {WARMUP_FRACTION:.0%}, cosine to 10%",
            "loss": "assistant answer + end-of-turn token",
            "over_max_seq_len": "prompt's beginning cut; dropped when the answer does not fit",
            "eval_rows": EVAL_ROWS, "total_steps": result["total_steps"],
        },
        "seed": cfg["seed"], "contract": contract, "probe": probe, "corpus_hash": corpus_hash,
        "messages_sha256": {
            split: sha256_file(path) if path.exists() else ""
            for split, path in (("train", train_path), ("val", val_path))
        },
        "versions": {
            "python": platform.python_version(),
            **{m.__name__: m.__version__ for m in (torch, transformers, peft, bitsandbytes)},
        },
        "result": {k: v for k, v in result.items() if k != "evals"},
    }  # fmt: skip
