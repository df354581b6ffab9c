"""The trm's inference forward in numpy (`TinyRecursiveModel.infer` of worker/models/trm.py, step
for step), over its `model.safetensors` read without torch: what an exported controller runs.

Only numpy, the standard library and the encoder's package (`worker/features`, which an export
ships beside it): an export ships this file with its imports pointed there (`export.py`). A test
holds it to the torch model's scores on the same rows.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from worker.features.wide import reading_of

FORMAT = "trm-v3"  # the version of worker/models/trm.py's model this forward is a port of
PAD_SCORE = -1e9  # a padding candidate's score, as worker/models/trm.py
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default
SET_LAYERS = 2  # the one network f: net.0 and net.1
SMALL_SET = 8  # candidates up to which a set's sums and maxima are taken one candidate at a time
_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}
_HALF, _ONE, _ROOT_HALF = np.float32(0.5), np.float32(1.0), np.float32(1.0 / math.sqrt(2.0))
_EPS = np.float32(LAYER_NORM_EPS)

try:  # optional: an export needs only numpy
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - depends on the environment
    _erf = None

Weights = dict[str, np.ndarray]
Activation = Callable[[np.ndarray], np.ndarray]


def _linear_keys(prefix: str) -> tuple[str, str]:
    return f"{prefix}.weight", f"{prefix}.bias"


# The state dict of worker/models/trm.py's TinyRecursiveModel, by name.
WEIGHT_KEYS = (
    *_linear_keys("embed.0"),
    *_linear_keys("embed.2"),
    *(
        key
        for k in range(SET_LAYERS)
        for part in ("norm", "mlp.0", "mlp.2")
        for key in _linear_keys(f"net.{k}.{part}")
    ),
    "y0",
    "z0",
    *_linear_keys("out_norm"),
    *_linear_keys("score"),
    *_linear_keys("halt"),
)
# The linear text part's, in a model that has one (`wide` > 0): its weights and its gate.
WIDE_KEYS = ("wide", "wide_gate")


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
    """GELU with the exact erf (torch's default): scipy's erf where scipy is installed (the
    service's environment: one ufunc, a third of the polynomial's time on a row's forward), else
    Abramowitz & Stegun 7.1.26 (error under 1.5e-7), written as relu(x) - |x|/2 * poly(t) *
    exp(-x^2/2), which is x/2 * (1 + erf(x/sqrt 2)) with the sign folded in. In float32
    throughout: against float64 the scores moved by under 3e-7 and a batch of 64 rows' forward
    took 40% less time."""
    if _erf is not None:
        # (x/2) * (1 + erf(x/sqrt 2)) in that order, the temporaries reused in place.
        inner = x * _ROOT_HALF
        _erf(inner, out=inner)
        inner += _ONE
        fast: np.ndarray = _HALF * x
        fast *= inner
        return fast
    f = np.float32
    a = np.abs(x)
    t = f(1.0) / (f(1.0) + f(0.3275911 / math.sqrt(2.0)) * a)
    poly = t * (
        f(0.254829592)
        + t * (f(-0.284496736) + t * (f(1.421413741) + t * (f(-1.453152027) + t * f(1.061405429))))
    )
    out: np.ndarray = np.maximum(x, f(0.0)) - f(0.5) * a * poly * np.exp(f(-0.5) * x * x)
    return out


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    # The means over the last axis as products with a column of 1/width (one BLAS call each: a
    # fifth of `np.add.reduce`'s time over rows of 64, and a row's forward makes dozens); in
    # place where a temporary is ours. The sums run in BLAS's order, not numpy's: routerBench's
    # scores moved by under 2e-6.
    width = x.shape[-1]
    flat = x.reshape(-1, width)
    avg = _averager(width)
    centered = flat - flat @ avg
    var = np.square(centered) @ avg
    var += _EPS
    np.sqrt(var, out=var)
    centered /= var
    centered *= weight
    centered += bias
    return centered.reshape(x.shape)


def _averager(width: int) -> np.ndarray:
    """(width, 1) of 1/width in float32: a matrix product with it is each row's mean."""
    avg = _AVERAGERS.get(width)
    if avg is None:
        avg = _AVERAGERS[width] = np.full((width, 1), 1.0 / width, dtype=np.float32)
    return avg


_AVERAGERS: dict[int, np.ndarray] = {}


class SetLayer:
    """h + MLP([LN(h), its mean over the row's candidates, its max over them]); the first
    linear's weight is split in its three column blocks, so the mean's and the max's parts are
    computed once a row, not once a candidate, and nothing is concatenated."""

    def __init__(self, w: Weights, k: int) -> None:
        first = w[f"net.{k}.mlp.0.weight"]  # (2H, 3H): [u | mean | max]
        own, mean, peak = (np.ascontiguousarray(b.T) for b in np.split(first, 3, axis=1))
        self.norm = (w[f"net.{k}.norm.weight"], w[f"net.{k}.norm.bias"])
        self.own, self.mean, self.peak = own, mean, peak
        self.bias0 = w[f"net.{k}.mlp.0.bias"]
        self.out = np.ascontiguousarray(w[f"net.{k}.mlp.2.weight"].T)
        self.bias2 = w[f"net.{k}.mlp.2.bias"]

    def __call__(self, h: np.ndarray, rows: Rows, act: Activation) -> np.ndarray:
        u = layer_norm(h, *self.norm)
        if rows.full:  # no padding: plain means and maxima
            mean, peak = _sum_and_max(u)
            mean /= np.float32(u.shape[1])
        else:
            mean = (u * rows.m).sum(1, keepdims=True) / rows.count
            peak = np.where(rows.m, u, -np.inf).max(1, keepdims=True)
            peak = np.where(np.isfinite(peak), peak, 0.0).astype(np.float32)
        # h + (gelu(u @ own + (mean @ mean_w + peak @ peak_w + b0)) @ out + b2), summed in that
        # order (addition commutes exactly), into temporaries of this call.
        mm = rows.mm
        shared = mm(mean, self.mean)  # (rows, 1, 2H)
        shared += mm(peak, self.peak)
        shared += self.bias0
        inner = mm(u, self.own)
        inner += shared
        out: np.ndarray = mm(act(inner), self.out)
        out += self.bias2
        out += h
        return out


def _sum_and_max(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, 1, width) sums and maxima of (rows, candidates, width) over the candidates: for a
    few candidates one elementwise operation a candidate, in their order (as `np.add.reduce`
    adds them: the same sums; half its time at 4 candidates), else the reductions."""
    count = u.shape[1]
    if count > SMALL_SET or len(u) == 1:  # one row: two calls cost less than a few
        return np.add.reduce(u, 1, keepdims=True), np.maximum.reduce(u, 1, keepdims=True)
    total, peak = u[:, :1].copy(), u[:, :1].copy()
    for k in range(1, count):
        part = u[:, k : k + 1]
        total += part
        np.maximum(peak, part, out=peak)
    return total, peak


class Rows:
    """A batch's mask and what the set layers read of it, worked out once a forward."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask
        self.full = bool(mask.all())
        self.m = mask[..., None]
        self.count = np.maximum(self.m.sum(1, keepdims=True), 1)
        self.pooled_count = np.maximum(self.m.sum(1), 1)  # the halting head's mean
        # A batch of several rows multiplies as one matrix of all its candidates (one BLAS
        # call; numpy's matmul of a stack of matrices makes one a row: at 64 rows the first
        # layer took twice the time); one row as it is.
        self.stacked = mask.shape[0] > 1

    def mm(self, a: np.ndarray, w: np.ndarray) -> np.ndarray:
        """`a @ w` over the last axis, the batch's leading axes flattened into one matrix."""
        if not self.stacked:
            out: np.ndarray = a @ w
            return out
        return (a.reshape(-1, a.shape[-1]) @ w).reshape(*a.shape[:-1], w.shape[-1])


class NumpyTrm:
    """The network of a trm's `model.safetensors` with its sizes (`config.json`'s `config`):
    `n_recursions` (n), `cycles` (T), `supervision_steps` (the most halting steps)."""

    def __init__(
        self,
        weights: Weights,
        n: int,
        cycles: int,
        steps: int,
        act: Activation | None = None,
        wide_reading: int = 1,
    ) -> None:
        wide = [k for k in WIDE_KEYS if k in weights]
        unknown = sorted(set(weights) - set(WEIGHT_KEYS) - set(WIDE_KEYS))
        missing = sorted(set(WEIGHT_KEYS) - set(weights))
        if wide and len(wide) < len(WIDE_KEYS):
            missing += sorted(set(WIDE_KEYS) - set(wide))
        if unknown or missing:
            # A trm with another layer (or without one) is another network: refuse it rather
            # than score it wrong.
            raise ValueError(
                f"not the network this forward runs: unknown {unknown}, missing {missing}"
            )
        w = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}
        self.w, self.n, self.cycles, self.steps = w, n, cycles, steps
        # The GELU: `gelu` here; the service passes torch's for large batches (controller.py).
        self.act: Activation = act or gelu
        self.embed = [
            (np.ascontiguousarray(w[f"embed.{k}.weight"].T), w[f"embed.{k}.bias"]) for k in (0, 2)
        ]
        self.layers = [SetLayer(w, k) for k in range(SET_LAYERS)]
        self.out_norm = (w["out_norm.weight"], w["out_norm.bias"])
        self.score = (w["score.weight"][0], w["score.bias"][0])
        self.halt = (w["halt.weight"][0], w["halt.bias"][0])
        # The linear text part: (buckets,) weights and the gate, or None.
        self.wide = (w["wide"], np.float32(w["wide_gate"])) if wide else None
        # How the text part reads a row (worker/features/wide.py; a config before the field: 1).
        self.wide_reading = wide_reading

    @property
    def wide_buckets(self) -> int:
        """The linear text part's buckets (its terms are hashed into them); 0 without one."""
        return 0 if self.wide is None else len(self.wide[0])

    def wide_logits(self, terms: list[list[Any]], widest: int) -> np.ndarray:
        """(rows, widest) linear text scores of each row's candidates from their hashed terms
        (`worker/features/wide.py`'s `Terms`: `ids` and `values`), as `TinyRecursiveModel.
        wide_logits`; a model without the part scores 0."""
        out = np.zeros((len(terms), widest), dtype=np.float32)
        if self.wide is None:
            return out
        for i, row in enumerate(terms):
            for c, t in enumerate(row):
                ids = np.asarray(t.ids, dtype=np.int64)
                values = np.asarray(t.values, dtype=np.float32)
                out[i, c] = np.add.reduce(self.wide[0][ids] * values) if len(ids) else 0.0
        return out

    @classmethod
    def load(cls, weights: Path, config: Path) -> NumpyTrm:
        meta = json.loads(Path(config).read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(
                f"{config}: a trm of version {meta.get('format')}; this forward runs {FORMAT}"
            )
        cfg = meta["config"]
        return cls(
            read_safetensors(weights),
            int(cfg["n_recursions"]),
            int(cfg["cycles"]),
            int(cfg["supervision_steps"]),
            wide_reading=reading_of(cfg),
        )

    def f(self, h: np.ndarray, rows: Rows) -> np.ndarray:
        for layer in self.layers:
            h = layer(h, rows, self.act)
        return h

    def latent_recursion(
        self, x: np.ndarray, y: np.ndarray, z: np.ndarray, rows: Rows
    ) -> tuple[np.ndarray, np.ndarray]:
        for _ in range(self.n):
            z = self.f(x + y + z, rows)
        return self.f(y + z, rows), z

    def infer(
        self, features: np.ndarray, mask: np.ndarray, wide: np.ndarray | None = None
    ) -> np.ndarray:
        """(rows, candidates) scores after each row's halting step (the first whose halting
        logit is > 0) or after `steps`; padding candidates score PAD_SCORE. `wide`: the linear
        text part's logits (`wide_logits`), for a model that has the part."""
        (w0, b0), (w2, b2) = self.embed
        rows = Rows(mask)
        mm = rows.mm
        x = mm(self.act(mm(features.astype(np.float32, copy=False), w0) + b0), w2) + b2
        y = np.empty_like(x)
        y[...] = self.w["y0"]
        z = np.empty_like(x)
        z[...] = self.w["z0"]
        final = np.full(mask.shape, PAD_SCORE, dtype=np.float32)
        done = np.zeros(mask.shape[0], dtype=bool)
        for step in range(self.steps):
            for _ in range(self.cycles):
                y, z = self.latent_recursion(x, y, z, rows)
            h = layer_norm(y, *self.out_norm)
            linear = h @ self.score[0] + self.score[1]
            if wide is not None and self.wide is not None:
                linear = linear + self.wide[1] * wide
            scores = np.where(mask, linear, PAD_SCORE)
            pooled = (h if rows.full else h * rows.m).sum(1) / rows.pooled_count
            q = pooled @ self.halt[0] + self.halt[1]
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
