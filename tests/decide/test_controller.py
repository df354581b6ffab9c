"""A trained controller decides batches of rows: the action is the policy's argmax, the scores
are probabilities, the margin decides abstention, and a row it cannot read is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.decide.conftest import TinyRun
from worker.context import StageFailure
from worker.decide import decision as rules
from worker.decide.controller import (
    MAX_STATE_CHARS,
    MAX_TOOLS,
    NUMPY_ROWS,
    Controller,
    DecideRow,
    RowError,
    load_controller,
    split_columns,
)
from worker.evaluate.policies import ConstantPolicy, load_policy
from worker.models.policy import argmax


def anchor_rows(run: TinyRun) -> list[DecideRow]:
    lines = (run.corpus / "anchor.jsonl").read_text().splitlines()
    return [DecideRow(r["state"], r["tools"]) for r in map(json.loads, lines)]


@pytest.mark.parametrize("which", ["trm_run", "gbdt_run"])
def test_decisions_are_the_policys_argmax_with_probabilities(which, request) -> None:
    run: TinyRun = request.getfixturevalue(which)
    rows = anchor_rows(run)
    controller = load_controller(run.trainer_dir, run.trainer)
    policy = load_policy({"type": run.trainer, "path": str(run.trainer_dir)})
    expected = policy.scores_batch([r.state for r in rows], [r.tools for r in rows])

    decisions = controller.decide(rows)

    assert controller.trainer == run.trainer and controller.model_hash == policy.model_hash
    assert controller.policy.forward_passes == 1  # the whole batch in one scoring call
    assert len(decisions) == len(rows)
    for row, decision, scores in zip(rows, decisions, expected, strict=True):
        assert decision.action == row.tools[argmax(scores)]
        assert sum(decision.scores) == pytest.approx(1.0)
        assert max(decision.scores) == decision.scores[row.tools.index(decision.action)]
        top = sorted(decision.scores, reverse=True)
        assert decision.margin == pytest.approx(top[0] - top[1] if len(top) > 1 else 1.0)
        assert not decision.abstain  # no abstain_margin: never abstains


def test_the_numpy_forward_decides_as_torch_does_at_every_batch_size(trm_run: TinyRun) -> None:
    # Calls of up to NUMPY_ROWS rows run the numpy forward, larger ones torch's: a row gets the
    # same action and its probabilities within 1e-5 whichever ran, alone or in a batch.
    rows = anchor_rows(trm_run)
    controller = load_controller(trm_run.trainer_dir, "trm")
    assert controller.numpy is not None
    policy = controller.policy
    torch_scores = policy.scores_batch([r.state for r in rows], [r.tools for r in rows])
    by_torch = [rules.decision(r.tools, s, None) for r, s in zip(rows, torch_scores, strict=True)]
    alone = [controller.decide([row])[0] for row in rows]
    together = controller.decide(rows[:NUMPY_ROWS])
    big = controller.decide([rows[i % len(rows)] for i in range(NUMPY_ROWS + 1)])  # torch
    for i, want in enumerate(by_torch):
        for got in (alone[i], big[i], *together[i : i + 1]):
            assert got.action == want.action
            assert got.scores == pytest.approx(want.scores, abs=1e-5)


def test_a_gbdt_decides_from_the_columns_its_trees_split_on(gbdt_run: TinyRun) -> None:
    # Its trees read a row only at their splits: a decision's matrix holds the general
    # encoder's values in those columns and 0.0 elsewhere, and scores exactly as the policy.
    rows = anchor_rows(gbdt_run)
    controller = load_controller(gbdt_run.trainer_dir, "gbdt")
    booster = controller.policy.booster  # type: ignore[attr-defined]
    assert controller.encoder is not None and controller.decider is not None
    pairs = [(r.state, r.tools) for r in rows]
    full, _ = controller.encoder.raw(pairs)
    part, _ = controller.decider.raw(pairs)
    reads = split_columns(booster)
    assert reads and len(reads) < full.shape[1]
    assert np.array_equal(part[:, reads], full[:, reads], equal_nan=True)
    assert (np.delete(part, reads, axis=1) == 0.0).all()
    want = controller.policy.scores_batch([r.state for r in rows], [r.tools for r in rows])
    assert controller.scores(rows) == want
    assert [d.action for d in controller.decide(rows)] == [
        r.tools[argmax(s)] for r, s in zip(rows, want, strict=True)
    ]


def test_abstains_when_the_margin_is_under_the_threshold(trm_run: TinyRun) -> None:
    rows = anchor_rows(trm_run)
    margins = sorted(d.margin for d in load_controller(trm_run.trainer_dir, "trm").decide(rows))
    threshold = margins[len(margins) // 2]
    controller = load_controller(trm_run.trainer_dir, "trm", abstain_margin=threshold)
    decisions = controller.decide(rows)
    assert [d.abstain for d in decisions] == [d.margin < threshold for d in decisions]
    assert any(d.abstain for d in decisions) and not all(d.abstain for d in decisions)
    assert all(d.action in r.tools for r, d in zip(rows, decisions, strict=True))
    one = controller.decide([DecideRow(rows[0].state, rows[0].tools[:1])])[0]
    assert (one.action, one.scores, one.margin, one.abstain) == (
        rows[0].tools[0],
        [1.0],
        1.0,
        False,
    )


@pytest.mark.parametrize(
    ("row", "field"),
    [
        (DecideRow("{}", []), "rows[1].tools"),
        (DecideRow("{}", ["a", "b", "a"]), "rows[1].tools[2]"),
        (DecideRow("{}", ["a", 3]), "rows[1].tools[1]"),  # type: ignore[list-item]
        (DecideRow({"a": 1}, ["a"]), "rows[1].state"),  # type: ignore[arg-type]
        (DecideRow("x" * (MAX_STATE_CHARS + 1), ["a"]), "rows[1].state"),
        (DecideRow("{}", [f"t{i}" for i in range(MAX_TOOLS + 1)]), "rows[1].tools"),
    ],
)
def test_a_row_it_cannot_read_is_refused_by_field(gbdt_run: TinyRun, row, field) -> None:
    controller = load_controller(gbdt_run.trainer_dir, "gbdt")
    with pytest.raises(RowError) as caught:
        controller.decide([anchor_rows(gbdt_run)[0], row])
    assert caught.value.field == field and str(caught.value).startswith(field + ":")
    assert controller.policy.forward_passes == 0  # refused before any model ran


def test_loading_names_the_missing_files_and_the_unknown_trainer(tmp_path: Path) -> None:
    with pytest.raises(StageFailure, match="model.safetensors"):
        load_controller(tmp_path, "trm")
    with pytest.raises(ValueError, match="trainer: 'svm'"):
        load_controller(tmp_path, "svm")
    with pytest.raises(ValueError, match="abstain_margin"):
        Controller(ConstantPolicy(), "trm", abstain_margin=1.5)
