"""OpenAI's Responses API: ``POST /v1/responses``, a JSON ``Response`` or SSE events.

The stream is the API's own sequence: ``response.created``, ``response.in_progress``, then
per output item ``response.output_item.added``, its deltas (``response.output_text.delta``,
``response.function_call_arguments.delta``), their ``.done`` events and
``response.output_item.done``; last ``response.completed`` with the whole response and its
usage (``input_tokens`` counts the cached ones, given in
``input_tokens_details.cached_tokens``). Every event carries ``sequence_number``.

Scripted replies as for the other servers (``wire.script``), and:

* ``error(status, msg, mid_stream=True)``: the reply begins, then an ``error`` event.
* ``drop()``: the connection is cut in the middle of an event (after the first text delta).
* ``failed(message, code)``: the reply begins, then ``response.failed``.
* ``cut_mid_event(s)``: the stream begins answering ``s``, then ends cleanly in the middle of
  an event (no ``response.completed``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .script import Reply, pieces, raw
from .server import Wire, WireServer, serve, split_json, sse

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
               403: "permission_error", 404: "invalid_request_error", 429: "rate_limit_error"}
ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


def _arguments(call) -> str:
    return call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)


def _usage(reply: Reply) -> dict[str, Any]:
    read, write = getattr(reply, "cache", (0, 0))
    prompt = reply.usage[0] + read + write  # the API counts cached tokens in input_tokens
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": read, "cache_write_tokens": write},
            "output_tokens": reply.usage[1], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + reply.usage[1]}


def _message_item(reply: Reply, n: int, *, done: bool) -> dict[str, Any]:
    content = [{"type": "output_text", "text": reply.full_text, "annotations": [],
                "logprobs": []}] if done else []
    return {"id": f"msg_wire_{n}", "type": "message", "role": "assistant",
            "status": "completed" if done else "in_progress", "content": content}


def _call_item(call, n: int, i: int, *, done: bool) -> dict[str, Any]:
    return {"id": f"fc_wire_{n}_{i}", "type": "function_call",
            "call_id": call.id or f"call_wire_{n}_{i}", "name": call.name,
            "arguments": _arguments(call) if done else "",
            "status": "completed" if done else "in_progress"}


def _output(reply: Reply, n: int) -> list[dict[str, Any]]:
    items = [_message_item(reply, n, done=True)] if reply.text else []
    return items + [_call_item(c, n, i, done=True) for i, c in enumerate(reply.tool_calls)]


def _response(reply: Reply, body: dict[str, Any], n: int, status: str) -> dict[str, Any]:
    final = status != "in_progress"
    return {"id": f"resp_wire_{n}", "object": "response", "created_at": 1700000000,
            "status": status, "error": None,
            "incomplete_details": ({"reason": "max_output_tokens"}
                                   if status == "incomplete" else None),
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"), "model": body.get("model", ""),
            "output": _output(reply, n) if final else [], "parallel_tool_calls": True,
            "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
            "store": body.get("store", True), "temperature": 1.0,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto",
            "tools": body.get("tools", []), "top_p": 1.0, "truncation": "disabled",
            "usage": _usage(reply) if final else None, "user": None, "metadata": {}}


def _status(reply: Reply) -> str:
    return "incomplete" if reply.stop_reason == "max_tokens" else "completed"


def _events(reply: Reply, body: dict[str, Any], n: int) -> Iterator[tuple[str, dict]]:
    """(event name, data without sequence_number) in the API's order."""
    begun = _response(reply, body, n, "in_progress")
    yield "response.created", {"response": begun}
    yield "response.in_progress", {"response": begun}
    index = 0
    if reply.text:
        item_id = f"msg_wire_{n}"
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        yield "response.output_item.added", {"output_index": index,
                                             "item": _message_item(reply, n, done=False)}
        yield "response.content_part.added", {**where, "part": {
            "type": "output_text", "text": "", "annotations": []}}
        for piece in reply.text:
            yield "response.output_text.delta", {**where, "delta": piece, "logprobs": []}
        yield "response.output_text.done", {**where, "text": reply.full_text, "logprobs": []}
        yield "response.content_part.done", {**where, "part": {
            "type": "output_text", "text": reply.full_text, "annotations": []}}
        yield "response.output_item.done", {"output_index": index,
                                            "item": _message_item(reply, n, done=True)}
        index += 1
    for i, call in enumerate(reply.tool_calls):
        where = {"item_id": f"fc_wire_{n}_{i}", "output_index": index}
        yield "response.output_item.added", {"output_index": index,
                                             "item": _call_item(call, n, i, done=False)}
        for piece in split_json(_arguments(call)):
            yield "response.function_call_arguments.delta", {**where, "delta": piece}
        yield "response.function_call_arguments.done", {**where, "arguments": _arguments(call)}
        yield "response.output_item.done", {"output_index": index,
                                            "item": _call_item(call, n, i, done=True)}
        index += 1
    status = _status(reply)
    yield f"response.{status}", {"response": _response(reply, body, n, status)}


def _sse(events: Iterable[tuple[str, dict]]) -> list[bytes]:
    return [sse(name, {"type": name, "sequence_number": seq, **data})
            for seq, (name, data) in enumerate(events)]


def _error_body(reply: Reply) -> dict[str, Any]:
    return {"error": {"message": reply.message,
                      "type": ERROR_TYPES.get(reply.status, "server_error"),
                      "param": None, "code": ERROR_CODES.get(reply.status)}}


def render(reply: Reply, body: Any, n: int) -> Wire:
    body = body if isinstance(body, dict) else {}
    stream = bool(body.get("stream"))
    headers = {"x-request-id": f"req_wire_{n}", **dict(reply.headers)}
    if reply.status != 200:
        if reply.mid_stream and stream:
            begun = list(_events(reply, body, n))[:5]  # created ... first text delta
            error = ("error", {"code": "server_error", "message": reply.message,
                               "param": None})
            return Wire(200, "text/event-stream", _sse([*begun, error]), stream=True,
                        headers=headers)
        return Wire(reply.status, "application/json", [json.dumps(_error_body(reply)).encode()],
                    headers=headers)
    if reply.garbage:
        chunk = b"event: response.created\ndata: {not json\n\n" if stream else b"{not json"
        return Wire(200, "text/event-stream" if stream else "application/json", [chunk],
                    stream=stream, headers=headers)
    if stream:
        wire = Wire(200, "text/event-stream", _sse(_events(reply, body, n)), stream=True,
                    headers=headers)
    else:
        wire = Wire(200, "application/json",
                    [json.dumps(_response(reply, body, n, _status(reply))).encode()],
                    headers=headers)
    if reply.drop == "before":
        wire.drop_after = 0
    elif reply.drop == "mid":
        if stream:  # created, in_progress, item added, part added, a delta, half the next
            nxt = wire.chunks[5]
            wire.chunks = wire.chunks[:5] + [nxt[:len(nxt) // 2]]
            wire.drop_after = 6
        else:
            wire.chunks = [wire.chunks[0][:20], wire.chunks[0][20:]]
            wire.drop_after = 1
    return wire


def failed(message: str, code: str = "server_error") -> Reply:
    """A stream that begins an answer, then says ``response.failed`` with ``message``."""
    answer = Reply(text=("Half ", "an answer"))
    events = list(_events(answer, {}, 0))[:5]
    gone = _response(answer, {}, 0, "failed")
    gone.update(output=[], usage=None, error={"code": code, "message": message})
    return raw(*_sse([*events, ("response.failed", {"response": gone})]))


def cut_mid_event(text: str) -> Reply:
    """A stream that begins answering ``text`` and then ends cleanly (the chunked body is
    finished) halfway through an event: no ``response.completed`` ever comes."""
    answer = Reply(text=pieces(text))
    chunks = _sse(_events(answer, {}, 0))
    return raw(*chunks[:5], chunks[5][:len(chunks[5]) // 2])


@contextmanager
def responses_server(script: Iterable[Reply] = (), *,
                     api_key: str = "test-openai-key") -> Iterator[WireServer]:
    """A local Responses API; ``base_url`` ends in ``/v1`` as OPENAI_BASE_URL does, and
    ``env`` sets OPENAI_BASE_URL and OPENAI_API_KEY."""
    with serve(WireServer(render, script, paths=("/v1/responses",),
                          stream_type="text/event-stream")) as srv:
        srv.base_url = srv.root + "/v1"
        srv.env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": api_key}
        yield srv
