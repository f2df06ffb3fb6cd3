"""Saved sessions: one JSON file per conversation, under ``$SILICA_HOME/sessions/``.

A file is ``{"format": "silica-session", "version": 1, "conversation": {...}}``: the
conversation as ``Conversation.model_dump`` gives it, images as refs into the session's
``ImageStore`` folder (``$SILICA_HOME/images/<id>/``), never as base64 or bytes.

What callers may rely on:

- ``save_session`` writes atomically (temporary file + ``os.replace``): a reader sees the old
  file or the new one, whole.
- ``load_session`` returns a conversation equal to the one saved, or raises ``SessionError``
  with a message naming the file and what is wrong; it never changes or removes a file. A
  tool call saved without its result (silica was stopped while the tool ran) is answered
  with an error result in what it returns (``answer_every_call``), so a loaded session never
  makes a provider refuse the next request.
- ``list_sessions`` never raises for a bad file (not JSON, nested past what can be read, not
  a session): it lists it with ``problem`` set.
- ``delete_session`` removes a session's file, its folder of saved tool outputs
  (``session_folder``) and its image folder; nothing else, but it first calls the
  ``silica_session_deleted`` hook, whose plugins clean up elsewhere (the default one deletes
  the session's Anthropic Files API uploads): a plugin's failure is a warning on the
  ``silica.sessions`` logger and never stops the deletion.

Nothing here imports Pillow or a provider SDK, so listing sessions is cheap.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from silica.agent.conversation import Conversation, ToolResultBlock, answer_every_call
from silica.blocks import ImageBlock, ImageRefBlock, TextBlock
from silica.errors import SilicaError
from silica.fsutil import write_atomic
from silica.paths import silica_home

FORMAT = "silica-session"
VERSION = 1
TITLE_LENGTH = 60

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

log = logging.getLogger("silica.sessions")


class SessionError(SilicaError):
    """A session cannot be saved or loaded; the message names the file and the problem."""


class SessionInfo(BaseModel):
    """One line of ``silica sessions list`` (``model_dump(mode="json")`` for ``--json``).

    For a file that cannot be read, ``problem`` says why, ``updated`` is the file's
    modification time, and the other fields are empty.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    path: Path
    created: datetime | None
    updated: datetime
    turns: int = 0
    messages: int = 0
    title: str = ""
    provider: str = ""
    model: str = ""
    replies: int = 0  # messages from the model: 0 for a session it never answered
    problem: str = ""


class DeletedSession(BaseModel):
    """What ``delete_session`` removed: the session file first, then its folders."""

    id: str
    removed: list[Path]


def sessions_dir(home: Path | None = None) -> Path:
    """``<silica home>/sessions``."""
    return (home or silica_home()) / "sessions"


def new_session_id() -> str:
    """A fresh id, e.g. ``20260509-142233-4f2a9c``: UTC time, then 6 random hex digits, so
    ids sort by creation time (to the second) and fit ``Conversation.id``."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def session_path(session_id: str, home: Path | None = None) -> Path:
    """Where session ``session_id`` is saved; ``SessionError`` for an id that is not one."""
    if not isinstance(session_id, str) or not _ID.fullmatch(session_id):
        raise SessionError(f"invalid session id {session_id!r}: ids are 1-64 letters, digits, "
                           "'_' or '-'; run `silica sessions list` to see them")
    return sessions_dir(home) / f"{session_id}.json"


def session_folder(session_id: str, home: Path | None = None) -> Path:
    """The folder beside the session file that holds its saved tool outputs
    (``<home>/sessions/<id>/``); ``SessionError`` for an id that is not one."""
    return session_path(session_id, home).with_suffix("")


def save_session(conversation: Conversation, home: Path | None = None) -> Path:
    """Write ``conversation`` to ``<home>/sessions/<id>.json`` atomically; returns the path.

    Raises ``SessionError`` if a message holds image bytes (an ``ImageBlock``: put it in the
    ``ImageStore`` first) or the file cannot be written.
    """
    path = session_path(conversation.id, home)
    _refuse_bytes(conversation)
    try:
        text = json.dumps({"format": FORMAT, "version": VERSION,
                           "conversation": conversation.model_dump(mode="json")},
                          indent=1, ensure_ascii=False)
    except (ValueError, RecursionError) as exc:  # e.g. tool arguments nested too deep
        raise SessionError(f"cannot save session {conversation.id}: its history cannot be "
                           f"written as JSON ({exc}); start a new session") from exc
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A lone surrogate (from a model's JSON) is written as its JSON escape, \uXXXX.
        write_atomic(path, text.encode("utf-8", "backslashreplace"))
    except OSError as exc:
        raise SessionError(f"cannot save session to {path}: {exc.strerror or exc}; free some "
                           f"disk space or fix the permissions of {path.parent}") from exc
    return path


def load_session(session_id: str, home: Path | None = None) -> Conversation:
    """The conversation saved as ``session_id``; ``SessionError`` if there is none or its
    file cannot be used (the file is left as it is)."""
    path = session_path(session_id, home)
    if not path.is_file():
        raise SessionError(f"no session {session_id}; run `silica sessions list`")
    conversation = _read(path)
    if conversation.id != session_id:
        raise SessionError(f"{path} holds session {conversation.id!r}, not {session_id!r}; "
                           "the file was left as it is: rename it or move it away")
    answer_every_call(conversation)  # in memory only: saved with the next turn
    return conversation


def list_sessions(home: Path | None = None) -> list[SessionInfo]:
    """Every saved session, most recently updated first; a bad file is listed with
    ``problem`` set instead of breaking the list."""
    folder = sessions_dir(home)
    if not folder.is_dir():
        return []
    found: list[SessionInfo] = []
    for path in folder.glob("*.json"):
        if not _ID.fullmatch(path.stem) or not path.is_file():
            continue  # temporary files, other people's files
        try:
            conversation = _read(path)
        except SessionError as exc:
            try:
                mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
            except OSError:
                continue  # removed while listing
            found.append(SessionInfo(id=path.stem, path=path, created=None, updated=mtime,
                                     problem=str(exc)))
            continue
        found.append(SessionInfo(
            id=conversation.id, path=path, created=conversation.created,
            updated=conversation.updated, turns=conversation.turn,
            messages=len(conversation.messages), title=title(conversation),
            provider=conversation.provider, model=conversation.model,
            replies=sum(m.role == "assistant" for m in conversation.messages)))
    return sorted(found, key=lambda s: (s.updated, s.id), reverse=True)


def delete_session(session_id: str, home: Path | None = None, *,
                   missing_ok: bool = False) -> DeletedSession:
    """Remove session ``session_id``: its file (readable or not), its folder of saved tool
    outputs and its image folder (a link there is removed, never what it points to).
    ``SessionError`` for an unknown id (nothing is removed; with ``missing_ok`` its folders
    still are) or a file that cannot be removed."""
    path = session_path(session_id, home)
    if not path.is_file() and not missing_ok:
        raise SessionError(f"no session {session_id}; run `silica sessions list` to see the "
                           "ids")
    images = (home or silica_home()) / "images" / session_id
    _announce_deletion(session_id, home or silica_home())
    removed = [target for target in (path, session_folder(session_id, home), images)
               if _remove(target)]
    return DeletedSession(id=session_id, removed=removed)


def delete_sessions(session_ids: list[str],
                    home: Path | None = None) -> list[DeletedSession]:
    """``delete_session`` for each id, once each; every id is checked first, so an unknown
    one raises ``SessionError`` before anything is removed."""
    ids = list(dict.fromkeys(session_ids))
    for session_id in ids:
        if not session_path(session_id, home).is_file():
            raise SessionError(f"no session {session_id}; run `silica sessions list` to see "
                               "the ids (nothing was deleted)")
    return [delete_session(session_id, home) for session_id in ids]


def find_sessions(*, empty: bool = False, older_than: float | None = None,
                  now: datetime | None = None, home: Path | None = None) -> list[SessionInfo]:
    """Readable sessions that match every filter given: ``empty`` (the model never
    answered), ``older_than`` days since the last update. A file with a ``problem`` never
    matches (delete it by id)."""
    cutoff = (now or datetime.now(UTC)) - timedelta(days=older_than or 0)
    return [s for s in list_sessions(home) if not s.problem
            and (not empty or s.replies == 0)
            and (older_than is None or s.updated < cutoff)]


def title(conversation: Conversation) -> str:
    """The first text a person typed, on one line, at most ``TITLE_LENGTH`` characters: a
    longer one is cut after its last whole word that fits (or mid-word, when that would
    leave less than half of it) and ends with "…". A session whose person sent only images
    is named after the first one (``Image: shot.png``); one with no message yet is ``""``."""
    image: ImageRefBlock | None = None
    for message in conversation.messages:
        if message.role != "user":
            continue
        for block in message.content:
            if isinstance(block, TextBlock) and block.text.strip():
                return _one_line(block.text)
            if isinstance(block, ImageRefBlock) and image is None:
                image = block
    if image is None:
        return ""
    return _one_line(f"Image: {image.alt}") if image.alt.strip() else "Image"


def _one_line(text: str) -> str:
    """``text`` on one line, cut to ``TITLE_LENGTH`` as ``title`` says."""
    text = " ".join(text.split())
    if len(text) > TITLE_LENGTH:
        cut = text[:TITLE_LENGTH - 1]
        if text[TITLE_LENGTH - 1] != " " and cut.rfind(" ") >= TITLE_LENGTH // 2:
            cut = cut[:cut.rfind(" ")]
        text = cut.rstrip() + "…"
    return text


def _read(path: Path) -> Conversation:
    """The conversation in ``path``; every way the file can be bad is a ``SessionError``."""
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
        return Conversation.model_validate(data.get("conversation"))
    except RecursionError as exc:
        raise SessionError(f"{path} is nested too deeply to be read; {keep}") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'conversation'}: {e['msg']}"
            for e in exc.errors()[:3])
        more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
        raise SessionError(f"{path} holds an invalid conversation: {problems}{more}; "
                           f"{keep}") from exc


def _remove(target: Path) -> bool:
    """Remove a file, link or folder tree; whether there was one. ``SessionError`` if it
    cannot be removed."""
    try:
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)  # removes links inside, never what they point to
        else:
            return False
    except OSError as exc:
        raise SessionError(f"cannot remove {target}: {exc.strerror or exc}; check its "
                           "permissions and try again") from exc
    return True


def _announce_deletion(session_id: str, home: Path) -> None:
    """Call each plugin's ``silica_session_deleted``; whatever fails is a warning."""
    from silica.config import ConfigError, Settings, load_settings
    from silica.plugins import call_each, get_plugin_manager

    try:
        settings = load_settings(home)
    except ConfigError:  # a broken config must not keep a session from being deleted
        settings = Settings()

    def failed(plugin: str, exc: Exception) -> None:
        log.warning("%s", f"plugin {plugin!r} failed to clean up after session "
                    f"{session_id}: {type(exc).__name__}: {exc}")

    call_each(get_plugin_manager().hook.silica_session_deleted, failed,
              session_id=session_id, home=home, settings=settings)


def _refuse_bytes(conversation: Conversation) -> None:
    for index, message in enumerate(conversation.messages):
        blocks = list(message.content)
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                blocks += block.content
        if any(isinstance(b, ImageBlock) for b in blocks):
            raise SessionError(f"message {index} of session {conversation.id} holds image "
                               "bytes; put images in the ImageStore and keep refs instead")
