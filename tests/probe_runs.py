"""A trm and a gbdt probe-trained through the real service once per test session, for the tests
that use trained runs (promote, decide, log decisions) rather than test training itself.

Training one pair took 40-100 s on the 2 test cores; five modules and databases each trained
their own. Now the first test process that asks trains them on a service of its own (an API and a
worker on SQLite), under a file lock in the session's shared temporary folder (pytest-xdist's
processes share its parent), and every service that asks gets them `install`ed: the run folders
copied into its runs folder and the runs' rows (as the service that trained them wrote them)
into its database, SQLite or Postgres."""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from core.db import make_engine
from core.models import Run, Stage
from core.settings import Settings
from tests.stack import Scratch, Stack, create_database, wait_for

TRAINERS = ("trm", "gbdt")
TINY_TRM = {"hidden": 16}


def rows_folder(settings: Settings, route_corpus: Path) -> str:
    """The route corpus's train and val rows as a folder source under DATA_DIR; its name."""
    folder = settings.data_dir / "route"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train.jsonl", "val.jsonl"):
        (folder / name).write_text((route_corpus / name).read_text())
    return "route"


def probe_spec(trainer: str, folder: str) -> dict[str, Any]:
    """A probe train run (one step, a few scored rows) on the rows folder `folder`."""
    source = {"type": "jsonl", "name": "r", "path": folder}
    spec: dict[str, Any] = {"kind": "train", "trainer": trainer, "probe": True}
    spec["corpus"] = {"sources": [source]}
    if trainer == "trm":
        spec["trm"] = TINY_TRM
    return spec


@dataclass(frozen=True)
class ProbeRuns:
    """The completed runs (id by trainer) in `root`: the trainer's `runs` folder and `trm.db`."""

    root: Path
    ids: dict[str, str]

    def install(self, settings: Settings, route_corpus: Path) -> dict[str, str]:
        """Make the runs this service's own (the rows folder they read included); their ids."""
        rows_folder(settings, route_corpus)
        for run_id in self.ids.values():
            shutil.copytree(self.root / "runs" / run_id, settings.run_dir(run_id))
        source = make_engine(f"sqlite:///{self.root / 'trm.db'}")
        target = make_engine(settings.database_url)
        try:
            with Session(source) as db:
                runs = [_copy(db.get(Run, run_id)) for run_id in self.ids.values()]
                stages = [
                    _copy(stage, id=None)
                    for stage in db.exec(
                        select(Stage).where(col(Stage.run_id).in_(self.ids.values()))
                    )
                ]
            with Session(target) as db:
                db.add_all(runs)
                db.flush()
                db.add_all(stages)
                db.commit()
        finally:
            source.dispose()
            target.dispose()
        return dict(self.ids)


def _copy(row: Any, **changed: Any) -> Any:
    """A new row of `row`'s table with its columns (times as UTC) and `changed`."""
    values = {c.name: getattr(row, c.name) for c in row.__table__.columns}
    for name, value in values.items():
        if getattr(value, "tzinfo", False) is None:
            values[name] = value.replace(tzinfo=UTC)  # SQLite gives its times back without one
    return type(row)(**{**values, **changed})


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # blocks until the process training them is done
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def probe_runs(shared: Path, route_corpus: Path) -> ProbeRuns:
    """The session's probe runs under `shared`, trained by whichever process asks first."""
    root = shared / "probe-runs"
    with _locked(shared / "probe-runs.lock"):
        done = root / "ids.json"
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # a process that died while training
            ids = _train(root, route_corpus)
            done.write_text(json.dumps(ids))
        return ProbeRuns(root, json.loads(done.read_text()))


def _train(root: Path, route_corpus: Path) -> dict[str, str]:
    import httpx

    from tests.conftest import QUICK

    scratch = Scratch(root, create_database("sqlite", root))
    settings = scratch.migrate()
    stack = Stack({**scratch.env, **QUICK}, root / "logs")
    try:
        stack.start_api()
        for _ in TRAINERS:  # the two train at once
            stack.start_worker()
        folder = rows_folder(settings, route_corpus)
        with httpx.Client(base_url=stack.url, timeout=30) as http:
            ids = {}
            for trainer in TRAINERS:
                answer = http.post("/runs", json=probe_spec(trainer, folder))
                assert answer.status_code == 202, answer.text
                ids[trainer] = str(answer.json()["id"])
            seen: dict[str, dict[str, Any]] = {}

            def ended() -> bool:
                for run_id in ids.values():
                    seen[run_id] = http.get(f"/runs/{run_id}").json()
                return all(s["status"] in ("completed", "failed") for s in seen.values())

            what = f"the probe runs to end (logs in {stack.logs})"
            wait_for(ended, timeout=180, what=what, interval=0.5)
        for run_id, run in seen.items():
            assert run["status"] == "completed", (run_id, run.get("failure_reason"))
        return ids
    finally:
        stack.stop()
        scratch.forget()
