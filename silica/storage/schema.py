"""The schema's revision: checked with one query on open, moved by Alembic when behind.

The revisions live in ``migrations/versions`` (one file each, Alembic's format; add one
with ``alembic -c silica/storage/migrations/alembic.ini revision -m "..."``, raise ``HEAD``
and write the new schema's statements into ``CREATE``). Alembic drives SQLAlchemy, which is
used for nothing else: both are imported only when a database must be moved, so the
everyday open costs one ``SELECT``.

A database with no schema yet (a new home) is made at ``HEAD`` directly by ``create``: the
statements the revisions make, then the revision stamped, in one transaction (Alembic's
"build from scratch, then stamp" way), so a first start costs milliseconds, not Alembic's
import. A test checks that ``CREATE`` and the revisions make the same schema on both
backends.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

HEAD = "0001"
"""The newest revision in ``migrations/versions`` (a test checks they agree)."""

MIGRATIONS = Path(__file__).parent / "migrations"

REVISION_QUERY = "SELECT version_num FROM alembic_version"

CREATE = (
    "CREATE TABLE sessions (id TEXT NOT NULL, document TEXT NOT NULL, version TEXT NOT NULL, "
    "created TEXT, updated TEXT NOT NULL, turns INTEGER DEFAULT '0' NOT NULL, "
    "messages INTEGER DEFAULT '0' NOT NULL, title TEXT DEFAULT '' NOT NULL, "
    "provider TEXT DEFAULT '' NOT NULL, model TEXT DEFAULT '' NOT NULL, "
    "replies INTEGER DEFAULT '0' NOT NULL, PRIMARY KEY (id))",
    "CREATE INDEX sessions_by_updated ON sessions (updated)",
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
    "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))",
    f"INSERT INTO alembic_version (version_num) VALUES ('{HEAD}')",
)
"""The schema at ``HEAD``, as the revisions make it (the same text on SQLite and Postgres)."""


def create(execute: Callable[[str], Any]) -> None:
    """Make the schema at ``HEAD`` in a database that has none: each statement of ``CREATE``
    through ``execute``, which the caller runs inside one transaction."""
    for statement in CREATE:
        execute(statement)


def behind(revision: str | None, where: str) -> bool:
    """Whether a database at ``revision`` (``None``: no schema yet) must be migrated;
    ``SessionError`` if it is newer than this silica knows."""
    from silica.storage.base import SessionError

    if revision == HEAD:
        return False
    if revision is not None and revision > HEAD:  # revisions are zero-padded numbers
        raise SessionError(f"the sessions database {where} was made by a newer silica "
                           f"(schema {revision}; this one knows up to {HEAD}); upgrade silica")
    return True


def migrate(connect: Callable[[], Any], dialect: str) -> None:
    """Bring the database reached by ``connect`` (a DB-API connection factory) to ``HEAD``
    with Alembic, in one transaction where the backend allows (Postgres, SQLite)."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(f"{dialect}://", creator=connect, poolclass=NullPool)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        engine.dispose()
