"""Stage code that needs it runs in a child process per run (SPEC §2), so a crash, an OOM or a
cancel never takes the worker down. Parent side: `ChildStage`. Child side: `python -m worker.child`.

Signals to the child: SIGTERM means cancel, SIGUSR1 means the worker is shutting down (the run
will resume elsewhere); either way the stage sees `should_stop()`, saves, and returns.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.db import DATABASE_AWAY, make_engine
from core.events import Publisher
from core.redisconn import sync_redis
from core.rundir import CHILD_LOG, CHILD_OUTCOME, CHILD_PAYLOAD, write_json_atomic
from core.settings import Settings
from worker.context import FENCED, LeaseMoved, StageContext, StageFailure
from worker.kinds import KINDS
from worker.kinds.base import StageFn
from worker.train.memory import CHILD_ENV

EXIT_DISK_FULL = 28  # the child could not write its outcome: no space left (errno 28)
EXIT_NO_OUTCOME = 27  # the child could not write its outcome for another OS reason
EXIT_FENCED = 29  # the run moved to a later attempt: the child stopped and wrote nothing
FENCED_OUTCOME: dict[str, Any] = {
    "ok": False,
    "failure_class": "lost",
    "reason": "the run moved to a later attempt; this attempt stopped without writing",
    "stop_reason": FENCED,
}
STOP_SIGNALS = {"cancel": signal.SIGTERM, "shutdown": signal.SIGUSR1, FENCED: signal.SIGUSR2}


def run_stage(fn: StageFn, ctx: StageContext) -> dict[str, Any]:
    """Call the stage and turn what happens into an outcome record (used in both processes)."""
    try:
        result = fn(ctx, ctx.spec) or {}
        outcome: dict[str, Any] = {"ok": True, "result": result}
    except LeaseMoved:
        return dict(FENCED_OUTCOME)
    except StageFailure as exc:
        outcome = {"ok": False, "failure_class": exc.failure_class, "reason": exc.reason}
    except MemoryError:
        outcome = {"ok": False, "failure_class": "oom", "reason": "out of memory (MemoryError)"}
    except DATABASE_AWAY as exc:  # not the stage's fault: the runner interrupts the attempt
        outcome = {
            "ok": False,
            "failure_class": "internal",
            "reason": f"the database did not answer ({type(exc).__name__})",
            "database_away": True,
        }
    except Exception as exc:  # a bug in stage code: record it, never lose it
        outcome = {
            "ok": False,
            "failure_class": "internal",
            "reason": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=20),
        }
    try:
        stop = ctx.stop_reason or (ctx.should_stop() if outcome["ok"] else None)
    except LeaseMoved:
        return dict(FENCED_OUTCOME)
    outcome.update(
        stop_reason=stop,
        counters=ctx.counters,
        notes=ctx.notes,
        inputs=[str(p) for p in ctx.inputs],
        outputs=[str(p) for p in ctx.outputs],
    )
    return outcome


class ChildStage:
    """Parent side: start the child, signal it, and read its outcome."""

    def __init__(self, ctx: StageContext, lease_token: int | None = None) -> None:
        self.ctx, self.lease_token = ctx, lease_token
        self.proc: subprocess.Popen[bytes] | None = None
        self.signalled: str | None = None

    def start(self) -> int:
        """Start `python -m worker.child`; it runs the stage `(ctx.kind, ctx.stage)` of KINDS."""
        stage_dir = self.ctx.stage_dir
        (stage_dir / CHILD_OUTCOME).unlink(missing_ok=True)
        payload = {
            **self.ctx.to_payload(),
            "parent_pid": os.getpid(),
            "lease_token": self.lease_token,
        }
        write_json_atomic(stage_dir / CHILD_PAYLOAD, payload)
        log = open(stage_dir / CHILD_LOG, "ab")  # noqa: SIM115 (the child owns it)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "worker.child", str(stage_dir / CHILD_PAYLOAD)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._env(),
            start_new_session=True,  # a Ctrl-C at the worker's terminal is the worker's to handle
        )
        log.close()
        return self.proc.pid

    def _env(self) -> dict[str, str]:
        settings = self.ctx.settings
        # CHILD_ENV first: the allocator settings training is measured with (train/memory.py).
        env = {**CHILD_ENV, **os.environ, "TRM_DATABASE_URL": settings.database_url}
        if settings.redis_url:
            env["TRM_REDIS_URL"] = settings.redis_url
        return env

    def poll(self) -> int | None:
        assert self.proc is not None
        return self.proc.poll()

    def stop(self, reason: str) -> None:
        if self.proc and self.proc.poll() is None and self.signalled is None:
            self.signalled = reason
            self.proc.send_signal(STOP_SIGNALS.get(reason, signal.SIGTERM))

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()

    def outcome(self) -> dict[str, Any]:
        assert self.proc is not None
        code = self.proc.wait()
        if code == EXIT_FENCED:  # an outcome file there now is the new attempt's
            return dict(FENCED_OUTCOME)
        path = self.ctx.stage_dir / CHILD_OUTCOME
        if path.exists():
            return json.loads(path.read_text())
        if code == EXIT_DISK_FULL or (code > 0 and _disk_full(self.ctx.stage_dir)):
            return {
                "ok": False,
                "failure_class": "internal",
                "reason": f"[Errno {errno.ENOSPC}] No space left on device: the runs directory "
                f"{self.ctx.run_dir.parent} is full; free space there and resubmit",
                "stop_reason": self.signalled,
            }
        if code < 0:
            sig = signal.Signals(-code).name
            why = "stopped by the worker" if self.signalled else "killed"
            hint = f" (out of memory? see {CHILD_LOG})" if -code == signal.SIGKILL else ""
            return {
                "ok": False,
                "failure_class": "crash",
                "reason": f"stage process {why} by {sig}{hint}",
                "stop_reason": self.signalled,
            }
        return {
            "ok": False,
            "failure_class": "crash",
            "reason": f"stage process exited with code {code} without an outcome; see "
            f"{self.ctx.stage}/{CHILD_LOG}",
            "stop_reason": self.signalled,
        }


def _disk_full(path: Path) -> bool:
    try:
        return shutil.disk_usage(path).free < 64 * 1024
    except OSError:
        return False


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a kill -9 of the worker ends us too
    except OSError:
        pass


def _stopper(ctx: StageContext, reason: str) -> Callable[[int, Any], None]:
    def handler(_signum: int, _frame: Any) -> None:
        ctx.stop_reason = reason

    return handler


def _fence(ctx: StageContext, engine: object, token: int) -> None:
    """The trainer's own fence: when the run's lease moved on (the worker froze or was cut off
    and the run went to another worker), stop at the next step boundary, as on shutdown."""
    import sqlalchemy as sa
    from sqlmodel import col

    from core.models import Run

    while ctx.stop_reason is None:
        time.sleep(ctx.settings.heartbeat_s)
        try:
            with engine.connect() as conn:  # type: ignore[attr-defined]
                row = conn.execute(
                    sa.select(col(Run.lease_token), col(Run.status)).where(
                        col(Run.id) == ctx.run_id
                    )
                ).first()
        except sa.exc.SQLAlchemyError:
            continue  # no evidence either way; the worker's lease thread decides
        if row is None or row.lease_token != token or row.status != "running":
            ctx.stop_reason = FENCED
            return


def main(payload_path: str) -> int:
    payload = json.loads(Path(payload_path).read_text())
    _die_with_parent()
    if os.getppid() != payload["parent_pid"]:
        return 3
    settings = Settings(**payload["settings"])
    engine = make_engine(settings.database_url, settings.db_pool_size, settings.db_max_overflow)
    token = payload.get("lease_token")
    publisher = Publisher(
        engine,
        sync_redis(settings),
        settings,
        retry_s=settings.db_retry_s,
        fence=token,
        on_fenced=lambda: setattr(ctx, "stop_reason", FENCED),
    )
    ctx = StageContext.from_payload(payload, settings, publisher)
    for reason, sig in STOP_SIGNALS.items():
        signal.signal(sig, _stopper(ctx, reason))
    if token is not None:
        threading.Thread(target=_fence, args=(ctx, engine, token), daemon=True).start()
    outcome = run_stage(KINDS[ctx.kind].stage(ctx.stage).fn, ctx)
    if ctx.stop_reason == FENCED:  # the stage dir is the new attempt's: leave it alone
        return EXIT_FENCED
    try:
        write_json_atomic(ctx.stage_dir / CHILD_OUTCOME, outcome)
    except OSError as exc:  # nowhere to write it: the exit code carries what happened
        return EXIT_DISK_FULL if exc.errno == errno.ENOSPC else EXIT_NO_OUTCOME
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
