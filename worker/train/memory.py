"""Memory as the trainers measure it (SPEC §6: RSS and VRAM measured), and how the training
process allocates it.

Allocation, measured on SmolLM2-135M 4-bit at micro-batch 8 x 256 on this 2-core CPU
(bf16 off; tokens/s, peak RSS):
- glibc's default heap: 190 tokens/s, 3.4 GB: freed activations stay in the heap, fragmented;
- every allocation over 64 KiB served by mmap (`mallopt`): 120 tokens/s, 1.3 GB: each fresh
  mapping is paid for in page faults on every step;
- PyTorch's transparent-huge-page allocation for tensors of 2 MB and more
  (`THP_MEM_ALLOC_ENABLE=1`): 199 tokens/s, 1.9 GB: 2 MB-aligned blocks, faulted 2 MB at a time.
PyTorch reads that variable once, at its first allocation, so it must be in the environment the
process starts with: `CHILD_ENV` is what the runner starts every stage's child process with.
A process started without it (a trainer called directly) falls back to the mmap threshold.

With fewer layers checkpointed many more tensors under 2 MB live at once, and they come
from glibc's heap, fragmented: SmolLM2-135M at 2 x 512 float32 peaked at 3.0 GB RSS over two
steps. A fixed mmap threshold of 256 KiB on top of the huge pages held it to 2.0 GB, but cost the
page faults again (bf16, whose tensors are half the size: 0.9x TRL's tokens/s instead of more
than 1.5x), so it is not applied: `activation_budget_mb` is the knob for memory.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import psutil

CHILD_ENV = {"THP_MEM_ALLOC_ENABLE": "1"}
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages_available() -> bool:
    """The kernel grants transparent huge pages to a process that asks (`always` or `madvise`)."""
    try:
        return "[never]" not in THP_MODE.read_text()
    except OSError:
        return False


def lean_allocator() -> str:
    """Make freed training memory reusable without page-fault storms; returns what it chose (the
    trainers record it in `run_meta.json`)."""
    if os.environ.get("THP_MEM_ALLOC_ENABLE") == "1" and huge_pages_available():
        return "transparent huge pages for tensors >= 2 MB"
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
        return "mmap for allocations > 64 KiB"
    return "system default"


class Rss:
    """Peak resident memory; call `sample()` after each forward pass (when activations peak) and
    after each step."""

    def __init__(self) -> None:
        self.process, self.peak = psutil.Process(), 0
        self.sample()

    def sample(self) -> None:
        self.peak = max(self.peak, self.process.memory_info().rss)


def reset_peak_vram() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_vram() -> int | None:
    import torch

    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
