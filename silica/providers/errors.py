"""``ProviderError`` messages shared by the built-in providers: what failed, what to do; and
the bounds every reply is read within.

Each message function returns (does not raise) a ``ProviderError`` so callers write
``raise http_error(...) from exc`` and keep the original cause attached.

Image problems: an error status whose text names an image (``image_refusal``) becomes a
``ProviderError`` whose ``image_problem`` is ``no_images`` (the model takes none),
``too_large``, ``too_many`` or ``invalid`` (``refused``), with a message saying what to
change. The wordings are those of the Anthropic, OpenAI, Ollama and Gemini APIs and of
OpenAI-compatible servers (``unknown variant `image_url`, expected `text```, ``... is not a
multimodal model``, ``At most 1 image(s) may be provided in one request``); Ollama's
come as a status or inside its stream (``this model is missing data required for image
input``).
``silica.providers.vision`` retries a request refused with ``no_images`` once with text in
place of its images; the others are never retried.

Bounds (``ReplyBounds``, attributes of each built-in provider): a reply must end within
``deadline`` seconds of the request (retries included), no line of it (an NDJSON line; in a
server-sent-event stream, an event) may pass ``max_line`` bytes, and all of it ``max_reply``
bytes. They are checked on the decoded bytes as they arrive (``bounded_hooks``), before the
SDK or silica buffers or parses them, so a server that never ends a line, trickles, or
answers without end costs bounded memory and time and ends in one ``ProviderError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from silica.providers.base import ProviderError
from silica.words import counted

MIB = 1024 * 1024
_DETAIL = 300  # characters of a server's text quoted in a message
_PIECE = 64 * 1024  # bytes handed on at a time: a larger decoded chunk is split first
_EVENT_LINES = 1000  # lines in one server-sent event (SDKs join an event's lines quadratically)
_EVENT_ENDS = re.compile(rb"\r\n\r\n|\n\n|\r\r")  # a blank line ends a server-sent event
_LINE_ENDS = re.compile(rb"\n")


class ReplyBounds:
    """The bounds on one reply, as attributes a caller may change on a provider.

    ``deadline``: seconds from sending the request to the end of the reply, retries
    included (``None``: none). ``max_line``: bytes in one line of a streamed reply (an NDJSON
    line, or one server-sent event). ``max_reply``: bytes in the whole reply body.
    """

    deadline: float | None = 3600.0
    max_line: int = 8 * MIB
    max_reply: int = 128 * MIB


class ReplyTooLarge(Exception):
    """Raised inside a reply's byte stream when it passes a bound; a provider turns it into
    ``too_large(ep, exc)``."""

    def __init__(self, what: str, limit: int, attribute: str) -> None:
        super().__init__(f"{what} longer than {_size(limit)}")
        self.what, self.limit, self.attribute = what, limit, attribute


@dataclass(frozen=True)
class Endpoint:
    """Who was called, for messages: ``label`` ("Anthropic"), where, and which env vars."""

    label: str  # "Anthropic", "OpenAI", "Ollama"
    api: str  # the protocol, for "check that it speaks the ... API"
    base_url: str
    model: str
    key_var: str | None = None  # None: the API takes no key (Ollama)
    url_var: str | None = None
    retries: int = 2
    missing_model_fix: str = "choose another with --model or SILICA_MODEL"
    missing_route_fix: str = ""  # what to do when the server has no route for the API
    unreachable_fix: str = ""


def _retries(ep: Endpoint) -> str:
    return counted(ep.retries + 1, "attempt")


def api_message(body: object) -> str:
    """The API's own error text from a decoded or raw error body, whatever its shape."""
    if isinstance(body, bytes | str):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            body = json.loads(text)
        except ValueError:
            return text.strip()[:500]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("type") or err)[:500]
        if err is not None and err is not body:
            return str(err)[:500]
        if "message" in body:
            return str(body["message"])[:500]
    return "" if body is None else str(body)[:500]


def http_error(ep: Endpoint, status: int, detail: str) -> ProviderError:
    """An HTTP error status from the API, after any retries, as a message a user can act on
    (``refused`` when its text names an image problem, see ``image_refusal``)."""
    kind = _image_status(status, detail)
    if kind:
        return refused(ep, kind, detail, f"HTTP {status}")
    said = f": {detail}" if detail else ""
    if status == 400:
        return ProviderError(
            f"{ep.label} rejected the request for model {ep.model!r} (HTTP 400){said}. "
            "If this names an image, that image was not accepted; since the history is re-sent "
            "every turn, start a new session or drop the image.")
    if status in (401, 403):
        fix = (f"check that {ep.key_var} holds a valid key with access to this model"
               if ep.key_var else f"check the server at {ep.base_url} allows this client")
        return ProviderError(f"{ep.label} refused the credentials (HTTP {status}){said}; {fix}.")
    if status == 404 and "model" not in detail.lower():  # the route, not the model
        fix = ep.missing_route_fix or (f"check the address in {ep.url_var}" if ep.url_var
                                       else f"check the server at {ep.base_url}")
        return ProviderError(f"{ep.label} at {ep.base_url} does not serve the {ep.api} API "
                             f"(HTTP 404){said}; {fix}.")
    if status == 404:
        return ProviderError(f"{ep.label} at {ep.base_url} has no model {ep.model!r} "
                             f"(HTTP 404){said}; {ep.missing_model_fix}.")
    if status == 413:
        return ProviderError(
            f"{ep.label} says the request is too large (HTTP 413){said}; fewer or smaller "
            "images (see [images] in config.toml) or a shorter history will fit.")
    if status == 429:
        return ProviderError(
            f"{ep.label} is rate limiting requests (HTTP 429){said}; still limited after "
            f"{_retries(ep)}. Wait a minute and try again, or raise the account's limits.")
    if status >= 500:
        return ProviderError(
            f"{ep.label} had a server error (HTTP {status}){said}; it persisted after "
            f"{_retries(ep)}. Try again later.")
    if status < 400:  # an error event inside a reply that had begun with HTTP 200
        return stream_error(ep, detail)
    return ProviderError(f"{ep.label} answered HTTP {status}{said}.")


# -- errors that name an image ----------------------------------------------------------

IMAGE_PROBLEMS = ("no_images", "too_large", "too_many", "invalid")
"""The values of ``ProviderError.image_problem``."""

_IMAGE = r"(image|input_image|image_url|multimodal|vision)"
_IMAGE_PART = r".?(image_url|input_image).?"  # an image's part type, as a wire format names it
# Tried in order, first match wins. "Too many" comes first (its wordings also hold "exceed");
# "takes no images" is matched narrowly, as the model's own statement: a vision model
# refusing one image's format must not be recorded as a model without vision.
_REFUSALS: list[tuple[str, re.Pattern[str]]] = [
    ("too_many", re.compile(
        r"too many images|too much media|at most \d+ images?|\d+ images?,? exceed"
        r"|exceeds? (the )?(maximum|limit) (of \d+ )?images|maximum (number of )?images"
        r"|images? per (request|prompt)|image count \d+ exceeds|passed \d+ image items"
        r"|number of images|only supports? (one|\d+) images?", re.I)),
    ("no_images", re.compile(
        r"(image|vision|multimodal)( input| inputs| content)?( modality)? (is |are )?"
        r"not (supported|enabled)"
        r"|(does not|doesn't|do not|don't|cannot|can't) (support|accept|take|handle) "
        r"(images?|image inputs?|vision|multimodal( inputs?)?)"
        r"(?![\w/-]| (format|type|size|mime|media|of|with|larger|bigger|over))"
        rf"|{_IMAGE_PART} is only supported by|{_IMAGE_PART} is not one of"
        rf"|(unknown variant|invalid value:?) {_IMAGE_PART}"
        r"|only supports? text|not a multimodal model|missing data required for image", re.I)),
    ("too_large", re.compile(
        rf"{_IMAGE}.{{0,120}}(too large|too long|too big|exceeds?|maximum (size|length)"
        r"|max size|larger than)|(too large|exceeds?).{0,40}image"
        r"|payload size exceeds", re.I)),
    ("invalid", re.compile(
        rf"invalid {_IMAGE}|{_IMAGE}.{{0,60}}(invalid|not valid|not supported|corrupt"
        r"|could not be|cannot be|failed to|unsupported|unable to)|(could not|unable to|failed to) "
        rf"(process|decode|read|parse|load) (the |an? |input )?{_IMAGE}"
        r"|not (represent|appear to be) a valid|unsupported (image|mime type)"
        r"|cannot identify image file|illegal base64 data|appears to be an? image/"
        r"|image: unknown format", re.I)),
]
_LIMIT = re.compile(r"(?:max(?:imum)?(?: number)?(?: of)?(?: is)?|at most|limit(?: of| is)?"
                    r"|> ?)\s*:?\s*(\d+)", re.I)


def image_refusal(detail: str) -> str | None:
    """Which image problem an error's text names (one of ``IMAGE_PROBLEMS``); ``None``
    when it names none."""
    detail = detail[:2000]  # the API's words come first; a long body is not searched whole
    for kind, pattern in _REFUSALS:
        if pattern.search(detail):
            return kind
    return None


def _image_status(status: int, detail: str) -> str | None:
    """The image problem an HTTP error names: for 400, 413, 422 and server errors (Ollama
    answers a model without vision, or an image it cannot decode, with a 500)."""
    return image_refusal(detail) if status in (400, 413, 422) or status >= 500 else None


def refused(ep: Endpoint, kind: str, detail: str, where: str = "HTTP 400") -> ProviderError:
    """The ``ProviderError`` for an image problem of ``kind`` (see ``image_refusal``); its
    ``image_problem`` attribute is ``kind``, for a caller that acts on it."""
    detail = detail.strip()[:500].rstrip(".")
    said = f"{ep.label} ({where}): {detail}"
    fresh = ("The history is re-sent every turn, so start a new session after the change "
             "(a resumed one still holds the image).")
    if kind == "no_images":
        error = ProviderError(
            f"model {ep.model!r} takes no images: {said}. Set `vision = false` in "
            "config.toml (or SILICA_VISION=false) to send it a text line in place of each "
            "image, or choose a model that sees images with --model.")
    elif kind == "too_large":
        error = ProviderError(
            f"an image was too large for {ep.model!r}: {said}. Lower `max_base64_bytes` or "
            f"`target_long_side` under [images] in config.toml so images are fitted smaller. "
            f"{fresh}")
    elif kind == "too_many":
        found = _LIMIT.search(detail)
        cap = f" to {found.group(1)} or fewer" if found else ""
        error = ProviderError(
            f"the request held too many images for {ep.model!r}: {said}. Set "
            f"`max_images_per_request`{cap} under [images] in config.toml: older images are "
            "then sent as text lines.")
    else:
        error = ProviderError(
            f"{ep.label} could not read an image sent to {ep.model!r} ({where}): {detail}. "
            "silica checks every image before it is sent, so this API may not take that kind "
            f"of image; send it as PNG or JPEG. {fresh}")
    error.image_problem = kind  # type: ignore[attr-defined]
    return error


def stream_error(ep: Endpoint, detail: str) -> ProviderError:
    """The API began its reply, then sent an error in the stream (overloaded, say; or, as
    Ollama does, an image problem: then ``refused``)."""
    kind = image_refusal(detail)
    if kind:
        return refused(ep, kind, detail, "in its reply")
    said = f": {detail}" if detail else ""
    return ProviderError(f"{ep.label} broke off its reply to {ep.model!r} with an error{said}; "
                         "try again.")


def connection_error(ep: Endpoint, exc: BaseException, *,
                     mid_stream: bool = False) -> ProviderError:
    """The connection failed (``mid_stream``: after the reply had started)."""
    where = f"{ep.label} at {ep.base_url}"
    fix = f"; check the address ({ep.url_var})" if ep.url_var else ""
    fix += ep.unreachable_fix
    reason = str(exc) or type(exc).__name__
    if mid_stream:
        return ProviderError(
            f"the connection to {where} dropped before the reply was complete ({reason}); "
            "try again.")
    return ProviderError(
        f"cannot reach {where} ({reason}) after {_retries(ep)}{fix}.")


def response_error(ep: Endpoint, detail: str) -> ProviderError:
    """The API answered, but not in a shape silica can read (``detail`` is cut short)."""
    if len(detail) > _DETAIL:
        detail = detail[:_DETAIL] + "..."
    return ProviderError(
        f"{ep.label} at {ep.base_url} sent a reply silica cannot read ({detail}). If this "
        f"address is a proxy or a compatible server, check that it speaks the {ep.api} API.")


def too_deep(ep: Endpoint) -> ProviderError:
    """The reply held JSON nested deeper than Python can parse (``RecursionError``)."""
    return response_error(ep, "JSON nested too deeply to parse")


def too_large(ep: Endpoint, exc: ReplyTooLarge) -> ProviderError:
    """A reply passed ``max_line`` or ``max_reply``; silica stopped reading it."""
    return ProviderError(
        f"{ep.label} at {ep.base_url} sent a reply with {exc.what} longer than "
        f"{_size(exc.limit)}; silica stopped reading it. Try again; if it keeps happening, check "
        f"that the address speaks the {ep.api} API (a legitimate reply that large needs a "
        f"higher `{exc.attribute}` on the provider).")


def deadline_error(ep: Endpoint, deadline: float) -> ProviderError:
    """The reply did not end within the provider's ``deadline``."""
    return ProviderError(
        f"{ep.label} at {ep.base_url} did not finish its reply to {ep.model!r} within "
        f"{deadline:g} s; silica gave up on it. Try again, or ask for a shorter answer; a "
        "slow server (a local model on a CPU) may need a higher `deadline` on the provider.")


@contextlib.asynccontextmanager
async def within_deadline(ep: Endpoint, deadline: float | None) -> AsyncIterator[None]:
    """Run the block within ``deadline`` seconds (``None``: no limit); past it, the block is
    cancelled and ``deadline_error`` is raised."""
    limit = asyncio.timeout(deadline)
    try:
        async with limit:
            yield
    except TimeoutError as exc:
        if limit.expired():
            raise deadline_error(ep, deadline or 0.0) from exc
        raise


def bounded_hooks(bounds: ReplyBounds) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    """``event_hooks`` for an ``httpx2`` client whose responses are read within ``bounds``:
    reading a response's decoded bytes (what ``aiter_bytes``, ``aiter_lines`` and ``aread``
    give, hence every SDK) raises ``ReplyTooLarge`` before a piece past a bound is handed on.
    """
    max_line, max_reply = bounds.max_line, bounds.max_reply

    async def bound(response: Any) -> None:
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        original = response.aiter_bytes

        async def aiter_bytes(chunk_size: int | None = None) -> AsyncIterator[bytes]:
            meter = _Meter(max_line, max_reply, events)
            async with contextlib.aclosing(original(chunk_size)) as parts:
                async for part in parts:
                    for start in range(0, len(part), _PIECE):
                        piece = part[start:start + _PIECE]
                        meter.add(piece)
                        yield piece

        response.aiter_bytes = aiter_bytes  # this response only; see the docstring

    return {"response": [bound]}


class _Meter:
    """Counts a reply's bytes, and those (and the line breaks) of each line or event."""

    def __init__(self, max_line: int, max_reply: int, events: bool) -> None:
        self.max_line, self.max_reply, self.events = max_line, max_reply, events
        self.ends = _EVENT_ENDS if events else _LINE_ENDS
        self.total = 0
        self.current = self.breaks = 0  # of the line or event not yet ended
        self.tail = b""  # the end of the previous piece: an event end may straddle two

    def add(self, piece: bytes) -> None:
        self.total += len(piece)
        if self.total > self.max_reply:
            raise ReplyTooLarge("a body", self.max_reply, "max_reply")
        text = self.tail + piece
        known = len(self.tail)  # text[:known] was counted with the previous piece
        begin = known - self.current  # where the unended line began (before text: < 0)
        breaks = self.breaks
        for end in self.ends.finditer(text):
            if end.end() <= known:
                continue  # an end already seen with the previous piece
            self._check(end.start() - begin, breaks + _breaks(text, max(begin, known),
                                                              end.start()))
            begin, breaks = end.end(), 0
        self.breaks = breaks + _breaks(text, max(begin, known), len(text))
        self.current = len(text) - begin
        self.tail = text[-3:]
        self._check(self.current, self.breaks)

    def _check(self, size: int, breaks: int) -> None:
        if size > self.max_line:
            raise ReplyTooLarge("an event" if self.events else "a line", self.max_line,
                                "max_line")
        if self.events and breaks > _EVENT_LINES:
            raise ReplyTooLarge(f"an event of more than {_EVENT_LINES} lines, or one",
                                self.max_line, "max_line")


def _breaks(text: bytes, start: int, end: int) -> int:
    return text.count(b"\n", start, end) + text.count(b"\r", start, end)


def _size(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB and n % (MIB // 16) == 0 else f"{n} bytes"
