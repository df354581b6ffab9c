"""The `bfcl` external bench: which function to call, or none, on the Berkeley Function Calling
Leaderboard (Patil et al., BFCL v4), scored as its community scores function choice.

Data: BFCL's data folder (`--data bfcl=PATH`: a checkout's `bfcl_eval/data`, or a folder above
it), else the installed bfcl-eval package's (`pip install --no-deps bfcl-eval`), read by the
`bfcl` corpus source (worker/corpus/bfcl.py: one row per question, the functions offered and
NO_CALL as candidates, env = the set of functions offered). Nothing is downloaded.

The bench: grouped cross-fitting. The function sets are dealt into FOLDS folds (largest first,
each to the fold with fewest rows so far; ties in sha256(f"{FOLD_SEED}:{env}") order); per fold
a corpus holds that fold's sets as anchors (`split.anchor`, never trained on) and splits the rest
by env into train and val (VAL_FRACTION of the sets: model selection). Every row is an anchor
in exactly one fold; the picks are pooled over the folds, per seed, then averaged over seeds per
row. Reported, each with its 95% interval (worker/evaluate/scorecard.py `score`: Wilson for
right/wrong outcomes, the normal interval of the mean for outcomes averaged over seeds):
- `multiple`, `live_multiple`: accuracy of the function picked (extra: the false-abstain rate,
  the share of rows where NO_CALL was picked; for learned methods, the share of the anchors'
  function names never seen in their fold's train or val rows);
- `irrelevance`, `live_irrelevance`: abstain recall (the share of rows where NO_CALL was picked);
- `multiple+live_multiple`: the false-abstain rate (lower is better).
Baselines: `lexical` (the function whose name and description share most words with the
question, `lexical_pick`; never abstains), `first-listed` (the first function offered), `random`
(uniform over the candidates, NO_CALL included: the controller's chance level; one draw per
seed). Learned (common.LEARNED): trained by `train_policy` on each fold's corpus; the trm and
its one-step ablation with TRM_CONFIG over the trainer's defaults.

The service's `bfcl` bench (specs/benches/bfcl.json, `score`) scores one model trained elsewhere,
so it holds one fold out: the bench split (`corpus_spec`: fold ANCHOR_FOLD's function sets as
anchors, the rest train and val), on which the router is trained; the same figures as above,
on that fold's anchors only, beside the same baselines. A model whose train or val rows hold an
anchor function set is refused.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.schemas.corpus import CorpusSpec
from core.schemas.sources import BfclSource, bfcl_data_folder
from worker.corpus import build_corpus
from worker.corpus.bfcl import NO_CALL, data_folder, files_of, read_rows
from worker.corpus.rows import Row, Tally
from worker.evaluate import scorecard
from worker.external.common import (
    LEARNED,
    BenchRow,
    Log,
    Scored,
    ScoreRefused,
    reshaping,
    train_policy,
    trained_envs,
)
from worker.models.policy import Policy, argmax

CHOICE_SETS = ("multiple", "live_multiple")
ABSTAIN_SETS = ("irrelevance", "live_irrelevance")
CATEGORIES = [*CHOICE_SETS, *ABSTAIN_SETS]
BASELINES = ("lexical", "first-listed", "random")
FOLDS, FOLD_SEED, VAL_FRACTION = 5, 0, 0.2
# The fold whose function sets are the service bench's anchors (`corpus_spec`).
ANCHOR_FOLD = 0
SCORE_BATCH = 256
# The trm's knobs on this bench, over the trainer's defaults: hidden 32 (default 64), a smaller
# network for ~1,500 train rows whose val figures peak within 2 epochs. Five folds, seeds 0 / 1 /
# 2: `live_multiple` 0.795 / 0.807 / 0.796, mean 0.799 (hidden 64: 0.807, then 0.779 over seeds
# 1-2, mean 0.788; gbdt 0.817); `multiple` 0.945 (0.954); abstain recall `irrelevance` 0.992
# (0.993), `live_irrelevance` 0.871 (0.864); false abstain 0.115 (0.114). A gain within the
# seeds' spread (0.012). The epoch is kept by val accuracy, as by default (by val loss: 0.803 /
# 0.857 abstain; by ranking AUC: 0.799 / 0.871). trm-1step takes it too (the same network, one
# step), not measured with it.
TRM_CONFIG: dict[str, Any] = {"hidden": 32}
INSTALL = "`pip install --no-deps bfcl-eval` (BFCL's data files, without its dependencies)"
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD = re.compile(r"[a-z0-9]{3,}")


# ---- baselines ---------------------------------------------------------------------------------
def words(text: str) -> set[str]:
    """Lower-case runs of 3+ letters and digits, camelCase split (`getWeather` -> get, weather)."""
    return set(_WORD.findall(_CAMEL.sub(r"\1 \2", text).lower()))


def lexical_pick(question: str, functions: Sequence[dict[str, Any]]) -> int | None:
    """The index of the function whose name and description share most words with the question
    (ties: the one more of whose own words are shared, then the first listed); None when no
    function is offered."""
    asked = words(question)
    best: tuple[int, float, int] | None = None
    pick = None
    for i, function in enumerate(functions):
        own = words(f"{function['name']} {function.get('description', '')}")
        shared = len(asked & own)
        key = (shared, shared / max(len(own), 1), -i)
        if best is None or key > best:
            best, pick = key, i
    return pick


class Baseline(Policy):
    """`lexical`, `first-listed` or `random` (seeded) as a policy over the corpus rows; each
    picks NO_CALL (the last candidate) when no function is offered."""

    def __init__(self, name: str, seed: int = 0) -> None:
        if name not in BASELINES:
            raise ValueError(f"unknown baseline {name!r}; baselines: {', '.join(BASELINES)}")
        super().__init__()
        self.name, self.draw = name, random.Random(seed)

    def pick(self, state: dict[str, Any], tools: list[str]) -> int:
        if self.name == "random":
            return self.draw.randrange(len(tools))
        if self.name == "first-listed" or len(tools) == 1:
            return 0
        return lexical_pick(state["question"], state["functions"]) or 0

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        out = []
        for state, options in zip(states, tools, strict=True):
            pick = self.pick(json.loads(state), options)
            out.append([1.0 if i == pick else 0.0 for i in range(len(options))])
        return out


# ---- the bench ---------------------------------------------------------------------------------
def locate(data: Path | None) -> Path:
    """BFCL's data folder: under `data` when given, else the installed package's;
    FileNotFoundError saying what to pass or install."""
    if data is None:
        installed = bfcl_data_folder()
        if installed is None:
            raise FileNotFoundError(
                f"no BFCL data: {INSTALL}, or name a copy of a checkout's "
                "bfcl_eval/data (the bench's `data`; bench/external.py: "
                "--data bfcl=PATH)"
            )
        data = Path(installed)
    folder = data_folder(Path(data))
    if folder is None:
        raise FileNotFoundError(
            f"{data} holds no BFCL_v4_*.json (want a copy of a "
            f"checkout's bfcl_eval/data); or leave the data out and "
            f"{INSTALL}"
        )
    return folder


def deal_folds(rows: Sequence[Row], folds: int = FOLDS, seed: int = FOLD_SEED) -> list[list[str]]:
    """The envs (function sets) of each fold: largest first, each to the fold with fewest rows
    so far, ties in sha256(f"{seed}:{env}") order; deterministic in `seed`."""
    sizes: dict[str, int] = {}
    for row in rows:
        sizes[row.env] = sizes.get(row.env, 0) + 1

    def order(env: str) -> tuple[int, bytes]:
        return -sizes[env], hashlib.sha256(f"{seed}:{env}".encode()).digest()

    dealt: list[list[str]] = [[] for _ in range(folds)]
    load = [0] * folds
    for env in sorted(sizes, key=order):
        fold = min(range(folds), key=lambda i: (load[i], i))
        dealt[fold].append(env)
        load[fold] += sizes[env]
    return [sorted(envs) for envs in dealt]


@dataclass
class Fold:
    """One fold's corpus and what its anchors are: rows in corpus order, ids, categories."""

    corpus: Path
    states: list[str]
    tools: list[list[str]]
    ids: list[str]
    categories: list[str]
    actions: list[str]
    # category -> (anchor function names, of which never in the fold's train or val rows)
    names: dict[str, tuple[int, int]] = field(default_factory=dict)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def all_rows(folder: Path, categories: Sequence[str]) -> list[Row]:
    """Every row of the categories in BFCL's data folder, as the corpus source reads them."""
    source = BfclSource.model_validate(
        {"type": "bfcl", "name": "bfcl", "path": str(folder), "categories": list(categories)}
    )
    tally = Tally("bfcl", "bfcl", str(folder))
    return read_rows(source, files_of(source, "data"), tally, lambda _: None)


def split_spec(folder: Path, categories: Sequence[str], anchors: list[str]) -> dict[str, Any]:
    """A corpus of the categories holding the function sets `anchors` out as anchors (never
    trained on) and splitting the rest by env into train and val."""
    return {
        "sources": [
            {"type": "bfcl", "name": "bfcl", "path": str(folder), "categories": list(categories)}
        ],
        "split": {"by": "env", "seed": FOLD_SEED, "val_fraction": VAL_FRACTION, "anchor": anchors},
        "dedupe": False,
    }


def corpus_spec(folder: Path, categories: Sequence[str] = CATEGORIES) -> dict[str, Any]:
    """The bench split a router is trained on for the service's `bfcl` bench: fold ANCHOR_FOLD's
    function sets (deal_folds) held out as anchors."""
    return split_spec(folder, categories, deal_folds(all_rows(folder, categories))[ANCHOR_FOLD])


def build_fold(
    spec: dict[str, Any], out: Path, categories: list[str], log: Log, label: str
) -> Fold:
    """The corpus of one split (`spec`, its anchors never trained on), its anchors read back."""
    build_corpus(CorpusSpec.model_validate(spec), out)
    anchors = _read_jsonl(out / "anchor.jsonl")
    seen = {
        name
        for split in ("train", "val")
        for row in _read_jsonl(out / f"{split}.jsonl")
        for name in row["tools"]
    }
    fold = Fold(
        out,
        [r["state"] for r in anchors],
        [r["tools"] for r in anchors],
        [r["meta"]["id"] for r in anchors],
        [r["meta"]["category"] for r in anchors],
        [r["action"] for r in anchors],
    )
    for category in categories:
        offered = {
            name
            for row in anchors
            if row["meta"]["category"] == category
            for name in row["tools"]
            if name != NO_CALL
        }
        fold.names[category] = (len(offered), len(offered - seen))
    unseen = ", ".join(f"{c} {new}/{n}" for c, (n, new) in fold.names.items())
    log(
        f"bfcl {label}: {len(spec['split']['anchor'])} function sets, {len(anchors)} anchor "
        f"rows; anchor function names never in train or val: {unseen}"
    )
    return fold


def build_folds(
    folder: Path, work: Path, categories: list[str], log: Log, only: list[int] | None = None
) -> list[Fold]:
    """One corpus per fold (see the module docstring), its anchors read back; `only` those
    folds (indices into the FOLDS dealt)."""
    dealt = deal_folds(all_rows(folder, categories))
    wanted = range(len(dealt)) if only is None else only
    bad = [k for k in wanted if not 0 <= k < len(dealt)]
    if bad:
        raise ValueError(f"folds {bad}: the folds are 0-{len(dealt) - 1}")
    return [
        build_fold(
            split_spec(folder, categories, dealt[k]),
            work / f"corpus-fold{k}",
            categories,
            log,
            f"fold {k}",
        )
        for k in wanted
    ]


def picks(policy: Policy, fold: Fold) -> dict[str, str]:
    """Row id -> the candidate the policy picks, over the fold's anchors."""
    out = {}
    for start in range(0, len(fold.states), SCORE_BATCH):
        stop = start + SCORE_BATCH
        scored = policy.scores_batch(fold.states[start:stop], fold.tools[start:stop])
        for row_id, options, scores in zip(
            fold.ids[start:stop], fold.tools[start:stop], scored, strict=True
        ):
            out[row_id] = options[argmax(scores)]
    return out


def score_rows(
    method: str, folds: list[Fold], runs: list[dict[str, str]], seconds: float | None
) -> list[BenchRow]:
    """The report rows of one method from its picks (one dict per seed, pooled over folds)."""
    truth = {i: a for f in folds for i, a in zip(f.ids, f.actions, strict=True)}
    category = {i: c for f in folds for i, c in zip(f.ids, f.categories, strict=True)}

    def outcomes(categories: Sequence[str], hit: Callable[[str, str], bool]) -> list[float]:
        ids = [i for i in truth if category[i] in categories]
        return [sum(hit(i, run[i]) for run in runs) / len(runs) for i in ids]

    def row(anchors: str, metric: str, values: list[float], **kw: Any) -> BenchRow:
        s = scorecard.score(values)
        ci = (float(s["ci95"][0]), float(s["ci95"][1]))
        return BenchRow(
            "bfcl",
            anchors,
            method,
            metric,
            float(s["value"] or 0.0),
            ci,
            len(values),
            len(runs),
            seconds,
            **kw,
        )

    rows = []
    learned = method not in BASELINES  # a trained model: how new the anchors' names are
    for name in CHOICE_SETS:
        right = outcomes([name], lambda i, pick: pick == truth[i])
        if not right:
            continue
        false_abstain = outcomes([name], lambda i, pick: pick == NO_CALL)
        extra = {"false_abstain": sum(false_abstain) / len(false_abstain)}
        if learned:
            n = sum(f.names.get(name, (0, 0))[0] for f in folds)
            new = sum(f.names.get(name, (0, 0))[1] for f in folds)
            extra["names_unseen"] = new / n if n else 0.0
        rows.append(row(name, "accuracy", right, extra=extra))
    for name in ABSTAIN_SETS:
        recall = outcomes([name], lambda i, pick: pick == NO_CALL)
        if recall:
            rows.append(row(name, "abstain_recall", recall))
    false_abstain = outcomes(CHOICE_SETS, lambda i, pick: pick == NO_CALL)
    if false_abstain:
        rows.append(
            row("+".join(CHOICE_SETS), "false_abstain", false_abstain, higher_is_better=False)
        )
    return rows


class BfclBench:
    """See the module docstring. `categories` are the BFCL categories read (default: the
    two scored for function choice and the two for abstaining); `folds` the fold indices whose
    anchors `run` trains for and scores (default: all FOLDS; fewer give a quicker figure over
    those folds' rows only, for trying a change)."""

    name = "bfcl"

    def __init__(self, categories: list[str] | None = None, folds: list[int] | None = None) -> None:
        self.categories = categories or list(CATEGORIES)
        self.folds = folds

    def run(
        self, work: Path, data: Path | None, methods: list[str], seeds: list[int], log: Log
    ) -> list[BenchRow]:
        folder = locate(data)
        folds = build_folds(folder, work, self.categories, log, self.folds)
        rows: list[BenchRow] = []
        if "baselines" in methods:
            for name in BASELINES:
                draws = seeds if name == "random" else seeds[:1]
                runs = [_pooled(Baseline(name, seed), folds) for seed in draws]
                rows += score_rows(name, folds, runs, None)
            log(f"bfcl: baselines scored on {sum(len(f.ids) for f in folds)} rows")
        for method in (m for m in methods if m in LEARNED):
            runs, seconds = [], 0.0
            for seed in seeds:
                run: dict[str, str] = {}
                for k, fold in enumerate(folds):
                    out = work / f"{method}-fold{k}-seed{seed}"
                    config = dict(TRM_CONFIG) if method.startswith("trm") else {}
                    policy, took = train_policy(method, fold.corpus, out, seed, config)
                    seconds += took
                    run.update(picks(policy, fold))
                runs.append(run)
                log(f"bfcl {method} seed {seed}: {len(folds)} folds trained")
            rows += score_rows(method, folds, runs, seconds / (len(seeds) * len(folds)))
        return rows

    def score(
        self, work: Path, data: Path | None, models: list[Scored], seeds: list[int], log: Log
    ) -> list[BenchRow]:
        """The baselines and models trained elsewhere (a service bench's sides) on the anchors of
        the bench split (`corpus_spec`: fold ANCHOR_FOLD's function sets). A model that trained
        on an anchor function set is refused; each reads the anchors shaped by its own corpus
        knobs."""
        folder = locate(data)
        spec = corpus_spec(folder, self.categories)
        fold = build_fold(spec, work / "corpus", self.categories, log, "bench split")
        rows: list[BenchRow] = []
        for name in BASELINES:
            draws = seeds if name == "random" else seeds[:1]
            rows += score_rows(name, [fold], [picks(Baseline(name, s), fold) for s in draws], None)
        anchors = set(spec["split"]["anchor"])
        for model in models:
            overlap = anchors & trained_envs(model.corpus)
            if overlap:
                raise ScoreRefused(
                    f"{model.name} trained on {len(overlap)} of the bench's {len(anchors)} anchor "
                    "function sets; train it on a bfcl corpus split as worker/external/bfcl.py's "
                    "corpus_spec splits it"
                )
            shaped, knobs = fold, reshaping(model.knobs)
            if knobs:
                digest = hashlib.sha256(json.dumps(knobs, sort_keys=True).encode())
                shaped = build_fold(
                    {**spec, "knobs": knobs},
                    work / f"corpus-{digest.hexdigest()[:12]}",
                    self.categories,
                    log,
                    f"bench split shaped for {model.name}",
                )
                if shaped.ids != fold.ids:
                    raise ValueError(
                        f"{model.name}: its corpus knobs {knobs} change which "
                        "rows are anchors; bench it without them"
                    )
            rows += score_rows(model.name, [fold], [picks(model.policy, shaped)], None)
            log(f"bfcl {model.name}: scored on {len(fold.ids)} anchor rows")
        return rows

    def targets(self, rows: list[BenchRow]) -> list[tuple[str, bool, str]]:
        """(what, met, what was measured): the trm above the lexical pick and at its goals on
        both choice sets, and within 0.02 of the gbdt; abstain recall said as measured."""
        found = {(r.anchors, r.method, r.metric): r for r in rows}
        out = []
        for name, goal in (("multiple", 0.97), ("live_multiple", 0.85)):
            trm = found.get((name, "trm", "accuracy"))
            if trm is None:
                continue
            lexical = found.get((name, "lexical", "accuracy"))
            if lexical is not None:
                out.append(
                    (
                        f"{name}: trm above the lexical pick",
                        trm.value > lexical.value,
                        f"{trm.value:.3f} {_ci(trm)} vs {lexical.value:.3f}",
                    )
                )
            out.append((f"{name}: trm >= {goal}", trm.value >= goal, f"{trm.value:.3f}"))
            gbdt = found.get((name, "gbdt", "accuracy"))
            if gbdt is not None:
                out.append(
                    (
                        f"{name}: trm >= gbdt - 0.02",
                        trm.value >= gbdt.value - 0.02,
                        f"{trm.value:.3f} vs {gbdt.value:.3f}",
                    )
                )
        for name in ABSTAIN_SETS:
            trm = found.get((name, "trm", "abstain_recall"))
            if trm is not None:
                out.append(
                    (f"{name}: trm abstain recall (reported)", True, f"{trm.value:.3f} {_ci(trm)}")
                )
        return out


def _pooled(policy: Policy, folds: list[Fold]) -> dict[str, str]:
    run: dict[str, str] = {}
    for fold in folds:
        run.update(picks(policy, fold))
    return run


def _ci(row: BenchRow) -> str:
    return f"[{row.ci95[0]:.3f}, {row.ci95[1]:.3f}]"


BENCH = BfclBench()
