"""Candidate scoring on a real trained adapter: SmolLM2-135M (the built-in base, 4-bit) with a
`qlora` adapter trained here on `route` play logs, scored on an unseen anchor world.

The adapter is trained once per module, as cheaply as still teaches the model to answer with a
candidate id: short states (two of the request's fields), route tags shared across worlds, 6
steps of 4 rows, sequences under 160 tokens (about 50 s of training on an idle 2-core CPU; 3
steps were already enough here, 6 leave a margin); 8 anchor rows are compared (about 20 s of
greedy generation). So little training teaches the answer's
form, not the routing: such an adapter tends to answer the same route on most rows. Accuracy is
not the point here; that the pick scoring reads off the log-likelihoods is the one the model
says, and that those are the trained tokens' exact log-likelihoods, is. Set
TRM_TEST_MODEL_CACHE to a folder to keep the converted SmolLM2 between test sessions.
"""

# ruff: noqa: F811 (the imported model_cache fixture is named as an argument)
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from core.schemas.corpus import CorpusSpec
from tests.train.qlora_fixtures import model_cache  # noqa: F401
from worker.corpus import build_corpus
from worker.envs import generate
from worker.evaluate.lm_scoring import LmPolicy
from worker.evaluate.policies import load_policy
from worker.evaluate.samples import read_jsonl
from worker.models import lm
from worker.models.policy import argmax
from worker.train import qlora
from worker.train.callbacks import TrainerCallbacks

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# The module takes about 80 s on an idle 2-core machine, several times that on a busy one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ANCHOR = "route-s0-w3"
# The scores are checked against whole-sequence passes in float32, where a batched pass with a
# shared prefix rounds the same to ~1e-5 nats. In bf16 (what this CPU computes in, see
# lm.device_and_dtype) the two round apart by up to 0.03 nats per answer token on an AMX CPU
# (4% of an unlikely answer's log-likelihood): no check of which tokens are scored. A wrong token
# would be off by nats.
LOGP_TOLERANCE = (2.5e-4, 1e-4)  # (absolute per answer token, relative)
ROWS = 8  # anchor rows compared (generation is the slow part: ~2.5 s a row on 2 cores)
# The cheapest training found that makes the model answer with a candidate id on unseen rows.
TRAINING = {"max_steps": 6, "micro_batch": 4, "grad_accum": 1, "lr": 2e-3, "max_seq_len": 160,
            "eval_every": 10**6, "checkpoint_every": 10**6}  # fmt: skip
STATE_FIELDS = ["observation.request.prompt_text", "observation.budget_left"]


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory, model_cache: Path
) -> tuple[LmPolicy, list[dict[str, Any]], dict[str, Any]]:
    """(the trained adapter loaded as a policy, anchor rows of a world it never saw, its ref)."""
    cache = model_cache  # the session's one converted SmolLM2 (tests/train/qlora_fixtures.py)
    root = tmp_path_factory.mktemp("lm-route")
    generate(root / "play", families=["route"], worlds=4, episodes=8, seed=0,
             formats=["reasoning_trace"])  # fmt: skip
    source = {
        "type": "jsonl", "mode": "reasoning_trace", "name": "route",
        "path": str(root / "play" / "reasoning_traces.jsonl"), "state_fields": STATE_FIELDS,
        "tools_field": "options.ids", "tags_field": "options.tags",
        "action_field": "decision.action",
        "meta_fields": ["meta.world_id", "meta.family", "meta.run", "meta.episode", "meta.turn",
                        "meta.kind"],
    }  # fmt: skip
    # Every world names the routes its own way; the shared tags make the unseen world readable.
    knobs = {"namespace_normalization": "auto"}
    spec = {"sources": [source], "contract": "action_only", "knobs": knobs,
            "split": {"by": "env", "anchor": [ANCHOR]}}  # fmt: skip
    build_corpus(CorpusSpec.model_validate(spec), root / "corpus")
    result = qlora.train(
        TRAINING, root / "corpus", root / "trainer", TrainerCallbacks(),
        seed=0, contract="action_only", probe=False, model_cache=cache,
    )  # fmt: skip
    assert result["rows_truncated"] == 0
    ref = {"type": "qlora", "path": str(root / "trainer" / "adapter"),
           "contract": "action_only", "model_cache": str(cache)}  # fmt: skip
    policy = load_policy(ref)
    assert isinstance(policy, LmPolicy)
    rows = read_jsonl(root / "corpus" / "anchor.jsonl")[:ROWS]
    assert len(rows) == ROWS
    return policy, rows, ref


def test_scoring_picks_what_greedy_generation_answers_on_a_trained_adapter(trained):
    policy, rows, _ = trained
    scores = policy.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
    scored = [r["tools"][argmax(s)] for r, s in zip(rows, scores, strict=True)]
    generated = [policy.generate_pick(r["state"], r["tools"]) for r in rows]
    answered = sum(g is not None for g in generated)
    same = sum(g == s for g, s in zip(generated, scored, strict=True))
    assert answered >= 0.95 * len(rows), f"generation answered a candidate {answered}/{len(rows)}"
    assert same >= 0.95 * len(rows), f"same pick on {same}/{len(rows)}: {generated} vs {scored}"


def test_scores_are_the_trained_answers_log_likelihood_in_one_pass_per_batch(trained, monkeypatch):
    _, rows, ref = trained
    float32 = (lm.device_and_dtype()[0], torch.float32)
    monkeypatch.setattr(lm, "device_and_dtype", lambda *args: float32)
    policy = load_policy(ref)  # the same adapter, computing in float32
    assert isinstance(policy, LmPolicy) and policy.dtype == torch.float32
    fresh = LmPolicy(
        policy.model, policy.tokenizer, "action_only", "fresh", policy.model_hash, rows_per_batch=3
    )  # 8 rows: three batches
    scores = fresh.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
    batches = -(-len(rows) // fresh.rows_per_batch)
    assert fresh.forward_passes == 1 + batches  # the prompts' shared prefix, then one per batch
    tokenizer = policy.tokenizer
    with torch.no_grad():
        for row, row_scores in zip(rows[:2], scores, strict=False):
            prompt, answers = policy.encode(row["state"], row["tools"])
            for tool, answer, score in zip(row["tools"], answers, row_scores, strict=True):
                # the tokens scored are the ones the trainer labelled: the answer and end of turn
                said = [*policy.messages(row["state"], row["tools"]),
                        {"role": "assistant", "content": tool}]  # fmt: skip
                text = tokenizer.apply_chat_template(said, tokenize=False)
                whole = tokenizer(text, add_special_tokens=False)["input_ids"]
                assert whole[: len(prompt) + len(answer)] == prompt + answer
                ids = torch.tensor([prompt + answer], device=policy.device)
                logp = torch.log_softmax(policy.model(input_ids=ids).logits[0].float(), -1)
                full = sum(float(logp[len(prompt) - 1 + t, tok]) for t, tok in enumerate(answer))
                per_token, rel = LOGP_TOLERANCE
                near = per_token * max(4, len(answer))
                assert score == pytest.approx(full, abs=near, rel=rel)
