"""Sessions in Postgres (``[storage] database = "postgresql://..."``): for several daemons and
workers on several machines.

psycopg 3 (the PostgreSQL adapter maintained with libpq's features: binary wheels, a real
connection pool, server-side errors with their SQLSTATE) through ``psycopg_pool``: a few
connections per process, shared by its threads. A session's turn lock is a session-level
advisory lock (``pg_try_advisory_lock``) taken on a connection of its own and held for the
turn: if the holder dies, its connection ends and the server drops the lock, so two
machines never run turns of one session at once and a crash never leaves one locked.

The password is never shown: every message names the server by its URL with the password
masked (``silica.security.urls``), and the password's own text is cut from libpq's messages.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from silica.security.urls import mask_urls
from silica.storage import schema, sql
from silica.storage.base import SessionError, SessionLock, SessionRow

CONNECT_TIMEOUT = 10
"""Seconds to wait for the server to answer a new connection (unless the URL says)."""
POOL_SIZE = 4
MIGRATION_KEY = 0x5111CA00  # the advisory lock one migrating process holds


def _pg(statement: str) -> str:
    return statement.replace("?", "%s")


class PostgresStore:
    """The Postgres backend of ``SessionStore``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = mask_urls(url)
        params = conninfo.conninfo_to_dict(url)
        self._password = str(params.get("password") or "")
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            self._kwargs["connect_timeout"] = CONNECT_TIMEOUT
        first = self.connect()  # the server's own words if it cannot be reached
        try:
            with self._errors("open"):
                if schema.behind(self._revision(first), self.where):
                    first.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_KEY,))
                    if schema.behind(self._revision(first), self.where):
                        schema.migrate(self.connect, "postgresql+psycopg")
                    first.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_KEY,))
        finally:
            first.close()
        self._pool = ConnectionPool(url, min_size=1, max_size=POOL_SIZE, kwargs=self._kwargs,
                                    check=ConnectionPool.check_connection, open=True,
                                    name="silica-sessions")

    def connect(self) -> psycopg.Connection:
        """A new connection of its own; ``SessionError`` saying what to do if there is none."""
        try:
            return psycopg.connect(self.url, **self._kwargs)
        except psycopg.Error as exc:
            raise SessionError(self._unreachable(exc)) from None

    def _unreachable(self, exc: BaseException) -> str:
        said = self._scrub(" ".join(str(exc).split()))
        lowered = said.lower()
        if "password" in lowered and "fail" in lowered or "no password supplied" in lowered:
            advice = ("check the user and password in [storage] database (or "
                      "SILICA_DATABASE), or set PGPASSWORD")
        elif "does not exist" in lowered and "database" in lowered:
            advice = "create the database (createdb NAME) or fix its name in the URL"
        else:
            advice = ("check that Postgres runs there and this machine can reach it, or "
                      "unset [storage] database (and SILICA_DATABASE) to keep sessions in "
                      "SQLite")
        return f"cannot open the sessions database {self.where}: {said}; {advice}"

    def _scrub(self, text: str) -> str:
        text = mask_urls(text)
        return text.replace(self._password, "***") if self._password else text

    def _revision(self, db: psycopg.Connection) -> str | None:
        try:
            found = db.execute(schema.REVISION_QUERY).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        return found[0] if found else None

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except PoolTimeout as exc:
            raise SessionError(f"cannot {doing} the sessions database {self.where}: no "
                               "connection to it could be made; check that Postgres runs "
                               "and this machine can reach it") from exc
        except psycopg.OperationalError as exc:
            raise SessionError(self._unreachable(exc).replace("open", doing, 1)) from None
        except psycopg.Error as exc:
            raise SessionError(f"cannot {doing} the sessions database {self.where}: "
                               f"{self._scrub(str(exc).strip())}") from None

    def _run(self, doing: str, statement: str, params: tuple = ()) -> list[tuple]:
        with self._errors(doing), self._pool.connection() as db:
            cursor = db.execute(_pg(statement), params)
            return cursor.fetchall() if cursor.description else [(cursor.rowcount,)]

    # -- SessionStore ---------------------------------------------------------------------

    def save(self, row: SessionRow, document: str) -> str:
        version = secrets.token_hex(8)
        self._run("save to", sql.SAVE, sql.values(row, document, version))
        return version

    def insert_new(self, row: SessionRow, document: str) -> bool:
        [(count,)] = self._run("save to", sql.INSERT_NEW,
                               sql.values(row, document, secrets.token_hex(8)))
        return count == 1

    def load(self, session_id: str) -> tuple[str, str] | None:
        found = self._run("read", sql.LOAD, (session_id,))
        return (found[0][0], found[0][1]) if found else None

    def rows(self) -> list[SessionRow]:
        return [sql.summary(f) for f in self._run("read", sql.ROWS)]

    def delete(self, session_id: str) -> bool:
        [(count,)] = self._run("delete from", sql.DELETE, (session_id,))
        return count > 0

    def exists(self, session_id: str) -> bool:
        return self.version(session_id) is not None

    def version(self, session_id: str) -> str | None:
        found = self._run("read", sql.VERSION, (session_id,))
        return found[0][0] if found else None

    def lock(self, session_id: str) -> SessionLock:
        return AdvisoryLock(self, lock_key(session_id))

    def busy(self, session_id: str) -> bool:
        high, low = _halves(lock_key(session_id))
        [(held,)] = self._run("read", _HELD, (high, low))
        return bool(held)

    def close(self) -> None:
        self._pool.close()


_HELD = ("SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
         "WHERE d.datname = current_database() AND l.locktype = 'advisory' AND l.granted "
         "AND l.objsubid = 1 AND l.classid::bigint = ? AND l.objid::bigint = ?)")


def lock_key(session_id: str) -> int:
    """The advisory lock key of a session: 64 bits of a hash of its id."""
    digest = hashlib.blake2b(f"silica-session:{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _halves(key: int) -> tuple[int, int]:
    """How ``pg_locks`` shows a bigint key: its high and low 32 bits (``classid``, ``objid``)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


class AdvisoryLock:
    """A session's turn lock: ``pg_try_advisory_lock`` on a connection held for the turn."""

    def __init__(self, store: PostgresStore, key: int) -> None:
        self.store, self.key = store, key
        self._db: psycopg.Connection | None = None

    def try_acquire(self) -> bool:
        db = self.store.connect()
        try:
            with self.store._errors("lock a session in"):
                [(taken,)] = db.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchall()
        except BaseException:
            db.close()
            raise
        if not taken:
            db.close()
            return False
        self._db = db
        return True

    def release(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            db.close()  # the server drops the session's advisory locks with it

    def forget(self) -> None:
        """Nothing is left behind: the lock lives only as long as its connection."""
