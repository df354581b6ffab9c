"""A worker fetches no code or weights from a model hub at run time (the models come from a
folder, MODEL_CACHE or the built-in SmolLM2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_worker_process_is_offline_before_bitsandbytes_asks_the_hub_for_a_kernel() -> None:
    """On a CPU with AVX512-BF16, importing bitsandbytes asks the hub for a compiled kernel
    unless the hub is offline; a worker process is, whatever its environment says."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    env["HF_HUB_OFFLINE"] = "0"  # an operator's setting does not turn it back on
    code = (
        "import worker.models.lm, bitsandbytes, huggingface_hub as h; "
        "import huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE, h.is_offline_mode())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]
    assert "publisher trust status" not in out.stderr  # the hub was not asked
