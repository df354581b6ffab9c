"""`trm db upgrade` and `trm db current`: the schema only changes through alembic."""

from __future__ import annotations

import argparse

from core.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    db = sub.add_parser("db", help="database schema (alembic)")
    verbs = db.add_subparsers(dest="db_verb", required=True, metavar="VERB")
    up = verbs.add_parser("upgrade", help="migrate the database to the code's schema")
    up.add_argument(
        "--revision", default="head", help="the alembic revision to reach (default: head)"
    )
    up.set_defaults(func=cmd_upgrade)
    cur = verbs.add_parser("current", help="print the database's and the code's revisions")
    cur.set_defaults(func=cmd_current)


def cmd_upgrade(args: argparse.Namespace) -> int:
    # SQLAlchemy loads for the db verbs only, not for every `trm` call.
    from core.db import current_revision, get_engine, head_revision, upgrade

    settings = get_settings()
    upgrade(settings.database_url, args.revision)
    print(f"database at revision {current_revision(get_engine(settings))} (head {head_revision()})")
    return 0


def cmd_current(_args: argparse.Namespace) -> int:
    from core.db import current_revision, get_engine, head_revision  # as in cmd_upgrade

    current, head = current_revision(get_engine(get_settings())), head_revision()
    print(f"database: {current or 'no schema'}\ncode:     {head}")
    return 0 if current == head else 1
