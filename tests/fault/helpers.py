"""What the fault tests read back: the run's stored events, straight from the database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from core.db import make_engine
from core.models import Event, Run
from core.settings import Settings


def loop_spec(steps: int, step_seconds: float, **extra: Any) -> dict[str, Any]:
    return {"kind": "selftest", "steps": steps, "step_seconds": step_seconds, **extra}


def stored_events(settings: Settings, run_id: str) -> list[dict[str, Any]]:
    engine = make_engine(settings.database_url)
    try:
        with Session(engine) as db:
            rows = db.exec(select(Event).where(Event.run_id == run_id).order_by(col(Event.id)))
            return [{"id": e.id, "seq": e.seq, "type": e.type, "data": e.data} for e in rows]
    finally:
        engine.dispose()


def lease_token(settings: Settings, run_id: str) -> int:
    engine = make_engine(settings.database_url)
    try:
        with Session(engine) as db:
            run = db.get(Run, run_id)
            assert run is not None
            return run.lease_token
    finally:
        engine.dispose()


def steps_after_attempt(events: list[dict[str, Any]], attempt: int) -> list[int]:
    """The `metric` steps published after the run went `running` on `attempt`."""
    started = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "status"
        and e["data"]["status"] == "running"
        and e["data"]["attempt"] == attempt
    )
    return [e["data"]["step"] for e in events[started:] if e["type"] == "metric"]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def no_temp_files(root: Path) -> list[Path]:
    """Leftover `.name.pid.tmp` files: a manifest or checkpoint written halfway."""
    return [p for p in root.rglob("*.tmp")]
