"""The qlora recipe's small parts (worker/train/qlora.py): the loss on the answer tokens, the
optimizer with its learning-rate schedule and step count, where a global step falls in the data,
and whether a dequantized copy of the frozen weights is worth its memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from worker.train.chat_data import IGNORE


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


def dense_fits(dense: int) -> bool:
    """The dequantized copy is worth its memory where it takes at most an eighth of what is
    available (SmolLM2-135M: 405 MiB float32, 203 MiB bf16)."""
    import psutil

    return dense * 8 <= psutil.virtual_memory().available


def make_optimizer(
    params: list[torch.nn.Parameter], lr: float, device: torch.device
) -> torch.optim.Optimizer:
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


def locate(step: int, steps_in_epoch: Callable[[int], int]) -> tuple[int, int]:
    """(epoch, step within it) of global `step`; past the configured epochs (a `max_steps` longer
    than `epochs`) the data keeps cycling in fresh epochs."""
    epoch = 0
    while step >= steps_in_epoch(epoch):
        step, epoch = step - steps_in_epoch(epoch), epoch + 1
    return epoch, step


def optimizer_step_count(optimizer: torch.optim.Optimizer) -> int | None:
    return next((int(st["step"]) for st in optimizer.state.values() if "step" in st), None)
