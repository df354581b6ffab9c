"""The parts of a state about each candidate (worker/features/aligned.py): one walk of the state
serves every candidate, and each still finds its own parts, even inside another's."""

from __future__ import annotations

import json

from worker.features.row import row_features


def test_a_candidate_keyed_inside_another_candidates_part_reads_its_own_fields() -> None:
    # `b` is keyed under `a`'s part: `a` reads routes.a as its own, and `b` still finds its
    # fields one level down, as a walk of its own would.
    state = {"routes": {"a": {"cost": 3, "b": {"cost": 7}}, "c": {"cost": 5}}, "budget": 6}
    a, b, c = row_features(json.dumps(state), ["a", "b", "c"])
    assert a["A:routes.*.cost"] == 3.0 and "A:routes.*.cost" not in b
    assert b["A:routes.a.*.cost"] == 7.0
    assert c["A:routes.*.cost"] == 5.0 and c["D:A:routes.*.cost|budget"] == -1.0
    # Items of a list are matched by their `name` (or `id`), per candidate.
    listed = {"offers": [{"name": "a", "price": 2}, {"id": "c", "price": 9}]}
    a, b, c = row_features(json.dumps(listed), ["a", "b", "c"])
    assert (a["A:offers.*.price"], c["A:offers.*.price"]) == (2.0, 9.0)
    assert not any(k.startswith("A:") for k in b)
