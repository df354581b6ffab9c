"""Scores, intervals and the sample cache, on real route play logs built into a real corpus."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from core.schemas.corpus import CorpusSpec
from worker.corpus import build_corpus
from worker.envs import generate
from worker.evaluate import scorecard as sc
from worker.evaluate.anchors import anchor_rows, evaluate_policy
from worker.evaluate.policies import ConstantPolicy, TablePolicy
from worker.evaluate.references import mcnemar, references
from worker.evaluate.samples import SampleCache, read_jsonl, run_sample_cache, score_rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("route")
    # 12 episodes: at 8 (50 train rows) the gbdt reference, with the words of every prompt to
    # split on, no longer found the rule and scored as majority does.
    generate(root / "play", families=["route"], worlds=4, episodes=12, seed=5)
    spec = {
        "sources": [{"type": "trm_play_root", "name": "r", "path": str(root / "play")}],
        "split": {"by": "env", "anchor": ["route-s5-w3"]},
    }
    build_corpus(CorpusSpec.model_validate(spec), root / "corpus")
    return root / "corpus", spec


def test_intervals_shrink_with_n_and_a_real_zero_is_a_score():
    widths = []
    for n in (10, 100, 1000):
        s = sc.score([1.0] * (n // 2) + [0.0] * (n - n // 2))
        widths.append(s["ci95"][1] - s["ci95"][0])
    assert widths[0] > widths[1] > widths[2]
    zero = sc.score([0.0] * 40)
    assert zero["value"] == 0.0 and zero["n"] == 40 and zero["ci95"][0] == 0.0
    assert 0 < zero["ci95"][1] < 0.1


def test_the_oracle_scores_one_and_a_constant_policy_its_hand_computed_rate(corpus):
    corpus_dir, spec = corpus
    anchors, split = anchor_rows(corpus_dir)
    train = read_jsonl(corpus_dir / "train.jsonl")
    assert split == "anchor" and anchors
    oracle = TablePolicy(train + anchors)
    card, samples, _ = evaluate_policy(oracle, train, anchors, split, spec, SampleCache(None))
    assert card["anchor_score"] == 1.0 and card["train_score"] == 1.0
    assert card["generalization_gap"] == 0.0
    assert len(samples) == len(anchors) and all(s["correct"] for s in samples)
    assert card["scores"]["failure_rate"]["source"] == "rollouts"

    first = ConstantPolicy(index=0)
    expected = sum(r["action"] == r["tools"][0] for r in anchors) / len(anchors)
    card, _, _ = evaluate_policy(first, train, anchors, split, spec, SampleCache(None))
    assert card["anchor_score"] == pytest.approx(expected, abs=1e-4)
    assert card["per_world"]["route-s5-w3"]["anchor_score"]["n"] == len(anchors)


class Counting(ConstantPolicy):
    def scores_batch(self, states, tools):
        self.forward_passes += 1
        return super().scores_batch(states, tools)


def test_cached_samples_are_reused_without_forward_passes(corpus, tmp_path):
    corpus_dir, _ = corpus
    anchors, _ = anchor_rows(corpus_dir)
    runs = tmp_path / "runs"
    first = Counting(index=1)
    cache = run_sample_cache(runs, runs / "r1", first.model_hash)
    samples, counters = score_rows(first, anchors, cache)
    assert first.forward_passes > 0 and counters["scored"] == len(anchors)
    assert cache.path is not None and cache.path.is_relative_to(runs / "r1")
    again = Counting(index=1)
    replay, counters = score_rows(
        again, anchors, run_sample_cache(runs, runs / "r2", again.model_hash)
    )
    assert again.forward_passes == 0 and counters["cached"] == len(anchors)
    assert [s["pick"] for s in replay] == [s["pick"] for s in samples]
    other = Counting(index=0)  # another model: nothing of the first one's is reused
    _, counters = score_rows(other, anchors, run_sample_cache(runs, runs / "r3", other.model_hash))
    assert other.forward_passes > 0 and counters["cached"] == 0


def test_references_stand_beside_the_router_with_paired_differences(corpus):
    """Majority and the gbdt reference, trained on the train split, on the router's anchors: an
    oracle router beats majority by exactly the rows majority gets wrong."""
    corpus_dir, _ = corpus
    anchors, _ = anchor_rows(corpus_dir)
    train = read_jsonl(corpus_dir / "train.jsonl")
    refs = references([1.0] * len(anchors), anchors, train, [], seed=0)
    assert set(refs) == {"majority", "gbdt"}
    top = Counter(r["action"] for r in train).most_common(1)[0][0]
    # Majority answers its action where a row offers it, else the first candidate.
    hits = sum(r["action"] == (top if top in r["tools"] else r["tools"][0]) for r in anchors)
    majority = refs["majority"]
    assert majority["anchor_score"]["n"] == len(anchors)
    assert majority["anchor_score"]["value"] == pytest.approx(hits / len(anchors), abs=1e-4)
    assert majority["delta"]["value"] == pytest.approx(1 - hits / len(anchors), abs=1e-4)
    assert majority["mcnemar"]["router_only"] == len(anchors) - hits
    assert majority["mcnemar"]["reference_only"] == 0 and majority["mcnemar"]["p_value"] < 0.01
    gbdt = refs["gbdt"]
    assert gbdt["anchor_score"]["value"] > majority["anchor_score"]["value"]


def test_mcnemar_counts_only_the_examples_one_side_got_right():
    router = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    other = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    result = mcnemar(router, other)
    assert (result["router_only"], result["reference_only"]) == (3, 1)
    assert result["p_value"] == pytest.approx(0.625)  # 2 * P(X <= 1), X ~ Binomial(4, 1/2)
    assert mcnemar([1.0, 0.0], [1.0, 0.0])["p_value"] == 1.0
