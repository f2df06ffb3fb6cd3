"""``ProviderError`` messages shared by the built-in providers: what failed, what to do; and
the bounds every reply is read within.

Each message function returns (does not raise) a ``ProviderError`` so callers write
``raise http_error(...) from exc`` and keep the original cause attached.

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
    unreachable_fix: str = ""


def _retries(ep: Endpoint) -> str:
    attempts = ep.retries + 1
    return "1 attempt" if attempts == 1 else f"{attempts} attempts"


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
    """An HTTP error status from the API, after any retries, as a message a user can act on."""
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


def stream_error(ep: Endpoint, detail: str) -> ProviderError:
    """The API began its reply, then sent an error in the stream (overloaded, say)."""
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
