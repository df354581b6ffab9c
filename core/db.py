"""Engines and sessions: SQLite in WAL mode by default, Postgres by URL (SPEC §2, §11)."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
from sqlmodel import Session, create_engine

from core.settings import Settings, get_settings

log = logging.getLogger("trm.db")
T = TypeVar("T")
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


class NotMigratedError(RuntimeError):
    """The database is behind the code's schema; the message says which command fixes it."""


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(url: str, pool_size: int = 10, max_overflow: int = 20) -> sa.Engine:
    """`pool_size` and `max_overflow`: Postgres connections per process kept open and added
    under load (TRM_DB_POOL_SIZE, TRM_DB_MAX_OVERFLOW); SQLite ignores them."""
    if is_sqlite(url):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    return create_engine(url, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=True)


@lru_cache(maxsize=8)
def engine_for(url: str, pool_size: int, max_overflow: int) -> sa.Engine:
    return make_engine(url, pool_size, max_overflow)


def get_engine(settings: Settings | None = None) -> sa.Engine:
    settings = settings or get_settings()
    return engine_for(settings.database_url, settings.db_pool_size, settings.db_max_overflow)


_WRITE_LOCKS: weakref.WeakKeyDictionary[sa.Engine, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


@contextmanager
def one_writer(engine: sa.Engine) -> Iterator[None]:
    """On SQLite, let one thread of this process write at a time. SQLite takes one writer anyway;
    queueing on a lock wakes the next thread the moment the last commits, where SQLite's own busy
    handler sleeps 1, 2, 5, ... 100 ms between tries (the API's p99 under concurrent POSTs).
    Postgres locks rows, not the database: no lock."""
    if engine.dialect.name != "sqlite":
        yield
        return
    with _LOCKS_GUARD:
        lock = _WRITE_LOCKS.setdefault(engine, threading.RLock())
    with lock:
        yield


@contextmanager
def session_scope(engine: sa.Engine) -> Iterator[Session]:
    """One transaction: committed on success, rolled back on error."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


# What "the database is unreachable" raises (a cut connection, a refused connect): worth a retry,
# and never a fault of the run that was being written.
DATABASE_AWAY = (sa.exc.OperationalError, sa.exc.InterfaceError)


def retrying(fn: Callable[[], T], for_s: float, what: str) -> T:
    """Run `fn` (one whole transaction) again while the database is unreachable, for up to
    `for_s` seconds. Workers use it for their writes; the API (for_s=0) answers 503 at once."""
    deadline, delay = time.monotonic() + for_s, 0.1
    while True:
        try:
            return fn()
        except DATABASE_AWAY as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("%s: database unreachable (%s); retrying", what, type(exc).__name__)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every time we store is UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url)
    cfg.attributes["configure_logger"] = False
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None, "migrations/ has no revisions"
    return head


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def check_migrated(engine: sa.Engine) -> None:
    current, head = current_revision(engine), head_revision()
    if current != head:
        where = engine.url.render_as_string(hide_password=True)
        state = "has no schema" if current is None else f"is at revision {current}"
        raise NotMigratedError(
            f"database {where} {state}, the code needs {head}: run `trm db upgrade` "
            f"(with the same TRM_DATABASE_URL) and start again"
        )
