"""The `trm` trainer on real data: it learns `route`, masks missing candidates, resumes exactly,
and the saved model scores like the trained one."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from worker.models.trm import (
    Encoded,
    TinyRecursiveModel,
    Tokenizer,
    load_trm,
    pieces,
    save_model,
)
from worker.train.callbacks import TrainerCallbacks
from worker.train.trm import train

TINY = {"hidden": 16, "n_recursions": 2, "batch_size": 8, "lr": 1e-2}


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_choice_corpus(root: Path, rows: int = 120, seed: int = 0) -> Path:
    """Rows with 2 to 5 candidates where the state names the right one (`want`)."""
    rng = random.Random(seed)
    names = [f"tool.{w}" for w in ("alpha", "beta", "gamma", "delta", "omega", "sigma")]
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", rows), ("val", rows // 4)):
        lines = []
        for _ in range(n):
            tools = rng.sample(names, rng.randint(2, 5))
            want = rng.choice(tools)
            state = json.dumps({"want": want, "noise": rng.randint(0, 9)})
            lines.append(json.dumps({"state": state, "tools": tools, "action": want, "meta": {}}))
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return root


class StopAfter(TrainerCallbacks):
    """Asks for a cancel once `k` optimizer steps are done, as a user's cancel would."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def should_stop(self) -> str | None:
        return "cancel" if len(self.steps) >= self.k else None


@pytest.fixture(scope="module")
def trained(route_corpus: Path, tmp_path_factory: pytest.TempPathFactory):
    """The default config, trained once on the route corpus (shared by the tests below)."""
    out = tmp_path_factory.mktemp("trm")
    callbacks = TrainerCallbacks()
    result = train({}, route_corpus, out, callbacks, seed=0)
    return out, result, callbacks


def test_default_model_learns_route_well_above_the_majority_rate(route_corpus, trained) -> None:
    out, result, callbacks = trained
    val = read(route_corpus / "val.jsonl")
    majority = Counter(r["action"] for r in val).most_common(1)[0][1] / len(val)
    # A stronger baseline: the most common action of each world, per world.
    per_world: dict[str, Counter[str]] = defaultdict(Counter)
    for row in val:
        per_world[row["meta"]["env"]][row["action"]] += 1
    world_majority = sum(max(c.values()) for c in per_world.values()) / len(val)
    accuracy = result["eval"]["val"]["accuracy"]
    print(
        f"\nroute val: accuracy {accuracy:.3f}, majority {majority:.3f}, per-world majority "
        f"{world_majority:.3f}, {result['steps']} steps in {result['train_seconds']:.1f}s"
    )
    # Well above the majority class (the bar), and clearly above knowing each world's
    # favourite action (0.69 vs 0.50 with seed 0 here).
    assert accuracy >= majority + 0.3 and accuracy >= world_majority + 0.15
    losses = [s["loss"] for s in callbacks.steps]
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10
    assert result["stopped_by"] is None and result["steps"] == result["total_steps"]
    assert result["rows_trained"] >= 8 * len(read(route_corpus / "train.jsonl"))
    assert result["device"] == "cpu" and result["tokens_trained"] > result["rows_trained"]
    assert {Path(p).name for p in result["artifacts"]} == {
        "model.safetensors",
        "config.json",
        "vocab.json",
    }
    assert result["train_seconds"] < 60
    assert [e["step"] for e in callbacks.evals][-1] == result["steps"]


def test_saved_model_reloads_and_scores_like_the_trained_one(route_corpus, trained) -> None:
    out, result, _ = trained
    policy = load_trm(out)
    val = read(route_corpus / "val.jsonl")
    scores = policy.scores_batch([r["state"] for r in val], [r["tools"] for r in val])
    picks = [
        r["tools"][max(range(len(s)), key=s.__getitem__)] for s, r in zip(scores, val, strict=True)
    ]
    reloaded = sum(p == r["action"] for p, r in zip(picks, val, strict=True)) / len(val)
    assert reloaded == pytest.approx(result["eval"]["val"]["accuracy"], abs=1e-4)
    assert [policy.act(r["state"], r["tools"]) for r in val[:5]] == picks[:5]


def test_load_trm_gives_the_in_memory_models_scores(tmp_path: Path, route_corpus: Path) -> None:
    rows = read(route_corpus / "train.jsonl")[:50]
    tok = Tokenizer.build(rows)
    torch.manual_seed(3)
    model = TinyRecursiveModel(len(tok.tokens), 16, 3).eval()
    save_model(
        tmp_path, model, tok, {"vocab_size": len(tok.tokens), "hidden": 16, "n_recursions": 3}
    )
    policy = load_trm(tmp_path)
    with torch.no_grad():
        direct = model(Encoded(tok, rows[:5]).batch(torch.arange(5), torch.device("cpu")))[-1]
    for i, row in enumerate(rows[:5]):
        assert policy.scores(row["state"], row["tools"]) == pytest.approx(direct[i].tolist())


def test_rows_with_fewer_candidates_put_no_probability_on_padding(tmp_path: Path) -> None:
    # 240 rows, 40 epochs: with 120 rows seed 1 missed the bar with 0.83 on two CPUs (float32
    # sums in another order), at 25 epochs on one and at 40 on the other; with 240 rows seeds 1-5
    # all reach 1.0 at 40 epochs (at 25 seed 5 still fell to 0.3).
    corpus = write_choice_corpus(tmp_path / "corpus", rows=240)
    result = train({**TINY, "epochs": 40}, corpus, tmp_path / "out", TrainerCallbacks(), seed=1)
    assert result["eval"]["val"]["accuracy"] >= 0.9  # mixed 2..5 candidates, learned
    policy = load_trm(tmp_path / "out")
    two = {"state": json.dumps({"want": "tool.beta"}), "tools": ["tool.alpha", "tool.beta"]}
    tools = ["tool.alpha", "tool.beta", "tool.gamma", "tool.delta", "tool.omega"]
    five = {"state": json.dumps({"want": "tool.omega"}), "tools": tools}
    data = Encoded(
        policy.tokenizer, [{**two, "action": "tool.beta"}, {**five, "action": "tool.omega"}]
    )
    with torch.no_grad():
        for scores in policy.model(data.batch(torch.arange(2), torch.device("cpu"))):
            probs = scores.softmax(-1)
            assert probs[0, 2:].sum().item() == 0.0
            assert probs[0, :2].sum().item() == pytest.approx(1.0)
    # Batched beside a longer row, a short row scores exactly as it does alone.
    alone = policy.scores(two["state"], two["tools"])
    batched = policy.scores_batch([two["state"], five["state"]], [two["tools"], five["tools"]])
    assert batched[0] == pytest.approx(alone) and len(batched[1]) == 5
    assert policy.act(two["state"], two["tools"]) == "tool.beta"


def test_cancel_saves_a_checkpoint_and_train_resumes_where_it_stopped(tmp_path: Path) -> None:
    corpus = write_choice_corpus(tmp_path / "corpus")
    config = {**TINY, "max_steps": 9}
    whole = train(config, corpus, tmp_path / "whole", TrainerCallbacks(), seed=5)

    out = tmp_path / "cut"
    first = train(config, corpus, out, StopAfter(4), seed=5)
    assert first["stopped_by"] == "cancel" and first["steps"] == 4
    assert (out / "checkpoints" / "step-000004" / "trainer_state.pt").exists()
    assert (out / "model.safetensors").exists()  # what it trained is kept

    second = train(config, corpus, out, TrainerCallbacks(), seed=5)
    assert second["resumed_from_step"] == 4 and second["stopped_by"] is None
    assert second["steps"] == whole["steps"] == 9
    assert second["rows_trained"] == 5 * 8
    # Same batches, same optimizer state: the resumed model is the uninterrupted one.
    assert second["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)
    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(out / "model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_candidate_ids_split_into_shared_pieces() -> None:
    assert pieces("TRM_PLUS_LLM") == ["trm", "plus", "llm"]
    assert pieces("route.local") == ["route", "local"]
    assert pieces("use-trm") == ["use", "trm"]
    assert pieces("searchDocs/v2:getItem") == ["search", "docs", "v2", "get", "item"]
