"""What the training benchmarks need to know about the machine and the model: the CPU's model and
the flags that decide its fast paths, a profile's top ops, a model's parameter count, and the bf16
matmul rate a GPU reaches (the MFU denominator)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

CPU_FLAGS = ("avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_kind() -> str:
    """The CPU's model name and the flags that decide its fast paths (Linux /proc/cpuinfo)."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    has = " ".join(f"{f}{'+' if f in flags else '-'}" for f in CPU_FLAGS)
    return f"{model}, {os.cpu_count()} cores; {has}"


def profile_summary(prof: Any, rows: int = 12) -> list[tuple[str, float]]:
    """(op, share of the step's self CPU time), largest first."""
    events = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    total = sum(t for _, t in events) or 1.0
    return [(k, t / total) for k, t in sorted(events, key=lambda e: -e[1])[:rows]]


def params_of(base_model: str, cache: Path) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    from worker.models.base_model import resolve_base_model

    config = AutoConfig.from_pretrained(resolve_base_model(base_model, cache))
    import torch

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def matmul_tflops() -> float | None:
    """The bf16 matmul rate this GPU actually reaches (the MFU denominator)."""
    import torch

    if not torch.cuda.is_available():
        return None
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, n = time.perf_counter(), 20
    for _ in range(n):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192**3 * n / (time.perf_counter() - start) / 1e12
