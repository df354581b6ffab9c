"""The tiny recursive model (SPEC §6), in the sense of Jolicoeur-Martineau (2025), "Less is More:
Recursive Reasoning with Tiny Networks": its network, its recursion, its files and its policy.

Read top to bottom: the one network, the recursion, rows as tensors, files, policy.

- **Input** `x`: each candidate's features (`worker/features/`: the candidate set against
  the state, numbers as numbers; those the trainer's screen kept), each as its scaled value, a
  presence flag and its sign as two flags (`encoding.BLOCKS`), embedded by a small MLP:
  (rows, candidates, hidden).
- **One network** `f`: two residual layers over a candidate set; each candidate also reads the
  mean and the max over the row's candidates (a choice is relative). `dropout` on each layer's
  hidden units while training only: the weights, and the answers at inference, are as without.
- **Latent recursion**: `z <- f(x + y + z)` `n` times, then the answer `y <- f(y + z)`.
- **Deep recursion**: `T` such cycles; the first `T-1` run without gradients, the last with.
- **Heads**: a score per candidate from `y` (padding scores -inf: softmax gives it exactly 0),
  and a halting logit `q` per row (is the current answer right?).
- **Deep supervision** (the trainer, `worker/train/trm.py`): up to `N_sup` steps per batch, each
  a deep recursion from the previous step's detached `(y, z)`, each with its own loss and update.
  At inference a row stops at the first step whose `q > 0`, or after `N_sup`.
- `n = T = N_sup = 1` is the one-step model (the ablation).
- **Wide text part** (optional, `wide` > 0 in the config): a linear score per candidate over the
  row's texts as hashed terms crossed with the candidate (`worker/features/wide.py`), the rare
  words and pairs the feature space leaves out. Its weights (`wide`) are fitted before the
  network as a penalized logistic regression and then frozen (worker/train/trm.py); the network
  learns what to add to it, and one learned gate (`wide_gate`) how much of it to take:
  `score = score(y) + wide_gate * wide_logit`.
- **Files**: `model.safetensors`, `config.json` (sizes and the training config), `features.json`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from core.rundir import FEATURES, TRM_CONFIG, TRM_MODEL, write_bytes_atomic, write_json_atomic
from core.schemas.train import TrmTrainerConfig
from worker.context import StageFailure
from worker.features.wide import BUCKETS, READING, Terms, reading_of, wide_terms
from worker.models.feature_space import FeatureSpace
from worker.models.policy import Policy, files_hash, model_files
from worker.models.rows import read_rows

# v3: each feature read as four columns (value, presence, above 0, below 0: encoding.BLOCKS)
FORMAT = "trm-v3"
SCORE_ROWS = 256  # rows per forward pass when scoring
PAD_SCORE = -1e9  # a padding candidate's score (its softmax share underflows to exactly 0)


# ---- the one network ---------------------------------------------------------------------------
class SetLayer(nn.Module):
    """h + MLP([h, mean over the row's candidates, max over them]), pre-normed. `dropout`
    (training only) on the MLP's hidden units."""

    def __init__(self, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = dropout
        self.norm = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(
            nn.Linear(3 * hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden)
        )

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        u = self.norm(h)
        m = mask.unsqueeze(-1)
        mean = (u * m).sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1)
        peak = u.masked_fill(~m, float("-inf")).amax(1, keepdim=True)
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
        inner = self.mlp[1](self.mlp[0](torch.cat([u, mean.expand_as(u), peak.expand_as(u)], -1)))
        inner = F.dropout(inner, self.dropout, self.training)
        return h + self.mlp[2](inner)


class TinyRecursiveModel(nn.Module):
    def __init__(
        self,
        width: int,
        hidden: int,
        n: int,
        cycles: int,
        dropout: float = 0.0,
        wide_buckets: int = 0,
        wide_reading: int = READING,
    ) -> None:
        super().__init__()
        self.n, self.cycles, self.wide_buckets = n, cycles, wide_buckets
        self.wide_reading = wide_reading  # how its text part reads a row (features/wide.py)
        if wide_buckets:
            # Fitted before the network and frozen (the optimizer never moves it).
            self.wide = nn.Parameter(torch.zeros(wide_buckets), requires_grad=False)
            self.wide_gate = nn.Parameter(torch.ones(()))
        self.embed = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        # the one network f
        self.net = nn.ModuleList([SetLayer(hidden, dropout), SetLayer(hidden, dropout)])
        self.y0 = nn.Parameter(torch.zeros(hidden))
        self.z0 = nn.Parameter(torch.zeros(hidden))
        self.out_norm = nn.LayerNorm(hidden)
        self.score = nn.Linear(hidden, 1)
        self.halt = nn.Linear(hidden, 1)

    def f(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.net:
            h = layer(h, mask)
        return h

    def start(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The initial (y, z) carry for the embedded input `x`."""
        return self.y0.expand_as(x).clone(), self.z0.expand_as(x).clone()

    def latent_recursion(
        self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for _ in range(self.n):
            z = self.f(x + y + z, mask)
        return self.f(y + z, mask), z

    def wide_logits(self, wide: dict[str, torch.Tensor], shape: tuple[int, int]) -> torch.Tensor:
        """(rows, candidates) linear text scores from a batch's hashed terms (`Encoded.batch`'s
        `wide_ids`, `wide_values`, `wide_slot`: the flat row * candidates slot of each term)."""
        flat = torch.zeros(shape[0] * shape[1], device=wide["wide_values"].device)
        flat.index_add_(0, wide["wide_slot"], self.wide[wide["wide_ids"]] * wide["wide_values"])
        return flat.view(shape)

    def deep_recursion(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        z: torch.Tensor,
        mask: torch.Tensor,
        wide: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One supervision step: T-1 gradient-free cycles, one with gradients. Returns the new
        (y, z) (still attached: the trainer detaches them for the next step), the scores
        (rows, candidates) and the halting logits (rows,). `wide`: the linear text part's
        logits (rows, candidates), added through the gate."""
        with torch.no_grad():
            for _ in range(self.cycles - 1):
                y, z = self.latent_recursion(x, y, z, mask)
        y, z = self.latent_recursion(x, y, z, mask)
        h = self.out_norm(y)
        scores = self.score(h).squeeze(-1)
        if wide is not None and self.wide_buckets:
            scores = scores + self.wide_gate * wide
        scores = scores.masked_fill(~mask, PAD_SCORE)
        m = mask.unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1)
        return y, z, scores, self.halt(pooled).squeeze(-1)

    @torch.no_grad()
    def infer(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        steps: int,
        wide: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores after each row's halting step (the first with q > 0) or after `steps`;
        `wide` the linear text part's logits (rows, candidates), for a model that has one."""
        x = self.embed(features)
        y, z = self.start(x)
        final = torch.full(mask.shape, PAD_SCORE, device=x.device)
        done = torch.zeros(mask.shape[0], dtype=torch.bool, device=x.device)
        for step in range(steps):
            y, z, scores, q = self.deep_recursion(x, y, z, mask, wide)
            halt = ~done & ((q > 0) | (step == steps - 1))
            final[halt] = scores[halt]
            done |= halt
            if bool(done.all()):
                break
        return final


# ---- rows as tensors ---------------------------------------------------------------------------
class Encoded:
    """Rows as each candidate's scaled features; `batch(idx)` pads to the batch's widest row.
    With `wide_buckets`, also each candidate's hashed text terms (`worker/features/wide.py`), and
    `wide_override` (rows, candidates) logits that a batch carries instead of the model's own
    (the trainer's out-of-fold logits of the train rows)."""

    def __init__(
        self,
        space: FeatureSpace,
        rows: Sequence[dict[str, Any]],
        wide_buckets: int = 0,
        wide_reading: int = READING,
    ) -> None:
        space.prefetch((r["state"], list(r["tools"])) for r in rows)
        self.features = [space.scaled(r["state"], list(r["tools"])) for r in rows]
        self.terms: list[list[Terms]] = (
            [wide_terms(r["state"], list(r["tools"]), wide_buckets, wide_reading) for r in rows]
            if wide_buckets
            else []
        )
        self.wide_override: list[np.ndarray] | None = None
        self.target = torch.tensor(
            [list(r["tools"]).index(r["action"]) if "action" in r else 0 for r in rows]
        )
        self.width = space.width
        self.rows = rows

    def __len__(self) -> int:
        return len(self.features)

    def candidates(self, idx: torch.Tensor) -> int:
        return sum(len(self.features[int(i)]) for i in idx)

    def batch(self, idx: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        chosen = [self.features[int(i)] for i in idx]
        widest = max(len(c) for c in chosen)
        x = np.zeros((len(chosen), widest, self.width), dtype=np.float32)
        mask = np.zeros((len(chosen), widest), dtype=bool)
        for i, c in enumerate(chosen):
            x[i, : len(c)] = c
            mask[i, : len(c)] = True
        out = {
            "x": torch.from_numpy(x).to(device),
            "mask": torch.from_numpy(mask).to(device),
            "target": self.target[idx].to(device),
        }
        if self.terms:
            out.update(self._wide_batch(idx, widest, device))
        return out

    def _wide_batch(
        self, idx: torch.Tensor, widest: int, device: torch.device
    ) -> dict[str, torch.Tensor]:
        if self.wide_override is not None:
            given = np.zeros((len(idx), widest), dtype=np.float32)
            for i, j in enumerate(idx):
                row = self.wide_override[int(j)]
                given[i, : len(row)] = row
            return {"wide_given": torch.from_numpy(given).to(device)}
        ids: list[int] = []
        values: list[float] = []
        slots: list[int] = []
        for i, j in enumerate(idx):
            for c, terms in enumerate(self.terms[int(j)]):
                ids += terms.ids
                values += terms.values
                slots += [i * widest + c] * len(terms.ids)
        return {
            "wide_ids": torch.tensor(ids, dtype=torch.long, device=device),
            "wide_values": torch.tensor(values, dtype=torch.float32, device=device),
            "wide_slot": torch.tensor(slots, dtype=torch.long, device=device),
        }


def wide_input(model: TinyRecursiveModel, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """A batch's linear text logits for the model (None for a model without the part)."""
    if not model.wide_buckets:
        return None
    if "wide_given" in batch:
        return batch["wide_given"]
    return model.wide_logits(batch, tuple(batch["mask"].shape))  # type: ignore[arg-type]


# ---- files -------------------------------------------------------------------------------------
def build(space: FeatureSpace, config: dict[str, Any]) -> TinyRecursiveModel:
    return TinyRecursiveModel(
        space.width,
        int(config["hidden"]),
        int(config["n_recursions"]),
        int(config["cycles"]),
        float(config.get("dropout") or 0.0),
        wide_buckets(config),
        reading_of(config),
    )


def wide_buckets(config: dict[str, Any]) -> int:
    """The linear text part's buckets a config asks for: 0 without the part; a config from
    before the knob, the default it was trained at."""
    if not float(config.get("wide") or 0.0) > 0:
        return 0
    return int(config.get("wide_buckets") or BUCKETS)


def save_model(
    dirpath: Path, model: TinyRecursiveModel, space: FeatureSpace, meta: dict[str, Any]
) -> list[Path]:
    """model.safetensors, config.json (`meta`: at least the config) and features.json in
    `dirpath`, each written whole."""
    dirpath.mkdir(parents=True, exist_ok=True)
    paths = [dirpath / TRM_MODEL, dirpath / TRM_CONFIG, dirpath / FEATURES]
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    write_bytes_atomic(paths[0], safetensors_bytes(weights))
    write_json_atomic(paths[1], {"format": FORMAT, **meta})
    space.save(paths[2])
    return paths


def load_trm(model_dir: Path, device: str | None = None) -> TrmPolicy:
    """The model in `model_dir` (a trainer/ folder or a checkpoint) as a policy; `dependency`
    when its files are not there or are of another version."""
    files = model_files(model_dir, [TRM_MODEL, TRM_CONFIG, FEATURES], "trm")
    meta = json.loads(files[1].read_text())
    if meta.get("format") != FORMAT:
        raise StageFailure(
            "dependency",
            f"{files[1]}: a trm model of another version ({meta.get('format')}); train it again",
        )
    space = FeatureSpace.load(files[2])
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = build(space, meta["config"])
    model.load_state_dict(load_file(files[0]))
    steps = int(meta["config"]["supervision_steps"])
    return TrmPolicy(model.to(dev), space, steps, dev, f"trm:{model_dir}", files_hash(*files))


def untrained_trm(vocab_rows: Path, seed: int, config: dict[str, Any]) -> TrmPolicy:
    """A trm of `config` (over the spec's defaults) at its seeded initialization, its feature
    space fitted on `vocab_rows` (the bench's training rows): the `none` baseline of a trm bench.
    The global RNG is left as it was."""
    cfg = {**TrmTrainerConfig().model_dump(), **config}
    space = FeatureSpace.fit(read_rows(Path(vocab_rows)))
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = build(space, cfg)
    finally:
        torch.random.set_rng_state(generator_state)
    tag = {"untrained": seed, "config": cfg, "features": space.names}
    digest = hashlib.sha256(json.dumps(tag, sort_keys=True).encode()).hexdigest()
    return TrmPolicy(
        model,
        space,
        int(cfg["supervision_steps"]),
        torch.device("cpu"),
        f"untrained-trm(seed={seed})",
        digest,
    )


# ---- policy ------------------------------------------------------------------------------------
class TrmPolicy(Policy):
    """A model answering `(state, tools) -> action`, with a score per candidate."""

    def __init__(
        self,
        model: TinyRecursiveModel,
        space: FeatureSpace,
        steps: int,
        device: torch.device,
        name: str = "trm",
        model_hash: str = "",
    ) -> None:
        super().__init__()
        self.model, self.space, self.steps = model.eval(), space, steps
        self.device, self.name, self.model_hash = device, name, model_hash

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        if any(not t for t in tools):
            raise ValueError("every row needs at least one candidate")
        rows = [{"state": s, "tools": list(t)} for s, t in zip(states, tools, strict=True)]
        out: list[list[float]] = []
        for start in range(0, len(rows), SCORE_ROWS):
            chunk = rows[start : start + SCORE_ROWS]
            data = Encoded(self.space, chunk, self.model.wide_buckets, self.model.wide_reading)
            b = data.batch(torch.arange(len(data)), self.device)
            wide = wide_input(self.model, b)
            final = self.model.infer(b["x"], b["mask"], self.steps, wide).cpu()
            self.forward_passes += 1
            out += [final[i, : len(r["tools"])].tolist() for i, r in enumerate(data.rows)]
        return out
