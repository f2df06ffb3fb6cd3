"""Event ids, the window of a session's recent events, and the rule for resuming after an id.

    key = parse_id("1764230000000-3")          # (1764230000000, 3); None: not an event id
    ids = IdClock(); ids.next()                 # "1764230000000-0", always after the last
    window = Window(); window.add(id, event, data)
    verdict = resume_from(after, window.span()) # Resume(entries_from, reset)

Every event of a session has an id of the shape Redis gives a stream entry: ``MS-SEQ`` (the
milliseconds of the Unix clock, then a counter within the millisecond), both decimal and
below 2**64, so ids sort by time, and ``"0-0"`` comes before every event. The in-process bus
makes ids of the same shape (``IdClock``) and keeps each session's last ``WINDOW`` events
(at most ``WINDOW_BYTES``) so a client can resume without Redis; the shared bus reads them
from the session's Redis stream.

A client resumes after the id of the last event it has. It gets a ``reset`` instead when
events after that id may be gone (``resume_from``): the window was trimmed past it, the
stream expired or Redis lost it, or the id is not one of this stream's.

``inline_form`` makes an image event's inline form (``image_data`` base64, ``image_mime``)
from the image store, for clients that asked for inline images.
"""

from __future__ import annotations

import base64
import collections
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from silica.blocks import ImageRef
from silica.config import Settings
from silica.images.store import StoreError, open_image_store

WINDOW = 2000  # events the in-process bus keeps per session for resume
WINDOW_BYTES = 1024 * 1024  # and at most this much of them (text, or JSON size)
WINDOW_SESSIONS = 64  # sessions whose window it keeps (the least recently used go first)
MAX_ID = 41  # characters of an event id: two numbers below 2**64 and a dash
ZERO = (0, 0)
_ID = re.compile(r"^([0-9]{1,20})-([0-9]{1,20})$")
_LIMIT = 2 ** 64

Key = tuple[int, int]


def parse_id(text: Any) -> Key | None:
    """``(ms, seq)`` of an event id, ``None`` for anything else (client input: bounded)."""
    if not isinstance(text, str) or len(text) > MAX_ID:
        return None
    found = _ID.fullmatch(text.strip())
    if found is None:
        return None
    ms, seq = int(found[1]), int(found[2])
    return (ms, seq) if ms < _LIMIT and seq < _LIMIT else None


def format_id(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


def before(key: Key) -> Key:
    """The id just before ``key`` (to resume with ``key`` itself included)."""
    ms, seq = key
    if seq:
        return (ms, seq - 1)
    return (ms - 1, _LIMIT - 1) if ms else ZERO


class IdClock:
    """In-process ids of the Redis shape, each after the one before (the clock may go back)."""

    def __init__(self) -> None:
        self.last: Key = ZERO

    def next(self) -> str:
        ms = int(time.time() * 1000)
        last_ms, last_seq = self.last
        self.last = (ms, 0) if ms > last_ms else (last_ms, last_seq + 1)
        return format_id(self.last)


@dataclass
class Span:
    """What a session's stream holds: its ``first`` and ``last`` ids (``None``: no stream),
    and ``dropped``, the newest id trimmed from it (``ZERO``: none)."""

    first: Key | None
    last: Key | None
    dropped: Key = ZERO


def must_reset(after: Key, span: Span) -> bool:
    """Whether a client that has every event up to ``after`` may have missed some that are
    gone, so it must read the history instead (see the module docstring)."""
    if after == ZERO:
        return span.dropped != ZERO
    if span.first is None or span.last is None:
        return True  # expired, or lost by a Redis that restarted: nothing says what was there
    if after > span.last:
        return True  # not an id of this stream
    if after < span.first and after != before(span.first):  # (that one: all of it)
        # trimmed past it; or (nothing ever trimmed) an id of an older stream of the session
        return span.dropped == ZERO or after < span.dropped
    return False


def reset_event(session_id: str) -> dict:
    """The ``reset`` event's data."""
    return {"session_id": session_id, "code": "events_gone", "message": (
        "the events after the id this stream was resumed from are no longer kept; read "
        f"GET /sessions/{session_id}/history, then follow the events from here")}


class Window:
    """A session's last events, ``(id, event, data)``, bounded by count and size."""

    def __init__(self) -> None:
        self.entries: collections.deque[tuple[Key, str, dict]] = collections.deque()
        self.sizes: collections.deque[int] = collections.deque()
        self.size = 0
        self.dropped: Key = ZERO

    def add(self, key: Key, event: str, data: dict) -> None:
        size = _size(event, data)
        self.entries.append((key, event, data))
        self.sizes.append(size)
        self.size += size
        while len(self.entries) > WINDOW or (self.size > WINDOW_BYTES and len(self.entries) > 1):
            self.dropped = self.entries.popleft()[0]
            self.size -= self.sizes.popleft()

    def span(self) -> Span:
        if not self.entries:
            return Span(None, None, self.dropped)
        return Span(self.entries[0][0], self.entries[-1][0], self.dropped)

    def after(self, key: Key) -> list[tuple[Key, str, dict]]:
        return [entry for entry in self.entries if entry[0] > key]


def _size(event: str, data: dict) -> int:
    if event == "text_delta":
        return len(str(data.get("text", ""))) + 64
    try:
        return len(json.dumps(data, ensure_ascii=False))
    except (TypeError, ValueError):
        return 1024


class Windows:
    """The windows of the ``WINDOW_SESSIONS`` sessions that had events last."""

    def __init__(self) -> None:
        self.windows: collections.OrderedDict[str, Window] = collections.OrderedDict()

    def add(self, session_id: str, key: Key, event: str, data: dict) -> None:
        window = self.windows.get(session_id)
        if window is None:
            window = self.windows[session_id] = Window()
            while len(self.windows) > WINDOW_SESSIONS:
                self.windows.popitem(last=False)
        self.windows.move_to_end(session_id)
        window.add(key, event, data)

    def get(self, session_id: str) -> Window | None:
        return self.windows.get(session_id)


# -- inline images -------------------------------------------------------------------------

IMAGE_EVENTS = ("tool_result", "image")


def inline_form(home: Path | None, settings: Settings | None, session_id: str, event: str,
                data: dict) -> dict | None:
    """``data`` with ``image_data`` and ``image_mime`` on each image (``tool_result``) or on
    itself (``image``), read from the session's image store (``open_image_store``: the
    object store behind it too, when configured); ``None`` when the event has no image. An
    image the store cannot give is left without them (its URL still works)."""
    if event not in IMAGE_EVENTS or home is None:
        return None
    try:
        store = open_image_store(home, session_id, settings or Settings())
    except StoreError:
        return None
    if event == "image":
        return {**data, **_inline(store, data)}
    images = data.get("images")
    if not isinstance(images, list) or not images:
        return None
    return {**data, "images": [{**item, **_inline(store, item)}
                               if isinstance(item, dict) else item for item in images]}


def _inline(store: Any, item: dict) -> dict:
    try:
        # read checks the bytes against the id; size fields are not used to find the file
        ref = ImageRef(id=str(item.get("image_id")), media_type=str(item.get("mime")),
                       bytes=0, width=max(1, int(item.get("width") or 1)),
                       height=max(1, int(item.get("height") or 1)))
        data = store.read(ref)
    except (StoreError, ValueError, TypeError):
        return {}
    return {"image_data": base64.b64encode(data).decode(), "image_mime": ref.media_type}
