"""The decision path reads JSON with orjson and falls back to `json` for what orjson refuses or
reads otherwise: a state with `NaN`, an integer past 64 bits (orjson makes it a float) or a
lone surrogate's escape is encoded as the general encoder encodes it (which reads states with
`json`), and such a request body is read as `json` reads it."""

from __future__ import annotations

import json

import numpy as np

from worker.decide.fast_encode import FastEncoder
from worker.decide.state_walk import parse_json
from worker.features.row import row_features
from worker.models.feature_space import FeatureSpace

TOOLS = ["route:fast", "route:slow", "route:cheap"]


def _state(extra: str) -> str:
    # A flat state (a `minimal` compression's dotted keys) with a per-route block and a request.
    return (
        '{"s.routes.fast.cost": 3, "s.routes.slow.cost": 9, "s.routes.cheap.cost": 1,'
        ' "s.routes.fast.tools": ["calc"], "s.routes.slow.tools": ["calc", "search"],'
        ' "s.routes.cheap.tools": [], "s.request.tokens": 340,'
        ' "s.request.text": "Extract the total from this invoice please"' + extra + "}"
    )


# What orjson refuses and `json` reads, each in a state the encoder otherwise compiles.
ODD = [
    ', "s.request.budget": NaN',
    ', "s.request.limit": Infinity, "s.request.floor": -Infinity',
    ', "s.request.id": 123456789012345678901234567890',
    ', "s.request.id": -9223372036854775809, "s.routes.slow.cap": 18446744073709551616',
    ', "s.request.note": "half \\ud800 a pair"',
    ', "s.routes.fast.ms": 1e400',
]


def test_states_orjson_refuses_get_the_general_encoder_s_matrices() -> None:
    rows = [(_state(""), TOOLS)] + [(_state(extra), TOOLS) for extra in ODD]
    for state, _ in rows:  # `json` reads every one
        assert parse_json(state) is not None
    features = [f for state, tools in rows for f in row_features(state, tools)]
    names = sorted({n for f in features for n in f})
    space = FeatureSpace(names, [0.25] * len(names), [2.0] * len(names))
    encoder = FastEncoder(space)
    assert encoder.compiled, encoder.reason
    for _ in range(2):  # the first pass works out the layout, the second reads rows by it
        got, counts = encoder.raw(rows)
        want = np.concatenate([space.raw(state, tools) for state, tools in rows])
        np.testing.assert_array_equal(got, want)
        assert counts == [len(TOOLS)] * len(rows)
        for row in rows:  # one row a call too
            np.testing.assert_array_equal(encoder.raw([row])[0], space.raw(*row))


def test_request_bodies_are_read_as_json_reads_them() -> None:
    texts = [
        '{"rows": [{"state": "s", "tools": ["a", "b"]}], "version": 2}',
        '{"big": 123456789012345678901234567890, "nan": NaN, "half": "\\ud800"}',
        '{"same": 1, "same": 2.5, "unicode": "caf\\u00e9 \\u2603"}',
        '{"version": 18446744073709551616, "low": -9223372036854775809, "ok": 2}',
        '{"rows": [{"state": "{\\"n\\": 680182433110826156032}", "tools": ["a"]}]}',
        '{"note": "caf\u00e9 \u2603 \u0661\u0662", "big": -98765432109876543210987}',
    ]
    for text in texts:
        want = json.dumps(json.loads(text), sort_keys=True)
        assert json.dumps(parse_json(text), sort_keys=True) == want, text
        assert json.dumps(parse_json(text.encode()), sort_keys=True) == want
    utf16 = texts[0].encode("utf-16")  # `json` reads UTF-16 bytes; orjson does not
    assert parse_json(utf16) == json.loads(utf16)
    for bad in (b"{", b'{"a": 1,}', b"\xff\xfe\xfd"):  # what neither reads is json's ValueError
        try:
            parse_json(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was read")


def test_route_values_that_read_alike_each_get_their_own_matrix() -> None:
    # The route blocks' contents are cached by their values: values that compare or print alike
    # in some reading (3, 3.0, true, "3", null, NaN, -0.0, lists of them) are each encoded as the
    # general encoder encodes them, whichever comes first.
    variants = ["3", "3.0", "true", '"3"', "null", "NaN", "1e400", "-0.0", "0.0", "0"]
    variants += ["[3]", "[3.0]", '["3"]', "[true]", "[]", '"null"']
    rows = []
    for value in variants:
        state = _state("").replace('"s.routes.fast.cost": 3', f'"s.routes.fast.cost": {value}')
        rows.append((state, TOOLS))
    features = [f for state, tools in rows for f in row_features(state, tools)]
    names = sorted({n for f in features for n in f})
    space = FeatureSpace(names, [0.25] * len(names), [2.0] * len(names))
    encoder = FastEncoder(space)
    assert encoder.compiled, encoder.reason
    for order in (rows, rows[::-1], rows):
        got, _ = encoder.raw(order)
        want = np.concatenate([space.raw(state, tools) for state, tools in order])
        np.testing.assert_array_equal(got, want)
        for row in order:
            np.testing.assert_array_equal(encoder.raw([row])[0], space.raw(*row))
