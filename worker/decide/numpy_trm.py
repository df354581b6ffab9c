"""The trm's inference forward in numpy (`TinyRecursiveModel.infer` of worker/models/trm.py, step
for step), over its `model.safetensors` read without torch: what an exported controller runs.

Only numpy and the standard library: an export ships this file as it is (`export.py`). A test
holds it to the torch model's scores on the same rows.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

FORMAT = "trm-v2"  # the version of worker/models/trm.py's model this forward is a port of
PAD_SCORE = -1e9  # a padding candidate's score, as worker/models/trm.py
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default
SET_LAYERS = 2  # the one network f: net.0 and net.1
_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}

Weights = dict[str, np.ndarray]


def _linear_keys(prefix: str) -> tuple[str, str]:
    return f"{prefix}.weight", f"{prefix}.bias"


# The state dict of worker/models/trm.py's TinyRecursiveModel, by name.
WEIGHT_KEYS = (
    *_linear_keys("embed.0"), *_linear_keys("embed.2"),
    *(key for k in range(SET_LAYERS) for part in ("norm", "mlp.0", "mlp.2")
      for key in _linear_keys(f"net.{k}.{part}")),
    "y0", "z0", *_linear_keys("out_norm"), *_linear_keys("score"), *_linear_keys("halt"),
)  # fmt: skip


def read_safetensors(path: Path) -> Weights:
    """A safetensors file's tensors (8 bytes of header length, a JSON header, the raw data):
    plain data, nothing in it is run."""
    blob = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    data = memoryview(blob)[8 + size :]
    out: Weights = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {key} is {info['dtype']}, not one of {list(_DTYPES)}")
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=_DTYPES[info["dtype"]])
        out[key] = array.reshape(info["shape"]).astype(np.float32)
    return out


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU with the exact erf (torch's default), erf by Abramowitz & Stegun 7.1.26 in float64
    (error under 1.5e-7, below float32's rounding of the result)."""
    v = x.astype(np.float64) / math.sqrt(2.0)
    a = np.abs(v)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                + t * 1.061405429))))  # fmt: skip
    erf = np.sign(v) * (1.0 - poly * np.exp(-a * a))
    return (0.5 * x.astype(np.float64) * (1.0 + erf)).astype(np.float32)


def linear(w: Weights, prefix: str, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x @ w[f"{prefix}.weight"].T + w[f"{prefix}.bias"]
    return out


def layer_norm(w: Weights, prefix: str, x: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: np.ndarray = (x - mean) / np.sqrt(var + LAYER_NORM_EPS) * w[f"{prefix}.weight"]
    return out + w[f"{prefix}.bias"]


class NumpyTrm:
    """The network of a trm's `model.safetensors` with its sizes (`config.json`'s `config`):
    `n_recursions` (n), `cycles` (T), `supervision_steps` (the most halting steps)."""

    def __init__(self, weights: Weights, n: int, cycles: int, steps: int) -> None:
        unknown = sorted(set(weights) - set(WEIGHT_KEYS))
        missing = sorted(set(WEIGHT_KEYS) - set(weights))
        if unknown or missing:
            # A trm with another layer (or without one) is another network: refuse it rather
            # than score it wrong.
            raise ValueError(f"not the network this forward runs: unknown {unknown}, "
                             f"missing {missing}")  # fmt: skip
        self.w, self.n, self.cycles, self.steps = weights, n, cycles, steps

    @classmethod
    def load(cls, weights: Path, config: Path) -> NumpyTrm:
        meta = json.loads(Path(config).read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"{config}: a trm of version {meta.get('format')}; this forward "
                             f"runs {FORMAT}")  # fmt: skip
        cfg = meta["config"]
        return cls(read_safetensors(weights), int(cfg["n_recursions"]), int(cfg["cycles"]),
                   int(cfg["supervision_steps"]))  # fmt: skip

    def set_layer(self, k: int, h: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """h + MLP([LN(h), its mean over the row's candidates, its max over them])."""
        u = layer_norm(self.w, f"net.{k}.norm", h)
        m = mask[..., None]
        mean = (u * m).sum(1, keepdims=True) / np.maximum(m.sum(1, keepdims=True), 1)
        peak = np.where(m, u, -np.inf).max(1, keepdims=True)
        peak = np.where(np.isfinite(peak), peak, 0.0).astype(np.float32)
        joined = np.concatenate(
            [u, np.broadcast_to(mean, u.shape), np.broadcast_to(peak, u.shape)], -1
        )
        hidden = gelu(linear(self.w, f"net.{k}.mlp.0", joined))
        return h + linear(self.w, f"net.{k}.mlp.2", hidden)

    def f(self, h: np.ndarray, mask: np.ndarray) -> np.ndarray:
        for k in range(SET_LAYERS):
            h = self.set_layer(k, h, mask)
        return h

    def latent_recursion(
        self, x: np.ndarray, y: np.ndarray, z: np.ndarray, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        for _ in range(self.n):
            z = self.f(x + y + z, mask)
        return self.f(y + z, mask), z

    def infer(self, features: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(rows, candidates) scores after each row's halting step (the first whose halting
        logit is > 0) or after `steps`; padding candidates score PAD_SCORE."""
        features = features.astype(np.float32)
        x = linear(self.w, "embed.2", gelu(linear(self.w, "embed.0", features)))
        y = np.broadcast_to(self.w["y0"], x.shape).copy()
        z = np.broadcast_to(self.w["z0"], x.shape).copy()
        final = np.full(mask.shape, PAD_SCORE, dtype=np.float32)
        done = np.zeros(mask.shape[0], dtype=bool)
        m = mask[..., None]
        for step in range(self.steps):
            for _ in range(self.cycles):
                y, z = self.latent_recursion(x, y, z, mask)
            h = layer_norm(self.w, "out_norm", y)
            scores = np.where(mask, linear(self.w, "score", h)[..., 0], PAD_SCORE)
            pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1)
            q = linear(self.w, "halt", pooled)[..., 0]
            halt = ~done & ((q > 0) | (step == self.steps - 1))
            final[halt] = scores[halt]
            done |= halt
            if done.all():
                break
        return final


def pad(blocks: list[np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (candidates, width) features as one (rows, widest, width) batch and its mask."""
    widest = max(len(b) for b in blocks)
    x = np.zeros((len(blocks), widest, width), dtype=np.float32)
    mask = np.zeros((len(blocks), widest), dtype=bool)
    for i, block in enumerate(blocks):
        x[i, : len(block)] = block
        mask[i, : len(block)] = True
    return x, mask
