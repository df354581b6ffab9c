"""The train kind's `launch_trainer` stage: it runs the resolved trainer, records usage, inputs and
outputs, retries an out-of-memory once at half the micro-batch, and names what went wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from core.card import Card, render_text
from core.schemas.train import qlora_batch
from core.settings import Settings
from tests.train.qlora_fixtures import TINY_LLAMA, model_cache, qlora_corpus  # noqa: F401
from worker.context import StageContext, StageFailure
from worker.evaluate.policies import load_policy
from worker.kinds.train import evaluate, launch_trainer
from worker.train import trm

# ruff: noqa: F811 (pytest fixtures imported above are named as test arguments)


class Events:
    """Stands in for the database-backed publisher: keeps what the stage published."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def publish(self, run_id: str, type_: str, data: dict[str, Any]) -> None:
        self.events.append((type_, data))

    def run_events(self, run_id: str, type_: str) -> list[dict[str, Any]]:
        return [data for t, data in self.events if t == type_]

    def steps(self) -> list[int]:
        return [d["step"] for t, d in self.events if t == "metric" and "loss" in d]


def make_ctx(
    tmp_path: Path,
    corpus_dir: Path,
    config: dict[str, Any],
    *,
    probe: bool = False,
    budget: dict[str, Any] | None = None,
    trainer: str = "trm",
    model_cache: Path | None = None,
) -> StageContext:
    """Run r1's context; its corpus folder (where prepare_corpus writes it) is `corpus_dir`."""
    settings = Settings(runs_dir=tmp_path, model_cache=model_cache or tmp_path / "models")
    run_dir = settings.run_dir("r1")
    run_dir.mkdir(parents=True, exist_ok=True)
    corpus = run_dir / "corpus"
    if not corpus.is_symlink():
        corpus.symlink_to(corpus_dir, target_is_directory=True)
    spec = {
        "kind": "train",
        "trainer": trainer,
        trainer: config,
        "corpus": {"sources": [], "contract": "action_only"},
        "seed": 0,
        "probe": probe,
        "budget": budget or {},
    }
    return StageContext(
        run_id="r1",
        kind="train",
        stage="launch_trainer",
        attempt=1,
        run_dir=run_dir,
        settings=settings,
        publisher=Events(),  # type: ignore[arg-type]
        card=Card(run_id="r1", kind="train"),
        spec=spec,
    )


def test_probe_trains_exactly_one_batch_end_to_end(tmp_path: Path, route_corpus: Path) -> None:
    ctx = make_ctx(tmp_path, route_corpus, {"batch_size": 16}, probe=True)
    result = launch_trainer(ctx, ctx.spec)
    assert result["steps"] == 1 and result["rows_trained"] == 16
    assert ctx.publisher.steps() == [1]  # type: ignore[attr-defined]
    assert ctx.counters["steps"] == 1 and ctx.counters["rows_trained"] == 16
    assert ctx.counters["tokens_trained"] == result["tokens_trained"] > 16
    assert ctx.counters["device"] == "cpu" and "peak_vram_bytes" not in ctx.counters
    assert ctx.counters["oom_retries"] == 0
    trainer = ctx.run_dir / "trainer"
    assert trainer / "model.safetensors" in ctx.outputs and trainer / "features.json" in ctx.outputs
    assert ctx.run_dir / "corpus" / "train.jsonl" in ctx.inputs
    assert not (trainer / "checkpoints").exists()  # a probe leaves nothing to resume from
    json.dumps(result)
    trained = load_policy({"type": "trm", "path": str(trainer)})
    assert trained.act('{"x": 1}', ["a", "b"]) in ("a", "b")


def test_the_resolved_config_file_in_the_run_dir_does_not_steer_the_trainer(
    tmp_path: Path, route_corpus: Path
) -> None:
    ctx = make_ctx(tmp_path, route_corpus, {"batch_size": 16}, probe=True)
    elsewhere = tmp_path / "elsewhere"
    planted = {
        "trainer": "qlora",
        "config": {},
        "corpus_dir": str(tmp_path / "nowhere"),
        "output_dir": str(elsewhere),
        "model_cache": str(elsewhere),
    }
    (ctx.run_dir / "trainer_config.resolved.json").write_text(json.dumps(planted))
    result = launch_trainer(ctx, ctx.spec)
    assert result["steps"] == 1 and (ctx.run_dir / "trainer" / "model.safetensors").is_file()
    assert not elsewhere.exists()


# A real out-of-memory cannot be produced on this CPU-only machine: the trainer is wrapped to
# raise the errors PyTorch and Python raise when memory runs out, then train for real.
OOMS = [
    lambda: torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    lambda: RuntimeError("CUDA error: out of memory"),
    lambda: MemoryError(),
]


def oom_first(monkeypatch: pytest.MonkeyPatch, make_error, times: int = 1) -> list[dict]:
    calls: list[dict] = []
    real = trm.train

    def flaky(config: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(dict(config))
        if len(calls) <= times:
            raise make_error()
        return real(config, *args, **kwargs)

    monkeypatch.setattr(trm, "train", flaky)
    return calls


@pytest.mark.parametrize("make_error", OOMS, ids=["cuda_oom", "runtime_oom", "memory_error"])
def test_out_of_memory_retries_once_at_half_the_batch_and_twice_the_accumulation(
    tmp_path: Path, route_corpus: Path, monkeypatch: pytest.MonkeyPatch, make_error
) -> None:
    calls = oom_first(monkeypatch, make_error)
    ctx = make_ctx(tmp_path, route_corpus, {"batch_size": 32, "max_steps": 2, "hidden": 16})
    result = launch_trainer(ctx, ctx.spec)
    assert [(c["batch_size"], c["grad_accum"]) for c in calls] == [(32, 1), (16, 2)]
    assert result["steps"] == 2 and result["rows_trained"] == 2 * 32  # same effective batch
    assert (result["micro_batch"], result["grad_accum"]) == (16, 2)
    assert ctx.counters["oom_retries"] == 1
    assert (ctx.counters["micro_batch"], ctx.counters["grad_accum"]) == (16, 2)
    assert any("out of memory" in n and "batch_size=16" in n for n in ctx.notes)


def test_a_second_out_of_memory_fails_with_class_oom_and_what_to_change(
    tmp_path: Path, route_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = oom_first(monkeypatch, OOMS[0], times=2)
    ctx = make_ctx(tmp_path, route_corpus, {"batch_size": 8})
    with pytest.raises(StageFailure) as failure:
        launch_trainer(ctx, ctx.spec)
    assert failure.value.failure_class == "oom" and len(calls) == 2
    assert "batch_size=4" in failure.value.reason and "trm.batch_size" in failure.value.reason


def test_other_errors_are_not_retried(
    tmp_path: Path, route_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = oom_first(monkeypatch, lambda: ValueError("a bug"), times=5)
    ctx = make_ctx(tmp_path, route_corpus, {})
    with pytest.raises(ValueError, match="a bug"):
        launch_trainer(ctx, ctx.spec)
    assert len(calls) == 1


def test_an_empty_corpus_is_bad_input_saying_where_to_look(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.jsonl").write_text("")
    ctx = make_ctx(tmp_path, corpus, {})
    with pytest.raises(StageFailure) as failure:
        launch_trainer(ctx, ctx.spec)
    assert failure.value.failure_class == "bad_input"
    assert "no rows" in failure.value.reason and "manifest.json" in failure.value.reason


def test_a_missing_corpus_is_bad_input(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "nowhere", {})
    with pytest.raises(StageFailure) as failure:
        launch_trainer(ctx, ctx.spec)
    assert failure.value.failure_class == "bad_input" and "train.jsonl" in failure.value.reason


def test_token_budget_stops_training_and_keeps_a_checkpoint(
    tmp_path: Path, route_corpus: Path
) -> None:
    ctx = make_ctx(tmp_path, route_corpus, {"hidden": 16}, budget={"max_tokens": 1})
    result = launch_trainer(ctx, ctx.spec)
    assert result["stopped_by"] == "budget" and result["steps"] == 1
    assert (ctx.run_dir / "trainer" / "checkpoints" / "step-000001").is_dir()
    assert any("stopped by budget" in n for n in ctx.notes)


def test_a_later_attempt_resumes_only_from_a_checkpoint_this_run_saved(
    tmp_path: Path, route_corpus: Path
) -> None:
    """A checkpoint folder that appeared in the run directory (an upload, a copy) is passed over:
    only one whose digest this run's own events recorded is resumed from."""
    import shutil

    config = {"hidden": 16, "max_steps": 3}
    first = make_ctx(tmp_path, route_corpus, config, budget={"max_tokens": 1})
    assert launch_trainer(first, first.spec)["steps"] == 1
    saved = tmp_path / "r1" / "trainer" / "checkpoints"
    planted = saved / "step-000050"
    shutil.copytree(saved / "step-000001", planted)
    meta = json.loads((planted / "checkpoint.json").read_text())
    (planted / "checkpoint.json").write_text(json.dumps({**meta, "step": 50}))

    again = make_ctx(tmp_path, route_corpus, config)
    again.publisher = first.publisher  # the same run: its recorded events
    result = launch_trainer(again, again.spec)
    assert again.counters["resumed_from_step"] == 1 and result["steps"] == 3
    assert any("step-000050: not a checkpoint this run saved" in n for n in again.notes)


def test_a_resumed_qlora_attempt_and_its_cut_rows_show_in_the_stage_counters(
    tmp_path: Path, qlora_corpus: Path, model_cache: Path
) -> None:
    config = {
        "base_model": TINY_LLAMA,
        "micro_batch": 2,
        "grad_accum": 1,
        "max_seq_len": 128,
        "max_steps": 3,
        "checkpoint_every": 10,
        "eval_every": 10,
    }
    first = make_ctx(
        tmp_path,
        qlora_corpus,
        config,
        trainer="qlora",
        model_cache=model_cache,
        budget={"max_tokens": 1},
    )
    assert launch_trainer(first, first.spec)["stopped_by"] == "budget"
    assert "resumed_from_step" not in first.counters  # a fresh start
    # Its val pass before the first step is on the card, with its rows and no ETA yet.
    events = first.publisher.events  # type: ignore[attr-defined]
    cards = [Card(**data) for type_, data in events if type_ == "card"]
    passes = [c for c in cards if c.pass_name == "eval" and c.step is None]
    val_rows = len((qlora_corpus / "messages_val.jsonl").read_text().splitlines())
    assert passes and passes[0].eta_s is None, cards
    assert f"launch_trainer eval   0/{val_rows} rows" in render_text(passes[0])

    # `eval_rows` sizes the val pass only, so an attempt may change it and still resume.
    again = make_ctx(
        tmp_path, qlora_corpus, {**config, "eval_rows": 2}, trainer="qlora", model_cache=model_cache
    )
    again.publisher = first.publisher  # the same run: the checkpoint it recorded
    result = launch_trainer(again, again.spec)
    assert result["steps"] == 3 and again.counters["resumed_from_step"] == 1
    meta = json.loads((again.run_dir / "trainer" / "run_meta.json").read_text())
    assert meta["resolved"]["eval_rows"] == 2 < val_rows
    assert again.publisher.steps()[-2:] == [2, 3]  # type: ignore[attr-defined]
    rows = len((qlora_corpus / "messages.jsonl").read_text().splitlines())
    assert again.counters["rows_truncated"] == rows and again.counters["rows_dropped"] == 0
    assert any(f"{rows} training rows longer than max_seq_len=128" in n for n in again.notes)


def test_evaluate_scores_the_spec_s_train_sample_and_every_anchor_row(
    tmp_path: Path, route_corpus: Path
) -> None:
    """`evaluate.train_sample` sizes the train rows a train run scores (the qlora demo's lever:
    an LM scores about a row a second here); the anchors are always scored whole."""
    ctx = make_ctx(tmp_path, route_corpus, {}, trainer="gbdt")
    launch_trainer(ctx, ctx.spec)
    spec = {**ctx.spec, "evaluate": {"train_sample": 20, "episodes": 2}}
    evaluate(ctx, spec)
    card = json.loads((ctx.run_dir / "scorecard.json").read_text())
    anchors = len((route_corpus / "val.jsonl").read_text().splitlines())  # no anchor split here
    assert card["n"] == {"train": 20, "anchor": anchors}
    evaluate(ctx, ctx.spec)  # the default: every train row up to 1000
    card = json.loads((ctx.run_dir / "scorecard.json").read_text())
    rows = len((route_corpus / "train.jsonl").read_text().splitlines())
    assert card["n"]["train"] == min(rows, 1000) > 20


def test_qlora_auto_batch_is_one_packed_sequence_times_sixteen_on_a_cpu(
    tmp_path: Path, qlora_corpus: Path, model_cache: Path
) -> None:
    """micro_batch/grad_accum `auto` (the defaults) resolve on the worker, before the estimate:
    1 x 16 on a CPU (bench/train_throughput.py's fastest), 8 x 2 on a GPU (a pure rule, checked
    below without one: this machine has none)."""
    config = {"base_model": TINY_LLAMA, "max_seq_len": 128, "eval_rows": 0}
    ctx = make_ctx(
        tmp_path, qlora_corpus, config, trainer="qlora", model_cache=model_cache, probe=True
    )
    launch_trainer(ctx, ctx.spec)
    assert (ctx.counters["micro_batch"], ctx.counters["grad_accum"]) == (1, 16)
    meta = json.loads((ctx.run_dir / "trainer" / "run_meta.json").read_text())
    assert meta["resolved"]["micro_batch"] == 1 and meta["resolved"]["eval_rows"] == 0
    assert qlora_batch("auto", "auto", cuda=True) == (8, 2)
    assert (
        qlora_batch(4, "auto", cuda=False) == (4, 4) and qlora_batch(32, "auto", cuda=True)[1] == 1
    )
    assert qlora_batch("auto", 3, cuda=False) == (1, 3)
