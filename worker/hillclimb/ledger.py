"""The search's ledger (SPEC §8): `LedgerEntry` rows plus `hillclimb_ledger.jsonl`, append-only,
one row per event, unique per (search, candidate, event).

The database row and its `ledger` event commit in one transaction; the JSONL line follows. A row
recorded twice (a resumed search repeating itself) is refused by the unique constraint and leaves
no second line; a line lost to a crash between commit and append is restored on the next open.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from core.db import as_utc
from core.events import Publisher
from core.models import LedgerEntry
from core.rundir import LEDGER

FIELDS = (
    "seq",
    "search_id",
    "candidate_id",
    "event",
    "parent_id",
    "run_id",
    "rung",
    "knobs",
    "knob_diff",
    "corpus_hash",
    "seed",
    "status",
    "train_score",
    "anchor_score",
    "failure_rate",
    "recovery_rate",
    "generalization_gap",
    "untrained_score",
    "untrained_like",
    "reused_from",
    "decision",
    "reason",
    "started_at",
    "finished_at",
)
_TIMES = ("started_at", "finished_at")


def as_row(entry: LedgerEntry) -> dict[str, Any]:
    row = {name: getattr(entry, name) for name in FIELDS}
    for name in _TIMES:
        value = as_utc(row[name]) if isinstance(row[name], datetime) else row[name]
        row[name] = value.isoformat() if isinstance(value, datetime) else value
    return row


def _parse_time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


class Ledger:
    def __init__(self, publisher: Publisher, search_id: str, run_dir: Path) -> None:
        self.publisher, self.search_id = publisher, search_id
        self.path = run_dir / LEDGER
        run_dir.mkdir(parents=True, exist_ok=True)

    def rows(self) -> list[dict[str, Any]]:
        with Session(self.publisher.engine) as session:
            entries = session.exec(
                select(LedgerEntry)
                .where(LedgerEntry.search_id == self.search_id)
                .order_by(col(LedgerEntry.seq))
            ).all()
            return [as_row(entry) for entry in entries]

    def open(self) -> list[dict[str, Any]]:
        """The rows so far, with the JSONL file brought level with the database."""
        rows = self.rows()
        written: set[tuple[str, str]] = set()
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    item = json.loads(line)
                    written.add((item["candidate_id"], item["event"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line from a crash; the database has the row
        missing = [row for row in rows if (row["candidate_id"], row["event"]) not in written]
        self._append(missing)
        return rows

    def record(self, candidate_id: str, event: str, **values: Any) -> dict[str, Any] | None:
        """Append one event; None when this (candidate, event) is already in the ledger."""
        fields = {k: v for k, v in values.items() if k in FIELDS}
        for name in _TIMES:
            fields[name] = _parse_time(fields.get(name))
        try:
            with self.publisher.transaction() as tx:
                seq = tx.session.execute(
                    sa.select(sa.func.coalesce(sa.func.max(col(LedgerEntry.seq)), 0)).where(
                        col(LedgerEntry.search_id) == self.search_id
                    )
                ).scalar_one()
                entry = LedgerEntry(
                    seq=seq + 1,
                    search_id=self.search_id,
                    candidate_id=candidate_id,
                    event=event,
                    **fields,
                )
                tx.session.add(entry)
                tx.session.flush()
                row = as_row(entry)
                tx.emit(self.search_id, "ledger", row)
        except sa.exc.IntegrityError:
            return None
        self._append([row])
        return row

    def _append(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        torn = False
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                torn = fh.read(1) != b"\n"  # a crash cut the last line: start a fresh one
        with open(self.path, "a", encoding="utf-8") as fh:
            if torn:
                fh.write("\n")
            fh.write("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows))
