"""The message intake of ``POST /sessions/{sid}/messages``: a person's text and images, read
as they arrive, checked, and handed over only when every part of them is good.

    incoming = await read_message(request, settings=settings, limits=agent.info.limits,
                                  stored_images=count)
    incoming.text, incoming.images, incoming.workspace

Two bodies are taken:

- JSON: ``{"message": str, "images": [{"data": base64, "mime"?, "name"?} | {"url": str,
  "name"?}], "workspace"?: str}``. ``data`` may also be a ``data:`` URL. The body is read up
  to a cap (``max_per_message`` base64 images of ``max_size_bytes``, the text, some slack),
  into a temporary file: a body cut off at the cap never sits in memory. It is parsed only
  within the daemon's ``BodyBudget`` (413 ``body_too_large``, 503 ``busy`` otherwise).
- ``multipart/form-data``: a ``message`` field, ``images[]`` file parts, an optional
  ``workspace``. The body is parsed as it streams in (python-multipart's parser, never a
  spooled ``form()``): an image part is refused the moment it passes ``max_size_bytes``, an
  image past the count limits the moment its part begins, so a 1 GB upload is cut off after
  ``max_size_bytes`` and memory stays flat. Image parts are held in temporary files (in
  memory up to ``_SPOOL_IN_MEMORY``), not in memory.

``message`` is required; it may be empty when images are sent. Text must be UTF-8. Every
image goes through ``silica.images.intake.prepare_upload`` (sniffed, fully decoded, converted
and fitted as tool images are), off the event loop and at most ``PREPARE_AT_ONCE`` at a
time; a URL is fetched first with ``silica.images.fetch.fetch_image`` (``[serve]
fetch_private``, ``fetch_timeout``). Anything wrong is an ``UploadRefused`` (status, code,
message naming the field or image and what to do), raised before anything is returned, so
nothing is stored and the session is unchanged:

    ======  ==========================================================================
    status  codes
    ======  ==========================================================================
    400     invalid_json, invalid_multipart, missing_message, empty_message,
            unknown_field, duplicate_field, invalid_field, invalid_text, invalid_base64
    413     body_too_large, message_too_large, image_too_large
    415     unsupported_media_type (the body is neither JSON nor multipart/form-data)
    422     too_many_images, session_image_limit, invalid_image, image_url_refused,
            image_fetch_failed
    503     busy (other large JSON bodies fill the budget; retry, or send multipart)
    ======  ==========================================================================
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import re
import tempfile
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, cast

import pybase64
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from silica.blocks import ImageBlock
from silica.errors import SilicaError
from silica.images.fetch import FetchError, fetch_image, shown_url
from silica.images.intake import ImageRefused, display_name, prepare_upload
from silica.images.sniff import normalize_media_type
from silica.security.text import safe_text
from silica.serve.bodies import BodyBudget, json_object
from silica.serve.errors import ApiError

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks
    from starlette.requests import Request

    from silica.config import Settings
    from silica.images.limits import ImageLimits

MAX_TEXT_BYTES = 1024 * 1024
"""Most bytes (UTF-8) of the ``message`` and ``workspace`` fields."""

PREPARE_AT_ONCE = 2
"""Images decoded and fitted at the same time, across all requests (each may take up to
``max_decoded_bytes`` of memory)."""

FIELDS = ("message", "images[]", "workspace")
"""The multipart fields a message may have (JSON: ``message``, ``images``, ``workspace``)."""

_SLACK = 64 * 1024  # boundaries, part headers, JSON punctuation
_PER_IMAGE = 4 * 1024  # an image's name, type and framing, in either body
_SPOOL_IN_MEMORY = 256 * 1024  # an image part past this goes to a temporary file
_JSON_KEYS = ("message", "images", "workspace")
_DATA_KEYS = frozenset({"data", "mime", "name"})
_URL_KEYS = frozenset({"url", "name"})
_DATA_URL = re.compile(r"^data:([^,;]*)((?:;[^,;]*)*);base64,", re.IGNORECASE)
_SPACE = re.compile(r"\s")
_JSON_EXAMPLE = '{"message": "...", "images": [...]}'


@dataclass
class Incoming:
    """A person's message, every image already checked and fitted (``source``: its name)."""

    text: str
    images: list[ImageBlock] = field(default_factory=list)
    workspace: str | None = None


class UploadRefused(SilicaError):
    """A message that cannot be taken: ``status`` (HTTP), ``code`` (snake_case) and
    ``message`` (what was wrong and what to do; also ``str(err)``)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class _Sent:
    """One image as sent: bytes (base64 text or a spooled part) or a URL, not yet checked."""

    index: int  # 1-based, in the order sent
    name: str | None
    declared: str | None = None
    base64: str | None = None
    file: IO[bytes] | None = None
    size: int = 0
    url: str | None = None

    @property
    def label(self) -> str:
        if self.url is not None:
            return f"image {self.index} ({shown_url(self.url)})"
        return f'image {self.index} ("{display_name(self.name)}")' if self.name \
            else f"image {self.index}"

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


@dataclass
class _Caps:
    per_message: int
    room: int  # images the session may still take
    stored: int
    per_session: int
    image_bytes: int

    def count(self, count: int) -> None:
        """Refuse the ``count``-th image of a message if it passes a limit."""
        if count > self.per_message:
            raise UploadRefused(422, "too_many_images", (
                f"the message has more than {self.per_message} images, the most one message "
                f"may carry ([images] max_per_message); send at most {self.per_message} at "
                "once"))
        if count > self.room:
            raise UploadRefused(422, "session_image_limit", (
                f"this session holds {self.stored} images and may hold {self.per_session} "
                f"([images] max_per_session), so it can take {max(0, self.room)} more, not "
                f"{count}; start a new session to send more images"))

    def too_large(self, label: str) -> UploadRefused:
        return UploadRefused(413, "image_too_large", (
            f"{label} is over the limit of {self.image_bytes:,} bytes per image ([images] "
            "max_size_bytes); send a smaller image (a PNG screenshot scaled down, or a JPEG)"))


async def read_message(request: Request, *, settings: Settings, limits: ImageLimits,
                       stored_images: int = 0, budget: BodyBudget | None = None,
                       doc: dict | None = None) -> Incoming:
    """The message in ``request``'s body with its images checked and fitted to ``limits``,
    or ``UploadRefused`` (see the module docstring); ``stored_images``: images the session
    holds already; ``budget``: the memory a JSON body may be read into, held until its
    images are checked; ``doc``: the message's JSON already read (the body is then not).
    Nothing is returned until every image is good."""
    images_settings = settings.images
    caps = _Caps(images_settings.max_per_message,
                 images_settings.max_per_session - stored_images, stored_images,
                 images_settings.max_per_session, images_settings.max_size_bytes)
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    sent: list[_Sent] = []
    held = contextlib.AsyncExitStack()
    try:
        if doc is not None:
            text, workspace = _fields(doc, caps, sent)
        elif kind == b"application/json":
            doc = await held.enter_async_context(json_body(
                request, cap=json_cap(images_settings), budget=budget, example=_JSON_EXAMPLE))
            text, workspace = _fields(doc, caps, sent)
        elif kind == b"multipart/form-data":
            boundary = options.get(b"boundary")
            if not boundary:
                raise UploadRefused(400, "invalid_multipart", (
                    "the multipart/form-data body has no boundary in its Content-Type; let "
                    "your HTTP library build the form"))
            text, workspace = await _read_multipart(request, boundary, caps, sent)
        else:
            shown = safe_text(kind.decode("latin-1")) or "no Content-Type"
            raise UploadRefused(415, "unsupported_media_type", (
                f"a message is sent as application/json or multipart/form-data, not {shown}"))
        if text is None:
            raise UploadRefused(400, "missing_message", (
                'the "message" field is missing; send the text (it may be empty when you '
                "send images)"))
        if not text.strip() and not sent:
            raise UploadRefused(400, "empty_message", (
                "the message is empty and has no images; write something or attach an image"))
        images = [await _prepare(item, settings, limits, caps) for item in sent]
    finally:
        for item in sent:
            item.close()
        await held.aclose()
    return Incoming(text, images, workspace)


# -- JSON ---------------------------------------------------------------------------------


def json_cap(images: Any) -> int:
    """Most bytes of a JSON message body: ``max_per_message`` base64 images of
    ``max_size_bytes`` (``images``: the ``[images]`` settings), the text, some slack."""
    return images.max_per_message * (4 * -(-images.max_size_bytes // 3) + _PER_IMAGE) \
        + 6 * MAX_TEXT_BYTES + _SLACK  # \uXXXX escapes: up to 6 bytes a character


@contextlib.asynccontextmanager
async def json_body(request: Request, *, cap: int, budget: BodyBudget | None,
                    example: str) -> AsyncIterator[dict]:
    """The JSON object of ``request``'s body, for the ``async with`` block: read up to
    ``cap`` bytes into a temporary file (a body cut off at the cap never sat in memory),
    parsed within ``budget``, held until the block ends. ``UploadRefused`` otherwise (413
    ``body_too_large``, 400 malformed, the budget's 413 / 503)."""
    with tempfile.SpooledTemporaryFile(_SPOOL_IN_MEMORY) as body:
        async with aclosing(_body(request, cap)) as chunks:
            async for chunk in chunks:
                body.write(chunk)
        with contextlib.ExitStack() as held:
            if budget is not None:  # read back, parsed and held as text until the end
                try:
                    held.enter_context(budget.hold(body.tell()))
                except ApiError as exc:
                    raise UploadRefused(exc.status, exc.code, exc.message) from None
            try:
                doc = await asyncio.to_thread(_parse_json, body, example)
            except ApiError as exc:
                raise UploadRefused(exc.status, exc.code, exc.message) from None
            yield doc


def _fields(doc: dict, caps: _Caps, sent: list[_Sent]) -> tuple[str | None, str | None]:
    """A JSON message's text and workspace; its images added to ``sent``, unchecked."""
    for key in doc:
        if key not in _JSON_KEYS:
            raise _unknown(key, "message, images and workspace")
    text = _text(doc.get("message"), "message") if "message" in doc else None
    workspace = _text(doc.get("workspace"), "workspace", optional=True)
    images = doc.get("images")
    if images is None:
        images = []
    if not isinstance(images, list):
        raise UploadRefused(400, "invalid_field", (
            '"images" must be a list of {"data": base64, "mime"?, "name"?} or {"url": ...}'))
    for index, item in enumerate(images, 1):
        caps.count(index)
        sent.append(_json_image(item, index, caps))
    return text, workspace


def _parse_json(body: IO[bytes], example: str) -> dict:
    body.seek(0)
    return json_object(body.read(), example=example)


def _json_image(item: Any, index: int, caps: _Caps) -> _Sent:
    where = f"images[{index - 1}]"
    if not isinstance(item, dict):
        raise UploadRefused(400, "invalid_field", (
            f'{where} must be an object: {{"data": base64, "mime"?, "name"?}} or '
            '{"url": "https://..."}'))
    keys = _URL_KEYS if "url" in item else _DATA_KEYS
    for key in item:
        if key not in keys:
            if key in _DATA_KEYS | _URL_KEYS:
                raise UploadRefused(400, "invalid_field", (
                    f'{where} has both "url" and "{safe_text(str(key))}"; an image is either '
                    '{"data": base64, ...} or {"url": ...}'))
            raise _unknown(f"{where}.{key}", ", ".join(sorted(keys)))
    name = _text(item.get("name"), f"{where}.name", optional=True)
    if "url" in item:
        url = _text(item["url"], f"{where}.url")
        return _Sent(index, name, url=url)
    if "data" not in item:
        raise UploadRefused(400, "invalid_field", (
            f'{where} has no "data" (the image, base64-encoded) and no "url"'))
    data = item["data"]
    if not isinstance(data, str):
        raise UploadRefused(400, "invalid_field", f'{where}.data must be a base64 string')
    declared = _text(item.get("mime"), f"{where}.mime", optional=True)
    declared, data = data_url(data, declared, _Sent(index, name).label, f"{where}.mime")
    sent = _Sent(index, name, declared, base64=data)
    if len(data) * 3 // 4 - data.count("=", -2) > caps.image_bytes:
        raise caps.too_large(sent.label)
    return sent


def data_url(data: str, declared: str | None, label: str, where: str) -> tuple[str | None, str]:
    """The type and base64 of an image sent as ``data`` (a ``data:`` URL, or bare base64) with
    ``declared`` (the sender's type, or None): the type is ``declared`` or else the URL's.
    ``UploadRefused`` 422 when the two name different types: every route that takes a
    ``data:`` URL (the message body's ``images``, the AI SDK's ``file`` parts) reads it here."""
    header = _DATA_URL.match(data[:512])
    if not header:
        return declared, data
    said = header.group(1) or None
    if declared and said and normalize_media_type(said) != normalize_media_type(declared):
        raise UploadRefused(422, "invalid_image", (
            f"{label}: {where} says {safe_text(declared)[:60]!r} but its data: URL says "
            f"{safe_text(said)[:60]!r}; send the file's real type in both"))
    return declared or said, data[header.end():]


def _text(value: Any, where: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise UploadRefused(400, "invalid_field", f'"{where}" must be a string')
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise UploadRefused(400, "invalid_text", (
            f'"{where}" holds a lone surrogate (\\ud800-\\udfff), which is not text; send '
            "valid UTF-8")) from None
    if size > MAX_TEXT_BYTES:
        raise UploadRefused(413, "message_too_large", (
            f'"{where}" is {size:,} bytes, over the limit of {MAX_TEXT_BYTES:,}; send less '
            "text, or put it in a file the tools can read"))
    return value


def _unknown(name: str, known: str) -> UploadRefused:
    shown = safe_text(str(name))[:100]
    hint = ' (files go in "images[]")' if name == "images" else ""
    return UploadRefused(400, "unknown_field", (
        f'unknown field "{shown}"{hint}; a message has {known}'))


# -- multipart ----------------------------------------------------------------------------


class _Form:
    """python-multipart's callbacks: fields and image parts, with the caps applied as
    bytes arrive."""

    def __init__(self, caps: _Caps, sent: list[_Sent]) -> None:
        self.caps, self.sent = caps, sent
        self.texts: dict[str, bytearray] = {}
        self.headers: dict[str, str] = {}
        self.header_field = bytearray()
        self.header_value = bytearray()
        self.text: bytearray | None = None  # the text field being read
        self.text_name = ""
        self.image: _Sent | None = None  # the image part being read
        self.ended = False

    def callbacks(self) -> dict[str, Any]:
        return {"on_part_begin": self.part_begin, "on_header_field": self.field_data,
                "on_header_value": self.value_data, "on_header_end": self.header_end,
                "on_headers_finished": self.headers_finished, "on_part_data": self.part_data,
                "on_part_end": self.part_end, "on_end": self.end}

    def part_begin(self) -> None:
        self.headers = {}
        self.text = self.image = None

    def field_data(self, data: bytes, start: int, end: int) -> None:
        self.header_field += data[start:end]

    def value_data(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def header_end(self) -> None:
        name = self.header_field.decode("latin-1").strip().lower()
        self.headers[name] = self.header_value.decode("latin-1").strip()
        self.header_field, self.header_value = bytearray(), bytearray()

    def headers_finished(self) -> None:
        disposition, options = parse_options_header(self.headers.get("content-disposition"))
        if disposition != b"form-data" or b"name" not in options:
            raise UploadRefused(400, "invalid_multipart", (
                'a part has no Content-Disposition: form-data; name="..."; let your HTTP '
                "library build the form"))
        name = _header_text(options[b"name"])
        if name == "images[]":
            index = len(self.sent) + 1
            self.caps.count(index)
            filename = options.get(b"filename")
            declared = self.headers.get("content-type")
            spool = tempfile.SpooledTemporaryFile(_SPOOL_IN_MEMORY)  # noqa: SIM115 (closed by read_message)
            self.image = _Sent(index, _header_text(filename) if filename else None,
                               declared or None, file=spool)
            self.sent.append(self.image)
        elif name in FIELDS:
            if name in self.texts:
                raise UploadRefused(400, "duplicate_field", (
                    f'the field "{name}" is sent twice; send it once'))
            self.text = self.texts[name] = bytearray()
            self.text_name = name
        else:
            raise _unknown(name, "message, images[] (files) and workspace")

    def part_data(self, data: bytes, start: int, end: int) -> None:
        size = end - start
        if self.image is not None:
            if self.image.size + size > self.caps.image_bytes:
                raise self.caps.too_large(self.image.label)
            assert self.image.file is not None
            self.image.file.write(data[start:end])
            self.image.size += size
        elif self.text is not None:
            if len(self.text) + size > MAX_TEXT_BYTES:
                raise UploadRefused(413, "message_too_large", (
                    f'"{self.text_name}" is over the limit of {MAX_TEXT_BYTES:,} bytes; send '
                    "less text, or put it in a file the tools can read"))
            self.text += data[start:end]

    def part_end(self) -> None:
        if self.image is not None and self.image.file is not None:
            self.image.file.seek(0)
        self.text = self.image = None

    def end(self) -> None:
        self.ended = True

    def field(self, name: str) -> str | None:
        raw = self.texts.get(name)
        if raw is None:
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UploadRefused(400, "invalid_text", (
                f'the field "{name}" is not valid UTF-8 text; send it encoded as UTF-8'
            )) from None
        return text


def _header_text(raw: bytes) -> str:
    """A part's name or file name: browsers send UTF-8 there, others Latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


async def _read_multipart(request: Request, boundary: bytes, caps: _Caps,
                          sent: list[_Sent]) -> tuple[str | None, str | None]:
    cap = caps.per_message * (caps.image_bytes + _PER_IMAGE) + 2 * MAX_TEXT_BYTES + _SLACK
    form = _Form(caps, sent)
    try:
        parser = MultipartParser(boundary, cast("MultipartCallbacks", form.callbacks()))
        async with aclosing(_body(request, cap)) as chunks:
            async for chunk in chunks:
                parser.write(chunk)
    except FormParserError as exc:
        raise UploadRefused(400, "invalid_multipart", (
            f"the multipart/form-data body is malformed ({safe_text(str(exc))}); let your "
            "HTTP library build the form")) from None
    if not form.ended:
        raise UploadRefused(400, "invalid_multipart", (
            "the multipart/form-data body ended before its closing boundary; send the whole "
            "form"))
    return form.field("message"), form.field("workspace")


async def _body(request: Request, cap: int) -> AsyncGenerator[bytes, None]:
    """The body's chunks as they arrive; ``UploadRefused`` (413) once it passes ``cap``."""
    refused = UploadRefused(413, "body_too_large", (
        f"the body is over {cap:,} bytes, more than a message with the most and largest "
        "images allowed ([images] max_per_message, max_size_bytes) can take; send fewer or "
        "smaller images"))
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise refused
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > cap:
            raise refused
        if chunk:
            yield chunk


# -- checking the images ------------------------------------------------------------------


_LIMITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = \
    weakref.WeakKeyDictionary()


def _limiter() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = asyncio.Semaphore(PREPARE_AT_ONCE)
    return limiter


async def _prepare(item: _Sent, settings: Settings, limits: ImageLimits,
                   caps: _Caps) -> ImageBlock:
    name, declared = item.name or f"image {item.index}", item.declared
    data: bytes | None = None
    if item.url is not None:
        try:
            fetched = await fetch_image(item.url, max_bytes=caps.image_bytes,
                                        timeout=settings.serve.fetch_timeout,
                                        allow_private=settings.serve.fetch_private)
        except FetchError as exc:
            status, code = {"too_large": (413, "image_too_large"),
                            "refused": (422, "image_url_refused")}.get(
                                exc.reason, (422, "image_fetch_failed"))
            raise UploadRefused(status, code, f"image {item.index}: {exc}") from None
        data, declared = fetched.data, declared or fetched.mime
        name = item.name or fetched.name
    async with _limiter():
        return await asyncio.to_thread(_check, item, data, name, declared, limits, caps)


def _check(item: _Sent, data: bytes | None, name: str, declared: str | None,
           limits: ImageLimits, caps: _Caps) -> ImageBlock:
    """Off the event loop: the image's bytes, checked and fitted."""
    if data is None:
        data = _decode(item) if item.base64 is not None else _read(item)
    try:
        return prepare_upload(data, name=name, declared=declared, limits=limits,
                              max_bytes=caps.image_bytes, label=item.label)
    except ImageRefused as exc:
        status = 413 if exc.code == "image_too_large" else 422
        raise UploadRefused(status, exc.code, str(exc)) from None


def _read(item: _Sent) -> bytes:
    assert item.file is not None
    item.file.seek(0)
    return item.file.read()


def _decode(item: _Sent) -> bytes:
    text = item.base64 or ""
    if _SPACE.search(text):  # base64 wrapped in lines
        text = "".join(text.split())
    try:
        return pybase64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise UploadRefused(400, "invalid_base64", (
            f"{item.label}: its data is not valid base64 ({safe_text(str(exc))}); send the "
            "image's bytes base64-encoded")) from None
