"""The two sides bench/train_throughput.py compares, each run in a process of its own
(`train_throughput.py --side ours|trl`): our `qlora` trainer (`run_ours`, its config from
`ours_config`, which the service side submits too) and TRL's SFTTrainer (`run_trl`); `side`
runs one and prints its result as one JSON line, with the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench.machine import matmul_tflops, params_of, profile_summary
from core.schemas.train import EFFECTIVE_BATCH


def ours_config(args: argparse.Namespace, extra_steps: int = 0) -> dict[str, Any]:
    return {
        "base_model": args.base_model,
        "micro_batch": args.micro_batch,
        "grad_accum": EFFECTIVE_BATCH // args.micro_batch,
        "max_seq_len": args.seq,
        "max_steps": args.steps + 1 + extra_steps,
        "eval_every": 10**6,
        "checkpoint_every": 10**6,
        "compute_dtype": args.dtype,
        "activation_budget_mb": args.activation_budget_mb,
        "dequant_cache": args.dequant_cache,
    }


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    from worker.train import qlora
    from worker.train.callbacks import TrainerCallbacks

    class Profiled(TrainerCallbacks):
        """Profiles the step after the timed ones."""

        prof: Any = None
        rss: int | None = None
        summary: list[tuple[str, float]] = []
        seconds = 0.0  # the profiled step's, profiler included: not part of the direct wall

        def should_stop(self) -> str | None:
            if len(self.steps) == args.steps + 1 and args.profile_step:
                from torch.profiler import ProfilerActivity, profile

                self.seconds = time.time()
                # the peak before the profiler, whose event records are not the trainer's memory
                self.rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                self.prof = profile(activities=[ProfilerActivity.CPU])
                self.prof.__enter__()
            return None

        def on_step(self, step: int, total: int | None, **metrics: Any) -> None:
            super().on_step(step, total, **metrics)
            if self.prof is not None:
                self.prof.__exit__(None, None, None)
                self.summary, self.prof = profile_summary(self.prof), None
                self.seconds = time.time() - self.seconds

    callbacks = Profiled()
    config = ours_config(args, extra_steps=1 if args.profile_step else 0)
    out = Path(tempfile.mkdtemp(prefix="ours-", dir=args.work))
    result = qlora.train(
        config,
        args.corpus,
        out,
        callbacks,
        seed=0,
        contract="action_only",
        probe=False,
        model_cache=args.model_cache,
    )
    # interpreter start -> trained, the profiled step left out (the service run has none)
    wall = time.time() - psutil.Process().create_time() - callbacks.seconds
    timed = callbacks.steps[1 : args.steps + 1]
    return {
        "tokens": sum(s["tokens"] for s in timed),
        "seconds": sum(s["seconds"] for s in timed),
        "loop_tokens_per_s": result["tokens_per_s"],
        "trainer_seconds": result["seconds"],
        "direct_wall": wall,
        "loss": result["final_loss"],
        "vram": result["peak_vram_bytes"],
        "params": params_of(args.base_model, args.model_cache),
        "kernels": result["kernels"],
        "profile": callbacks.summary,
        "rss_before_profile": callbacks.rss,
    }


def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from worker.models.base_model import resolve_base_model
    from worker.models.lm import bnb_backend, device_and_dtype, load_4bit
    from worker.train.chat_data import read_messages

    base_dir = resolve_base_model(args.base_model, args.model_cache)
    cuda = torch.cuda.is_available()
    device, dtype = device_and_dtype(args.dtype)  # the compute dtype ours uses
    model = load_4bit(base_dir, device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    rows = [{"messages": r["messages"]} for r in read_messages(args.corpus / "messages.jsonl")]
    marks: list[tuple[float, int]] = []

    class Clock(TrainerCallback):
        def on_step_end(self, targs, state, control, **kwargs):
            marks.append((time.perf_counter(), state.num_input_tokens_seen))

        def on_train_begin(self, targs, state, control, **kwargs):
            marks.append((time.perf_counter(), 0))

    config = SFTConfig(
        output_dir=str(Path(tempfile.mkdtemp(prefix="trl-", dir=args.work))),
        per_device_train_batch_size=1,
        gradient_accumulation_steps=EFFECTIVE_BATCH,
        max_length=512,
        packing=False,
        assistant_only_loss=False,
        learning_rate=2e-4,
        max_steps=args.steps + 1,
        logging_steps=10**6,
        save_strategy="no",
        report_to=[],
        bf16=dtype == torch.bfloat16,
        use_cpu=not cuda,
        optim="paged_adamw_8bit" if cuda else "adamw_torch",
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        seed=0,
    )
    lora = LoraConfig(
        r=16,
        lora_alpha=32,
        lora_dropout=0.05,
        bias="none",
        task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[Clock()],
    )
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    output = trainer.train()
    (t1, n1), (t_end, n_end) = marks[1], marks[-1]
    ckpt = bool(trainer.args.gradient_checkpointing)
    layers = len(trainer.model.get_base_model().get_decoder().layers)
    kernels = {
        "compute_dtype": str(dtype).removeprefix("torch."),
        "attention": trainer.model.config._attn_implementation,
        "gradient_checkpointing": f"{layers if ckpt else 0} of {layers} layers",
        "dequant_cache": "off",
        "matmul_4bit": bnb_backend(device),
        "threads": torch.get_num_threads(),
    }
    return {
        "kernels": kernels,
        "tokens": n_end - n1,
        "seconds": t_end - t1,
        "loss": output.training_loss,
        "vram": torch.cuda.max_memory_allocated() if cuda else None,
        "params": params_of(args.base_model, args.model_cache),
    }


def side(args: argparse.Namespace) -> None:
    """Child process: run one side, print one JSON line with its peak RSS."""
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    result = {"ours": run_ours, "trl": run_trl}[args.side](args)
    result["rss"] = result.pop("rss_before_profile", None) or (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    result["tflops"] = matmul_tflops()
    print("RESULT " + json.dumps(result), flush=True)
