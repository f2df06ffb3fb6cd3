"""A session as a JSON file: the format ``silica sessions export`` prints, and the one-time
import of the files silica kept before sessions moved into a database.

A file is ``{"format": "silica-session", "version": 1, "conversation": {...}}``, written by
``json.dumps(..., indent=1, ensure_ascii=False)`` in UTF-8, a lone surrogate as its JSON
escape. ``export_text`` of a session imported from such a file gives the file's bytes back.

The import (``import_files``) runs when a home's store is first opened in a process and
``<home>/sessions/*.json`` exist: each readable file goes into the store (never over a
session already there, so running it again imports nothing twice) and is then moved into
``<home>/imported-sessions/``, kept as it was. A file that cannot be read stays where it is,
and ``silica sessions list`` shows it with its problem. A run stopped anywhere (SIGKILL too)
is finished by the next: a file is moved only after its session is in the store.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from silica import locks
from silica.agent.conversation import Conversation
from silica.storage import SessionError, SessionStore

FORMAT = "silica-session"
VERSION = 1
KEPT = "imported-sessions"

log = logging.getLogger("silica.sessions")


def json_document(conversation: Any) -> str:
    """A conversation's JSON object as the text a store keeps: ``ensure_ascii=False``, a lone
    surrogate (from a model's JSON) kept as its JSON escape, ``\\uXXXX``. ``ValueError`` or
    ``RecursionError`` when it cannot be written as JSON (nested too deep)."""
    text = json.dumps(conversation, ensure_ascii=False)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def file_bytes(document: str) -> bytes:
    """The JSON file of a session whose conversation is ``document`` (JSON text)."""
    text = json.dumps({"format": FORMAT, "version": VERSION,
                       "conversation": json.loads(document)}, indent=1, ensure_ascii=False)
    return text.encode("utf-8", "backslashreplace")


def read_file(path: Path) -> tuple[Conversation, Any]:
    """The conversation in the file at ``path``, and its ``conversation`` object as the file
    has it; every way the file can be bad is a ``SessionError``."""
    keep = "the file was left as it is: fix it or move it away"
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError as exc:  # a hostile or broken file nested deeper than Python goes
        raise SessionError(f"{path} is nested too deeply to be read; {keep}") from exc
    except OSError as exc:
        raise SessionError(f"cannot read session file {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise SessionError(f"{path} is not UTF-8 text ({exc}); {keep}") from exc
    except json.JSONDecodeError as exc:
        raise SessionError(f"{path} is not valid JSON ({exc}); {keep}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SessionError(f"{path} is not a silica session file (no \"format\": "
                           f"\"{FORMAT}\"); {keep}")
    if data.get("version") != VERSION:
        raise SessionError(f"{path} is a session file of version {data.get('version')!r}, "
                           f"which this silica cannot read (it reads version {VERSION}); "
                           "upgrade silica")
    try:
        conversation = Conversation.model_validate(data.get("conversation"))
    except RecursionError as exc:
        raise SessionError(f"{path} is nested too deeply to be read; {keep}") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'conversation'}: {e['msg']}"
            for e in exc.errors()[:3])
        more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
        raise SessionError(f"{path} holds an invalid conversation: {problems}{more}; "
                           f"{keep}") from exc
    if conversation.id != path.stem:
        raise SessionError(f"{path} holds session {conversation.id!r}, not {path.stem!r}; "
                           f"{keep}: rename it or move it away")
    return conversation, data["conversation"]


def leftover_files(folder: Path) -> list[Path]:
    """The session files in ``folder`` (``<home>/sessions``): named ``<id>.json``."""
    from silica.agent.sessions import valid_id

    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    return [Path(e.path) for e in entries
            if e.name.endswith(".json") and valid_id(e.name[:-5]) and e.is_file()]


def import_files(store: SessionStore, home: Path) -> None:
    """Move the readable session files of ``<home>/sessions`` into ``store`` (see the module
    docstring); says on the ``silica.sessions`` logger what moved and where the files are."""
    if not leftover_files(home / "sessions"):
        return
    try:  # one process at a time: two starting at once must not both move a file
        fd = locks.wait_for(home / "sessions" / ".import.lock")
    except OSError as exc:
        raise SessionError(f"cannot import the session files of {home / 'sessions'}: "
                           f"{exc.strerror or exc}; check the permissions of that folder"
                           ) from exc
    try:
        _import(store, home, leftover_files(home / "sessions"))  # what is left by then
    finally:
        locks.release(fd)


def _import(store: SessionStore, home: Path, files: list[Path]) -> None:
    from silica.agent.sessions import row_of

    kept = home / KEPT
    moved = 0
    for path in sorted(files):
        try:
            conversation, original = read_file(path)
            document = json_document(original)
        except (SessionError, ValueError, RecursionError):
            continue  # listed with its problem by list_sessions
        if not store.insert_new(row_of(conversation), document):
            log.warning("%s", f"{path} was not imported: the sessions database already holds "
                        f"session {conversation.id}; the file is kept in {kept}")
        try:
            kept.mkdir(parents=True, exist_ok=True)
            os.replace(path, _free_name(kept / path.name))
        except OSError as exc:
            raise SessionError(f"cannot move {path} into {kept}: {exc.strerror or exc}; "
                               f"check the permissions of {home}") from exc
        moved += 1
    if moved:
        log.warning("%s", f"silica moved {moved} session file{'s' if moved > 1 else ''} into "
                    f"the sessions database {store.where}; the files are kept in {kept}")


def _free_name(path: Path) -> Path:
    """``path``, or ``<stem>.N.json`` for the first N free (a file imported twice)."""
    n = 1
    found = path
    while found.exists():
        found = path.with_name(f"{path.stem}.{n}{path.suffix}")
        n += 1
    return found
