"""Ollama: ``POST /api/chat``, one JSON object or NDJSON lines (the default, ``stream``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .script import Reply
from .server import Wire, WireServer, serve

CREATED = "2025-01-01T00:00:00.000000Z"


def _calls(reply: Reply) -> list[dict[str, Any]]:
    out = []
    for call in reply.tool_calls:
        arguments: Any = call.arguments if call.raw_arguments is None else call.raw_arguments
        entry: dict[str, Any] = {"function": {"name": call.name, "arguments": arguments}}
        if call.id:
            entry["id"] = call.id
        out.append(entry)
    return out


def _line(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode() + b"\n"


def _final(reply: Reply, model: str, content: str, with_calls: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if with_calls and reply.tool_calls:
        message["tool_calls"] = _calls(reply)
    return {"model": model, "created_at": CREATED, "message": message, "done": True,
            "done_reason": reply.stop_reason or "stop", "total_duration": 1000,
            "prompt_eval_count": reply.usage[0], "eval_count": reply.usage[1]}


def _lines(reply: Reply, model: str) -> Iterator[bytes]:
    for piece in reply.text:
        yield _line({"model": model, "created_at": CREATED,
                     "message": {"role": "assistant", "content": piece}, "done": False})
    if reply.tool_calls:  # Ollama sends tool calls in a chunk of their own, before the end
        yield _line({"model": model, "created_at": CREATED,
                     "message": {"role": "assistant", "content": "",
                                 "tool_calls": _calls(reply)}, "done": False})
    yield _line(_final(reply, model, "", with_calls=False))


def render(reply: Reply, body: Any, n: int) -> Wire:
    body = body if isinstance(body, dict) else {}
    stream = body.get("stream", True) is not False
    model = body.get("model", "")
    headers = dict(reply.headers)
    if reply.status != 200:
        if reply.mid_stream and stream:
            chunks = list(_lines(reply, model))[:1] + [_line({"error": reply.message})]
            return Wire(200, "application/x-ndjson", chunks, stream=True, headers=headers)
        return Wire(reply.status, "application/json", [_line({"error": reply.message})],
                    headers=headers)
    if reply.garbage:
        return Wire(200, "application/x-ndjson" if stream else "application/json",
                    [b"{not json\n"], stream=stream, headers=headers)
    if stream:
        wire = Wire(200, "application/x-ndjson", list(_lines(reply, model)), stream=True,
                    headers=headers)
    else:
        wire = Wire(200, "application/json",
                    [_line(_final(reply, model, reply.full_text, with_calls=True))],
                    headers=headers)
    if reply.drop == "before":
        wire.drop_after = 0
    elif reply.drop == "mid":
        wire.drop_after = 1
        if not stream:
            wire.chunks = [wire.chunks[0][:20], wire.chunks[0][20:]]
    return wire


@contextmanager
def ollama_server(script: Iterable[Reply] = ()) -> Iterator[WireServer]:
    """A local Ollama server; ``env`` sets OLLAMA_HOST."""
    with serve(WireServer(render, script, paths=("/api/chat",),
                          stream_type="application/x-ndjson")) as srv:
        srv.env = {"OLLAMA_HOST": srv.base_url}
        yield srv
