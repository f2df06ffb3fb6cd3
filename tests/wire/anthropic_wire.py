"""The Anthropic Messages API: ``POST /v1/messages``, JSON or SSE (``"stream": true``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .script import Reply
from .server import Wire, WireServer, serve, split_json, sse

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 529: "overloaded_error"}


def _blocks(reply: Reply, n: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.full_text})
    for i, call in enumerate(reply.tool_calls):
        blocks.append({"type": "tool_use", "id": call.id or f"toolu_wire_{n}_{i}",
                       "name": call.name, "input": call.arguments})
    return blocks


def _stop(reply: Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")


def _message(reply: Reply, model: str, n: int, *, final: bool) -> dict[str, Any]:
    return {"id": f"msg_wire_{n}", "type": "message", "role": "assistant", "model": model,
            "content": _blocks(reply, n) if final else [],
            "stop_reason": _stop(reply) if final else None, "stop_sequence": None,
            "usage": {"input_tokens": reply.usage[0],
                      "output_tokens": reply.usage[1] if final else 1}}


def _events(reply: Reply, model: str, n: int) -> Iterator[bytes]:
    yield sse("message_start", {"type": "message_start",
                                "message": _message(reply, model, n, final=False)})
    yield sse("ping", {"type": "ping"})
    index = 0
    if reply.text:
        yield sse("content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}})
        for piece in reply.text:
            yield sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "text_delta", "text": piece}})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    for i, call in enumerate(reply.tool_calls):
        block = {"type": "tool_use", "id": call.id or f"toolu_wire_{n}_{i}",
                 "name": call.name, "input": {}}
        yield sse("content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": block})
        raw = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)
        for piece in split_json(raw):
            yield sse("content_block_delta", {
                "type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece}})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    yield sse("message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": _stop(reply), "stop_sequence": None},
                                "usage": {"output_tokens": reply.usage[1]}})
    yield sse("message_stop", {"type": "message_stop"})


def render(reply: Reply, body: Any, n: int) -> Wire:
    stream = isinstance(body, dict) and bool(body.get("stream"))
    model = body.get("model", "") if isinstance(body, dict) else ""
    headers = {"request-id": f"req_wire_{n}", **dict(reply.headers)}
    if reply.status != 200:
        err = {"type": "error", "request_id": f"req_wire_{n}",
               "error": {"type": ERROR_TYPES.get(reply.status, "api_error"),
                         "message": reply.message}}
        if reply.mid_stream and stream:
            chunks = list(_events(reply, model, n))[:3] + [sse("error", err)]
            return Wire(200, "text/event-stream", chunks, stream=True, headers=headers)
        return Wire(reply.status, "application/json", [json.dumps(err).encode()],
                    headers=headers)
    if reply.garbage:
        chunk = b"event: message_start\ndata: {not json\n\n" if stream else b"{not json"
        return Wire(200, "text/event-stream" if stream else "application/json", [chunk],
                    stream=stream, headers=headers)
    if stream:
        chunks = list(_events(reply, model, n))
        wire = Wire(200, "text/event-stream", chunks, stream=True, headers=headers)
    else:
        wire = Wire(200, "application/json",
                    [json.dumps(_message(reply, model, n, final=True)).encode()],
                    headers=headers)
    if reply.drop == "before":
        wire.drop_after = 0
    elif reply.drop == "mid":
        wire.drop_after = 3 if stream else 1  # start, ping, first text piece
        if not stream:
            wire.chunks = [wire.chunks[0][:20], wire.chunks[0][20:]]
    return wire


@contextmanager
def anthropic_server(script: Iterable[Reply] = (), *,
                     api_key: str = "test-anthropic-key") -> Iterator[WireServer]:
    """A local Anthropic Messages API; ``env`` sets ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY."""
    with serve(WireServer(render, script, paths=("/v1/messages",),
                          stream_type="text/event-stream")) as srv:
        srv.env = {"ANTHROPIC_BASE_URL": srv.base_url, "ANTHROPIC_API_KEY": api_key}
        yield srv
