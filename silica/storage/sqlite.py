"""Sessions in one SQLite file (``<home>/sessions.db``): the default, nothing to set up.

WAL mode and a busy timeout let several processes (``silica chat``, ``silica serve``, a
library user) read and write at once: a save is one statement, so one transaction, and a
reader sees a session as one save left it. One connection per process, used by one thread
at a time. A session's turn lock is a ``flock`` on ``<home>/sessions/<id>.lock``: the kernel
drops it when its holder's process ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from silica import locks
from silica.storage import schema, sql
from silica.storage.base import SessionError, SessionLock, SessionRow

BUSY_TIMEOUT = 30.0
"""Seconds a statement waits for another process's write before it gives up."""


class SqliteStore:
    """The SQLite backend of ``SessionStore``."""

    def __init__(self, path: Path, lock_folder: Path) -> None:
        self.path, self.lock_folder = path, lock_folder
        self.where = str(path)
        self._guard = threading.Lock()
        with self._errors("open"):
            path.parent.mkdir(parents=True, exist_ok=True)
            # conversations are private: made 0600 (SQLite gives its -wal and -shm the same)
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
            self._db = self._connect()
            if schema.behind(self._revision(), self.where):
                with _migration_lock(path):
                    if schema.behind(self._revision(), self.where):  # not done meanwhile
                        schema.migrate(self._connect, "sqlite")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None,
                             check_same_thread=False)
        db.execute("PRAGMA journal_mode = WAL")  # kept in the file: readers never wait
        db.execute("PRAGMA synchronous = NORMAL")  # WAL: a crash of silica loses nothing
        return db

    def _revision(self) -> str | None:
        try:
            found = self._db.execute(schema.REVISION_QUERY).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return found[0] if found else None

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise SessionError(f"cannot {doing} the sessions database {self.path}: {exc}; "
                               "check that its folder can be written and the disk has room "
                               "(a file that is not a database: move it away)") from exc
        except OSError as exc:
            raise SessionError(f"cannot {doing} the sessions database {self.path}: "
                               f"{exc.strerror or exc}; check the permissions of "
                               f"{self.path.parent}") from exc

    def _run(self, doing: str, statement: str, params: tuple = ()) -> sqlite3.Cursor:
        with self._guard, self._errors(doing):
            return self._db.execute(statement, params)

    # -- SessionStore ---------------------------------------------------------------------

    def save(self, row: SessionRow, document: str) -> str:
        version = secrets.token_hex(8)
        self._run("save to", sql.SAVE, sql.values(row, document, version))
        return version

    def insert_new(self, row: SessionRow, document: str) -> bool:
        done = self._run("save to", sql.INSERT_NEW,
                         sql.values(row, document, secrets.token_hex(8)))
        return done.rowcount == 1

    def load(self, session_id: str) -> tuple[str, str] | None:
        with self._guard, self._errors("read"):
            found = self._db.execute(sql.LOAD, (session_id,)).fetchone()
        return (found[0], found[1]) if found else None

    def rows(self) -> list[SessionRow]:
        with self._guard, self._errors("read"):
            found = self._db.execute(sql.ROWS).fetchall()
        return [sql.summary(f) for f in found]

    def delete(self, session_id: str) -> bool:
        return self._run("delete from", sql.DELETE, (session_id,)).rowcount > 0

    def exists(self, session_id: str) -> bool:
        return self.version(session_id) is not None

    def version(self, session_id: str) -> str | None:
        with self._guard, self._errors("read"):
            found = self._db.execute(sql.VERSION, (session_id,)).fetchone()
        return found[0] if found else None

    def lock(self, session_id: str) -> SessionLock:
        return FileLock(self.lock_folder / f"{session_id}.lock")

    def busy(self, session_id: str) -> bool:
        return locks.is_locked(self.lock_folder / f"{session_id}.lock")

    def close(self) -> None:
        with self._guard:
            self._db.close()


class FileLock:
    """A session's turn lock as a non-blocking ``flock`` on a file. Where no lock can be
    had at all (the folder cannot be written, a filesystem without ``flock``), the turn goes
    on unlocked: saving it will say what is wrong, and a lock is no reason to refuse a turn
    that could run. The file is never removed while a turn may hold it, except by
    ``forget`` called by the holder of a session being deleted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # a ``busy`` probe holds the lock for microseconds: a refusal is tried twice more
            fd = locks.acquire(self.path, wait=False, pauses=(0.002, 0.005))
        except OSError:
            return True  # no lock can be had here: the turn goes on unlocked
        if fd is None:
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            locks.release(fd)

    def forget(self) -> None:
        """Remove the lock file while holding it. A process that opened the old file gets
        ``SessionBusy`` while it is held, and after that finds it gone and locks a new one:
        never two holders."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


@contextlib.contextmanager
def _migration_lock(path: Path) -> Iterator[None]:
    """One process at a time makes or moves the schema of the database at ``path``."""
    fd = locks.wait_for(path.with_name(path.name + ".migrate.lock"))
    try:
        yield
    finally:
        locks.release(fd)
