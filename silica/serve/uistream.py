"""A turn's events as the AI SDK's UI message stream, protocol v1: the chunks a ``useChat``
front end reads (``POST /api/chat``, ``GET /api/chat/{id}/stream``; ``silica.serve.uichat``).

    chunks = TurnChunks(turn_id, base_url="http://127.0.0.1:8700")
    for event, data in events: out += chunks.feed(event, data)      # [chunk dicts]
    response = ui_stream(bus, turn_log, base_url=...)                  # text/event-stream

Each chunk is one server-sent event, ``data: <json>\\n\\n``; the stream ends with
``data: [DONE]``. The events of a turn become:

=============================  ==============================================================
event                          chunks
=============================  ==============================================================
``message``                    ``start`` (``messageId``: the turn's id, ``messageMetadata``:
                               ``{session_id, turn_id, turn}``), ``start-step``
``text_delta``                 ``text-start`` (the first of a step's text), ``text-delta``
``tool_call``                  ``text-end`` (if text is open), ``tool-input-available``
                               (``dynamic: true``)
``approval``                   ``tool-approval-request`` (``approvalId``: its id)
``approval_done`` (denied)     ``tool-output-denied``; the refusal that follows is not sent
``tool_result``                ``tool-output-available`` ``{text, isError, images: [{url,
                               mediaType, width, height}]}``, or ``tool-output-error`` for an
                               error that has no image
``image``                      ``file`` ``{url, mediaType}``
``tool_note``                  ``data-tool-note`` ``{toolCallId, text}``
``error``                      ``error`` ``{errorText}``
``turn_end``                   ``text-end`` (if open), ``finish-step``, ``finish``
                               (``finishReason``, ``messageMetadata``: ``{usage,
                               stop_reason}``)
=============================  ==============================================================

A model request is a step: text or a tool call after the step's tool results begins the next
(``finish-step``, ``start-step``). The client's ordering rules always hold: a delta never
comes before its start nor after its end, a tool's output or approval request never comes
before its input (an input the stream never had is sent first, as ``{}``), every step that
starts finishes, and nothing follows ``finish``. Image URLs are absolute (``base_url``).

A stream shows one turn: from its start (a replay of what it said so far, then live), or from
where a client left it (``start``: events already seen, after an approval). It pauses, ending
with ``finish-step``, ``finish`` (``tool-calls``) and ``[DONE]``, once it has shown an approval
request that waits for an answer: the client sends the answer in its next ``POST /api/chat``,
whose stream goes on from there with a ``start`` and no new step (the client's message goes on
in the step it was in, where its tools wait for their approvals). A reply's text pieces are
encoded once for every stream at the same point (``delta_only``), as SSE encodes each event
once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse

from silica.serve.bus import Event, EventBus
from silica.serve.eventlog import Key
from silica.serve.replay import TurnLog

PING_EVERY = 15.0
HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache",
           "x-vercel-ai-ui-message-stream": "v1", "x-accel-buffering": "no"}
DONE = b"data: [DONE]\n\n"
FINISH_REASONS = {"end_turn": "stop", "stop": "stop", "stop_sequence": "stop",
                  "max_tokens": "length", "length": "length", "tool_use": "tool-calls",
                  "error": "error", "interrupted": "error", "refusal": "content-filter"}

Chunk = dict[str, Any]


def encode(chunk: Chunk) -> bytes:
    """One chunk as a server-sent event (JSON escapes every line break: one line)."""
    return b"data: " + json.dumps(chunk, ensure_ascii=False,
                                  separators=(",", ":")).encode() + b"\n\n"


class TurnChunks:
    """One client's view of one turn as UI message chunks (see the module docstring)."""

    def __init__(self, turn_id: str, *, base_url: str = "") -> None:
        self.turn_id, self.base = turn_id, base_url.rstrip("/")
        self.started = False  # ``start`` sent
        self.ended = False  # ``finish`` sent
        self.step = 0  # steps started
        self.texts = 0  # text parts started
        self.step_open = False
        self.results = False  # the step has tool results: text or a call begins the next
        self.text_id: str | None = None  # the open text part
        self.names: dict[str, str] = {}  # call id -> tool name, of inputs sent
        self.answered: set[str] = set()  # call ids with an output (or denied)
        self.pending: dict[str, str] = {}  # approval id -> call id, not yet done
        self.given: set[str] = set()  # approval ids this stream's client has answered

    # -- events -------------------------------------------------------------------------

    def feed(self, event: str, data: Any) -> list[Chunk]:
        """The chunks for one event of the session (none for another turn's, once ended, or
        for an event with no chunk)."""
        if self.ended or not isinstance(data, dict) or data.get("turn_id") != self.turn_id:
            return []
        handler = getattr(self, "_on_" + event, None)
        return handler(data) if handler is not None else []

    def _on_message(self, data: dict) -> list[Chunk]:
        return self._begin(data)

    def _on_text_delta(self, data: dict) -> list[Chunk]:
        text = data.get("text")
        if not isinstance(text, str) or not text:
            return []
        out = self._begin() + self._next_step_if_results()
        if self.text_id is None:
            self.texts += 1
            self.text_id = f"text-{self.texts}"
            out.append({"type": "text-start", "id": self.text_id})
        out.append({"type": "text-delta", "id": self.text_id, "delta": text})
        return out

    def _on_tool_call(self, data: dict) -> list[Chunk]:
        call_id, name = str(data.get("call_id", "")), str(data.get("name", ""))
        out = self._begin() + self._next_step_if_results() + self._end_text()
        out.append(self._input(call_id, name, data.get("input")))
        return out

    def _on_approval(self, data: dict) -> list[Chunk]:
        call_id, approval_id = str(data.get("call_id", "")), str(data.get("id", ""))
        if call_id in self.answered:
            return []
        out = self._begin() + self._end_text() + self._ensure_input(call_id, "shell")
        self.pending[approval_id] = call_id
        out.append({"type": "tool-approval-request", "approvalId": approval_id,
                    "toolCallId": call_id})
        return out

    def _on_approval_done(self, data: dict) -> list[Chunk]:
        approval_id = str(data.get("id", ""))
        call_id = self.pending.pop(approval_id, None)
        if call_id is None or data.get("decision") != "deny" or call_id in self.answered:
            return []
        self.answered.add(call_id)
        return [{"type": "tool-output-denied", "toolCallId": call_id}]

    def _on_tool_result(self, data: dict) -> list[Chunk]:
        call_id, name = str(data.get("call_id", "")), str(data.get("name", ""))
        out = self._begin() + self._end_text() + self._ensure_input(call_id, name)
        self.results = True
        if call_id in self.answered:  # denied: the refusal is the denial already shown
            return out
        self.answered.add(call_id)
        text = str(data.get("text", ""))
        images = [self._image(item) for item in data.get("images") or []
                  if isinstance(item, dict)]
        if data.get("is_error") and not images:
            out.append({"type": "tool-output-error", "toolCallId": call_id,
                        "errorText": text, "dynamic": True})
        else:
            out.append({"type": "tool-output-available", "toolCallId": call_id,
                        "output": {"text": text, "isError": bool(data.get("is_error")),
                                   "images": images},
                        "dynamic": True})
        return out

    def _on_image(self, data: dict) -> list[Chunk]:
        url = data.get("url")
        if not isinstance(url, str):
            return []
        return self._begin() + [{"type": "file", "url": self._url(url),
                                 "mediaType": str(data.get("mime", ""))}]

    def _on_tool_note(self, data: dict) -> list[Chunk]:
        return self._begin() + [{"type": "data-tool-note",
                                 "data": {"toolCallId": str(data.get("call_id", "")),
                                          "text": str(data.get("text", ""))}}]

    def _on_error(self, data: dict) -> list[Chunk]:
        return self._begin() + [{"type": "error",
                                 "errorText": str(data.get("message", "the turn failed"))}]

    def _on_turn_end(self, data: dict) -> list[Chunk]:
        out = self._begin() + self._end_text() + self._finish_step()
        reason = str(data.get("stop_reason") or "")
        out.append({"type": "finish", "finishReason": FINISH_REASONS.get(reason, "other"),
                    "messageMetadata": {"usage": data.get("usage") or {},
                                        "stop_reason": reason}})
        self.ended = True
        return out

    def delta_only(self, event: str, data: Any) -> str | None:
        """The open text part's id when ``event`` makes only a ``text-delta`` of it (the
        chunk any stream at the same point makes: its bytes can be shared); else ``None``."""
        if event != "text_delta" or self.text_id is None or self.results or self.ended \
                or not isinstance(data, dict) or data.get("turn_id") != self.turn_id:
            return None
        text = data.get("text")
        return self.text_id if isinstance(text, str) and text else None

    # -- a stream that pauses and goes on -----------------------------------------------

    def pause(self) -> list[Chunk]:
        """The end of a stream that stops to wait for an approval (the turn goes on)."""
        return self._end_text() + self._finish_step() + [{"type": "finish",
                                                          "finishReason": "tool-calls"}]

    def resume(self) -> list[Chunk]:
        """The beginning of a stream that goes on from where a paused one stopped (which
        closed its text). It opens no step: the client's message goes on with the step it
        was in, so the tool parts still waiting for an approval are in its last step."""
        self.step_open, self.text_id = True, None
        return [{"type": "start", "messageId": self.turn_id}]

    def answer(self, approval_ids: list[str]) -> None:
        """This stream's client answered these approvals: it waits for them no more."""
        self.given.update(approval_ids)

    @property
    def waiting(self) -> bool:
        """Whether an approval request shown waits for the client's answer."""
        return any(approval_id not in self.given for approval_id in self.pending)

    # -- parts --------------------------------------------------------------------------

    def _begin(self, data: dict | None = None) -> list[Chunk]:
        if self.started:
            return []
        self.started = True
        start: Chunk = {"type": "start", "messageId": self.turn_id}
        if data is not None:
            start["messageMetadata"] = {"session_id": data.get("session_id"),
                                        "turn_id": self.turn_id, "turn": data.get("turn")}
        return [start, *self._start_step()]

    def _start_step(self) -> list[Chunk]:
        self.step += 1
        self.step_open, self.results = True, False
        return [{"type": "start-step"}]

    def _finish_step(self) -> list[Chunk]:
        if not self.step_open:
            return []
        self.step_open = False
        return [{"type": "finish-step"}]

    def _next_step_if_results(self) -> list[Chunk]:
        if not self.results and self.step_open:
            return []
        return self._end_text() + self._finish_step() + self._start_step()

    def _end_text(self) -> list[Chunk]:
        if self.text_id is None:
            return []
        chunk = {"type": "text-end", "id": self.text_id}
        self.text_id = None
        return [chunk]

    def _input(self, call_id: str, name: str, arguments: Any) -> Chunk:
        self.names[call_id] = name
        return {"type": "tool-input-available", "toolCallId": call_id, "toolName": name,
                "input": arguments if arguments is not None else {}, "dynamic": True}

    def _ensure_input(self, call_id: str, name: str) -> list[Chunk]:
        return [] if call_id in self.names else [self._input(call_id, name, {})]

    def _image(self, item: dict) -> dict:
        return {"url": self._url(str(item.get("url", ""))), "mediaType": item.get("mime"),
                "width": item.get("width"), "height": item.get("height")}

    def _url(self, url: str) -> str:
        return self.base + url if url.startswith("/") else url


# -- the HTTP stream ----------------------------------------------------------------------


def ui_stream(bus: EventBus, turn_log: TurnLog, *, base_url: str, start: int = 0,
              answered: list[str] | None = None) -> StreamingResponse:
    """The turn of ``turn_log`` as a UI message stream: from its first event, or after the
    ``start`` events a client already has (``answered``: the approvals it just answered)."""
    return StreamingResponse(_logged(bus, turn_log, base_url, start, answered or []),
                             headers=HEADERS)


def stream_from(bus: EventBus, session_id: str, turn_id: str, after: Key, *, base_url: str,
                answered: list[str] | None = None) -> StreamingResponse:
    """The turn ``turn_id`` as a UI message stream, read from the session's events after the
    id ``after`` (the one before its ``message``): a turn run by another daemon or worker, or
    one this daemon hears only through the shared bus. ``answered``: the approvals the client
    just answered (the stream goes on after the last of them)."""
    return StreamingResponse(_kept(bus, session_id, turn_id, after, base_url, answered or []),
                             headers=HEADERS)


def answered_stream() -> StreamingResponse:
    """A stream that only says the answer was taken (the turn is not followed here)."""

    async def chunks() -> AsyncIterator[bytes]:
        yield encode({"type": "start"}) + encode({"type": "finish"}) + DONE

    return StreamingResponse(chunks(), headers=HEADERS)


async def _logged(bus: EventBus, turn_log: TurnLog, base_url: str, start: int,
                  answered: list[str]) -> AsyncIterator[bytes]:
    async with bus.subscribe(turn_log.session_id) as live:
        seen = turn_log.snapshot()  # nothing awaited since the subscription's catch-up
        # what the log had may also be queued (it came while the subscription caught up)
        upto = turn_log.last_key

        def paused(at: int) -> None:
            turn_log.paused_at = max(turn_log.paused_at, at)

        async for piece in _follow(TurnChunks(turn_log.turn_id, base_url=base_url), seen,
                                   start, answered, live, upto, paused,
                                   lambda approval_id: turn_log.after("approval", "id",
                                                                      approval_id)):
            yield piece


async def _kept(bus: EventBus, session_id: str, turn_id: str, after: Key, base_url: str,
                answered: list[str]) -> AsyncIterator[bytes]:
    kept, floor, reset = await bus.replay(session_id, after, limit=None)  # said so far
    if reset:
        yield encode({"type": "error", "errorText": (
            "the turn's first events are no longer kept; read GET "
            f"/sessions/{session_id}/history")}) + DONE
        return
    seen = [(event, data) for _, event, data in kept]
    start = 0
    if answered:  # go on after the last approval the client answered
        marks = [i + 1 for i, (event, data) in enumerate(seen)
                 if event == "approval" and data.get("id") in answered]
        start = max(marks, default=len(seen))
    async with bus.subscribe(session_id, after=kept[-1][0] if kept else floor) as live:
        async for piece in _follow(TurnChunks(turn_id, base_url=base_url), seen, start,
                                   answered, live, None, lambda at: None, lambda _: None):
            yield piece


async def _follow(chunks: TurnChunks, seen: list[tuple[str, Any]], start: int,
                  answered: list[str], live: Any, upto: Key | None,
                  paused: Any, approval_at: Any) -> AsyncIterator[bytes]:
    """The chunks of ``seen`` (the turn so far: those from index ``start`` on), then of the
    ``live`` subscription's events (those after the id ``upto``), until the turn ends or
    waits for an approval; ``paused(at)`` is told how many events a paused client has."""
    chunks.answer(answered)
    shown: list[Chunk] = []
    for index, (event, data) in enumerate(seen):
        if index == start and start:
            shown += chunks.resume()
        made = chunks.feed(event, data)
        if index >= start:
            shown += made
    if start and start >= len(seen):
        shown += chunks.resume()
    if shown:
        yield b"".join(encode(chunk) for chunk in shown)
    if chunks.ended:
        yield DONE
        return
    if chunks.waiting:
        paused(len(seen))
        yield b"".join(encode(chunk) for chunk in chunks.pause()) + DONE
        return
    while True:
        try:
            item = await live.next(PING_EVERY)
        except StopAsyncIteration:  # the client fell behind, or the daemon stops
            yield encode({"type": "error", "errorText": (
                "the stream ended before the turn did (the client fell behind, or the "
                "daemon is stopping); GET /api/chat/{id}/stream resumes it")}) + DONE
            return
        if item is None:
            yield b": ping\n\n"
            continue
        key = getattr(item, "key", None)
        if upto is not None and key is not None and key <= upto:
            continue  # in ``seen`` already
        event, data = item
        if event == "reset":
            yield encode({"type": "error", "errorText": str(data.get("message", ""))}) + DONE
            return
        shared = chunks.delta_only(event, data)
        if shared is not None and isinstance(item, Event):
            # a reply's pieces: encoded once for every stream at the same point
            wires = item.__dict__.setdefault("ui", {})
            wire = wires.get(shared)
            if wire is None:
                wire = wires[shared] = encode({"type": "text-delta", "id": shared,
                                               "delta": data["text"]})
            yield wire
            continue
        made = chunks.feed(event, data)
        if made:
            yield b"".join(encode(chunk) for chunk in made)
        if chunks.ended:
            yield DONE
            return
        if event == "approval" and chunks.waiting:
            after = approval_at(data.get("id"))
            if after is not None:
                paused(after)
            yield b"".join(encode(chunk) for chunk in chunks.pause()) + DONE
            return
