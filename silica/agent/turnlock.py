"""One turn at a time per session, across processes and machines: ``silica chat``,
``silica serve``, a worker, a library user.

    lock = TurnLock(session_id, home)
    with lock:                     # SessionBusy if a turn of this session runs anywhere
        ...                        # run the turn

The session store of ``home`` holds the lock (``silica.storage``): with SQLite, a
non-blocking ``flock`` on ``<home>/sessions/<id>.lock``; with Postgres, a session-level
advisory lock on a connection of its own. Either is dropped when the holder's process ends
however it ends (SIGKILL too), so a crash never leaves a session locked. Locks of two
``TurnLock`` objects conflict, even in one process; one object is reentrant (``acquire``
twice, ``release`` twice), so a caller that holds it may call code that takes it again (the
daemon holds it from a message's intake to the end of its turn, and ``Agent.send`` takes it
inside).

What callers may rely on: ``acquire`` never waits for another holder; ``busy`` takes and
creates nothing; a lock file is never removed while a turn may hold it (removing it would
let two holders in), except by ``remove_lock_file`` called by the holder of a session being
deleted.
"""

from __future__ import annotations

from pathlib import Path

from silica.agent.sessions import check_id, sessions_dir, store_of
from silica.errors import SilicaError
from silica.storage import SessionLock


class SessionBusy(SilicaError):
    """Another turn of the session runs now (in this process or another)."""


def lock_path(session_id: str, home: Path | None = None) -> Path:
    """``<home>/sessions/<id>.lock`` (the SQLite store's lock file); ``SessionError`` for an
    id that is not one."""
    return sessions_dir(home) / f"{check_id(session_id)}.lock"


def busy_message(session_id: str) -> str:
    return (f"session {session_id} is running a turn elsewhere (silica chat, silica serve or "
            "another program); wait for it to finish, or start a new session")


class TurnLock:
    """The turn lock of one session (see the module docstring)."""

    def __init__(self, session_id: str, home: Path | None = None) -> None:
        self.session_id = check_id(session_id)
        self.home = home
        self.path = lock_path(session_id, home)
        self._held: SessionLock | None = None
        self._depth = 0

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._depth > 0

    def acquire(self) -> None:
        """Take the lock (again, if this object holds it); ``SessionBusy`` if another holds
        it; ``SessionError`` if the session database cannot be reached."""
        if self._depth:
            self._depth += 1
            return
        lock = store_of(self.home).lock(self.session_id)
        if not lock.try_acquire():
            raise SessionBusy(busy_message(self.session_id))
        self._held, self._depth = lock, 1

    def release(self) -> None:
        """Give the lock back (the last release unlocks); nothing if not held."""
        if not self._depth:
            return
        self._depth -= 1
        if self._depth == 0 and self._held is not None:
            lock, self._held = self._held, None
            lock.release()

    def remove_lock_file(self) -> None:
        """Remove what the lock left behind while holding it (the session is being
        deleted). A process that opened the old file gets ``SessionBusy`` while it is
        held, and after that finds it gone and locks a new one: never two holders."""
        if self._held is not None:
            self._held.forget()

    def __enter__(self) -> TurnLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def busy(session_id: str, home: Path | None = None) -> bool:
    """Whether a turn of the session runs now, in any process (this one included). Takes
    and creates nothing."""
    return store_of(home).busy(check_id(session_id))
