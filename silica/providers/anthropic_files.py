"""The Anthropic Files API (beta), opt-in with ``[anthropic] files_api = true``.

Each distinct image a request holds (by the sha256 of the bytes sent, so each aging variant
of a screenshot counts on its own) is uploaded once per session (``client.beta.files.upload``
with the ``anthropic-beta: files-api-2025-04-14`` header), and requests name it as
``{"type": "image", "source": {"type": "file", "file_id": ...}}`` instead of carrying its
base64. A file id never changes, so a request still repeats the one before byte for byte up
to its end, and the prompt cache works as before (``silica.providers.anthropic``).

What a session uploaded is remembered for as long as the session lives, in
``$SILICA_HOME/cache/anthropic-files/<session id>.json`` (removed with the session), keyed by
the API's address, since a file id means nothing to another server::

    {"version": 1, "files": {"https://api.anthropic.com": {"<sha256 hex>": "file_011C..."}}}

The file is written atomically after each upload and read defensively: a file that is too
large, not JSON or of another shape is ignored with one warning and replaced by the next
write (its files are then not deleted with the session).

Failures, none of which fails a turn by itself:

- an upload refused for the image (HTTP 400, 413, 415, 422) sends that image as base64 for
  the rest of the session; any other failure (no such endpoint, credentials, rate limit,
  server error after the SDK's retries, no connection) sends every image not uploaded yet as
  base64 for the rest of the session. One warning per request says so.
- a request refused because a file it names is unknown (HTTP 400 or 404 naming one of its
  file ids, or saying a file is not found or expired; files can expire or be deleted
  elsewhere) drops those files from the map, uploads them again and sends the request once
  more. Refused again, it is a ``ProviderError`` saying what to do; never a loop.
- deleting a session (``silica_session_deleted``, see ``silica.default_plugins``) deletes
  its files through the address configured now (a file already gone counts as deleted);
  whatever cannot be deleted is a warning naming the file ids.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from silica.blocks import ImageBlock
from silica.fsutil import write_atomic
from silica.paths import cache_dir
from silica.providers.base import ProviderError, Request, RequestToolResult
from silica.providers.clients import close_all
from silica.providers.errors import api_message
from silica.security.text import safe_text
from silica.words import counted

if TYPE_CHECKING:
    from silica.config import Settings

FILES_BETA = "files-api-2025-04-14"
MAP_FOLDER = "anthropic-files"
FORMAT = 1
MAX_MAP_BYTES = 1024 * 1024
UPLOADS_AT_ONCE = 4
IMAGE_REFUSALS = (400, 413, 415, 422)
"""Upload statuses that refuse one image: only that image is sent as base64."""

_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # a session id, a file name
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_FILE_ID = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_FILE_GONE = re.compile(r"file.{0,60}(not found|not exist|does not exist|doesn't exist|expired"
                        r"|deleted|unknown|no longer)|(unknown|missing|expired) file", re.I)
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif",
               "image/webp": "webp"}
_DETAIL = 200  # characters of a server's text quoted in a warning

Notice = Callable[[str], None]
log = logging.getLogger("silica.providers")


def warn(message: str) -> None:
    """The default ``Notice``: a warning on the ``silica.providers`` logger."""
    log.warning("%s", message)


def digest(data: bytes) -> str:
    """The content hash an image is known by: sha256, hex."""
    return hashlib.sha256(data).hexdigest()


def file_image(file_id: str) -> dict[str, Any]:
    """An Anthropic ``image`` block that names an uploaded file."""
    return {"type": "image", "source": {"type": "file", "file_id": file_id}}


def files_path(session_id: str, home: Path | None = None) -> Path:
    """Where session ``session_id`` remembers its uploads; ``ValueError`` for a string that
    is no session id."""
    if not _SESSION_ID.fullmatch(session_id):
        raise ValueError(f"not a session id: {session_id[:80]!r}")
    return cache_dir(home) / MAP_FOLDER / f"{session_id}.json"


def images(request: Request) -> Iterator[ImageBlock]:
    """Every image of ``request``, tool results included, in order."""
    for message in request.messages:
        for block in message.content:
            for inner in block.content if isinstance(block, RequestToolResult) else [block]:
                if isinstance(inner, ImageBlock):
                    yield inner


def _said(detail: str) -> str:
    detail = " ".join(str(detail).split())
    if len(detail) > _DETAIL:
        detail = detail[:_DETAIL - 1] + "…"
    return safe_text(detail)


class FileMap:
    """The map of one session's uploads, in the file ``files_path`` names (see the module
    docstring)."""

    def __init__(self, path: Path, notice: Notice = warn) -> None:
        self.path = path
        self.notice = notice
        self._warned = False

    def read(self) -> dict[str, dict[str, str]]:
        """Address -> {sha256 -> file id}; empty when there is no file or it is unusable."""
        try:
            if self.path.stat().st_size > MAX_MAP_BYTES:
                return self._ignore(f"is larger than {MAX_MAP_BYTES} bytes")
            doc = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except OSError as exc:
            return self._ignore(f"cannot be read ({exc.strerror or exc})")
        except RecursionError:
            return self._ignore("is JSON nested too deeply to read")
        except ValueError as exc:  # UnicodeDecodeError included
            return self._ignore(f"is not valid JSON ({exc})")
        files = doc.get("files") if isinstance(doc, dict) and doc.get("version") == FORMAT \
            else None
        if not isinstance(files, dict) or not all(
                isinstance(ids, dict) and all(
                    isinstance(d, str) and _DIGEST.match(d) and isinstance(i, str)
                    and _FILE_ID.match(i) for d, i in ids.items())
                for ids in files.values()):
            return self._ignore(f'is not a map of uploads ({{"version": {FORMAT}, "files": '
                                '{address: {sha256: file id}}})')
        return files

    def write(self, files: dict[str, dict[str, str]]) -> None:
        """Replace the file with ``files`` (addresses left empty are dropped); ``OSError``."""
        kept = {url: ids for url, ids in files.items() if ids}
        text = json.dumps({"version": FORMAT, "files": kept}, indent=1, sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, text + "\n")

    def _ignore(self, problem: str) -> dict[str, dict[str, str]]:
        if not self._warned:
            self._warned = True
            self.notice(f"ignoring {self.path}: it {problem}; images are uploaded again, and "
                        "the files it names are not deleted with the session")
        return {}


class SessionFiles:
    """The uploads of one session at one API address, for one provider: ``sources`` before
    each request, ``lost`` and ``forget`` when the API no longer knows a file."""

    def __init__(self, session_id: str, base_url: str, home: Path | None = None,
                 notice: Notice = warn) -> None:
        self.session_id = session_id
        self.base_url = base_url
        self.notice = notice
        self.map = FileMap(files_path(session_id, home), notice)
        self.inline: set[str] = set()  # images sent as base64 for the rest of the session
        self.unavailable = ""  # why nothing more is uploaded ("": uploads go on)
        self._unsaved: dict[str, str] = {}  # uploads the map file could not take
        self._gone: set[str] = set()  # files dropped while the map file could not be written
        self._write_warned = False

    def known(self) -> dict[str, str]:
        """sha256 -> file id of every image uploaded for this session at this address."""
        ids = {**self.map.read().get(self.base_url, {}), **self._unsaved}
        for gone in self._gone:
            ids.pop(gone, None)
        return ids

    async def sources(self, client: Any, request: Request) -> dict[str, str]:
        """sha256 -> file id for each image of ``request`` that is (now) uploaded: those not
        uploaded yet are, at most ``UPLOADS_AT_ONCE`` at a time. An image whose upload fails
        is left out (sent as base64), with one warning for the request."""
        wanted: dict[str, ImageBlock] = {}
        for image in images(request):
            wanted.setdefault(digest(image.data), image)
        if not wanted:
            return {}
        ids = self.known()
        new = [d for d in wanted if d not in ids and d not in self.inline]
        if new and not self.unavailable:
            gate = asyncio.Semaphore(UPLOADS_AT_ONCE)

            async def one(key: str) -> tuple[str, str | None, int | None, str]:
                async with gate:
                    return (key, *await _upload(client, key, wanted[key]))

            results = await asyncio.gather(*(one(d) for d in new))
            uploaded = {key: file_id for key, file_id, _, _ in results if file_id}
            if uploaded:
                ids.update(uploaded)
                self._save(uploaded, set())
            self._refused([(key, status, why) for key, file_id, status, why in results
                           if not file_id])
        return {d: ids[d] for d in wanted if d in ids}

    def _refused(self, failures: list[tuple[str, int | None, str]]) -> None:
        if not failures:
            return
        self.inline.update(key for key, _, _ in failures)
        _, status, why = failures[0]
        said = f"HTTP {status}: {why}" if status else why
        if status in IMAGE_REFUSALS:
            self.notice(f"the Anthropic Files API refused {counted(len(failures), 'image')} "
                        f"({_said(said)}); "
                        "sent inline as base64 in this session instead")
            return
        self.unavailable = said
        self.notice(f"the Anthropic Files API at {self.base_url} cannot take uploads "
                    f"({_said(said)}); this session's images are sent inline as base64 from "
                    "now on (set files_api = false under [anthropic] in config.toml to stop "
                    "trying)")

    def lost(self, status: int, detail: str, sources: dict[str, str]) -> list[str]:
        """The sha256 of each image whose file the API no longer knows, from a request's
        error (``status``, the API's ``detail``); empty when the error is about something
        else. Files the text names, else every file the request named when the text says a
        file is missing."""
        if status not in (400, 404):
            return []
        named = [key for key, file_id in sources.items() if file_id in detail]
        return named or (list(sources) if _FILE_GONE.search(detail) else [])

    def forget(self, keys: list[str]) -> None:
        """Drop those images' files from the map: the next request uploads them again."""
        self._save({}, set(keys))

    def _save(self, added: dict[str, str], gone: set[str]) -> None:
        self._unsaved.update(added)
        for key in gone:
            self._unsaved.pop(key, None)
        self._gone = (self._gone | gone) - set(added)
        files = self.map.read()
        ids = {**files.get(self.base_url, {}), **self._unsaved}
        for key in self._gone:
            ids.pop(key, None)
        files[self.base_url] = ids
        try:
            self.map.write(files)
        except OSError as exc:
            if not self._write_warned:
                self._write_warned = True
                self.notice(f"cannot write {self.map.path} ({exc.strerror or exc}): images "
                            "uploaded for this session are not remembered after it, nor "
                            "deleted with it")
            return
        self._unsaved.clear()
        self._gone.clear()

    def lost_again(self, status: int, detail: str) -> ProviderError:
        """The error for a request refused for an unknown file after the file was uploaded
        again."""
        return ProviderError(
            f"Anthropic still does not know a file this session uploaded to {self.base_url} "
            f"(HTTP {status}: {_said(detail)}), even after uploading it again. Try again; if "
            "it keeps happening, set files_api = false under [anthropic] in config.toml to "
            "send images inline.")


async def _upload(client: Any, key: str, image: ImageBlock) -> tuple[str | None, int | None, str]:
    """Upload ``image``: (file id, None, "") or (None, the HTTP status or None, why not)."""
    import anthropic

    name = f"silica-{key[:16]}.{_EXTENSIONS.get(image.media_type, 'bin')}"
    try:
        meta = await client.beta.files.upload(file=(name, image.data, image.media_type),
                                              betas=[FILES_BETA])
    except anthropic.APIStatusError as exc:
        return None, exc.status_code, api_message(exc.body) or exc.message
    except Exception as exc:  # no connection, a reply too large or unreadable: no upload
        return None, None, f"{type(exc).__name__}: {exc}"
    file_id = getattr(meta, "id", None)
    if not isinstance(file_id, str) or not _FILE_ID.match(file_id):
        return None, None, f"the reply holds no usable file id ({str(file_id)[:60]!r})"
    return file_id, None, ""


# -- deleting a session's files ----------------------------------------------------------


def delete_session_files(session_id: str, home: Path | None, settings: Settings,
                         notice: Notice = warn) -> int:
    """Delete, through the Anthropic API configured now, every file session ``session_id``
    uploaded there; how many are gone (deleted now, or already). Never raises: whatever is
    not deleted is one warning naming the file ids. Without a map of uploads it does
    nothing (and imports no SDK). The map of uploads is removed either way."""
    try:
        path = files_path(session_id, home)
    except ValueError:
        return 0
    if not path.is_file():
        return 0
    files = FileMap(path, notice).read()
    try:
        return _run(_delete_all(session_id, files, settings, notice)) if any(
            files.values()) else 0
    except Exception as exc:  # a bug, or an SDK surprise: deleting the session goes on
        notice(f"could not delete the Anthropic files of session {session_id} "
               f"({type(exc).__name__}: {_said(str(exc))}); they stay in the account's file "
               "storage")
        return 0
    finally:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            notice(f"cannot remove {path} ({exc.strerror or exc})")


async def _delete_all(session_id: str, files: dict[str, dict[str, str]], settings: Settings,
                      notice: Notice) -> int:
    import anthropic

    from silica.providers.anthropic import AnthropicProvider

    try:
        client = AnthropicProvider(settings).client()
    except ProviderError as exc:
        ids = [i for ids in files.values() for i in ids.values()]
        notice(f"could not delete the {len(ids)} Anthropic files of session {session_id}: "
               f"{exc} They stay in the account's file storage: {', '.join(ids)}")
        return 0
    base_url = str(client.base_url).rstrip("/")
    ids = list(files.get(base_url, {}).values())
    gone, why = 0, ""
    # on a loop of its own (``_run``): its client is closed before the loop ends
    for file_id in ids:
        try:
            await client.beta.files.delete(file_id, betas=[FILES_BETA])
        except anthropic.NotFoundError:
            pass  # expired or deleted already: gone all the same
        except anthropic.APIStatusError as exc:
            why = f"HTTP {exc.status_code}: {api_message(exc.body) or exc.message}"
            break  # the SDK has retried: the next ones would fare no better
        except Exception as exc:  # no connection, an unreadable reply
            why = f"{type(exc).__name__}: {exc}"
            break
        gone += 1
    left = ids[gone:]
    if left:
        notice(f"could not delete {len(left)} of the Anthropic files of session {session_id} "
               f"from {base_url} ({_said(why)}); they stay in the account's file storage: "
               f"{', '.join(left)}")
    for url, elsewhere in files.items():
        if url != base_url and elsewhere:
            uploaded = counted(len(elsewhere), "Anthropic file was", "Anthropic files were")
            notice(f"of session {session_id}, {uploaded} uploaded through {_said(url)}, not "
                   f"the address configured now ({base_url}), and not deleted: "
                   f"{', '.join(elsewhere.values())}")
    return gone


def _run(coroutine: Any) -> Any:
    """Run ``coroutine`` to its end from synchronous code, also when called on a running
    event loop's thread (then in a thread of its own)."""
    async def closing() -> Any:
        try:
            return await coroutine
        finally:
            await close_all()  # the clients of this loop, which ends here

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(closing())
    with ThreadPoolExecutor(1, thread_name_prefix="silica-files") as pool:
        return pool.submit(asyncio.run, closing()).result()
