"""The schema comes from alembic, on SQLite and Postgres; an un-migrated database is refused."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest
import sqlalchemy as sa

from app.main import create_app
from core.db import NotMigratedError, check_migrated, current_revision, head_revision, make_engine
from core.db import upgrade as db_upgrade
from core.settings import Settings
from tests.conftest import ROOT


def test_upgrade_creates_every_table(settings: Settings) -> None:
    engine = make_engine(settings.database_url)
    assert current_revision(engine) is None
    db_upgrade(settings.database_url)
    assert current_revision(engine) == head_revision()
    tables = set(sa.inspect(engine).get_table_names())
    assert {"runs", "stages", "events", "ledger_entries", "workers"} <= tables
    assert {"controllers", "controller_versions"} <= tables
    check_migrated(engine)
    engine.dispose()


def test_unmigrated_database_is_refused_with_the_command_to_run(
    settings: Settings, env: dict[str, str]
) -> None:
    with pytest.raises(NotMigratedError, match="run `trm db upgrade`"):
        check_migrated(make_engine(settings.database_url))
    for verb in (["serve", "--port", "1"], ["worker"]):
        proc = subprocess.run(
            [sys.executable, "-m", "app.cli", *verb],
            env={**os.environ, **env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "trm db upgrade" in proc.stderr and "has no schema" in proc.stderr


def test_app_lifespan_refuses_an_unmigrated_database(settings: Settings) -> None:
    app = create_app(settings)

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    errors: list[BaseException] = []

    def run_in_own_loop() -> None:  # another test's plugin may hold this thread's event loop
        try:
            asyncio.run(start())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run_in_own_loop)
    thread.start()
    thread.join(timeout=60)
    assert len(errors) == 1 and isinstance(errors[0], NotMigratedError), errors


def test_trm_db_upgrade_command_migrates(env: dict[str, str], settings: Settings) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "db", "upgrade"],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"revision {head_revision()}" in proc.stdout
    check_migrated(make_engine(settings.database_url))


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_the_postgres_pool_is_sized_by_the_settings(migrated: Settings) -> None:
    """TRM_DB_POOL_SIZE / TRM_DB_MAX_OVERFLOW: with 2 + 1, a fourth connection at once waits
    until one is given back."""
    from core.db import get_engine

    sized = migrated.model_copy(update={"db_pool_size": 2, "db_max_overflow": 1})
    engine = get_engine(sized)
    assert engine is not get_engine(migrated)  # each size has its own engine
    held = [engine.connect() for _ in range(3)]
    fourth: list[sa.Connection] = []
    waiter = threading.Thread(target=lambda: fourth.append(engine.connect()))
    waiter.start()
    waiter.join(0.5)
    try:
        assert fourth == [] and engine.pool.size() == 2  # type: ignore[attr-defined]
        held.pop().close()
        waiter.join(5)
        assert len(fourth) == 1
    finally:
        for conn in held + fourth:
            conn.close()
        engine.dispose()
