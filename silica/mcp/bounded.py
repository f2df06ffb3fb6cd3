"""What silica reads of one message from a stdio MCP server: bounded, whatever the server sends.

The SDK reads a message whole (one line of JSON) and then parses all of it: a server that
lists 100,000 tools in one answer, or sends a gigabyte in one line, costs that much memory
before any limit of silica's applies. So the server's stdout reaches the SDK through
``BoundedLines``, which hands over whole lines only and holds at most ``MAX_MESSAGE`` bytes
of one:

- a line of up to ``PAGE_BYTES`` passes as it is;
- a longer answer to ``tools/list`` is cut: its first ``MAX_TOOLS`` tools (read from its
  first ``PAGE_HOLD`` bytes at most) are passed on in a page of their own, without its
  ``nextCursor`` and with ``_meta["silica/cut"]`` saying what was left out (``cut_note``);
  the rest of the line is skipped unread;
- any line longer than ``MAX_MESSAGE`` is refused: it becomes an error answer to its
  request, and the rest of it is skipped unread;
- an answer to a ``resources/read`` of an MCP App (a ``ui://`` URI, seen going out by
  ``RequestWatch``) is refused the same way once it is longer than ``APP_ANSWER_MAX``,
  when its ``id`` comes at its start (the error's ``data`` is ``TOO_LARGE``).

The ``id`` of a cut or refused answer is read from its start, or, when it comes after the
result, from the last ``TAIL`` bytes of the line (``id_in_tail``); an answer whose ``id``
is in neither is dropped, and its request runs into its timeout.

Only the start of a long line is ever parsed (``page_prefix``), with ``json``'s decoder one
value at a time; the rest is searched for its newline only.

Over streamable HTTP, an answer in a JSON body goes through ``BoundedBody``, with the same
bounds (a long tools page is cut and the rest of the body is not read; past
``MAX_MESSAGE`` the SDK gets a stream error, which it answers the request with). Answers in
server-sent events are bounded by the SDK itself (1 MiB an event, on both HTTP transports).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_TOOLS = 1000  # tools taken from one server; more would drown the model's context
PAGE_BYTES = 1024 * 1024  # a line up to this size is passed on as it is
PAGE_HOLD = 4 * 1024 * 1024  # what is read of a long tools/list answer to cut it
MAX_MESSAGE = 64 * 1024 * 1024  # the most silica holds of one message (as a tool's stdout)
CUT_KEY = "silica/cut"
APP_ANSWER_MAX = 8 * 1024 * 1024  # an MCP App's HTML (silica.mcp.apps: 4 MiB) as JSON, escaped
TOO_LARGE = {"silica": "answer_too_large"}  # the data of the error an app read is refused with
_WATCHED = 64  # app reads awaiting their answer on one connection, at most
_READ = 64 * 1024
# A tools/list result's fields that the 2026-07-28 wire requires, at their safest values
# (never cached, private, complete): a cut page whose own came after its tools gets these.
_REQUIRED = {"ttlMs": 0, "cacheScope": "private", "resultType": "complete"}
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


@dataclass
class Prefix:
    """What the start of one JSON-RPC message says (``page_prefix``)."""

    id: Any = None
    has_id: bool = False
    tools: list[Any] | None = None
    """The tools of a ``result.tools`` array decoded so far (``None``: not a tools page)."""
    more: bool = False
    """Whether the array went on past ``tools`` (or past ``limit`` of them)."""
    extra: dict[str, Any] = field(default_factory=dict)


class _Short(Exception):
    """The prefix ended (or broke) before the value being read."""


def page_prefix(text: str, limit: int | None = None) -> Prefix:
    """Read the start of a JSON-RPC message: its ``id`` and, when it answers with
    ``result.tools``, up to ``limit`` (default ``MAX_TOOLS + 1``) of those tools. ``text``
    may stop anywhere (or be no JSON at all): what could not be read is left out, never
    guessed."""
    limit = MAX_TOOLS + 1 if limit is None else limit
    found = Prefix()
    with contextlib.suppress(_Short):
        pos = _open(text, 0, "{")
        while (step := _key(text, pos)) is not None:
            key, pos = step
            if key == "result" and text.startswith("{", pos):
                pos = pos + 1
                while (inner := _key(text, pos)) is not None:
                    name, pos = inner
                    if name == "tools" and text.startswith("[", pos):
                        found.tools = []
                        pos = _items(text, pos + 1, found, limit)
                    else:
                        found.extra[name], pos = _value(text, pos)
                    pos = _after(text, pos, "}")
                pos = _open(text, pos, "}")
            else:
                value, pos = _value(text, pos)
                if key == "id":
                    found.id, found.has_id = value, True
            pos = _after(text, pos, "}")
    return found


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]


def _open(text: str, pos: int, char: str) -> int:
    pos = _skip_space(text, pos)
    if not text.startswith(char, pos):
        raise _Short
    return pos + 1


def _key(text: str, pos: int) -> tuple[str, int] | None:
    """The next key of an object (``pos`` is after its ``{`` or a ``,``) and where its value
    starts; ``None`` at the object's ``}``."""
    pos = _skip_space(text, pos)
    if text.startswith("}", pos):
        return None
    key, pos = _value(text, pos)
    if not isinstance(key, str):
        raise _Short
    return key, _skip_space(text, _open(text, pos, ":"))


def _after(text: str, pos: int, close: str) -> int:
    """Past the ``,`` after a member; at the ``close`` that ends its container, stays."""
    pos = _skip_space(text, pos)
    if text.startswith(close, pos):
        return pos
    return _open(text, pos, ",")


def _value(text: str, pos: int) -> tuple[Any, int]:
    pos = _skip_space(text, pos)
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        raise _Short from None
    if end >= len(text):  # a number may go on past the text ("1" of "10"): unknown yet
        raise _Short
    return value, end


def _items(text: str, pos: int, found: Prefix, limit: int) -> int:
    """Decode the array's items into ``found.tools``; the position after its ``]``."""
    tools = found.tools
    assert tools is not None
    pos = _skip_space(text, pos)
    while not text.startswith("]", pos):
        if len(tools) >= limit:
            found.more = True
            raise _Short
        try:
            item, pos = _value(text, pos)
        except _Short:
            found.more = True  # the array goes on past what was read
            raise
        tools.append(item)
        pos = _skip_space(text, _after(text, pos, "]"))
    return pos + 1


TAIL = 4096  # the end of a skipped line kept, to find an ``id`` that comes after the tools
_ID_KEY = re.compile(r'[,{][ \t\n\r]*"id"[ \t\n\r]*:')


def id_in_tail(tail: str) -> tuple[bool, Any]:
    """``(True, id)`` when ``tail``, the end of one JSON object, holds that object's own
    ``"id"`` member; ``(False, None)`` otherwise. A candidate is taken only when everything
    from it to the end reads as one object, which a member of a nested object never does."""
    for match in reversed(list(_ID_KEY.finditer(tail))):
        try:
            rest = json.loads("{" + tail[match.start() + 1:])
        except (ValueError, RecursionError):
            continue
        if isinstance(rest, dict) and "id" in rest:
            return True, rest["id"]
    return False, None


def cut_page(prefix: Prefix) -> dict[str, Any] | None:
    """The page to pass on in place of a long ``tools/list`` answer (``None`` when it is
    none); ``finish`` puts in the answer's size, and its ``id`` when it came after the
    tools."""
    if prefix.tools is None:
        return None
    kept = prefix.tools[:MAX_TOOLS]
    more = prefix.more or len(prefix.tools) > MAX_TOOLS
    result = {k: v for k, v in prefix.extra.items() if k not in ("nextCursor", "_meta")}
    for key, value in _REQUIRED.items():  # fields the newer wire needs, if after the tools
        result.setdefault(key, value)
    meta = prefix.extra.get("_meta")
    meta = {**(meta if isinstance(meta, dict) else {}),
            CUT_KEY: {"kept": len(kept), "more": more, "bytes": 0}}
    result.update(tools=kept, _meta=meta)
    page: dict[str, Any] = {"jsonrpc": "2.0", "result": result}
    if prefix.has_id:
        page["id"] = prefix.id
    return page


def refusal(prefix: Prefix) -> dict[str, Any]:
    """An error answer to the request whose answer was longer than ``MAX_MESSAGE``
    (``finish`` puts in the size, and the ``id`` when it came late)."""
    error = {"jsonrpc": "2.0", "error": {"code": -32603, "message": ""}}
    return {"id": prefix.id, **error} if prefix.has_id else error


def finish(message: dict[str, Any], size: int, tail: bytes | bytearray = b"") -> bytes:
    """``message`` (from ``cut_page`` or ``refusal``) as a line, saying the size it stands
    for; a page without its ``id`` takes it from ``tail`` (the end of the answer), or is
    dropped (b"": its request is left to time out)."""
    if "id" not in message:
        found, rid = id_in_tail(_text(tail))
        if not found:
            return b""
        message = {"jsonrpc": "2.0", "id": rid, **message}
    if "error" not in message:
        message["result"]["_meta"][CUT_KEY]["bytes"] = size
    elif not message["error"]["message"]:
        message["error"]["message"] = (
            f"the server's answer was {size:,} bytes, more than the "
            f"{MAX_MESSAGE // (1024 * 1024)} MiB silica reads of one message; silica refused it")
    return _line(message)


class BoundedBody:
    """A JSON response body (httpx's ``AsyncByteStream`` interface) given whole, cut to a
    page, or refused with ``TooLong``, as the module's docstring says."""

    def __init__(self, stream: Any, size: int = 0) -> None:
        self._stream = stream
        self._size = size  # Content-Length, when the server gave one
        self._waiting = False  # a tools page under the cut so far: read on to PAGE_HOLD

    async def __aiter__(self):
        held = bytearray()
        page: dict[str, Any] | None = None  # a tools page to cut this body to
        size, tail = 0, bytearray()
        probe_at = PAGE_BYTES + 1  # read the start once here, once more at PAGE_HOLD
        async for chunk in self._stream:
            if page is not None:  # cut, but its id comes after the tools: read on for it
                size += len(chunk)
                tail += chunk[-TAIL:]
                del tail[:-TAIL]
                continue
            held += chunk
            if len(held) > MAX_MESSAGE:
                raise TooLong(f"the server's answer was more than {MAX_MESSAGE:,} bytes; "
                              "silica refused it")
            if len(held) < probe_at:
                continue
            page = self._cut(held)
            probe_at = PAGE_HOLD if self._waiting and probe_at < PAGE_HOLD else MAX_MESSAGE + 1
            if page is not None and "id" in page:
                yield finish(page, max(self._size, len(held)))
                return  # the rest of the body is never read
            if page is not None:
                size, tail, held = len(held), held[-TAIL:], bytearray()
        if page is not None:
            yield finish(page, size, tail)
        elif self._waiting and (page := self._cut(held)) is not None:
            yield finish(page, len(held), held[-TAIL:])
        else:
            yield bytes(held)

    def _cut(self, held: bytearray) -> dict[str, Any] | None:
        """The page to cut a tools answer to, once enough of it is read (else ``None``)."""
        prefix = page_prefix(_text(held[:PAGE_HOLD]))
        self._waiting = prefix.tools is not None
        if prefix.tools is None:
            return None
        if len(prefix.tools) > MAX_TOOLS or len(held) >= PAGE_HOLD:
            return cut_page(prefix)
        return None

    async def aclose(self) -> None:
        await self._stream.aclose()


class TooLong(Exception):
    """An answer longer than ``MAX_MESSAGE`` (raised as the SDK's stream error, see
    ``bounded_http_client``)."""


def bounded_http_client(headers: dict[str, str] | None):
    """The SDK's HTTP client for streamable HTTP, with every JSON answer read through
    ``BoundedBody``; it asks for answers uncompressed and refuses compressed ones, whose
    size could not be bounded before they are decoded."""
    import httpx2
    from mcp.shared._httpx_utils import create_mcp_http_client

    class Refused(TooLong, httpx2.StreamError):
        pass

    class Bounded(BoundedBody, httpx2.AsyncByteStream):
        async def __aiter__(self):
            try:
                async for chunk in super().__aiter__():
                    yield chunk
            except TooLong as exc:
                raise Refused(str(exc)) from None

    class Compressed(httpx2.AsyncByteStream):
        def __init__(self, stream: Any) -> None:
            self._stream = stream

        async def __aiter__(self):
            raise Refused("the server sent a compressed answer, which silica did not ask "
                          "for; it was refused")
            yield b""  # an async generator that never yields

        async def aclose(self) -> None:
            await self._stream.aclose()

    async def bound(response: Any) -> None:
        if not response.headers.get("content-type", "").startswith("application/json"):
            return
        if response.headers.get("content-encoding", "identity") != "identity":
            response.stream = Compressed(response.stream)
            return
        size = response.headers.get("content-length", "")
        response.stream = Bounded(response.stream, int(size) if size.isdigit() else 0)

    client = create_mcp_http_client(headers={**(headers or {}), "Accept-Encoding": "identity"})
    client.event_hooks["response"].append(bound)
    return client


def cut_note(name: str, meta: dict[str, Any] | None) -> str:
    """The listing's note for a page ``BoundedLines`` cut ("" for any other page)."""
    cut = (meta or {}).get(CUT_KEY)
    if not isinstance(cut, dict):
        return ""
    kept, size = cut.get("kept", 0), cut.get("bytes", 0)
    offered = f"more than {kept}" if cut.get("more") else str(kept)
    return (f"the MCP server {name!r} offers {offered} tools in one answer of "
            f"{size / 1e6:.1f} MB; silica read only the first {kept} and skipped the rest "
            "unread")


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class BoundedLines:
    """A byte stream (anyio's ``ByteReceiveStream`` interface) over a server's stdout that
    yields whole lines, each bounded as the module's docstring says. ``receive`` gives
    every whole line it has, whatever ``max_bytes`` says: the SDK joins what it receives
    until a newline, and a line given in one piece is joined once, not chunk by chunk."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._held = bytearray()  # the start of the current line
        self._ready = bytearray()  # whole lines to hand over
        self._skipping = 0  # >0: the bytes of a long line skipped so far
        self._replace: dict[str, Any] | None = None  # what a skipped line becomes at its end
        self._probed = False  # the current long line's start was read once
        self._cut_now = False  # the current line answers tools/list: cut at PAGE_HOLD
        self._tail = bytearray()  # the last TAIL bytes of a skipped line
        self._ended = False
        self._prefix: Prefix | None = None  # the start of the current long line, once read
        self.limits: dict[Any, int] = {}
        """Request ids whose answers are refused past so many bytes (``RequestWatch``)."""

    async def receive(self, max_bytes: int = _READ) -> bytes:
        import anyio

        while not self._ready:
            if self._ended:
                raise anyio.EndOfStream
            try:
                chunk = await self._stream.receive(_READ)
            except anyio.EndOfStream:
                self._ended = True
                if self._held and not self._skipping:  # a last line without its newline
                    self._ready += self._held
                    self._held.clear()
                continue
            self.feed(chunk)
        out, self._ready = self._ready, bytearray()
        return bytes(out)

    def feed(self, chunk: bytes) -> None:
        """Take ``chunk`` of the server's stdout (whole lines become ready to hand over)."""
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end + 1]
            start = len(chunk) if end < 0 else end + 1
            if self._skipping:
                self._skipping += len(piece)
                self._tail += piece[-TAIL:]
                del self._tail[:-TAIL]
                if end >= 0:
                    self._end_skip()
                continue
            self._held += piece
            if end >= 0:
                self._whole_line()
            elif len(self._held) > PAGE_BYTES:
                self._long_line()

    def _whole_line(self) -> None:
        line = self._held
        if len(line) > MAX_MESSAGE:  # it came in one piece: refused all the same
            refused = refusal(page_prefix(_text(line[:PAGE_HOLD]), 0))
            self._ready += finish(refused, len(line), line[-TAIL:])
            self._reset()
            return
        if len(line) > PAGE_BYTES and (self._cut_now or not self._probed):
            prefix = page_prefix(_text(line[:PAGE_HOLD]))
            cut = len(prefix.tools or ()) > MAX_TOOLS or len(line) >= PAGE_HOLD
            page = cut_page(prefix) if cut else None  # as _long_line would have
            if page is not None:
                self._ready += finish(page, len(line), line[-TAIL:])
                self._reset()
                return
        if self._ready:
            self._ready += line
        else:  # the usual case: hand the line over without copying it
            self._ready = line
        self._reset()

    def _long_line(self) -> None:
        """The current line outgrew ``PAGE_BYTES`` and has not ended."""
        size = len(self._held)
        if not self._probed or (self._cut_now and size >= PAGE_HOLD):
            self._probed = True
            prefix = self._prefix = page_prefix(_text(self._held[:PAGE_HOLD]))
            if prefix.tools is not None:
                self._cut_now = True
                if len(prefix.tools) > MAX_TOOLS or size >= PAGE_HOLD:
                    self._skip(cut_page(prefix), size)
                return
        known = self._prefix
        limit = self.limits.get(known.id) if known is not None and known.has_id \
            and _hashable(known.id) else None
        if known is not None and limit is not None and size > limit:
            del self.limits[known.id]
            refused = refusal(known)
            refused["error"].update(data=TOO_LARGE, message=(
                f"the server's answer to the read of an MCP App was over {limit:,} bytes; "
                "silica refused it"))
            self._skip(refused, size)
            return
        if size > MAX_MESSAGE:
            self._skip(refusal(page_prefix(_text(self._held[:PAGE_HOLD]), 0)), size)

    def _skip(self, replacement: dict[str, Any] | None, size: int) -> None:
        self._replace, self._skipping = replacement, size
        self._tail = self._held[-TAIL:]
        self._held = bytearray()

    def _end_skip(self) -> None:
        if self._replace is not None:  # the size is known now that the line ended
            self._ready += finish(self._replace, self._skipping, self._tail)
        self._reset()

    def _reset(self) -> None:
        self._held, self._tail = bytearray(), bytearray()
        self._skipping, self._replace, self._probed, self._cut_now = 0, None, False, False
        self._prefix = None

    async def aclose(self) -> None:
        await self._stream.aclose()


class RequestWatch:
    """A stdio server's stdin (anyio's ``ByteSendStream``) as the SDK writes to it: each
    ``resources/read`` of a ``ui://`` URI gives its answer the ``APP_ANSWER_MAX`` bound in
    ``lines`` (the server's ``BoundedLines``). Only writes that name both are parsed."""

    def __init__(self, stream: Any, lines: BoundedLines) -> None:
        self._stream, self._lines = stream, lines

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def send(self, item: bytes) -> None:
        if b'"resources/read"' in item and b'"ui://' in item:
            for line in item.splitlines():
                with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
                    message = json.loads(line)
                    uri = message["params"]["uri"]
                    if message.get("method") == "resources/read" and isinstance(uri, str) \
                            and uri.startswith("ui://") and _hashable(message["id"]):
                        limits = self._lines.limits
                        while len(limits) >= _WATCHED:  # answers that never came
                            limits.pop(next(iter(limits)))
                        limits[message["id"]] = APP_ANSWER_MAX
        await self._stream.send(item)


def _hashable(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _text(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", "replace")
