"""A plan in a `minimal` state that `context.nested` leaves flat (its items a list of objects):
the names' spellings are dotted keys beside the plan (`state.tags.T1.cpu2`), read as the dict
they were flattened from, so a verifier sees the plan step by step at every compression."""

from __future__ import annotations

import json

from worker.features.row import row_features

JOBS = [
    {"name": "op1", "release": 1, "deadline": 7, "dur": 3},
    {"name": "op2", "release": 0, "deadline": 9, "dur": 1},
]
TOOLS = ["verdict:accept", "escalate", "verdict:reject"]


def _flat(proposal: list[str], tags: dict[str, str]) -> str:
    state = {"state.instance.jobs": JOBS, "state.proposal": proposal}
    state.update({f"state.tags.{k}": v for k, v in tags.items()})
    return json.dumps(state)


def test_a_flattened_plan_is_read_as_the_nested_one() -> None:
    tags = {"T1.cpu2": "place:cpu2@t1", "T0.cpu1": "place:cpu1@t0"}
    nested = json.dumps({"instance": {"jobs": JOBS}, "proposal": list(tags), "tags": tags})
    flat, deep = row_features(_flat(list(tags), tags), TOOLS)[0], row_features(nested, TOOLS)[0]
    assert flat["PLEN"] == deep["PLEN"] == 0.0
    assert flat["PALL:P:place"] == deep["PALL:P:place"] == 1.0
    # A dropped step shows as the plan one short of its items.
    (one,) = list(tags)[:1]
    assert row_features(_flat([one], {one: tags[one]}), TOOLS)[0]["PLEN"] == -1.0


def test_dotted_keys_elsewhere_in_the_state_are_not_a_plan() -> None:
    # `state.job.machines` names `oven`, and `state.busy.oven` is a string: not beside it.
    state = {
        "state.busy.oven": "#..##.....",
        "state.job.machines": ["oven"],
        "state.queued": [{"name": "a", "dur": 1}],
    }
    features = row_features(json.dumps(state), ["place:oven@t0", "place:kiln@t0"])
    assert not any(name.startswith(("PLEN", "PALL:", "PMIN:")) for name in features[0])
