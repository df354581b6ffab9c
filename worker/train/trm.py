"""The `trm` trainer (SPEC §6): a tiny recursive model trained from scratch on normalized rows.

Read top to bottom: config, tokenizer, model, data, saving, `train()`, `load_trm()`.

- Tokenizer, built from the train split and saved as `vocab.json`: the state JSON becomes one
  "leaf" per scalar (its key path, its last key, its value, and the value as a number when it is
  one); a candidate id becomes sub-tokens (split on `_ - : . / +`, spaces and camelCase, lower
  case) plus the whole id, so namespaced actions (`route.local`, `use-trm`) share pieces.
- Model: leaves are embedded and mixed by one self-attention layer (the state encoder); each
  candidate is embedded from its pieces (the candidate encoder). A latent `z` and an answer `y`
  per candidate are refined `n_recursions` times: `z` reads the state through attention queried
  by the candidate, sees the other candidates' answers (a choice is relative), and updates `y`.
  Every recursion scores the candidates and is supervised (deep supervision), so later
  recursions learn to correct earlier ones.
- Rows have different numbers of candidates: padding slots get a score of -inf, so softmax gives
  them exactly zero probability and the cross-entropy is over each row's own candidates.
- Checkpoints (`checkpoints/step-NNNNNN/`: model, vocabulary, optimizer, step, RNG; written
  atomically by `checkpoints.py`, shared with `qlora`) every `checkpoint_every` steps and on a
  stop; `train()` resumes from the newest one. The data order is a function of (seed, epoch), so
  a resumed run takes the same batches as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from worker.context import StageFailure
from worker.train import checkpoints
from worker.train.callbacks import TrainerCallbacks
from worker.train.memory import Rss, peak_vram, reset_peak_vram

DEFAULTS: dict[str, Any] = {
    "n_recursions": 4,
    "hidden": 64,
    "epochs": 8,
    "max_steps": None,
    "batch_size": 32,
    "lr": 3e-3,
    "seed": 0,
    # Not in the spec model: set by the OOM retry (half the batch, twice the accumulation).
    "grad_accum": 1,
    "checkpoint_every": 100,
}
# Keys that may change between attempts without invalidating a checkpoint (the OOM retry).
RESUMABLE_CHANGES = ("batch_size", "grad_accum", "checkpoint_every")
MODEL_FILE, CONFIG_FILE, VOCAB_FILE = "model.safetensors", "config.json", "vocab.json"
MAX_PATH, MAX_PIECES, MAX_WORDS = 6, 8, 24  # key-path pieces per leaf, pieces per id, words/str
PAD, UNK = "<pad>", "<unk>"
EVAL_SPLITS = ("val", "anchor")

# ---- tokenizer ---------------------------------------------------------------------------------
_SEPARATORS = re.compile(r"[\s_\-:./+,;=()\[\]{}\"'!?]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+\d*|\d+")


def pieces(text: str) -> list[str]:
    """`TRM_PLUS_LLM` -> trm plus llm; `route.local` -> route local; `useTrm` -> use trm."""
    return [p.lower() for part in _SEPARATORS.split(text) for p in _CAMEL.findall(part)]


def id_pieces(tool: str) -> list[str]:
    return ([*pieces(tool)[: MAX_PIECES - 1], tool.lower()])[-MAX_PIECES:]


@dataclass
class Leaf:
    path: list[str]
    key: str
    value: str
    number: float | None


def leaves(state: str) -> list[Leaf]:
    """The state as leaves; a state that is not JSON is one string value."""
    try:
        obj = json.loads(state)
    except (TypeError, ValueError):
        obj = state
    out: list[Leaf] = []

    def walk(node: Any, path: list[str], key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, [*path, *pieces(str(k))], str(k).lower())
        elif isinstance(node, list):
            for item in node:
                walk(item, path, key)
        elif isinstance(node, bool) or node is None:
            out.append(Leaf(path[-MAX_PATH:], key, str(node).lower(), None))
        elif isinstance(node, int | float):
            number = math.copysign(math.log1p(abs(node)), node) / 4.0
            out.append(Leaf(path[-MAX_PATH:], key, repr(node), number))
        elif " " in node.strip() or len(node) > 32:  # free text: one leaf per word
            for word in pieces(node)[:MAX_WORDS]:
                out.append(Leaf(path[-MAX_PATH:], key, word, None))
        else:  # short strings (ids, families) compare whole
            out.append(Leaf(path[-MAX_PATH:], key, node.lower(), None))

    walk(obj, [], "")
    return out or [Leaf([], "", "<empty>", None)]


class Tokenizer:
    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.index = {t: i for i, t in enumerate(tokens)}

    @classmethod
    def build(cls, rows: list[dict[str, Any]], max_size: int = 20000) -> Tokenizer:
        counts: Counter[str] = Counter()
        for row in rows:
            for leaf in leaves(row["state"]):
                counts.update([*leaf.path, leaf.key, leaf.value])
            for tool in row["tools"]:
                counts.update(id_pieces(tool))
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max_size - 2]
        return cls([PAD, UNK, *[t for t, _ in ranked]])

    def id(self, token: str) -> int:
        return max(self.index.get(token, 1), 1)  # a literal "<pad>" in the data is unknown

    def encode(self, state: str, tools: list[str]) -> dict[str, Any]:
        ls = leaves(state)
        return {
            "path": [[self.id(p) for p in leaf.path] for leaf in ls],
            "key": [self.id(leaf.key) for leaf in ls],
            "value": [self.id(leaf.value) for leaf in ls],
            "number": [(leaf.number or 0.0, float(leaf.number is not None)) for leaf in ls],
            "cand": [[self.id(p) for p in id_pieces(t)] for t in tools],
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"tokens": self.tokens}, ensure_ascii=False))

    @classmethod
    def load(cls, path: Path) -> Tokenizer:
        return cls(json.loads(path.read_text())["tokens"])


# ---- model -------------------------------------------------------------------------------------
def _mean(embedded: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    mask = (ids != 0).unsqueeze(-1).to(embedded.dtype)
    return (embedded * mask).sum(-2) / mask.sum(-2).clamp(min=1.0)


class TinyRecursiveModel(nn.Module):
    def __init__(self, vocab_size: int, hidden: int, n_recursions: int):
        super().__init__()
        self.n_recursions = n_recursions
        h = hidden
        self.embed = nn.Embedding(vocab_size, h, padding_idx=0)
        self.leaf = nn.Sequential(nn.Linear(3 * h + 2, 2 * h), nn.GELU(), nn.Linear(2 * h, h))
        self.mix = nn.TransformerEncoderLayer(
            h, math.gcd(h, 4), 2 * h, dropout=0.0, batch_first=True, norm_first=True
        )
        self.cand = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.Linear(h, h), nn.LayerNorm(h))
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.think = nn.Sequential(nn.Linear(6 * h, 2 * h), nn.GELU(), nn.Linear(2 * h, h))
        self.answer = nn.Sequential(nn.Linear(2 * h, 2 * h), nn.GELU(), nn.Linear(2 * h, h))
        self.norm_z, self.norm_y = nn.LayerNorm(h), nn.LayerNorm(h)
        self.y0 = nn.Parameter(torch.zeros(h))
        self.score = nn.Linear(h, 1)

    def forward(self, b: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """Scores (batch, candidates) after each recursion; padding candidates score -inf."""
        leaf_mask, cand_mask = b["key"] != 0, b["cand"][..., 0] != 0
        e = self.embed
        x = torch.cat([_mean(e(b["path"]), b["path"]), e(b["key"]), e(b["value"]), b["number"]], -1)
        s = self.mix(self.leaf(x), src_key_padding_mask=~leaf_mask)  # (B, L, H)
        s = s.masked_fill(~leaf_mask.unsqueeze(-1), 0.0)
        g = s.sum(1) / leaf_mask.sum(1, keepdim=True)  # the whole state, (B, H)
        c = self.cand(_mean(e(b["cand"]), b["cand"]))  # (B, C, H)
        keys, values = self.key(s), self.value(s)
        cm = cand_mask.unsqueeze(-1).to(c.dtype)
        z, y = torch.zeros_like(c), self.y0.expand_as(c)
        g = g.unsqueeze(1).expand_as(c)
        out = []
        for _ in range(self.n_recursions):
            att = torch.einsum("bch,blh->bcl", self.query(z + c), keys) / math.sqrt(c.shape[-1])
            att = att.masked_fill(~leaf_mask.unsqueeze(1), float("-inf")).softmax(-1)
            read = torch.einsum("bcl,blh->bch", att, values)
            peers = ((y * cm).sum(1, keepdim=True) / cm.sum(1, keepdim=True)).expand_as(c)
            z = self.norm_z(z + self.think(torch.cat([c, y, z, read, g, peers], -1)))
            y = self.norm_y(y + self.answer(torch.cat([y, z], -1)))
            out.append(self.score(y).squeeze(-1).masked_fill(~cand_mask, float("-inf")))
        return out


# ---- data --------------------------------------------------------------------------------------
def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            state, tools, action = row["state"], row["tools"], row["action"]
        except (ValueError, KeyError, TypeError):
            raise StageFailure(
                "bad_input",
                f"{path.name} line {n}: not a corpus row with state, tools, action; "
                "rebuild the corpus (prepare_corpus) or fix the file",
            ) from None
        if not isinstance(tools, list) or action not in tools:
            raise StageFailure(
                "bad_input", f"{path.name} line {n}: the action is not one of the row's tools"
            )
        rows.append({"state": state if isinstance(state, str) else json.dumps(state),
                     "tools": [str(t) for t in tools], "action": action})  # fmt: skip
    return rows


def _pad(seq: list[Any], length: int, fill: Any) -> list[Any]:
    return seq + [fill] * (length - len(seq))


class Encoded:
    """One split as padded tensors; `batch(idx)` trims padding to the batch's longest row."""

    def __init__(self, tok: Tokenizer, rows: list[dict[str, Any]]):
        enc = [tok.encode(r["state"], r["tools"]) for r in rows]
        lmax = max(len(e["key"]) for e in enc)
        cmax = max(len(e["cand"]) for e in enc)
        no_path, no_cand = [0] * MAX_PATH, [0] * MAX_PIECES
        paths = [_pad([_pad(p, MAX_PATH, 0) for p in e["path"]], lmax, no_path) for e in enc]
        self.path = torch.tensor(paths, dtype=torch.long)
        # A key id 0 would read as padding: a leaf with an empty key gets <unk> instead.
        self.key = torch.tensor([_pad([k or 1 for k in e["key"]], lmax, 0) for e in enc])
        self.value = torch.tensor([_pad(e["value"], lmax, 0) for e in enc])
        self.number = torch.tensor([_pad(e["number"], lmax, (0.0, 0.0)) for e in enc])
        cands = [_pad([_pad(c, MAX_PIECES, 0) for c in e["cand"]], cmax, no_cand) for e in enc]
        self.cand = torch.tensor(cands, dtype=torch.long)
        self.target = torch.tensor([r["tools"].index(r["action"]) for r in rows])
        self.leaves = torch.tensor([len(e["key"]) for e in enc])
        self.tokens = torch.tensor([len(e["key"]) + sum(map(len, e["cand"])) for e in enc])
        self.actions = [r["action"] for r in rows]
        self.rows = rows

    def __len__(self) -> int:
        return len(self.target)

    def batch(self, idx: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        lmax = int(self.leaves[idx].max())
        cmax = int((self.cand[idx, :, 0] != 0).sum(1).max())
        parts = {
            "path": self.path[idx, :lmax], "key": self.key[idx, :lmax],
            "value": self.value[idx, :lmax], "number": self.number[idx, :lmax],
            "cand": self.cand[idx, :cmax], "target": self.target[idx],
        }  # fmt: skip
        return {k: v.to(device) for k, v in parts.items()}


def deep_supervision_loss(outs: list[torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """Summed (not averaged) over rows: callers divide by the rows of the optimizer step."""
    total = sum(F.cross_entropy(o, target, reduction="sum") for o in outs)
    return cast(torch.Tensor, total) / len(outs)


@torch.no_grad()
def evaluate(model: TinyRecursiveModel, data: Encoded, device: torch.device) -> dict[str, float]:
    model.eval()
    correct, loss = 0, 0.0
    for start in range(0, len(data), 256):
        idx = torch.arange(start, min(start + 256, len(data)))
        b = data.batch(idx, device)
        final = model(b)[-1]
        loss += float(F.cross_entropy(final, b["target"], reduction="sum"))
        correct += int((final.argmax(-1) == b["target"]).sum())
    model.train()
    majority = Counter(data.actions).most_common(1)[0][1] / len(data)
    return {"accuracy": correct / len(data), "loss": loss / len(data), "majority": majority}


# ---- saving -------------------------------------------------------------------------------------
def save_model(dirpath: Path, model: TinyRecursiveModel, tok: Tokenizer, meta: dict) -> list[Path]:
    dirpath.mkdir(parents=True, exist_ok=True)
    paths = [dirpath / MODEL_FILE, dirpath / CONFIG_FILE, dirpath / VOCAB_FILE]
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, paths[0])
    paths[1].write_text(json.dumps(meta, indent=2))
    tok.save(paths[2])
    return paths


# ---- training ----------------------------------------------------------------------------------
def train(
    config: dict[str, Any],
    corpus_dir: Path,
    out_dir: Path,
    callbacks: TrainerCallbacks,
    *,
    seed: int,
    contract: str = "action_only",
    probe: bool = False,
    model_cache: Path | None = None,
) -> dict[str, Any]:
    """Train on `corpus_dir/train.jsonl`; write model.safetensors, config.json, vocab.json.

    `seed` (the run's) drives init and data order; `contract` and `model_cache` are unused here
    (same signature as the other trainers). `probe` runs exactly one batch end to end.
    """
    threads = torch.get_num_threads()
    # A model this small runs several times faster on one CPU thread than on a busy many.
    if not torch.cuda.is_available() and int(config.get("hidden") or 64) <= 256:
        torch.set_num_threads(1)
    try:
        return _train(config, Path(corpus_dir), Path(out_dir), callbacks, seed=seed, probe=probe)
    finally:
        torch.set_num_threads(threads)


def _train(
    config: dict[str, Any],
    corpus_dir: Path,
    out_dir: Path,
    callbacks: TrainerCallbacks,
    *,
    seed: int,
    probe: bool,
) -> dict[str, Any]:
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise StageFailure("bad_input", f"trm config: unknown key {unknown[0]!r}")
    cfg = {**DEFAULTS, **{k: v for k, v in config.items() if v is not None or k == "max_steps"}}
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = read_rows(corpus_dir / "train.jsonl")
    if not rows:
        raise StageFailure(
            "bad_input", f"{corpus_dir / 'train.jsonl'} has no rows: check the corpus sources and "
            "corpus/manifest.json (rows left out and why)",
        )  # fmt: skip
    fingerprint = checkpoints.fingerprint(
        {**cfg, "seed": seed}, RESUMABLE_CHANGES, [corpus_dir / "train.jsonl"]
    )
    resume = None if probe else checkpoints.resume_point(out_dir, fingerprint)
    tok = Tokenizer.load(resume / VOCAB_FILE) if resume else Tokenizer.build(rows)
    data = Encoded(tok, rows)
    evals = {s: Encoded(tok, r) for s in EVAL_SPLITS if (r := read_rows(corpus_dir / f"{s}.jsonl"))}

    micro, accum = int(cfg["batch_size"]), 1 if probe else int(cfg["grad_accum"])
    per_step = micro * accum  # the effective batch: the OOM retry keeps it
    steps_per_epoch = math.ceil(len(data) / per_step)
    total = 1 if probe else cfg["max_steps"] or int(cfg["epochs"]) * steps_per_epoch
    meta = {
        "format": "trm-v1", "vocab_size": len(tok.tokens), "hidden": cfg["hidden"],
        "n_recursions": cfg["n_recursions"], "config": cfg, "seed": seed, "total_steps": total,
    }  # fmt: skip

    torch.manual_seed(seed)
    model = TinyRecursiveModel(len(tok.tokens), cfg["hidden"], cfg["n_recursions"]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    step, last_loss, stopped_by = 0, None, None
    if resume:  # the weights, optimizer and RNG as they were at its step
        model.load_state_dict(load_file(resume / MODEL_FILE, device=str(device)))
        state = checkpoints.load(resume, optimizer)
        step, last_loss = int(state["step"]), state.get("loss")
    resumed_from = step if resume else None

    def lr_at(s: int) -> float:  # linear warmup, cosine down to a tenth
        warm = max(1, total // 20)
        if s < warm:
            return cfg["lr"] * (s + 1) / warm
        return cfg["lr"] * (
            0.1 + 0.45 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm)))
        )

    def checkpoint(at: int) -> None:
        weights = partial(save_model, model=model, tok=tok, meta=meta)
        state = {"loss": last_loss, "fingerprint": fingerprint}
        path = checkpoints.save(out_dir, at, weights, optimizer, None, state)
        callbacks.on_checkpoint(at, path)

    reset_peak_vram()
    rss = Rss()
    rows_done = tokens_done = 0
    started = time.perf_counter()
    model.train()
    while step < total:
        if (stopped_by := callbacks.should_stop()) is not None:
            break
        epoch, i = divmod(step, steps_per_epoch)
        shuffle = torch.Generator().manual_seed(seed * 7919 + epoch)
        order = torch.randperm(len(data), generator=shuffle)
        idx = order[i * per_step : (i + 1) * per_step]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for chunk in idx.split(micro):
            b = data.batch(chunk, device)
            loss = deep_supervision_loss(model(b), b["target"]) / len(idx)
            loss.backward()
            step_loss += float(loss.detach())
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        rss.sample()
        step, last_loss = step + 1, step_loss
        rows_done += len(idx)
        tokens_done += int(data.tokens[idx].sum())
        rate = tokens_done / max(time.perf_counter() - started, 1e-9)
        callbacks.on_step(step, total, loss=round(step_loss, 5), lr=lr_at(step - 1),
                          tokens_per_s=round(rate, 1), tokens_trained=tokens_done)  # fmt: skip
        if step % steps_per_epoch == 0 or step == total:
            for split, split_data in evals.items():
                res = evaluate(model, split_data, device)
                callbacks.on_eval(step, **{f"{split}_{k}": round(v, 4) for k, v in res.items()})
        if not probe and step % int(cfg["checkpoint_every"]) == 0 and step < total:
            checkpoint(step)
    if not probe:
        checkpoint(step)  # on a stop, and at the end: a re-run resumes instead of retraining

    metrics = {s: evaluate(model, d, device) for s, d in evals.items()}
    meta.update(steps=step, final_loss=last_loss, eval=metrics)
    artifacts = save_model(out_dir, model, tok, meta)
    return {
        "trainer": "trm",
        "steps": step,
        "total_steps": total,
        "final_loss": last_loss,
        "rows_trained": rows_done,
        "tokens_trained": tokens_done,
        "stopped_by": stopped_by,
        "artifacts": [str(p) for p in artifacts],
        "resumed_from_step": resumed_from,
        "device": device.type,
        "peak_vram_bytes": peak_vram(),
        "peak_rss_bytes": rss.peak,
        "micro_batch": micro,
        "grad_accum": accum,
        "train_seconds": round(time.perf_counter() - started, 3),
        "eval": {s: {k: round(v, 4) for k, v in m.items()} for s, m in metrics.items()},
    }


# ---- loading for evaluation --------------------------------------------------------------------
class TrmPolicy:
    """A trained model answering `(state, tools) -> action`, with a score per candidate."""

    def __init__(self, model: TinyRecursiveModel, tokenizer: Tokenizer, device: torch.device):
        self.model, self.tokenizer, self.device = model.eval(), tokenizer, device

    @torch.no_grad()
    def scores_batch(self, states: list[str], tools: list[list[str]]) -> list[list[float]]:
        if any(not t for t in tools):
            raise ValueError("every row needs at least one candidate")
        rows = [
            {"state": s, "tools": t, "action": t[0]} for s, t in zip(states, tools, strict=True)
        ]
        out: list[list[float]] = []
        for start in range(0, len(rows), 256):
            data = Encoded(self.tokenizer, rows[start : start + 256])
            final = self.model(data.batch(torch.arange(len(data)), self.device))[-1].cpu()
            out.extend(final[i, : len(r["tools"])].tolist() for i, r in enumerate(data.rows))
        return out

    def scores(self, state: str, tools: list[str]) -> list[float]:
        return self.scores_batch([state], [tools])[0]

    def act(self, state: str, tools: list[str]) -> str:
        scores = self.scores(state, tools)
        return tools[max(range(len(tools)), key=scores.__getitem__)]


def load_trm(model_dir: Path, device: str | None = None) -> TrmPolicy:
    """Load model.safetensors + config.json + vocab.json (a trainer/ folder or a checkpoint)."""
    model_dir = Path(model_dir)
    meta = json.loads((model_dir / CONFIG_FILE).read_text())
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = TinyRecursiveModel(meta["vocab_size"], meta["hidden"], meta["n_recursions"])
    model.load_state_dict(load_file(model_dir / MODEL_FILE))
    return TrmPolicy(model.to(dev), Tokenizer.load(model_dir / VOCAB_FILE), dev)
