"""The statements both backends run (``?`` placeholders; Postgres turns them into ``%s``)."""

from __future__ import annotations

from datetime import datetime

from silica.storage.base import SessionRow, moment

COLUMNS = ("id", "document", "version", "created", "updated", "turns", "messages", "title",
           "provider", "model", "replies")
_SUMMARY = ("id", "created", "updated", "turns", "messages", "title", "provider", "model",
            "replies")

_VALUES = ", ".join("?" for _ in COLUMNS)
SAVE = (f"INSERT INTO sessions ({', '.join(COLUMNS)}) VALUES ({_VALUES}) "
        "ON CONFLICT (id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS[1:]))
INSERT_NEW = (f"INSERT INTO sessions ({', '.join(COLUMNS)}) VALUES ({_VALUES}) "
              "ON CONFLICT (id) DO NOTHING")
LOAD = "SELECT document, version FROM sessions WHERE id = ?"
ROWS = f"SELECT {', '.join(_SUMMARY)} FROM sessions ORDER BY updated DESC, id DESC"
DELETE = "DELETE FROM sessions WHERE id = ?"
VERSION = "SELECT version FROM sessions WHERE id = ?"


def values(row: SessionRow, document: str, version: str) -> tuple:
    """The parameters of ``SAVE`` and ``INSERT_NEW``."""
    return (row.id, document, version, moment(row.created), moment(row.updated), row.turns,
            row.messages, column_text(row.title), column_text(row.provider),
            column_text(row.model), row.replies)


def column_text(text: str) -> str:
    """``text`` as a summary column keeps it: a NUL (which Postgres text cannot hold) as
    U+FFFD, a lone surrogate (which is no UTF-8) as its backslash escape. Only what is
    listed changes; the document keeps every character."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "backslashreplace").decode("utf-8")


def summary(found: tuple) -> SessionRow:
    """A row of ``ROWS`` as a ``SessionRow``."""
    sid, created, updated, turns, messages, title, provider, model, replies = found
    return SessionRow(id=sid, created=datetime.fromisoformat(created) if created else None,
                      updated=datetime.fromisoformat(updated), turns=turns,
                      messages=messages, title=title, provider=provider, model=model,
                      replies=replies)
