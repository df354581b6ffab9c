"""The decision-time encoder (worker/decide/fast_encode.py) gives the general encoder's matrices bit
for bit, and a controller's decisions through it are the policy's own, on the frozen rows of every
generated family at every state compression and of routerBench (tests/features/frozen.py)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tests.decide.conftest import TinyRun
from tests.features import frozen
from worker.decide.controller import DecideRow, load_controller
from worker.decide.decision import decision
from worker.decide.fast_encode import FastEncoder
from worker.features.row import row_features
from worker.models.feature_space import FeatureSpace
from worker.models.rows import read_rows


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    found = frozen.load()
    assert {r["source"].split("/")[0] for r in found} == {*frozen.FAMILIES, "routerbench"}
    return found


def _every_name_space(rows: list[dict[str, Any]]) -> FeatureSpace:
    names = sorted({f[0] for r in rows for c in r["features"] for f in c})
    return FeatureSpace(
        names,
        [0.5 * (i % 7) for i in range(len(names))],
        [1.0 + (i % 5) for i in range(len(names))],
    )


def _assert_same_matrices(space: FeatureSpace, rows: list[dict[str, Any]]) -> None:
    encoder = FastEncoder(space)
    assert encoder.compiled, encoder.reason
    for i, row in enumerate(rows):
        got, counts = encoder.raw([(row["state"], row["tools"])])
        want = space.raw(row["state"], row["tools"])
        assert counts == [len(row["tools"])]
        np.testing.assert_array_equal(got, want, err_msg=f"row {i} ({row['source']})")
        np.testing.assert_array_equal(
            encoder.scaled(got), space.scaled(row["state"], row["tools"]), err_msg=f"row {i}"
        )
    # One call for all rows: the same stacked matrices, scaled at once.
    got, counts = encoder.raw([(r["state"], r["tools"]) for r in rows])
    want = np.concatenate([space.raw(r["state"], r["tools"]) for r in rows])
    np.testing.assert_array_equal(got, want)
    assert counts == [len(r["tools"]) for r in rows]
    np.testing.assert_array_equal(
        encoder.scaled(got), np.concatenate([space.scaled(r["state"], r["tools"]) for r in rows])
    )


def test_every_feature_of_every_family_is_encoded_as_the_general_encoder_does(
    rows: list[dict[str, Any]],
) -> None:
    # A space holding every name the frozen rows have: every kind, every reading.
    _assert_same_matrices(_every_name_space(rows), rows)


def test_a_fitted_space_keeps_a_subset_and_gets_the_same_matrices(
    rows: list[dict[str, Any]],
) -> None:
    # A fitted space keeps some names of each kind: the skipped comparisons, crossings and
    # matches must not drop a kept one.
    fitted = FeatureSpace.fit(
        {"state": r["state"], "tools": r["tools"], "env": r["source"]} for r in rows
    )
    assert 0 < len(fitted.names) < len(_every_name_space(rows).names)
    _assert_same_matrices(fitted, rows)


def test_a_space_with_a_kind_it_does_not_compile_is_encoded_by_the_general_encoder(
    rows: list[dict[str, Any]],
) -> None:
    space = _every_name_space(rows)
    odd = FeatureSpace([*space.names, "ZZ:new"], [*space.mean, 0.0], [*space.scale, 1.0])
    encoder = FastEncoder(odd)
    assert not encoder.compiled and "ZZ" in str(encoder.reason)
    got, _ = encoder.raw([(r["state"], r["tools"]) for r in rows[:10]])
    np.testing.assert_array_equal(
        got, np.concatenate([odd.raw(r["state"], r["tools"]) for r in rows[:10]])
    )


@pytest.mark.parametrize("trainer", ["trm", "gbdt"])
def test_a_controller_decides_as_its_policy_on_anchor_and_frozen_rows(
    trainer: str, trm_run: TinyRun, gbdt_run: TinyRun, rows: list[dict[str, Any]]
) -> None:
    run = trm_run if trainer == "trm" else gbdt_run
    controller = load_controller(run.trainer_dir, trainer, abstain_margin=0.2)
    assert controller.encoder is not None and controller.encoder.compiled
    anchors = read_rows(run.corpus / "anchor.jsonl")
    found = [DecideRow(r["state"], list(r["tools"])) for r in anchors] + [
        DecideRow(r["state"], list(r["tools"])) for r in rows
    ]
    want_scores = controller.policy.scores_batch(
        [r.state for r in found], [list(r.tools) for r in found]
    )
    want = [decision(r.tools, s, 0.2) for r, s in zip(found, want_scores, strict=True)]
    # All rows in one call: above NUMPY_ROWS a trm runs torch, as the policy does, on the
    # same matrices: the very same answers.
    assert len(found) > 64
    assert controller.decide(found) == want
    # One row a call (a trm: the numpy forward, within a few 1e-6 of torch's).
    one_by_one = [controller.decide([r])[0] for r in found]
    assert [d.action for d in one_by_one] == [d.action for d in want]
    if trainer == "gbdt":
        assert one_by_one == want
    for got, expected in zip(one_by_one, want, strict=True):
        np.testing.assert_allclose(got.scores, expected.scores, atol=1e-5)


def _flat_rows() -> list[tuple[str, list[str]]]:
    """Flat states (dotted keys) whose reading depends on more than their keys: a key's value a
    number in one row and a string, a list or `true` in the next; a key that a later one turns
    into an object and one that replaces an object; a key with an empty part; a plan (a list
    of names beside an object spelling them) in one row and not in the next, under the same
    keys; repeated list items; a route block shared by rows whose requests differ."""
    tools = ["route:fast", "route:slow", "route:A"]
    out: list[tuple[str, list[str]]] = []
    for k, (budget, intent, plan, tags) in enumerate(
        [
            (3, "code", ["a", "b"], "fast"),
            ("three", "chat", [], 7),
            ([1, 2, 2], "code", ["a"], "slow"),
            (True, "code fix this please", ["a", "b", "a"], "fast"),
            (2.5, "", "a", "fast"),
        ]
    ):
        state = {
            "state.budget": budget,
            "state.request.intent": intent,
            "state.request.tokens": 100 + 7 * k,
            "state.routes.fast.cost": 1,
            "state.routes.fast.ms": 30 + k,
            "state.routes.fast.tools": ["calc", "code"],
            "state.routes.slow.cost": 9,
            "state.routes.slow.ms": 900,
            "state.routes.slow.tools": ["code", "code"],
            "state.routes.a.cost": 4,
            "state.routes.a.ms": 400,
            "state.x": 5,
            "state.x.y": 6,
            "state.z.w": 1,
            "state.z": "replaced",
            ".lead": 2,
            "plan.steps": plan,
            "plan.tags.a": "route:fast",
            "plan.tags.b": tags,
            "plan.queue": [4, 5],
        }
        out.append((json.dumps(state), tools))
    return out


def test_flat_states_read_from_their_json_get_the_general_encoder_s_matrices() -> None:
    rows = _flat_rows()
    features = [f for state, tools in rows for f in row_features(state, tools)]
    names = sorted({n for f in features for n in f})
    space = FeatureSpace(names, [0.25] * len(names), [2.0] * len(names))
    encoder = FastEncoder(space)
    assert encoder.compiled, encoder.reason
    # Twice over: the first pass works out the layout, the second reads rows by it.
    for _ in range(2):
        got, counts = encoder.raw(rows)
        want = np.concatenate([space.raw(state, tools) for state, tools in rows])
        np.testing.assert_array_equal(got, want)
    assert any(n.startswith("PALL:") for n in names)  # a plan was read
    assert any(n.startswith("D:") for n in names)  # numbers were compared
