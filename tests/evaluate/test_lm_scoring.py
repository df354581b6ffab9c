"""Candidate scoring on a real trained adapter: SmolLM2-135M (the built-in base, 4-bit) with a
`qlora` adapter trained on `route` play logs (the session's one, tests/train/smol_adapter.py),
scored on an unseen anchor world.

4 anchor rows are compared (about 10 s of greedy generation). So little training teaches the
answer's form, not the routing: such an adapter tends to answer the same route on most rows.
Accuracy is not the point here; that the pick scoring reads off the log-likelihoods is the one
the model says, and that those are the trained tokens' exact log-likelihoods, is. Set
TRM_TEST_MODEL_CACHE to a folder to keep the converted SmolLM2 between test sessions.
"""

# ruff: noqa: F811 (the imported fixtures are named as arguments)
from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from tests.train.qlora_fixtures import model_cache  # noqa: F401
from tests.train.smol_adapter import TRAINING, SmolAdapter, smol_adapter  # noqa: F401
from worker.evaluate.lm_scoring import BATCH_CELLS, LmPolicy
from worker.evaluate.policies import load_policy
from worker.evaluate.samples import read_jsonl
from worker.models import lm
from worker.models.policy import argmax

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# The module takes about 30 s on an idle 2-core machine once the session's adapter is trained,
# several times that on a busy one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# The scores are checked against whole-sequence passes in float32, where a batched pass with a
# shared prefix rounds the same to ~1e-5 nats. In bf16 (what this CPU computes in, see
# lm.device_and_dtype) the two round apart by up to 0.03 nats per answer token on an AMX CPU
# (4% of an unlikely answer's log-likelihood): no check of which tokens are scored. A wrong token
# would be off by nats.
LOGP_TOLERANCE = (2.5e-4, 1e-4)  # (absolute per answer token, relative)
TRAINED_SEQ_LEN = TRAINING["max_seq_len"]  # what the adapter records of its rows
ROWS = 4  # anchor rows compared (generation is the slow part: ~2.5 s a row on 2 cores)


@pytest.fixture(scope="module")
def trained(smol_adapter: SmolAdapter) -> tuple[LmPolicy, list[dict[str, Any]], dict[str, Any]]:
    """(the trained adapter loaded as a policy, anchor rows of a world it never saw, its ref)."""
    assert smol_adapter.result["rows_truncated"] == 0
    ref = {
        "type": "qlora",
        "path": str(smol_adapter.adapter),
        "contract": "action_only",
        "model_cache": str(smol_adapter.model_cache),
    }
    policy = load_policy(ref)
    assert isinstance(policy, LmPolicy)
    rows = read_jsonl(smol_adapter.corpus / "anchor.jsonl")[:ROWS]
    assert len(rows) == ROWS
    return policy, rows, ref


@pytest.fixture(scope="module")
def float32(trained) -> LmPolicy:
    """The same adapter loaded again computing in float32 (once for the module's two checks of
    exact log-likelihoods): a row scored alone, beside others or in one whole pass rounds alike.
    Only the batching check scores with it; the other wraps its model in policies of its own."""
    _, _, ref = trained
    with pytest.MonkeyPatch.context() as patch:
        float32 = (lm.device_and_dtype()[0], torch.float32)
        patch.setattr(lm, "device_and_dtype", lambda *args: float32)
        policy = load_policy(ref)
    assert isinstance(policy, LmPolicy) and policy.dtype == torch.float32
    return policy


def test_scoring_picks_what_greedy_generation_answers_on_a_trained_adapter(trained):
    policy, rows, _ = trained
    scores = policy.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
    scored = [r["tools"][argmax(s)] for r, s in zip(rows, scores, strict=True)]
    generated = [policy.generate_pick(r["state"], r["tools"]) for r in rows]
    answered = sum(g is not None for g in generated)
    same = sum(g == s for g, s in zip(generated, scored, strict=True))
    assert answered >= 0.95 * len(rows), f"generation answered a candidate {answered}/{len(rows)}"
    assert same >= 0.95 * len(rows), f"same pick on {same}/{len(rows)}: {generated} vs {scored}"


def test_scores_are_the_trained_answers_log_likelihood_in_one_pass_per_batch(trained, float32):
    _, rows, _ = trained
    policy = float32  # the same adapter, computing in float32
    fresh = LmPolicy(
        policy.model, policy.tokenizer, "action_only", "fresh", policy.model_hash, rows_per_batch=3
    )  # 4 rows: two batches, the second one short
    scores = fresh.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
    batches = -(-len(rows) // fresh.rows_per_batch)
    assert fresh.forward_passes == 1 + batches  # the prompts' shared prefix, then one per batch
    tokenizer = policy.tokenizer
    with torch.no_grad():
        for row, row_scores in zip(rows[:2], scores, strict=False):
            prompt, answers = policy.encode(row["state"], row["tools"])
            for tool, answer, score in zip(row["tools"], answers, row_scores, strict=True):
                # the tokens scored are the ones the trainer labelled: the answer and end of turn
                said = [
                    *policy.messages(row["state"], row["tools"]),
                    {"role": "assistant", "content": tool},
                ]
                text = tokenizer.apply_chat_template(said, tokenize=False)
                whole = tokenizer(text, add_special_tokens=False)["input_ids"]
                assert whole[: len(prompt) + len(answer)] == prompt + answer
                ids = torch.tensor([prompt + answer], device=policy.device)
                logp = torch.log_softmax(policy.model(input_ids=ids).logits[0].float(), -1)
                full = sum(float(logp[len(prompt) - 1 + t, tok]) for t, tok in enumerate(answer))
                per_token, rel = LOGP_TOLERANCE
                near = per_token * max(4, len(answer))
                assert score == pytest.approx(full, abs=near, rel=rel)


def test_a_batch_is_split_by_its_attention_and_scores_the_same(trained, float32):
    _, rows, _ = trained
    policy = float32  # float32: a row scored alone or beside others rounds alike
    assert policy.max_seq_len == TRAINED_SEQ_LEN
    states, tools = [r["state"] for r in rows], [r["tools"] for r in rows]
    together = policy.scores_batch(states, tools)
    assert policy.forward_passes == 2  # the shared prefix, then every row in one pass
    args = (policy.model, policy.tokenizer, "action_only", "alone", policy.model_hash)
    # A bound no two rows fit under (BATCH_CELLS' role for long prompts): one row a pass.
    alone = LmPolicy(*args, batch_cells=1)
    assert BATCH_CELLS >= 16 * 448 * 448  # 16 rows of the demo's max_seq_len fit by default
    split = alone.scores_batch(states, tools)
    assert alone.forward_passes == 1 + len(rows)
    per_token, rel = LOGP_TOLERANCE
    for a, b in zip(together, split, strict=True):
        assert b == pytest.approx(a, abs=per_token * 8, rel=rel)
