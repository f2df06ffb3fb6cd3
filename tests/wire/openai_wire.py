"""OpenAI chat completions: ``POST /v1/chat/completions``, JSON or SSE ending ``[DONE]``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .script import Reply
from .server import Wire, WireServer, serve, split_json, sse

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
               403: "permission_error", 404: "invalid_request_error", 429: "rate_limit_error"}
ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


def _arguments(call) -> str:
    return call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)


def _finish(reply: Reply) -> str:
    return reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: Reply) -> dict[str, Any]:
    prompt = reply.usage[0] + sum(reply.cache)  # OpenAI counts cached tokens in the prompt
    usage = {"prompt_tokens": prompt, "completion_tokens": reply.usage[1],
             "total_tokens": prompt + reply.usage[1]}
    if any(reply.cache):
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cache[0]}
    return usage


def _call_id(call, n: int, i: int) -> str:
    return call.id or f"call_wire_{n}_{i}"


def _completion(reply: Reply, model: str, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.full_text or None,
                               "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": _call_id(c, n, i), "type": "function",
             "function": {"name": c.name, "arguments": _arguments(c)}}
            for i, c in enumerate(reply.tool_calls)]
    return {"id": f"chatcmpl-wire-{n}", "object": "chat.completion", "created": 1700000000,
            "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                         "finish_reason": _finish(reply)}],
            "usage": _usage(reply)}


def _chunks(reply: Reply, model: str, n: int, include_usage: bool) -> Iterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse(None, {"id": f"chatcmpl-wire-{n}", "object": "chat.completion.chunk",
                          "created": 1700000000, "model": model,
                          "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                       "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in reply.text:
        yield chunk({"content": piece})
    for i, call in enumerate(reply.tool_calls):
        yield chunk({"tool_calls": [{"index": i, "id": _call_id(call, n, i), "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}]})
        for piece in split_json(_arguments(call)):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, _finish(reply))
    if include_usage:
        yield sse(None, {"id": f"chatcmpl-wire-{n}", "object": "chat.completion.chunk",
                         "created": 1700000000, "model": model, "choices": [],
                         "usage": _usage(reply)})
    yield b"data: [DONE]\n\n"


def render(reply: Reply, body: Any, n: int) -> Wire:
    body = body if isinstance(body, dict) else {}
    stream = bool(body.get("stream"))
    model = body.get("model", "")
    headers = {"x-request-id": f"req_wire_{n}", **dict(reply.headers)}
    if reply.status != 200:
        err = {"error": {"message": reply.message,
                         "type": ERROR_TYPES.get(reply.status, "server_error"),
                         "param": None, "code": ERROR_CODES.get(reply.status)}}
        if reply.mid_stream and stream:
            chunks = list(_chunks(reply, model, n, False))[:2] + [sse(None, err)]
            return Wire(200, "text/event-stream", chunks, stream=True, headers=headers)
        return Wire(reply.status, "application/json", [json.dumps(err).encode()],
                    headers=headers)
    if reply.garbage:
        chunk = b"data: {not json\n\n" if stream else b"{not json"
        return Wire(200, "text/event-stream" if stream else "application/json", [chunk],
                    stream=stream, headers=headers)
    if stream:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        wire = Wire(200, "text/event-stream", list(_chunks(reply, model, n, include_usage)),
                    stream=True, headers=headers)
    else:
        wire = Wire(200, "application/json",
                    [json.dumps(_completion(reply, model, n)).encode()], headers=headers)
    if reply.drop == "before":
        wire.drop_after = 0
    elif reply.drop == "mid":
        wire.drop_after = 2 if stream else 1  # role chunk, first text piece
        if not stream:
            wire.chunks = [wire.chunks[0][:20], wire.chunks[0][20:]]
    return wire


@contextmanager
def openai_server(script: Iterable[Reply] = (), *,
                  api_key: str = "test-openai-key") -> Iterator[WireServer]:
    """A local OpenAI-compatible server; ``base_url`` ends in ``/v1`` as OPENAI_BASE_URL does,
    and ``env`` sets OPENAI_BASE_URL and OPENAI_API_KEY."""
    with serve(WireServer(render, script, paths=("/v1/chat/completions",),
                          stream_type="text/event-stream")) as srv:
        srv.base_url = srv.root + "/v1"
        srv.env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": api_key}
        yield srv
