"""What a wire server replays: scripted replies, and what it records of each request."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal


@dataclass(frozen=True)
class ScriptedCall:
    """A tool call the model makes. ``raw_arguments`` (if set) is sent instead of the JSON of
    ``arguments``: use it to script a model that writes invalid JSON."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    raw_arguments: str | None = None


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build it with the helpers below and join them with ``+``:
    ``text("Let me look.") + tool_call("screenshot", {})``."""

    text: tuple[str, ...] = ()  # streamed piece by piece
    tool_calls: tuple[ScriptedCall, ...] = ()
    stop_reason: str | None = None  # None: the protocol's own for text / tool calls
    usage: tuple[int, int] = (12, 7)  # input tokens, output tokens
    cache: tuple[int, int] = (0, 0)  # input tokens read from / written to the prompt cache
    status: int = 200
    message: str = ""  # the API's error message when status is not 200
    headers: tuple[tuple[str, str], ...] = ()
    drop: Literal["before", "mid"] | None = None
    garbage: bool = False
    mid_stream: bool = False  # an error: sent as a stream event after the reply has begun
    raw: tuple[bytes, ...] = ()  # sent as the streamed body (``repeat`` times) instead
    repeat: int = 1
    delay: float = 0.0  # seconds between two streamed chunks: a trickling server

    def __add__(self, other: Reply) -> Reply:
        return replace(self, text=self.text + other.text,
                       tool_calls=self.tool_calls + other.tool_calls,
                       stop_reason=other.stop_reason or self.stop_reason)

    @property
    def full_text(self) -> str:
        return "".join(self.text)


def pieces(s: str) -> tuple[str, ...]:
    """``s`` cut into word-sized pieces (each keeps its trailing space), as a model streams."""
    return tuple(re.findall(r"\s*\S+\s*", s)) or ((s,) if s else ())


def text(s: str, *, chunks: list[str] | None = None, stop_reason: str | None = None,
         usage: tuple[int, int] = (12, 7), cache: tuple[int, int] = (0, 0)) -> Reply:
    """The model answers ``s``, streamed in word pieces (or exactly ``chunks``). ``usage``:
    input tokens not cached, output tokens; ``cache``: tokens read from / written to the
    prompt cache (each protocol reports them its own way)."""
    return Reply(text=tuple(chunks) if chunks is not None else pieces(s),
                 stop_reason=stop_reason, usage=usage, cache=cache)


def tool_call(name: str, arguments: dict[str, Any] | None = None, id: str | None = None, *,
              raw_arguments: str | None = None) -> Reply:
    """The model calls tool ``name``; ``id`` defaults to a protocol-style id (none for Ollama,
    which sends no ids)."""
    return Reply(tool_calls=(ScriptedCall(name, dict(arguments or {}), id, raw_arguments),))


def error(status: int, message: str = "", *, retry_after: float | None = 0.001,
          headers: dict[str, str] | None = None, mid_stream: bool = False) -> Reply:
    """An HTTP error with the API's error body. ``retry_after`` (seconds) is sent as
    ``retry-after-ms`` so the SDKs' retries wait that long instead of their backoff (fast
    tests); ``None`` sends no such header. ``mid_stream``: a streamed reply begins (HTTP 200)
    and then carries the error as a stream event, as an API overloaded mid-answer does."""
    extra = dict(headers or {})
    if retry_after is not None:
        extra.setdefault("retry-after-ms", str(max(1, round(retry_after * 1000))))
    return Reply(text=pieces("Half an answer") if mid_stream else (), status=status,
                 message=message or f"scripted error {status}", headers=tuple(extra.items()),
                 mid_stream=mid_stream)


def drop(*, mid_stream: bool = True) -> Reply:
    """Cut the connection: after the first part of a streamed reply (``mid_stream``), or before
    sending anything at all (which the SDKs treat as a connection error and retry)."""
    return Reply(text=pieces("This reply will never finish"),
                 drop="mid" if mid_stream else "before")


def garbage() -> Reply:
    """A 200 reply whose body (or first stream event) is not valid JSON."""
    return Reply(garbage=True)


def raw(*chunks: bytes, repeat: int = 1) -> Reply:
    """A 200 streamed reply (the protocol's stream content type) whose body is exactly
    ``chunks``, sent ``repeat`` times over: a line that never ends, JSON nested too deeply...
    The chunks are not copied, so a large body costs the test no memory."""
    return Reply(raw=chunks, repeat=repeat)


def trickle(reply: Reply, delay: float) -> Reply:
    """``reply``, its streamed chunks sent ``delay`` seconds apart."""
    return replace(reply, delay=delay)


@dataclass(frozen=True)
class Received:
    """One request as the server saw it: ``body`` is the parsed JSON (or the raw text)."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any
    raw: bytes = b""  # the body's bytes exactly as sent
