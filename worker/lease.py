"""A running run's lease: heartbeats while the worker holds it, notices a cancel request or a lost
lease (the reconciler gave the run to another worker), and samples memory for the usage record."""

from __future__ import annotations

import logging
import threading
import time

import psutil
import sqlalchemy as sa
from sqlmodel import Session, col

from core.models import Run, WorkerRecord, utcnow
from core.settings import Settings

log = logging.getLogger("trm.worker")
TICK_S = 0.2


class Lease(threading.Thread):
    def __init__(
        self, engine: sa.Engine, settings: Settings, run_id: str, token: int, worker_id: str
    ):
        super().__init__(name=f"lease-{run_id}", daemon=True)
        self.engine, self.settings = engine, settings
        self.run_id, self.token, self.worker_id = run_id, token, worker_id
        self.cancelled = threading.Event()
        self.lost = threading.Event()
        self._halt = threading.Event()
        self.pids: list[int] = []
        self.peak_rss = 0
        # When the run last published anything (its event_seq moved): the runner's stall clock.
        self.progress_at = time.monotonic()
        self._seq = -1

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        last_beat = 0.0
        while not self._halt.wait(TICK_S):
            self._sample_memory()
            try:
                with Session(self.engine) as session:
                    row = session.execute(
                        sa.select(
                            col(Run.status),
                            col(Run.lease_token),
                            col(Run.cancel_requested),
                            col(Run.event_seq),
                        ).where(col(Run.id) == self.run_id)
                    ).first()
                    if row is None or row.lease_token != self.token or row.status != "running":
                        self.lost.set()
                        return
                    if row.cancel_requested:
                        self.cancelled.set()
                    if row.event_seq != self._seq:
                        self._seq, self.progress_at = row.event_seq, time.monotonic()
                    if time.monotonic() - last_beat >= self.settings.heartbeat_s:
                        self._beat(session)
                        last_beat = time.monotonic()
            except sa.exc.SQLAlchemyError as exc:  # the database is down: try again next tick
                log.warning("heartbeat for %s failed: %s", self.run_id, exc)

    def _beat(self, session: Session) -> None:
        now = utcnow()
        session.execute(
            sa.update(Run)
            .where(col(Run.id) == self.run_id, col(Run.lease_token) == self.token)
            .values(heartbeat_at=now)
        )
        session.execute(
            sa.update(WorkerRecord)
            .where(col(WorkerRecord.id) == self.worker_id)
            .values(heartbeat_at=now, current_run_id=self.run_id)
        )
        session.commit()

    def _sample_memory(self) -> None:
        total = 0
        for pid in [*self.pids]:
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
        self.peak_rss = max(self.peak_rss, total)
