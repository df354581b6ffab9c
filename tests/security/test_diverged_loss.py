"""A loss that is no longer a number is the spec's doing, not the service's: a run that diverges
(reachable with valid knobs: a learning rate near 1 on a deep recursion) fails `bad_input`
naming the learning rate, on both databases. And no event is ever stored or sent with NaN or
Infinity in it: before, Postgres refused such an event (the run failed `internal` with SQL
text as its reason) and SQLite stored a bare `NaN` that the dashboard's strict JSON reader
could not parse, reconnecting forever."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.db import make_engine
from core.events import Publisher
from core.settings import Settings
from tests.conftest import Service, rows_folder

# The recursion's residuals overflow within the first batch at this rate: NaN at step 1.
DIVERGING = {
    "hidden": 8,
    "n_recursions": 16,
    "cycles": 4,
    "supervision_steps": 4,
    "lr": 0.99,
    "batch_size": 4,
    "max_steps": 3,
}


def strict(text: str) -> Any:
    """JSON as a strict reader (a browser's JSON.parse) takes it: no NaN, no Infinity."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def stored_event_texts(settings: Settings, run_id: str) -> list[str]:
    """The events' data as the database holds it, as text."""
    engine = make_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT CAST(data AS TEXT) FROM events WHERE run_id = :r ORDER BY id"),
                {"r": run_id},
            ).scalars()
            return list(rows)
    finally:
        engine.dispose()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # where it failed `internal`
def test_a_diverged_trm_run_fails_bad_input_naming_the_learning_rate(
    service: Service, settings: Settings, route_corpus: Path
) -> None:
    corpus = {
        "sources": [{"type": "jsonl", "name": "r", "path": rows_folder(settings, route_corpus)}]
    }
    service.start_worker()
    run = service.submit({"kind": "train", "trm": DIVERGING, "corpus": corpus})
    done = service.wait_status(run["id"], "completed", "failed", timeout=120)
    assert (done["status"], done["failure_class"]) == ("failed", "bad_input"), done
    reason = done["failure_reason"]
    assert "diverged" in reason and "lower trm.lr=0.99" in reason, reason
    assert "SQL" not in reason and "sqlalchemy" not in reason.lower(), reason
    for text in stored_event_texts(settings, run["id"]):
        strict(text)
    lines = (settings.runs_dir / run["id"] / "events.jsonl").read_text().splitlines()
    assert lines and all(strict(line) for line in lines)


def test_events_never_carry_nan_or_infinity(service: Service, settings: Settings) -> None:
    """Whatever a stage reports, the event is stored and sent as strict JSON: a number that is
    not finite becomes null."""
    run = service.submit({"kind": "selftest", "steps": 1})  # no worker: it stays queued
    engine = make_engine(settings.database_url)
    try:
        publisher = Publisher(engine, None, settings)
        metrics = {
            "step": 1,
            "loss": math.nan,
            "grad_norm": math.inf,
            "history": [1.0, -math.inf],
            "eval": {"val_loss": math.nan},
        }
        sent = publisher.publish(run["id"], "metric", metrics)
        card = publisher.publish(run["id"], "card", {"phase": "loop", "loss": math.nan})
    finally:
        engine.dispose()
    assert sent["data"] == {
        "step": 1,
        "loss": None,
        "grad_norm": None,
        "history": [1.0, None],
        "eval": {"val_loss": None},
    }
    assert card["data"]["loss"] is None
    texts = stored_event_texts(settings, run["id"])
    assert [strict(t) for t in texts][-2:] == [sent["data"], card["data"]]
    lines = (settings.runs_dir / run["id"] / "events.jsonl").read_text().splitlines()
    assert [strict(line)["data"] for line in lines[-2:]] == [sent["data"], card["data"]]
    assert service.run(run["id"])["card"]["loss"] is None
