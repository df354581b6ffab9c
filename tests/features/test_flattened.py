"""A state flattened to dotted keys (`state_compression: minimal`) is read as the nested state it
came from, also where one of its lists holds objects (a queue of requests, jobs or orders): the
candidates' own records, the collections and a plan are read the same at every compression."""

from __future__ import annotations

import json

from worker.corpus.knobs import compress_state
from worker.features.row import row_features

TOOLS = ["fast", "slow", "local"]


def _state() -> dict[str, object]:
    return {
        "state": {
            "budget": 6,
            "requests": [
                {"intent": "code", "tokens": 900, "tools": ["calc"]},
                {"intent": "chat", "tokens": 40, "tools": []},
            ],
            "routes": {
                "fast": {"cost": 2, "ms": 30, "cap": {"code": 2, "chat": 4}},
                "slow": {"cost": 9, "ms": 900, "cap": {"code": 5, "chat": 5}},
                "local": {"cost": 1, "ms": 5, "cap": {"code": 1, "chat": 2}},
            },
        }
    }


def test_a_minimal_state_with_a_list_of_objects_reads_as_the_full_one() -> None:
    full = json.dumps(_state())
    minimal = compress_state(full, None, "minimal", [])
    assert minimal is not None and '"state.routes.fast.cost":2' in minimal.replace(" ", "")
    deep, flat = row_features(full, TOOLS), row_features(minimal, TOOLS)
    assert flat == deep
    fast, slow, _ = flat
    # Each candidate reads its own record, ranked among the others' (the cheapest is told from
    # the dearest), and its capability for the intent a queued request names.
    assert fast["A:state.routes.*.cost"] == 2.0 and slow["A:state.routes.*.cost"] == 9.0
    assert fast["LO:state.routes.*.cost"] != slow["LO:state.routes.*.cost"]
    assert fast["A:state.routes.*.cap.[state.requests.0.intent]"] == 2.0


def test_a_plan_of_dotted_names_reads_the_same_flattened() -> None:
    # A verifier's plan names steps with dots (`T1.cpu2`); the names' spellings sit beside it.
    tags = {"T1.cpu2": "place:cpu2@t1", "T0.cpu1": "place:cpu1@t0"}
    jobs = [{"name": "op1", "dur": 3, "deadline": 7}, {"name": "op2", "dur": 1, "deadline": 9}]
    state = {"state": {"instance": {"jobs": jobs}, "proposal": list(tags), "tags": tags}}
    tools = ["verdict:accept", "escalate", "verdict:reject"]
    full = json.dumps(state)
    minimal = compress_state(full, None, "minimal", [])
    assert minimal is not None
    deep, flat = row_features(full, tools)[0], row_features(minimal, tools)[0]
    assert flat["PLEN"] == deep["PLEN"] == 0.0
    assert flat["PALL:P:place"] == deep["PALL:P:place"] == 1.0
    assert {k for k in flat if k.startswith("P")} == {k for k in deep if k.startswith("P")}
