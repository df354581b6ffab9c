"""Alembic environment: the URL comes from the caller (`trm db upgrade`) or TRM_DATABASE_URL."""

from alembic import context
from sqlmodel import SQLModel

import core.models  # noqa: F401  (registers the tables on SQLModel.metadata)
from core.db import make_engine
from core.settings import get_settings

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().database_url


def run_migrations() -> None:
    engine = make_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=SQLModel.metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
