"""The `routellm` external bench: weak/strong routing on RouteLLM's MMLU and GSM8K labels.

Data: a checkout of lm-sys/RouteLLM (`--data routellm=PATH`: its root, its `routellm/evals`
folder, or the folder holding `mmlu/` and `gsm8k/`), read by the `routellm` corpus source
(worker/corpus/routellm.py). Nothing is downloaded.

The corpus: one row per prompt (tools weak/strong, action `strong` only where the strong model
alone is right), split by env (one env per MMLU subject, `gsm8k`). Two anchor sets, never trained
on:
- `mmlu-unseen-subjects`: a quarter of the 57 MMLU subjects, the first by sha256(f"{seed}:{name}")
  at the split's seed (`unseen_subjects`), so a router is scored on subjects it never saw;
- `gsm8k`: all of GSM8K, a shifted set (grade-school math word problems, trained on MMLU only).
Val is a fifth of the remaining subjects (model selection); train is the rest.

Anchor splits: which 14 subjects are unseen moves a router's APGR more than most changes to the
router do (TF-IDF + logistic regression: 0.451 to 0.605 over eight draws, the same prompts
otherwise). So `run` trains and scores every method on each of `splits` (seeds of the draw;
default five) and reports each split's rows and, under the sets' plain names, their mean, with an
interval from the mean of the splits' bootstrap resamples. The service's bench (`score`) and
`splits=(ANCHOR_SEED,)` score the one draw at ANCHOR_SEED.

Methods, each scored with RouteLLM's metrics (routing.py: APGR, CPT(50%), CPT(80%), with
bootstrap intervals over prompts):
- baselines: `random` (uniform scores, one draw per seed: APGR ~ 0.5), `always-weak` and
  `always-strong` (one point each: their quality, PGR 0 and 1), `oracle` (the highest curve any
  router can trace), `tfidf-logreg` (TF-IDF of the prompt and a logistic regression on the same
  train rows, the simplest text router);
- learned (common.LEARNED): trained by `train_policy` on the corpus; a policy's strong-call
  score is its score of `strong` minus its score of `weak`.
`train_rows` caps the train rows the learned methods see: a seeded sample, the same for every
method and seed (None, the default: all ~9,300, as the TF-IDF baseline reads them; on a
3,000-row sample TF-IDF scores 0.518, not 0.559, and the trm loses as much: more rows is the
lever measured, docs/quality.md). `text_encoder` (bench/external.py's `--text-encoder`) sets the
trm's and gbdt's knob of that name; None (the default) leaves each its own: the trm's
`TRM_CONFIG` reads with the sentence encoder, the gbdt by words.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.schemas.corpus import CorpusSpec
from worker.corpus import build_corpus
from worker.corpus.routellm import MMLU_GLOB, evals_folder
from worker.external import routing
from worker.external.common import LEARNED, BenchRow, Log, Scored, train_policy

# The trm keeps its epoch of least val loss: a router is swept by threshold across prompts, so
# what counts is how its scores rank the prompts, not how often the pick of each is right (82%
# of MMLU rows want the weak model: by accuracy the first, constant epoch always wins). It reads
# the prompt's words with its linear text part (`wide`, C 1; reading 2, the default) at 2^20
# buckets: over the five anchor splits (seed 0) unseen subjects read 0.513 without the part,
# 0.555 with it by reading 1 and 0.567 by reading 2 (TF-IDF 0.572); at the default 2^18 buckets
# the prompts' ~200,000 word and pair keys share buckets. GSM8K, which it never trains on,
# falls from 0.580 to 0.492 with the part. Its network also reads each prompt as the frozen
# SmolLM2's sentence vector (`text_encoder: smollm2`, cached on disk by text: the first run reads
# ~15,000 prompts in about 2.5 minutes here): 0.579 over the splits, GSM8K 0.501.
TRM_CONFIG: dict[str, Any] = {
    "select_by": "loss",
    "wide": 1.0,
    "wide_buckets": 1 << 20,
    "text_encoder": "smollm2",
}

ANCHOR_SEED = 0
UNSEEN_SHARE = 0.25
SPLIT_SEED = 0
VAL_FRACTION = 0.2
# The anchor splits bench/external.py runs by default: one draw of unseen subjects is a coin
# toss (TF-IDF + logistic regression reads 0.451-0.605 over eight draws), so the targets are
# judged on the mean over five.
SPLITS = (0, 1, 2, 3, 4)
BASELINES = ("random", "always-weak", "always-strong", "oracle", "tfidf-logreg")
MMLU_UNSEEN, GSM8K = "mmlu-unseen-subjects", "gsm8k"
SCORE_BATCH = 512


def unseen_subjects(subjects: list[str], seed: int = ANCHOR_SEED) -> list[str]:
    """The MMLU subjects held out as anchors: the first quarter by sha256(f"{seed}:{name}")."""
    ordered = sorted(subjects, key=lambda s: hashlib.sha256(f"{seed}:{s}".encode()).digest())
    return sorted(ordered[: round(len(subjects) * UNSEEN_SHARE)])


@dataclass
class AnchorSet:
    """The prompts one anchor set scores, in corpus order, and one shared set of resamples."""

    name: str
    states: list[str]
    tools: list[list[str]]
    outcomes: routing.Outcomes
    draws: np.ndarray


def locate(data: Path | None) -> Path:
    """The folder holding mmlu/ and gsm8k/; FileNotFoundError saying what to pass."""
    if data is None:
        raise FileNotFoundError(
            "no data path: pass a checkout of lm-sys/RouteLLM (--data routellm=PATH)"
        )
    evals = evals_folder(Path(data))
    if evals is None:
        raise FileNotFoundError(
            f"{data} holds no RouteLLM evaluation data (want the repo root, its routellm/evals "
            "folder, or a folder holding mmlu/ and gsm8k/)"
        )
    return evals


def corpus_spec(evals: Path, split: int = ANCHOR_SEED) -> dict[str, Any]:
    """The corpus of anchor split `split`: its unseen subjects drawn at that seed."""
    subjects = sorted(p.stem.removeprefix("mmlu_") for p in evals.glob(MMLU_GLOB))
    anchors = [f"mmlu-{s}" for s in unseen_subjects(subjects, split)] + [GSM8K]
    return {
        "sources": [{"type": "routellm", "name": "routellm", "path": str(evals)}],
        "split": {"by": "env", "seed": SPLIT_SEED, "val_fraction": VAL_FRACTION, "anchor": anchors},
        # RouteLLM scores every prompt, repeats included.
        "dedupe": False,
        "contract": "action_only",
    }


def _lines(path: Path) -> list[str]:
    """A JSONL file's rows; split at "\n" only, as prompts may hold U+0085 or U+2028."""
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _lines(path)]


def anchor_sets(corpus: Path) -> list[AnchorSet]:
    rows = _read(corpus / "anchor.jsonl")
    groups = {
        MMLU_UNSEEN: [r for r in rows if r["meta"]["benchmark"] == "mmlu"],
        GSM8K: [r for r in rows if r["meta"]["benchmark"] == "gsm8k"],
    }
    sets = []
    for name, members in groups.items():
        if not members:
            continue
        outcomes = routing.Outcomes.of(
            [r["meta"]["weak_correct"] for r in members],
            [r["meta"]["strong_correct"] for r in members],
        )
        states = [r["state"] for r in members]
        tools = [r["tools"] for r in members]
        sets.append(AnchorSet(name, states, tools, outcomes, routing.resamples(len(members))))
    return sets


def sample_train(corpus: Path, out: Path, rows: int | None, seed: int = SPLIT_SEED) -> Path:
    """The corpus the learned methods train on: `corpus` itself, or a copy whose train.jsonl
    keeps a seeded sample of `rows` rows (val, anchors and the chat messages as they are)."""
    train = [line + "\n" for line in _lines(corpus / "train.jsonl")]
    if rows is None or len(train) <= rows:
        return corpus
    out.mkdir(parents=True, exist_ok=True)
    kept = sorted(random.Random(seed).sample(range(len(train)), rows))
    (out / "train.jsonl").write_text("".join(train[i] for i in kept), encoding="utf-8")
    # The chat form qlora reads goes along whole: its step count (max_steps) bounds what it reads.
    for name in (
        "val.jsonl",
        "anchor.jsonl",
        "manifest.json",
        "messages.jsonl",
        "messages_val.jsonl",
    ):
        if (corpus / name).exists():
            (out / name).write_bytes((corpus / name).read_bytes())
    return out


def tfidf_scores(train: list[dict[str, Any]], sets: list[AnchorSet]) -> list[np.ndarray]:
    """P(strong) from a TF-IDF + logistic regression on the train prompts, per anchor set."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    def prompts(states: list[str]) -> list[str]:
        return [json.loads(s)["prompt"] for s in states]

    vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2)
    x = vectorizer.fit_transform(prompts([r["state"] for r in train]))
    y = np.array([r["action"] == "strong" for r in train])
    model = LogisticRegression(max_iter=2000).fit(x, y)
    return [model.predict_proba(vectorizer.transform(prompts(s.states)))[:, 1] for s in sets]


def policy_scores(policy: Any, anchors: AnchorSet) -> np.ndarray:
    """Strong-call scores of a trained policy: its score of `strong` minus that of `weak`."""
    out = []
    for start in range(0, len(anchors.states), SCORE_BATCH):
        states = anchors.states[start : start + SCORE_BATCH]
        tools = anchors.tools[start : start + SCORE_BATCH]
        for row_tools, scores in zip(tools, policy.scores_batch(states, tools), strict=True):
            out.append(scores[row_tools.index("strong")] - scores[row_tools.index("weak")])
    return np.array(out, dtype=np.float64)


@dataclass
class Figure:
    """One method's row on one anchor set, and what a mean over anchor splits is resampled from:
    a router's score (its APGR in each of the set's resamples with it), or a single model's
    quality in each resample."""

    row: BenchRow
    score: routing.RoutingScore | None = None
    quality_boot: np.ndarray | None = None


def _router_row(
    anchors: str, method: str, score: routing.RoutingScore, train_seconds: float | None
) -> BenchRow:
    extra = {f"cpt{round(level * 100)}": v for level, v in score.cpt.items() if v is not None}
    if len(score.apgr_per_seed) > 1:
        extra["seed_spread"] = max(score.apgr_per_seed) - min(score.apgr_per_seed)
    return BenchRow(
        "routellm",
        anchors,
        method,
        "apgr",
        score.apgr,
        score.apgr_ci95,
        score.n,
        score.seeds,
        train_seconds,
        extra=extra,
        curve=score.points,
    )


def curve_figure(
    anchors: AnchorSet,
    method: str,
    scores_per_seed: list[np.ndarray],
    train_seconds: float | None = None,
) -> Figure:
    score = routing.score_router(scores_per_seed, anchors.outcomes, anchors.draws)
    return Figure(_router_row(anchors.name, method, score, train_seconds), score=score)


def model_figure(anchors: AnchorSet, method: str) -> Figure:
    """always-weak / always-strong: one point, scored by its quality."""
    strong = method == "always-strong"
    correct = anchors.outcomes.strong if strong else anchors.outcomes.weak
    quality = float(correct.mean())
    boot = routing.quality_boot(correct, anchors.draws)
    row = BenchRow(
        "routellm",
        anchors.name,
        method,
        "quality",
        quality,
        routing.interval(boot),
        len(correct),
        1,
        extra={"pgr": 1.0 if strong else 0.0, "strong_share": 1.0 if strong else 0.0},
        curve=[(1.0 if strong else 0.0, round(quality, 4))],
    )
    return Figure(row, quality_boot=boot)


def split_name(anchors: str, split: int) -> str:
    """An anchor set's name in one split's rows when several splits are run."""
    return f"{anchors}@split{split}"


def pooled_rows(per_split: list[list[Figure]]) -> list[BenchRow]:
    """Per (anchor set, method), the mean over the splits' figures under the set's plain name,
    with its interval from the mean of the splits' resamples; `extra` says how many splits and
    how far apart their figures are."""
    out = []
    for figures in zip(*per_split, strict=True):
        first = figures[0].row
        values = [f.row.value for f in figures]
        spread = {"splits": float(len(figures)), "split_spread": max(values) - min(values)}
        if all(f.score is not None for f in figures):
            score = routing.pooled([f.score for f in figures if f.score is not None])
            took = [f.row.train_seconds for f in figures if f.row.train_seconds is not None]
            seconds = sum(took) / len(took) if took else None
            row = _router_row(first.anchors, first.method, score, seconds)
        else:
            boot = np.mean([f.quality_boot for f in figures if f.quality_boot is not None], axis=0)
            row = dataclasses.replace(
                first,
                value=float(np.mean(values)),
                ci95=routing.interval(boot),
                n=sum(f.row.n for f in figures),
                curve=[],
            )
        row.extra.update(spread)
        out.append(row)
    return out


class RouteLlmBench:
    """See the module docstring. `train_rows` caps the learned methods' train rows."""

    name = "routellm"

    def __init__(
        self,
        train_rows: int | None = None,
        text_encoder: str | None = None,
        splits: tuple[int, ...] = SPLITS,
    ) -> None:
        self.train_rows = train_rows
        # The trm's and gbdt's `text_encoder` for both (None: each its own; `smollm2`: the
        # prompt read by the sentence encoder too, its vectors cached under MODEL_CACHE).
        self.text_encoder = text_encoder
        # The anchor splits run (bench/external.py's `--splits`): each draws its unseen subjects
        # at its own seed, and every method trains again on the rest.
        self.splits = splits

    def run(
        self, work: Path, data: Path | None, methods: list[str], seeds: list[int], log: Log
    ) -> list[BenchRow]:
        """Every method on each anchor split. One split: its rows under the anchor sets' plain
        names. Several: each split's rows named `<set>@split<k>`, then under the plain names the
        mean over the splits (the figures the targets judge)."""
        evals = locate(data)
        per_split = [self._split(evals, split, work, methods, seeds, log) for split in self.splits]
        if len(per_split) == 1:
            return [f.row for f in per_split[0]]
        rows = [
            dataclasses.replace(f.row, anchors=split_name(f.row.anchors, split))
            for split, figures in zip(self.splits, per_split, strict=True)
            for f in figures
        ]
        return rows + pooled_rows(per_split)

    def _split(
        self, evals: Path, split: int, work: Path, methods: list[str], seeds: list[int], log: Log
    ) -> list[Figure]:
        suffix = "" if split == ANCHOR_SEED else f"-split{split}"
        corpus = self._corpus(evals, work / f"corpus{suffix}", {}, log, split)
        sets = anchor_sets(corpus)
        figures: list[Figure] = []
        if "baselines" in methods:
            figures += self._baselines(corpus, sets, seeds, log)
        learned = [m for m in methods if m in LEARNED]
        if learned:
            training = sample_train(corpus, work / f"corpus{suffix}-sampled", self.train_rows)
            for method in learned:
                models = work / f"models{suffix}"
                figures += self._learned(method, training, sets, seeds, models, log)
        return figures

    def score(
        self, work: Path, data: Path, models: list[Scored], seeds: list[int], log: Log
    ) -> list[BenchRow]:
        """The baselines and models trained elsewhere (a service bench's sides) on the anchors.
        Each model reads the anchors shaped by its own corpus knobs (the rows it trained on)."""
        evals = locate(data)
        corpus = self._corpus(evals, work / "corpus", {}, log)
        sets = anchor_sets(corpus)
        rows = [f.row for f in self._baselines(corpus, sets, seeds, log)]
        for model in models:
            shaped = sets
            if model.knobs:
                digest = hashlib.sha256(json.dumps(model.knobs, sort_keys=True).encode())
                folder = work / f"corpus-{digest.hexdigest()[:12]}"
                shaped = anchor_sets(self._corpus(evals, folder, model.knobs, log))
                if [len(s.states) for s in shaped] != [len(s.states) for s in sets]:
                    raise ValueError(
                        f"{model.name}: its corpus knobs {model.knobs} change which "
                        "prompts are anchors; bench it without them"
                    )
            for anchors, states in zip(sets, shaped, strict=True):
                scores = policy_scores(model.policy, states)
                rows.append(curve_figure(anchors, model.name, [scores]).row)
            log(f"routellm {model.name}: scored on {sum(len(s.states) for s in sets)} prompts")
        return rows

    def _corpus(
        self, evals: Path, out: Path, knobs: dict[str, Any], log: Log, split: int = ANCHOR_SEED
    ) -> Path:
        spec = corpus_spec(evals, split)
        if knobs:
            spec["knobs"] = knobs
        result = build_corpus(CorpusSpec.model_validate(spec), out)
        counters = result.counters
        log(
            f"routellm: corpus from {evals}: {counters['rows_read']} read, "
            f"{counters['rows_invalid']} left out ({result.manifest['invalid']}), "
            f"train {counters['train']}, val {counters['val']}, anchor {counters['anchor']}"
        )
        return out

    def _baselines(
        self, corpus: Path, sets: list[AnchorSet], seeds: list[int], log: Log
    ) -> list[Figure]:
        figures: list[Figure] = []
        tfidf = tfidf_scores(_read(corpus / "train.jsonl"), sets)
        for anchors, text_scores in zip(sets, tfidf, strict=True):
            n = len(anchors.states)
            rand = [np.random.default_rng(seed).random(n) for seed in seeds]
            figures += [
                curve_figure(anchors, "random", rand),
                model_figure(anchors, "always-weak"),
                model_figure(anchors, "always-strong"),
                curve_figure(anchors, "oracle", [anchors.outcomes.oracle_scores()]),
                curve_figure(anchors, "tfidf-logreg", [text_scores]),
            ]
            log(f"routellm {anchors.name}: baselines scored on {n} prompts")
        return figures

    def _learned(
        self,
        method: str,
        corpus: Path,
        sets: list[AnchorSet],
        seeds: list[int],
        work: Path,
        log: Log,
    ) -> list[Figure]:
        per_set: list[list[np.ndarray]] = [[] for _ in sets]
        seconds = []
        for seed in seeds:
            config: dict[str, Any] = dict(TRM_CONFIG) if method.startswith("trm") else {}
            if self.text_encoder is not None and method in ("trm", "trm-1step", "gbdt"):
                config["text_encoder"] = self.text_encoder
            policy, took = train_policy(method, corpus, work / f"{method}-{seed}", seed, config)
            seconds.append(took)
            for i, anchors in enumerate(sets):
                per_set[i].append(policy_scores(policy, anchors))
            log(f"routellm {method} seed {seed}: trained in {took:.1f} s")
        mean_seconds = sum(seconds) / len(seconds)
        return [
            curve_figure(anchors, method, scores, mean_seconds)
            for anchors, scores in zip(sets, per_set, strict=True)
        ]

    def targets(self, rows: list[BenchRow]) -> list[tuple[str, bool, str]]:
        """RouteLLM's targets, on the unseen MMLU subjects (the mean over the anchor splits
        where several ran): (what, met, what was measured)."""
        apgr = {r.method: r for r in rows if r.anchors == MMLU_UNSEEN and r.metric == "apgr"}
        out = []
        trm = apgr.get("trm")
        if trm and "random" in apgr:
            rand = apgr["random"]
            met = trm.value > rand.value and trm.ci95[0] > 0.5
            out.append(
                (
                    f"{MMLU_UNSEEN}: trm APGR above random, its interval clear of 0.5",
                    met,
                    f"{trm.value:.3f} {_ci(trm)} vs random {rand.value:.3f} {_ci(rand)}",
                )
            )
        if trm and "tfidf-logreg" in apgr:
            text = apgr["tfidf-logreg"]
            out.append(
                (
                    f"{MMLU_UNSEEN}: trm APGR above tfidf-logreg",
                    trm.value > text.value,
                    f"{trm.value:.3f} vs {text.value:.3f} {_ci(text)}",
                )
            )
        if trm and "gbdt" in apgr:
            gbdt = apgr["gbdt"]
            out.append(
                (
                    f"{MMLU_UNSEEN}: trm >= gbdt - 0.02",
                    trm.value >= gbdt.value - 0.02,
                    f"{trm.value:.3f} vs {gbdt.value:.3f}",
                )
            )
        return out


def _ci(row: BenchRow) -> str:
    return f"[{row.ci95[0]:.3f}, {row.ci95[1]:.3f}]"


BENCH = RouteLlmBench()
