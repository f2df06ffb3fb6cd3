"""The schema's revision: checked with one query on open, moved by Alembic when behind.

The revisions live in ``migrations/versions`` (one file each, Alembic's format; add one
with ``alembic -c silica/storage/migrations/alembic.ini revision -m "..."`` and raise
``HEAD``). Alembic drives SQLAlchemy, which is used for nothing else: both are imported
only when a database must be made or moved, so the everyday open costs one ``SELECT``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

HEAD = "0001"
"""The newest revision in ``migrations/versions`` (a test checks they agree)."""

MIGRATIONS = Path(__file__).parent / "migrations"

REVISION_QUERY = "SELECT version_num FROM alembic_version"


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
