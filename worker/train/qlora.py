"""The `qlora` trainer (SPEC §6): a LoRA adapter on a 4-bit NF4 causal LM, config in, adapter out.

A recipe in the torchtune manner: `train()` at the bottom reads top to bottom (setup, then a step
at a time until done or stopped, with an eval and a checkpoint on schedule, then the adapter and
`run_meta.json`); `QloraRecipe` holds the named phases it drives: `setup`, `step` (one optimizer
step), `evaluate` (the val loss), `checkpoint` (save; `setup` resumes from the newest one) and
`finish`. The model (4-bit base, LoRA on top, adapter files) is `worker/models/lm.py`; the data
(chat rows -> token ids with labels on the assistant's answer only, packed into sequences; what
happens to rows over `max_seq_len`) is `chat_data.py`; checkpoints (atomic, newest wins, shared
with `trm`) are `checkpoints.py`; the loss on the answer tokens, the optimizer and its schedule
are `qlora_parts.py`. The service plugs in through `TrainerCallbacks`: `on_step`
after every optimizer step, `should_stop()` at every step boundary (cancel, shutdown, budget: save
a checkpoint, return), `on_eval`, `on_checkpoint`.

Choices that matter for speed and memory, each for a reason:
- The loss is computed on the assistant tokens only, so the vocabulary projection (`lm_head`) runs
  on those positions only instead of on every token; a controller's answer is a few tokens.
- Rows are packed into sequences of `max_seq_len` (several rows per sequence, each attending only
  to itself through reset position ids) or, with `packing: false`, grouped by length; either way
  almost no compute goes to padding.
- Gradient checkpointing only where memory needs it: the base model is frozen, so backward is one
  matmul per forward one and recomputing a layer costs it a third more time; the layers whose
  activations fit `activation_budget_mb` (per micro-batch) keep them instead (`lm.
  checkpoint_within`), the rest are recomputed (a 30-layer model's activations at 8 x 512 tokens
  would take gigabytes).
- On a CPU computing in bf16 the frozen 4-bit weights are dequantized once
  (`dequant_cache`, `lm.dequantize_frozen`): bitsandbytes otherwise dequantizes each weight on
  every forward and again in backward, as much time as the bf16 matmuls themselves on an
  AVX512-BF16 CPU. The copy computes exactly what the 4-bit layer computes. In float32 the
  matmuls dwarf the dequantizing, so `auto` spends that memory on kept layers instead: the
  `auto` budget is SPEED_MEMORY_MB less the copy (AMD EPYC, float32 forced: 1.42x TRL with the
  copy and 192 MiB, 1.62x without it and 400 MiB, peak RSS under TRL's).
- On a CPU a micro-batch is one packed sequence (`micro_batch: auto`), x 16 accumulated.
- Compute in bf16 where the hardware has it (CUDA, and CPUs with AVX512-BF16), with the LoRA
  weights, norms, embeddings and the loss in float32; `compute_dtype` forces one.
- Measured on SmolLM2-135M (one micro-batch of 2 x 512, 1 thread, same process): bf16 12.9 s
  with every layer checkpointed and dequantizing per call, 8.8 s with the dequantized copy, 6.3 s
  with no layer checkpointed too (float32: 9.4 s, 7.4 s at 1 x 512).
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
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from core.rundir import ADAPTER, RUN_META, sha256_file, write_json_atomic
from core.schemas.train import SPEED_MEMORY_MB, QloraTrainerConfig, qlora_batch
from worker.context import StageFailure
from worker.models import lm
from worker.models.base_model import resolve_base_model
from worker.train import checkpoints
from worker.train.callbacks import TrainerCallbacks
from worker.train.chat_data import Encoded, collate, encode, plan_epoch, read_messages
from worker.train.memory import Rss, lean_allocator, peak_vram, reset_peak_vram
from worker.train.qlora_parts import (
    answer_loss,
    dense_fits,
    locate,
    lr_factor,
    make_optimizer,
    optimizer_step_count,
)

# The spec's defaults, plus `max_seconds`, which the stage may pass from the run's budget.
DEFAULTS: dict[str, Any] = {**QloraTrainerConfig().model_dump(), "max_seconds": None}
# Keys that may change between attempts without invalidating a checkpoint (the OOM retry).
# (`activation_budget_mb` and `dequant_cache` change the speed, not what is computed.)
RESUMABLE_CHANGES = (
    "micro_batch",
    "grad_accum",
    "eval_every",
    "checkpoint_every",
    "max_seconds",
    "activation_budget_mb",
    "dequant_cache",
    "eval_rows",
)
WARMUP_FRACTION = 0.03


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
    started = time.time()
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise StageFailure("bad_input", f"qlora config: unknown key {unknown[0]!r}")
    cfg = {**DEFAULTS, **config, "seed": seed}
    recipe = QloraRecipe(cfg, Path(corpus_dir), Path(out_dir), callbacks, probe=probe)
    recipe.setup(Path(model_cache))
    if recipe.resumed_from is None:
        recipe.evaluate()
    stopped_by, last_saved = None, recipe.resumed_from
    while recipe.done.step < recipe.total:
        stopped_by = callbacks.should_stop()
        if not stopped_by and cfg["max_seconds"] and time.time() - started >= cfg["max_seconds"]:
            stopped_by = "budget"
        if stopped_by:
            break
        step = recipe.step()
        if probe:
            continue
        if step % cfg["eval_every"] == 0 or step == recipe.total:
            recipe.evaluate()
        if step % cfg["checkpoint_every"] == 0 or step == recipe.total:
            recipe.checkpoint()
            last_saved = step
    if stopped_by and recipe.done.step > 0 and last_saved != recipe.done.step and not probe:
        recipe.checkpoint()
    return recipe.finish(stopped_by, contract, started)


@dataclass
class Trained:
    """What the run has trained so far: a checkpoint saves it, a resume restores it."""

    step: int = 0
    rows_trained: int = 0
    tokens_trained: int = 0
    label_tokens_trained: int = 0


class QloraRecipe:
    """One qlora run's state and its phases; `train()` decides when each one runs."""

    def __init__(
        self,
        cfg: dict[str, Any],
        corpus_dir: Path,
        out_dir: Path,
        callbacks: TrainerCallbacks,
        *,
        probe: bool,
    ) -> None:
        self.cfg, self.corpus_dir, self.out_dir = cfg, corpus_dir, out_dir
        self.callbacks, self.probe, self.seed = callbacks, probe, int(cfg["seed"])
        self.train_path = corpus_dir / "messages.jsonl"
        self.val_path = corpus_dir / "messages_val.jsonl"
        self.micro, accum = qlora_batch(
            cfg["micro_batch"], cfg["grad_accum"], cuda=torch.cuda.is_available()
        )
        self.accum = 1 if probe else accum
        # Sequences per optimizer step: the OOM retry (half the micro-batch) keeps it.
        self.per_step = self.micro * self.accum
        self.done = Trained()
        self.resumed_from: int | None = None
        self.evals: list[dict[str, Any]] = []
        self.step_losses: list[float] = []
        self.session_tokens, self.session_seconds = 0, 0.0  # this attempt's, for tokens/s
        self._plans: dict[int, list[list[int]]] = {}

    # ---- setup: data, model, optimizer, schedule, and the checkpoint to resume from ------------
    def setup(self, model_cache: Path) -> None:
        from transformers import AutoTokenizer

        cfg = self.cfg
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.device, self.dtype = lm.device_and_dtype(cfg["compute_dtype"])
        reset_peak_vram()
        self.allocator = lean_allocator()
        self.rss = Rss()

        self.base_dir = resolve_base_model(cfg["base_model"], model_cache)
        self.tokenizer = AutoTokenizer.from_pretrained(self.base_dir)
        pad_id = self.tokenizer.pad_token_id
        self.pad_id = pad_id if pad_id is not None else 0
        self.data, self.val_data = self._encode_splits()
        self.examples, self.val = self.data.examples, self.val_data.examples
        self.lengths = [len(e.ids) for e in self.examples]
        val_lengths = [len(e.ids) for e in self.val]
        self.val_sequences = plan_epoch(val_lengths, cfg["max_seq_len"], True, self.seed, -1)
        epochs = range(int(cfg["epochs"]))
        total = int(cfg["max_steps"] or sum(self._steps_in_epoch(e) for e in epochs))
        self.total = 1 if self.probe else total

        # The LoRA init (a resume restores the RNG from its checkpoint).
        torch.manual_seed(self.seed)
        self.model = lm.build_lora_model(self.base_dir, cfg, self.device, self.dtype)
        self.model.train()
        self.kernels = self._speed_up()
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(self.trainable, cfg["lr"], self.device)
        warmup, total = max(1, round(WARMUP_FRACTION * self.total)), self.total
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, warmup, total)
        )
        self.fingerprint = checkpoints.fingerprint(cfg, RESUMABLE_CHANGES, [self.train_path])
        resume = (
            None
            if self.probe
            else checkpoints.resume_point(self.out_dir, self.fingerprint, self.callbacks.trusts)
        )
        if resume is not None:  # the adapter, optimizer, scheduler and RNG as they were then
            lm.load_lora(self.model, resume)
            state = checkpoints.load(resume, self.optimizer, self.scheduler)
            self.done = Trained(**{k: state[k] for k in asdict(self.done)})
            self.resumed_from = state["step"]

    def _speed_up(self) -> dict[str, Any]:
        """Spend `activation_budget_mb` on uncheckpointed layers and, where `dequant_cache` says
        so, memory on a dequantized copy of the frozen weights; returns what ran (the kernels
        the result and `run_meta.json` report)."""
        cfg, model = self.cfg, self.model
        cache = cfg["dequant_cache"]
        if cache == "auto":  # a bf16 CPU dequantizes on every call as long as it multiplies;
            # float32 matmuls dwarf it, and CUDA keeps QLoRA's VRAM footprint
            bf16_cpu = self.device.type == "cpu" and self.dtype == torch.bfloat16
            cache = "on" if bf16_cpu and dense_fits(lm.dense_bytes(model, self.dtype)) else "off"
        held = lm.dequantize_frozen(model, self.dtype) if cache == "on" else 0
        budget = cfg["activation_budget_mb"]
        budget = max(0, SPEED_MEMORY_MB * 2**20 - held) if budget == "auto" else budget * 2**20
        tokens = self.micro * int(cfg["max_seq_len"])
        layers = len(model.get_base_model().get_decoder().layers)
        checkpointed = lm.checkpoint_within(model, budget, tokens, self.dtype)
        return {
            "compute_dtype": str(self.dtype).removeprefix("torch."),
            "attention": model.config._attn_implementation,
            "gradient_checkpointing": f"{checkpointed} of {layers} layers",
            "activation_budget_mb": budget // 2**20,
            "dequant_cache": f"on, {held / 2**20:.0f} MiB" if held else "off",
            "matmul_4bit": "dense copy (F.linear)" if held else lm.bnb_backend(self.device),
            "threads": torch.get_num_threads(),
        }

    def _encode_splits(self) -> tuple[Encoded, Encoded]:
        max_seq_len = self.cfg["max_seq_len"]
        rows = read_messages(self.train_path)
        if not rows:
            reason = f"{self.train_path} has no rows: check the corpus (corpus/manifest.json)"
            raise StageFailure("bad_input", reason)
        data = encode(self.tokenizer, rows, max_seq_len)
        val_rows = read_messages(self.val_path)[: self.cfg["eval_rows"]]
        val = encode(self.tokenizer, val_rows, max_seq_len)
        if not data.examples:
            raise StageFailure(
                "bad_input",
                f"no row of {self.train_path.name} fits qlora.max_seq_len={max_seq_len} with its "
                f"whole answer; the longest row is {data.longest} tokens: raise max_seq_len",
            )
        return data, val

    def _plan(self, epoch: int) -> list[list[int]]:
        if epoch not in self._plans:
            cfg = self.cfg
            plan = plan_epoch(self.lengths, cfg["max_seq_len"], cfg["packing"], self.seed, epoch)
            self._plans[epoch] = plan
        return self._plans[epoch]

    def _steps_in_epoch(self, epoch: int) -> int:
        return math.ceil(len(self._plan(epoch)) / self.per_step)

    # ---- step: one optimizer step --------------------------------------------------------------
    def step(self) -> int:
        """Train on the next `per_step` sequences (`micro` at a time, gradients accumulated);
        returns the step number it completed."""
        step_started = time.time()
        epoch, index = locate(self.done.step, self._steps_in_epoch)
        sequences = self._plan(epoch)[index * self.per_step : (index + 1) * self.per_step]
        if self.probe:
            sequences = sequences[: self.micro]
        batches = [
            collate(self.examples, sequences[i : i + self.micro], self.pad_id)
            for i in range(0, len(sequences), self.micro)
        ]
        label_tokens = sum(b["label_tokens"] for b in batches)
        step_loss = 0.0
        for batch in batches:
            loss = answer_loss(self.model, batch, self.device) / max(label_tokens, 1)
            self.rss.sample()
            loss.backward()
            step_loss += loss.item()
        torch.nn.utils.clip_grad_norm_(self.trainable, 1.0)
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.rss.sample()

        tokens = sum(b["tokens"] for b in batches)
        seconds = time.time() - step_started
        self.session_tokens += tokens
        self.session_seconds += seconds
        done = self.done
        done.step += 1
        done.rows_trained += sum(b["rows"] for b in batches)
        done.tokens_trained += tokens
        done.label_tokens_trained += label_tokens
        self.step_losses.append(step_loss)
        self.callbacks.on_step(
            done.step,
            self.total,
            loss=step_loss,
            lr=lr,
            tokens_per_s=tokens / max(seconds, 1e-9),
            tokens=tokens,
            seconds=seconds,
            epoch=epoch,
            tokens_trained=done.tokens_trained,  # the run's `max_tokens` reads it
        )
        return done.step

    # ---- evaluate: the loss on the val rows ----------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> None:
        """The mean loss per answer token over the val sample (none in a probe)."""
        if not self.val or self.probe:
            return
        self.model.eval()
        total, count = 0.0, 0
        rows, done = sum(map(len, self.val_sequences)), 0  # val rows, packed into sequences
        for i in range(0, len(self.val_sequences), self.micro):
            self.callbacks.on_pass("eval", done, rows)  # the card: `launch_trainer eval 8/256 rows`
            sequences = self.val_sequences[i : i + self.micro]
            batch = collate(self.val, sequences, self.pad_id)
            total += answer_loss(self.model, batch, self.device).item()
            count += batch["label_tokens"]
            done += sum(map(len, sequences))
        self.callbacks.on_pass("eval", rows, rows)
        self.model.train()
        loss = total / max(count, 1)
        self.evals.append({"step": self.done.step, "loss": loss})
        self.callbacks.on_eval(self.done.step, loss=loss)

    # ---- checkpoint: what a resume needs, whole or not at all ----------------------------------
    def checkpoint(self) -> None:
        step, lora = self.done.step, partial(lm.save_lora, self.model)
        meta = {
            **asdict(self.done),
            "fingerprint": self.fingerprint,
            "total_steps": self.total,
            "config": self.cfg,
        }
        path = checkpoints.save(self.out_dir, step, lora, self.optimizer, self.scheduler, meta)
        self.callbacks.on_checkpoint(step, path)

    # ---- finish: the adapter, run_meta.json, the result ----------------------------------------
    def finish(self, stopped_by: str | None, contract: str, started: float) -> dict[str, Any]:
        cfg, data, losses = self.cfg, self.data, self.step_losses
        write = partial(
            lm.save_adapter,
            model=self.model,
            tokenizer=self.tokenizer,
            base_model=cfg["base_model"],
            max_seq_len=cfg["max_seq_len"],
        )
        adapter = checkpoints.write_folder(self.out_dir / ADAPTER, write)
        trained = (self.session_tokens, self.session_seconds)
        done = asdict(self.done)
        result = {
            **{k: done[k] for k in ("rows_trained", "tokens_trained", "label_tokens_trained")},
            "steps": self.done.step,
            "total_steps": self.total,
            "stopped_by": stopped_by,
            "resumed_from_step": self.resumed_from,
            "optimizer_state_step": optimizer_step_count(self.optimizer),
            "final_loss": losses[-1] if losses else None,
            "first_loss": losses[0] if losses else None,
            "eval_loss": self.evals[-1]["loss"] if self.evals else None,
            "evals": self.evals,
            "rows_truncated": data.truncated,
            "rows_dropped": data.dropped,
            "data": {
                "max_seq_len": cfg["max_seq_len"],
                "train": data.counts(),
                "val": self.val_data.counts(),
            },
            "tokens_per_s": trained[0] / trained[1] if trained[1] else None,
            "seconds": time.time() - started,
            "peak_rss_bytes": self.rss.peak,
            "peak_rss_process_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_vram_bytes": peak_vram(),
            "device": self.device.type,
            "compute_dtype": str(self.dtype).removeprefix("torch."),
            "kernels": self.kernels,
            "allocator": self.allocator,
            "trainable_params": sum(p.numel() for p in self.trainable),
        }
        meta_path = self.out_dir / RUN_META
        write_json_atomic(meta_path, run_meta(self, result, contract))
        newest = checkpoints.list_checkpoints(self.out_dir)[-1:]
        result["artifacts"] = [str(adapter), str(meta_path), *map(str, newest)]
        return result


def run_meta(recipe: QloraRecipe, result: dict[str, Any], contract: str) -> dict[str, Any]:
    import bitsandbytes
    import peft
    import transformers

    cfg, corpus_dir = recipe.cfg, recipe.corpus_dir
    manifest = corpus_dir / "manifest.json"
    corpus_hash = json.loads(manifest.read_text()).get("corpus_hash") if manifest.exists() else None
    splits = (("train", recipe.train_path), ("val", recipe.val_path))
    return {
        "trainer": "qlora",
        "hyperparameters": cfg,
        "resolved": {
            "base_model_dir": str(recipe.base_dir),
            "device": result["device"],
            "quantization": "4-bit nf4, double quant (bitsandbytes)",
            "compute_dtype": result["compute_dtype"],
            "gradient_checkpointing": result["kernels"]["gradient_checkpointing"],
            "activation_budget_mb": result["kernels"]["activation_budget_mb"],
            "dequant_cache": result["kernels"]["dequant_cache"],
            "attention": result["kernels"]["attention"],
            "threads": result["kernels"]["threads"],
            "allocator": result["allocator"],
            "optimizer": "PagedAdamW8bit" if result["device"] == "cuda" else "AdamW",
            "schedule": f"linear warmup {WARMUP_FRACTION:.0%}, cosine to 10%",
            "loss": "assistant answer + end-of-turn token",
            "over_max_seq_len": "prompt's beginning cut; dropped when the answer does not fit",
            "micro_batch": recipe.micro,
            "grad_accum": recipe.accum,
            "eval_rows": len(recipe.val),
            "total_steps": result["total_steps"],
        },
        "seed": cfg["seed"],
        "contract": contract,
        "probe": recipe.probe,
        "corpus_hash": corpus_hash,
        "messages_sha256": {
            split: sha256_file(path) if path.exists() else "" for split, path in splits
        },
        "versions": {
            "python": platform.python_version(),
            **{m.__name__: m.__version__ for m in (torch, transformers, peft, bitsandbytes)},
        },
        "result": {k: v for k, v in result.items() if k != "evals"},
    }
