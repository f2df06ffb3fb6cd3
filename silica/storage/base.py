"""The session store's interface: what each backend (SQLite, Postgres) provides."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from silica.errors import SilicaError


class SessionError(SilicaError):
    """A session cannot be saved, loaded or found; the message says what to do."""


@dataclass(frozen=True)
class SessionRow:
    """A session's summary columns, kept beside its JSON document so that listing sessions
    never reads a document."""

    id: str
    created: datetime | None
    updated: datetime
    turns: int = 0
    messages: int = 0
    title: str = ""
    provider: str = ""
    model: str = ""
    replies: int = 0


class SessionLock(Protocol):
    """One session's turn lock as a backend holds it (``silica.agent.turnlock`` counts the
    re-entries and raises ``SessionBusy``)."""

    def try_acquire(self) -> bool:
        """Take the lock without waiting; whether it was taken."""

    def release(self) -> None:
        """Give it back (only called after a ``try_acquire`` that took it)."""

    def forget(self) -> None:
        """The session is being deleted by the holder: drop what the lock left behind."""


class SessionStore(Protocol):
    """Sessions as JSON documents with summary columns. Every method is safe to call from
    several threads; every write is one transaction."""

    where: str  # for messages: the database file, or the server's URL with its password masked

    def save(self, row: SessionRow, document: str) -> str:
        """Insert or replace the session; returns its new version (a value no other save of
        it had)."""

    def insert_new(self, row: SessionRow, document: str) -> bool:
        """Insert the session only if there is none of its id; whether it was inserted."""

    def load(self, session_id: str) -> tuple[str, str] | None:
        """``(document, version)``, or ``None`` if there is no such session."""

    def rows(self) -> list[SessionRow]:
        """Every session's summary, most recently updated first."""

    def delete(self, session_id: str) -> bool:
        """Remove the session; whether there was one."""

    def exists(self, session_id: str) -> bool: ...

    def version(self, session_id: str) -> str | None:
        """The version its last save returned; ``None`` if there is no such session."""

    def lock(self, session_id: str) -> SessionLock:
        """The session's turn lock (not taken)."""

    def busy(self, session_id: str) -> bool:
        """Whether any process holds the session's turn lock now; takes nothing."""

    def close(self) -> None: ...


def moment(value: datetime | None) -> str | None:
    """A time as stored: UTC ISO 8601 to the microsecond, so text order is time order (a
    naive time is taken as UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")
