"""Saved sessions: the one facade the rest of silica calls, over the session store.

Sessions live in a database (``silica.storage``): SQLite in ``$SILICA_HOME/sessions.db`` by
default, Postgres when ``[storage] database`` (or ``SILICA_DATABASE``) names one. Each is its
conversation as JSON (``Conversation.model_dump``), images as refs into the session's
``ImageStore`` folder (``$SILICA_HOME/images/<id>/``), never as base64 or bytes, with a few
summary columns for listing. Its saved tool outputs stay files, in ``session_folder``.
``silica sessions export ID`` prints a session as the JSON file of earlier versions
(``silica.agent.session_files``), and a home's old ``sessions/*.json`` are imported once.

What callers may rely on:

- ``save_session`` is one transaction: a reader sees the session as one save or the next
  left it, whole; two writers of one session: the last one wins, nothing half-written.
- ``load_session`` returns a conversation equal to the one saved, or raises ``SessionError``
  with a message saying what is wrong; it never changes what is stored. A tool call saved
  without its result (silica was stopped while the tool ran) is answered with an error
  result in what it returns (``answer_every_call``), so a loaded session never makes a
  provider refuse the next request.
- ``list_sessions`` never raises for a bad session file left from before the database (not
  JSON, not a session): it lists it with ``problem`` set.
- ``session_version`` changes with every save (``Agent.catch_up`` compares it).
- ``delete_session`` removes a session, its folder of saved tool outputs
  (``session_folder``) and its image folder; nothing else, but it first calls the
  ``silica_session_deleted`` hook, whose plugins clean up elsewhere (the default one deletes
  the session's Anthropic Files API uploads): a plugin's failure is a warning on the
  ``silica.sessions`` logger and never stops the deletion.
- The store of a home is opened once per process, from ``load_settings(home)``; an
  unreachable database is one ``SessionError`` naming it with its password masked
  (``open_sessions`` checks at a command's start).

Nothing here imports Pillow, a provider SDK or a database driver beyond ``sqlite3``, so
listing sessions is cheap.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from silica.agent import session_files
from silica.agent.conversation import Conversation, ToolResultBlock, answer_every_call
from silica.blocks import ImageBlock, ImageRefBlock, TextBlock
from silica.paths import silica_home
from silica.storage import SessionError, SessionRow, SessionStore, open_store

__all__ = ["SessionError", "SessionInfo", "DeletedSession", "save_session", "load_session",
           "list_sessions", "delete_session", "delete_sessions", "find_sessions",
           "session_exists", "session_version", "export_session", "open_sessions",
           "session_folder", "new_session_id", "title"]

TITLE_LENGTH = 60
FORMAT, VERSION = session_files.FORMAT, session_files.VERSION  # of an exported file

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

log = logging.getLogger("silica.sessions")


class SessionInfo(BaseModel):
    """One line of ``silica sessions list`` (``model_dump(mode="json")`` for ``--json``).

    ``path``: the SQLite database the session is in (``None`` in Postgres), or the file of a
    session file left from before the database that cannot be read; then ``problem`` says
    why, ``updated`` is the file's modification time, and the other fields are empty.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    path: Path | None
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
    """What ``delete_session`` removed: the session, then the files and folders it had."""

    id: str
    removed: list[Path]


def sessions_dir(home: Path | None = None) -> Path:
    """``<silica home>/sessions``: the sessions' folders of saved tool outputs and turn
    locks (and session files left from before the database)."""
    return (home or silica_home()) / "sessions"


def new_session_id() -> str:
    """A fresh id, e.g. ``20260509-142233-4f2a9c``: UTC time, then 6 random hex digits, so
    ids sort by creation time (to the second) and fit ``Conversation.id``."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def valid_id(session_id: object) -> bool:
    return isinstance(session_id, str) and _ID.fullmatch(session_id) is not None


def check_id(session_id: str) -> str:
    """``session_id`` if it is one; ``SessionError`` saying what an id is otherwise."""
    if not valid_id(session_id):
        raise SessionError(f"invalid session id {session_id!r}: ids are 1-64 letters, digits, "
                           "'_' or '-'; run `silica sessions list` to see them")
    return session_id


def session_path(session_id: str, home: Path | None = None) -> Path:
    """Where a session file of earlier versions was kept (``<home>/sessions/<id>.json``);
    ``SessionError`` for an id that is not one."""
    return sessions_dir(home) / f"{check_id(session_id)}.json"


def session_folder(session_id: str, home: Path | None = None) -> Path:
    """The folder that holds the session's saved tool outputs (``<home>/sessions/<id>/``);
    ``SessionError`` for an id that is not one."""
    return sessions_dir(home) / check_id(session_id)


# -- the store of a home -------------------------------------------------------------------

_imported: set[Path] = set()  # homes whose old session files this process imported
_lock = threading.Lock()


def store_of(home: Path | None = None) -> SessionStore:
    """The session store of ``home`` (see the module docstring; ``open_store`` opens it once
    per process); its old session files are imported the first time a process asks."""
    home = Path(home or silica_home())
    store = open_store(home, _database(home))
    if home not in _imported:
        with _lock:
            if home not in _imported:
                session_files.import_files(store, home)
                _imported.add(home)
    return store


def _database(home: Path) -> str | None:
    """``[storage] database`` of ``home``'s settings. Without one (the single-user case),
    found with the stdlib alone: the settings' models are imported only to check a URL."""
    if home not in _databases:
        _databases[home] = _database_setting(home)
    return _databases[home]


def _database_setting(home: Path) -> str | None:
    import os
    import tomllib

    if not os.environ.get("SILICA_DATABASE"):
        try:
            # silica.config.CONFIG_NAME, read as silica.resident.settings reads it
            data = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            data = None  # load_settings says what is wrong with it
        storage = data.get("storage") if isinstance(data, dict) else None
        if data is not None and not (isinstance(storage, dict) and "database" in storage):
            return None
    from silica.config import load_settings

    return load_settings(home).storage.database


_databases: dict[Path, str | None] = {}


def forget_stores() -> None:
    """Close the stores this process opened; the next call opens them again (tests)."""
    from silica.storage import forget_stores as close_all

    with _lock:
        _imported.clear()
        _databases.clear()
        close_all()


def open_sessions(home: Path | None = None) -> None:
    """Open the session store of ``home`` now (migrating it, importing old session files),
    so that a command fails at its start, in one line, when the database cannot be used."""
    store_of(home)


# -- sessions ------------------------------------------------------------------------------

def save_session(conversation: Conversation, home: Path | None = None) -> str:
    """Save ``conversation`` (one transaction); returns its new ``session_version``.

    Raises ``SessionError`` if a message holds image bytes (an ``ImageBlock``: put it in the
    ``ImageStore`` first) or the session cannot be written.
    """
    check_id(conversation.id)
    _refuse_bytes(conversation)
    try:
        document = session_files.json_document(conversation.model_dump(mode="json"))
    except (ValueError, RecursionError) as exc:  # e.g. tool arguments nested too deep
        raise SessionError(f"cannot save session {conversation.id}: its history cannot be "
                           f"written as JSON ({exc}); start a new session") from exc
    return store_of(home).save(row_of(conversation), document)


def row_of(conversation: Conversation) -> SessionRow:
    """The summary columns of ``conversation``."""
    return SessionRow(id=conversation.id, created=conversation.created,
                      updated=conversation.updated, turns=conversation.turn,
                      messages=len(conversation.messages), title=title(conversation),
                      provider=conversation.provider, model=conversation.model,
                      replies=sum(m.role == "assistant" for m in conversation.messages))


def load_session(session_id: str, home: Path | None = None) -> Conversation:
    """The conversation saved as ``session_id``; ``SessionError`` if there is none or it
    cannot be used (what is stored is left as it is)."""
    return _load(session_id, home)[0]


def _load(session_id: str, home: Path | None) -> tuple[Conversation, str]:
    check_id(session_id)
    found = store_of(home).load(session_id)
    if found is None:
        leftover = session_path(session_id, home)
        if leftover.is_file():  # a file the import could not read: say why
            session_files.read_file(leftover)
        raise SessionError(f"no session {session_id}; run `silica sessions list`")
    document, version = found
    try:
        conversation = Conversation.model_validate(json.loads(document))
    except (ValueError, ValidationError, RecursionError) as exc:
        raise SessionError(f"session {session_id} in {store_of(home).where} cannot be read "
                           f"({str(exc).splitlines()[0]}); export it with `silica sessions "
                           "export` to look, or delete it") from exc
    answer_every_call(conversation)  # in memory only: saved with the next turn
    return conversation, version


def export_session(session_id: str, home: Path | None = None) -> bytes:
    """The session as the JSON file earlier versions kept (``silica.agent.session_files``):
    byte for byte the file it was imported from."""
    check_id(session_id)
    found = store_of(home).load(session_id)
    if found is None:
        raise SessionError(f"no session {session_id}; run `silica sessions list` to see the "
                           "ids")
    return session_files.file_bytes(found[0])


def session_exists(session_id: str, home: Path | None = None) -> bool:
    """Whether there is a session ``session_id`` (one stored, or a file left from before the
    database that could not be imported); ``SessionError`` for an id that is not one."""
    check_id(session_id)
    return store_of(home).exists(session_id) or session_path(session_id, home).is_file()


def session_version(session_id: str, home: Path | None = None) -> str | None:
    """A value that changes with every save of the session; ``None`` if there is none."""
    return store_of(home).version(check_id(session_id))


def list_sessions(home: Path | None = None) -> list[SessionInfo]:
    """Every saved session, most recently updated first; a session file left from before
    the database that cannot be read is listed with ``problem`` set."""
    store = store_of(home)
    where = getattr(store, "path", None)
    found = [SessionInfo(path=where, **vars(row)) for row in store.rows()]
    for path in session_files.leftover_files(sessions_dir(home)):
        try:
            session_files.read_file(path)
            continue  # readable: the next open imports it
        except SessionError as exc:
            problem = str(exc)
        try:
            mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        except OSError:
            continue  # removed while listing
        found.append(SessionInfo(id=path.stem, path=path, created=None, updated=mtime,
                                 problem=problem))
    return sorted(found, key=lambda s: (s.updated, s.id), reverse=True)


def delete_session(session_id: str, home: Path | None = None, *,
                   missing_ok: bool = False) -> DeletedSession:
    """Remove session ``session_id`` (and a file of it left from before the database), its
    folder of saved tool outputs and its image folder (a link there is removed, never what
    it points to). ``SessionError`` for an unknown id (nothing is removed; with
    ``missing_ok`` its folders still are) or something that cannot be removed."""
    home = Path(home or silica_home())
    if not session_exists(session_id, home) and not missing_ok:
        raise SessionError(f"no session {session_id}; run `silica sessions list` to see the "
                           "ids")
    images = home / "images" / session_id
    _announce_deletion(session_id, home)
    store_of(home).delete(session_id)
    removed = [target for target in (session_path(session_id, home),
                                     session_folder(session_id, home), images)
               if _remove(target)]
    return DeletedSession(id=session_id, removed=removed)


def delete_sessions(session_ids: list[str],
                    home: Path | None = None) -> list[DeletedSession]:
    """``delete_session`` for each id, once each; every id is checked first, so an unknown
    one raises ``SessionError`` before anything is removed."""
    ids = list(dict.fromkeys(session_ids))
    for session_id in ids:
        if not session_exists(session_id, home):
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
