"""The feature space a model reads (SPEC §6): which of the named numbers of `worker/features/`
(`row_features`) exist, in what order, and how the neural model scales them; fitted on the train
rows, saved as JSON beside the model (`features.json`), loaded with it.

A feature is kept when it is seen often enough (`MIN_SHARE` of the train rows, at least twice), in
enough of the train worlds to carry to an unseen one (half of them, up to `MIN_ENVS`: a name one
world alone uses only lets a model memorize that world; counted among the worlds whose states
hold what it reads, so a grid, a plan or a list only some worlds have is read where it is), and
not with one value on every candidate. Words of the context's texts (`W:`, and `X:W:` crossed
with the candidates) have a budget of their own (`MAX_WORDS`), so a long prompt's vocabulary
never crowds out what the state's structure says.

`text_encoder`: `tokens` (the default) reads texts as words only; `smollm2` adds what the frozen
sentence encoder reads in each long context text (`E:`, worker/features/embed.py and
worker/models/sentence.py), computed here beside `row_features` (which stays stdlib) and saved as
the space's `text_encoder` (features.json has the key only when it is not `tokens`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from core.rundir import write_json_atomic
from worker.context import StageFailure
from worker.features import kinds
from worker.features.embed import embedding_features, long_texts
from worker.features.row import row_features as row_features
from worker.models.encoding import BLOCKS, raw_matrix, scaled_matrix

MIN_SHARE = 0.005  # a feature must occur in this share of train rows (and at least twice)
MIN_ENVS = 3  # ... and in half the train worlds (envs), up to this many
MAX_FEATURES = 4096  # features other than a text's words
MAX_WORDS = 2048  # words of the context's texts (`W:`), the most frequent
# /4: plans read step by step (plans.py), aligned fields looked up by a context string
# /5: text read as words and matched with the candidates', grids read around their anchors,
# lists of strings in order
# /6: a state flattened to dotted keys read back nested also where a list holds objects (the
# collections, alignments and plans of a `minimal` state read as the `full` one's)
FORMAT = "trm-features/6"
_UNSAFE = re.compile(r"[^0-9A-Za-z_]+")
WORDS = (kinds.start("W"), kinds.start("X") + kinds.start("W"))
# Cells around a grid's anchors crossed with the candidate: many per row, and a model that reads
# the whole row at once (the trm) combines cells with candidates itself.
CROSSED_CELLS = kinds.start("X") + kinds.start("WIN")


@dataclass
class FeatureSpace:
    """The feature names a model reads, in order, and how the neural model scales them: a
    signed log (numbers keep their order and sign, large ones are tamed), then the train rows'
    mean and spread."""

    names: list[str]
    mean: list[float]
    scale: list[float]
    text_encoder: str = "tokens"

    @classmethod
    def fit(
        cls,
        rows: Iterable[dict[str, Any]],
        crossed_cells: bool = True,
        text_encoder: str = "tokens",
    ) -> FeatureSpace:
        """`crossed_cells=False` leaves out the grid cells crossed with a candidate id
        (`X:WIN:`): a ranker of one candidate at a time needs them to tell candidates apart on
        a cell they share; the trm sees the whole row and combines them itself, at a fraction
        of the width (and of the training time: grid at gen seed 4242, 208 s -> 50 s). Words
        crossed with the candidate stay: without them a tiny trm learned a decision made by
        the prompt's words alone to 0.97, not 1.0."""
        embed = _embedder(text_encoder)
        if embed is not None:
            rows = list(rows)
            embed.prefetch([(r["state"], list(r["tools"])) for r in rows])
        counts: Counter[str] = Counter()
        sums: dict[str, list[float]] = {}
        envs: dict[str, set[str]] = {}
        all_envs: set[str] = set()
        total = candidates = 0
        for row in rows:
            total += 1
            env = str(row.get("env") or "")
            all_envs.add(env)
            seen: set[str] = set()
            features_of = row_features(row["state"], row["tools"])
            if embed is not None:
                for features, more in zip(
                    features_of, embed.features(row["state"], row["tools"]), strict=True
                ):
                    features.update(more)
            for features in features_of:
                candidates += 1
                for name, value in features.items():
                    if not crossed_cells and name.startswith(CROSSED_CELLS):
                        continue
                    seen.add(name)
                    acc = sums.setdefault(name, [0.0, 0.0, 0.0])
                    v = _squash(value)
                    acc[0] += 1
                    acc[1] += v
                    acc[2] += v * v
            counts.update(seen)
            for name in seen:
                envs.setdefault(name, set()).add(env)
        floor = max(2, math.ceil(MIN_SHARE * total))
        worlds = _world_floors(envs, len(all_envs))
        kept = sorted(
            (
                n
                for n, c in counts.items()
                if c >= floor and len(envs[n]) >= worlds[n] and not _constant(sums[n], candidates)
            ),
            key=lambda n: (-counts[n], n),
        )
        structure = [n for n in kept if not n.startswith(WORDS)]
        words = [n for n in kept if n.startswith(WORDS)]
        names = sorted(structure[:MAX_FEATURES] + words[:MAX_WORDS])
        mean, scale = [], []
        for name in names:
            k, s, ss = sums[name]
            mu = s / k
            mean.append(mu)
            spread = math.sqrt(max(ss / k - mu * mu, 0.0))
            scale.append(spread if spread > 1e-6 else 1.0)  # one value: rounding, not spread
        return cls(names, mean, scale, text_encoder)

    def subset(self, columns: list[int]) -> FeatureSpace:
        """The space of these columns alone (in the order given), each scaled as here."""
        return FeatureSpace(
            [self.names[i] for i in columns],
            [self.mean[i] for i in columns],
            [self.scale[i] for i in columns],
            self.text_encoder,
        )

    @property
    def columns(self) -> list[str]:
        """A safe, unique column name per feature, in order, for LightGBM (which refuses JSON's
        special characters): `f0012_D_A_routes_cost_budget`. The names themselves stay in
        features.json; `self.names[i]` is column i's."""
        return [f"f{i:04d}_{_UNSAFE.sub('_', n)[:80]}" for i, n in enumerate(self.names)]

    @cached_property
    def index(self) -> dict[str, int]:
        """Each name's column, built once (a space is not changed after it is fitted or
        loaded): rebuilding it per row cost a decision more than its forward."""
        return {name: i for i, name in enumerate(self.names)}

    def raw(self, state: str, tools: list[str]) -> np.ndarray:
        """(candidates, features): the values, NaN where a candidate has no such feature (what a
        tree model reads)."""
        out = raw_matrix(self.index, state, tools)
        if self._embed is not None:
            get = self.index.get
            for c, features in enumerate(self._embed.features(state, tools)):
                for feature, value in features.items():
                    j = get(feature)
                    if j is not None:
                        out[c, j] = value
        return out

    def prefetch(self, rows: Iterable[tuple[str, list[str]]]) -> None:
        """Read the rows' long texts with the sentence encoder in batches, ahead of `raw` one
        row at a time (nothing to do for a `tokens` space)."""
        if self._embed is not None:
            self._embed.prefetch(list(rows))

    @cached_property
    def _embed(self) -> _Embedder | None:
        return _embedder(self.text_encoder)

    def scaled(self, state: str, tools: list[str]) -> np.ndarray:
        """(candidates, BLOCKS * features), float32: the scaled values (0 where missing), then a
        presence flag and the value's sign as two flags for each (what the neural model
        reads: `encoding.scaled_matrix`)."""
        return scaled_matrix(self.raw(state, tools), self._mean, self._scale)

    @cached_property
    def _mean(self) -> np.ndarray:
        return np.asarray(self.mean, dtype=np.float64)

    @cached_property
    def _scale(self) -> np.ndarray:
        return np.asarray(self.scale, dtype=np.float64)

    @property
    def width(self) -> int:
        return BLOCKS * len(self.names)

    def save(self, path: Path) -> None:
        data: dict[str, Any] = {
            "format": FORMAT,
            "names": self.names,
            "mean": self.mean,
            "scale": self.scale,
        }
        if self.text_encoder != "tokens":
            data["text_encoder"] = self.text_encoder
        write_json_atomic(path, data)

    @classmethod
    def load(cls, path: Path) -> FeatureSpace:
        data = json.loads(Path(path).read_text())
        if data.get("format") != FORMAT:
            raise StageFailure(
                "dependency",
                f"{path}: features of another version ({data.get('format')}, this one reads "
                f"{FORMAT}); train the model again",
            )
        encoder = str(data.get("text_encoder", "tokens"))
        return cls(list(data["names"]), list(data["mean"]), list(data["scale"]), encoder)


def _world_floors(envs: dict[str, set[str]], worlds: int) -> dict[str, int]:
    """Per feature, the train worlds it must be seen in. With rows from several worlds, a
    feature seen in one world only (a name that world alone uses) cannot carry to an unseen one:
    a model would only memorize it. The floor is half the worlds, up to MIN_ENVS, counted among
    the worlds whose states hold what the feature reads (`kinds.reads`: its kind and path): a
    walk on a grid only one train world has is that grid's feature, which any world with such a
    grid reads too, not a name one world alone uses; an id's piece or a word, read from every
    world, is held to the floor of all of them."""
    where = {n: kinds.reads(n) for n in envs}
    reach: dict[str, set[str]] = {}
    for n, seen in envs.items():
        reach.setdefault(where[n], set()).update(seen)
    cap = min(MIN_ENVS, max(1, worlds // 2))
    return {n: min(cap, max(1, len(reach[where[n]]) // 2)) for n in envs}


def _constant(acc: list[float], candidates: int) -> bool:
    """A feature every train candidate has with one value (`pos` where every row offers one
    candidate) tells the train rows nothing; kept, it would let an unseen value at the anchors
    steer the model where training never could."""
    k, s, ss = acc
    mu = s / k
    return k == candidates and ss / k - mu * mu <= 1e-12 * max(1.0, mu * mu)


def _squash(value: float) -> float:
    return math.copysign(math.log1p(abs(value)), value)


class _Embedder:
    """The `E:` features of a row from the sentence encoder (imported on use: torch and the
    model's weights are loaded only by a space that reads them)."""

    def __init__(self) -> None:
        from core.settings import get_settings
        from worker.models.sentence import encoder

        self.encoder = encoder(Path(get_settings().model_cache))

    def prefetch(self, rows: list[tuple[str, list[str]]]) -> None:
        texts = [t for state, tools in rows for t in long_texts(state, tools).values()]
        self.encoder.vectors(texts)

    def features(self, state: str, tools: list[str]) -> list[dict[str, float]]:
        texts = long_texts(state, tools)
        vectors = self.encoder.vectors(list(texts.values()))
        return embedding_features(dict(zip(texts, vectors.tolist(), strict=True)), tools)


def _embedder(text_encoder: str) -> _Embedder | None:
    from worker.models.sentence import ENCODERS

    if text_encoder not in ENCODERS:
        raise StageFailure(
            "bad_input", f"text_encoder {text_encoder!r}: want one of {', '.join(ENCODERS)}"
        )
    return None if text_encoder == "tokens" else _Embedder()
