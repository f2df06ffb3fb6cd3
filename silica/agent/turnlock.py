"""One turn at a time per session, across processes: ``silica chat``, ``silica serve``, a
library user.

    lock = TurnLock(session_id, home)
    with lock:                     # SessionBusy if a turn of this session runs anywhere
        ...                        # run the turn

The lock is a non-blocking ``flock`` on ``<home>/sessions/<id>.lock``, held while the turn
runs. The kernel drops it when the holder's process ends however it ends (SIGKILL too), so a
crash never leaves a session locked. Locks of two ``TurnLock`` objects conflict, even in one
process; one object is reentrant (``acquire`` twice, ``release`` twice), so a caller that holds
it may call code that takes it again (the daemon holds it from a message's intake to the end
of its turn, and ``Agent.send`` takes it inside).

What callers may rely on: ``acquire`` never waits; ``busy`` never creates a file; a lock file
is never removed while a turn may hold it (removing it would let two holders in), except by
``remove_lock_file`` called by the holder of a session being deleted.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from silica import locks
from silica.agent.sessions import session_path
from silica.errors import SilicaError


class SessionBusy(SilicaError):
    """Another turn of the session runs now (in this process or another)."""


def lock_path(session_id: str, home: Path | None = None) -> Path:
    """``<home>/sessions/<id>.lock``; ``SessionError`` for an id that is not one."""
    return session_path(session_id, home).with_suffix(".lock")


def busy_message(session_id: str) -> str:
    return (f"session {session_id} is running a turn elsewhere (silica chat, silica serve or "
            "another program); wait for it to finish, or start a new session")


class TurnLock:
    """The turn lock of one session (see the module docstring)."""

    def __init__(self, session_id: str, home: Path | None = None) -> None:
        self.session_id = session_id
        self.path = lock_path(session_id, home)
        self._fd: int | None = None
        self._depth = 0

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._depth > 0

    def acquire(self) -> None:
        """Take the lock (again, if this object holds it); ``SessionBusy`` if another holds
        it. Where no lock can be had at all (the sessions folder cannot be written, a
        filesystem without ``flock``), the turn goes on unlocked: saving it will say what is
        wrong with the folder, and a lock is no reason to refuse a turn that could run."""
        if self._depth:
            self._depth += 1
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # a ``busy`` probe holds the lock for microseconds: a refusal is tried twice more
            fd = locks.acquire(self.path, wait=False, pauses=(0.002, 0.005))
        except OSError:
            fd = None  # no lock can be had here: the turn goes on unlocked
        else:
            if fd is None:
                raise SessionBusy(busy_message(self.session_id))
        self._fd, self._depth = fd, 1

    def release(self) -> None:
        """Give the lock back (the last release unlocks); nothing if not held."""
        if not self._depth:
            return
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fd, self._fd = self._fd, None
            locks.release(fd)

    def remove_lock_file(self) -> None:
        """Remove the lock file while holding it (the session is being deleted). A process
        that opened the old file gets ``SessionBusy`` while it is held, and after that finds
        it gone and locks a new one: never two holders."""
        if self.held:
            with contextlib.suppress(OSError):
                self.path.unlink()

    def __enter__(self) -> TurnLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def busy(session_id: str, home: Path | None = None) -> bool:
    """Whether a turn of the session runs now, in any process (this one included). Creates
    nothing: a session without a lock file has never been locked, so it is not busy."""
    return locks.is_locked(lock_path(session_id, home))
