"""What GPU a worker has, for the registry (`GET /workers`): asked of `nvidia-smi`, never of torch,
so a CPU worker and the API stay light. Honours CUDA_VISIBLE_DEVICES (one worker per GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class GpuInfo:
    name: str
    memory_bytes: int


def detect_gpu(timeout_s: float = 5.0) -> GpuInfo | None:
    """The first GPU this process may use, or None (no driver, no GPU, or none visible)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, *QUERY], capture_output=True, text=True, timeout=timeout_s, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
    gpus = [g for g in gpus if len(g) >= 4]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        if not wanted or wanted[0] in ("-1", "none", "NoDevFiles"):
            return None
        gpus = [g for g in gpus if g[0] == wanted[0] or g[1] == wanted[0]] or []
    if not gpus:
        return None
    _index, _uuid, name, mib = gpus[0][:4]
    try:
        memory = int(float(mib) * 1024 * 1024)
    except ValueError:
        memory = 0
    return GpuInfo(name=name, memory_bytes=memory)
