"""Where sessions are kept: one small interface (``SessionStore``) and its two backends
(images' objects are ``silica.storage.objects``).

    store = open_store(home, database=None)      # SQLite in <home>/sessions.db
    store = open_store(home, database="postgresql://silica@db/silica")
    version = store.save(row, document)          # one transaction: a reader sees all or none
    document, version = store.load(session_id)   # None if there is none

This layer keeps JSON text and a few summary columns; it knows nothing of conversations, the
agent or the daemon (``silica.agent.sessions`` is the facade the rest of silica calls).

- **SQLite** (the default): the standard library's ``sqlite3``, in WAL mode with a busy
  timeout, so ``silica chat``, ``silica serve`` and a library user share one file.
- **Postgres** (``[storage] database``): psycopg 3 with a small connection pool
  (``silica.storage.postgres``), imported only then.
- The schema (``silica.storage.schema``): one cheap query on open tells its revision; a new
  database is made at the newest one by its own statements, and an older one is moved by the
  Alembic revisions in ``silica/storage/migrations``, so only that imports Alembic or
  SQLAlchemy.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from silica.storage.base import SessionError, SessionLock, SessionRow, SessionStore

__all__ = ["SessionError", "SessionLock", "SessionRow", "SessionStore", "open_store",
           "forget_stores"]

_opened: dict[tuple[Path, str | None], tuple[int, SessionStore]] = {}
_opening = threading.Lock()


def open_store(home: Path, database: str | None = None) -> SessionStore:
    """The session store of ``home``: Postgres at ``database`` if given, else SQLite in
    ``<home>/sessions.db``. Opened once per process (and again in a forked child), made or
    migrated to the current schema on open. ``SessionError`` with one line saying what to do
    when it cannot be opened (an unreachable server, a wrong password: the URL's password
    is never shown)."""
    key = (Path(home), database)
    pid = os.getpid()
    with _opening:
        found = _opened.get(key)
        if found is not None and found[0] == pid:
            return found[1]
        store: SessionStore
        if database:
            from silica.extras import require

            require("postgres")
            from silica.storage.postgres import PostgresStore

            store = PostgresStore(database)
        else:
            from silica.storage.sqlite import SqliteStore

            store = SqliteStore(Path(home) / "sessions.db", Path(home) / "sessions")
        if found is not None:
            _inherited.append(found[1])  # a parent's connection: never used, never closed
        _opened[key] = (pid, store)
        return store


_inherited: list[SessionStore] = []


def forget_stores() -> None:
    """Close every store opened in this process (tests, a daemon's shutdown)."""
    with _opening:
        for pid, store in _opened.values():
            if pid == os.getpid():
                store.close()
        _opened.clear()
