"""The tiny recursive model (SPEC §6): its tokenizer, its network, its files and its policy.

Read top to bottom: tokenizer, model, rows as the model reads them, files, policy.

- Tokenizer, built from the train split and saved as `vocab.json`: the state JSON becomes one
  "leaf" per scalar (its key path, its last key, its value, and the value as a number when it is
  one); a candidate id becomes sub-tokens (split on `_ - : . / +`, spaces and camelCase, lower
  case) plus the whole id, so namespaced actions (`route.local`, `use-trm`) share pieces.
- Model: leaves are embedded and mixed by one self-attention layer (the state encoder); each
  candidate is embedded from its pieces (the candidate encoder). A latent `z` and an answer `y`
  per candidate are refined `n_recursions` times: `z` reads the state through attention queried
  by the candidate, sees the other candidates' answers (a choice is relative), and updates `y`.
  Every recursion scores the candidates (the trainer supervises each one: deep supervision).
- Rows have different numbers of candidates: padding slots get a score of -inf, so softmax gives
  them exactly zero probability.
- Files: `model.safetensors`, `config.json` (sizes and the training config), `vocab.json`; the
  trainer writes them into `trainer/` and into each checkpoint, `load_trm` reads either.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from core.rundir import (
    TRM_CONFIG,
    TRM_MODEL,
    TRM_VOCAB,
    atomic_file,
    write_bytes_atomic,
    write_json_atomic,
)
from core.schemas.train import TrmTrainerConfig
from worker.context import StageFailure
from worker.models.policy import Policy, files_hash

MAX_PATH, MAX_PIECES, MAX_WORDS = 6, 8, 24  # key-path pieces per leaf, pieces per id, words/str
PAD, UNK = "<pad>", "<unk>"
SCORE_ROWS = 256  # rows per forward pass when scoring


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
        with atomic_file(path) as fh:
            fh.write(json.dumps({"tokens": self.tokens}, ensure_ascii=False))

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


# ---- rows as the model reads them --------------------------------------------------------------
def read_rows(path: Path) -> list[dict[str, Any]]:
    """A corpus split (`train.jsonl`, ...) as rows of state (JSON text), tools, action; a missing
    file has none; a line that is not such a row is `bad_input`."""
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
    """Rows as padded tensors; `batch(idx)` trims padding to the batch's longest row."""

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


# ---- files -------------------------------------------------------------------------------------
def save_model(dirpath: Path, model: TinyRecursiveModel, tok: Tokenizer, meta: dict) -> list[Path]:
    """model.safetensors, config.json (`meta`: at least vocab_size, hidden, n_recursions) and
    vocab.json in `dirpath`, each written whole."""
    dirpath.mkdir(parents=True, exist_ok=True)
    paths = [dirpath / TRM_MODEL, dirpath / TRM_CONFIG, dirpath / TRM_VOCAB]
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    write_bytes_atomic(paths[0], safetensors_bytes(weights))
    write_json_atomic(paths[1], meta)
    tok.save(paths[2])
    return paths


def load_trm(model_dir: Path, device: str | None = None) -> TrmPolicy:
    """The model in `model_dir` (a trainer/ folder or a checkpoint) as a policy; `dependency`
    when its files are not there."""
    model_dir = Path(model_dir)
    files = [model_dir / TRM_MODEL, model_dir / TRM_CONFIG, model_dir / TRM_VOCAB]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise StageFailure(
            "dependency",
            f"no trm model at {model_dir}: missing {', '.join(missing)} (a completed trm train "
            "run leaves them in <run>/trainer/)",
        )
    meta = json.loads(files[1].read_text())
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = TinyRecursiveModel(meta["vocab_size"], meta["hidden"], meta["n_recursions"])
    model.load_state_dict(load_file(files[0]))
    tokenizer = Tokenizer.load(files[2])
    return TrmPolicy(model.to(dev), tokenizer, dev, f"trm:{model_dir}", files_hash(*files))


def untrained_trm(vocab_rows: Path, seed: int, config: dict[str, Any]) -> TrmPolicy:
    """A trm of `config` (over the spec's defaults) at its seeded initialization, with a
    vocabulary built from `vocab_rows` (the bench's training rows): the `none` baseline of a trm
    bench. The global RNG is left as it was."""
    cfg = {**TrmTrainerConfig().model_dump(), **config}
    tokenizer = Tokenizer.build(read_rows(Path(vocab_rows)))
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = TinyRecursiveModel(len(tokenizer.tokens), cfg["hidden"], cfg["n_recursions"])
    finally:
        torch.random.set_rng_state(generator_state)
    tag = {"untrained": seed, "hidden": cfg["hidden"], "n": cfg["n_recursions"],
           "vocab": tokenizer.tokens}  # fmt: skip
    digest = hashlib.sha256(json.dumps(tag).encode()).hexdigest()
    return TrmPolicy(model, tokenizer, torch.device("cpu"), f"untrained-trm(seed={seed})", digest)


# ---- policy ------------------------------------------------------------------------------------
class TrmPolicy(Policy):
    """A model answering `(state, tools) -> action`, with a score per candidate."""

    def __init__(
        self,
        model: TinyRecursiveModel,
        tokenizer: Tokenizer,
        device: torch.device,
        name: str = "trm",
        model_hash: str = "",
    ) -> None:
        super().__init__()
        self.model, self.tokenizer, self.device = model.eval(), tokenizer, device
        self.name, self.model_hash = name, model_hash

    @torch.no_grad()
    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        if any(not t for t in tools):
            raise ValueError("every row needs at least one candidate")
        rows = [
            {"state": s, "tools": list(t), "action": t[0]}
            for s, t in zip(states, tools, strict=True)
        ]
        out: list[list[float]] = []
        for start in range(0, len(rows), SCORE_ROWS):
            data = Encoded(self.tokenizer, rows[start : start + SCORE_ROWS])
            final = self.model(data.batch(torch.arange(len(data)), self.device))[-1].cpu()
            self.forward_passes += 1
            out.extend(final[i, : len(r["tools"])].tolist() for i, r in enumerate(data.rows))
        return out

    def scores(self, state: str, tools: list[str]) -> list[float]:
        return self.scores_batch([state], [tools])[0]
