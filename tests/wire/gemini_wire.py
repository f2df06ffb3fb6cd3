"""The Gemini API: ``POST /v1beta/models/{model}:generateContent`` (one JSON
``GenerateContentResponse``) and ``:streamGenerateContent?alt=sse`` (one per SSE event).

Gemini streams text piece by piece and sends each function call whole. It gives function
calls no ``id`` unless the script names one, and puts a ``thoughtSignature`` on the first
function call part of each reply (``signature(n)`` for request ``n``), as Gemini 3 models do.
Every chunk carries ``usageMetadata``; the last one carries ``finishReason`` (``STOP`` unless
the script says otherwise, even after function calls). ``usage=(input, output)`` and
``cache=(read, _)`` of a scripted reply become ``promptTokenCount`` (input + read, as Gemini
counts cached tokens in the prompt), ``candidatesTokenCount`` and
``cachedContentTokenCount``. Errors are Google's ``{"error": {"code", "message",
"status"}}``; ``mid_stream`` ones arrive as such an object in an SSE event.

``prompt_blocked(reason)`` and ``no_candidates()`` script the replies that hold no candidate
at all: a prompt refused by the safety filters (``promptFeedback.blockReason``), and an
answer with nothing in it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .script import Reply, raw
from .server import Wire, WireServer, serve

STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
            500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
_ROUTE = re.compile(r"/v1beta/(models|tunedModels)/[^/:]+:(generateContent|streamGenerateContent)")
_END = b"\r\n\r\n"  # Gemini ends each server-sent event with a CRLF blank line


class _Routes:
    """The paths the server answers: any model, either method."""

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and _ROUTE.fullmatch(path) is not None


def signature(n: int) -> str:
    """The ``thoughtSignature`` (base64) of the first function call in reply ``n``."""
    return base64.b64encode(f"wire-thought-signature-{n}".encode()).decode()


def _event(data: Any) -> bytes:
    return b"data: " + json.dumps(data).encode() + _END


def _usage(reply: Reply, final: bool = True) -> dict[str, int]:
    prompt = reply.usage[0] + reply.cache[0]
    usage = {"promptTokenCount": prompt, "totalTokenCount": prompt}
    if final:
        usage |= {"candidatesTokenCount": reply.usage[1],
                  "totalTokenCount": prompt + reply.usage[1]}
    if reply.cache[0]:
        usage["cachedContentTokenCount"] = reply.cache[0]
    return usage


def _calls(reply: Reply, n: int) -> list[dict[str, Any]]:
    parts = []
    for i, call in enumerate(reply.tool_calls):
        args: Any = call.arguments if call.raw_arguments is None else call.raw_arguments
        function: dict[str, Any] = {"name": call.name, "args": args}
        if call.id:
            function["id"] = call.id
        part: dict[str, Any] = {"functionCall": function}
        if i == 0:
            part["thoughtSignature"] = signature(n)
        parts.append(part)
    return parts


def _chunk(parts: list[dict[str, Any]], model: str, n: int, usage: dict[str, int],
           finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"index": 0}
    if parts:
        candidate["content"] = {"parts": parts, "role": "model"}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": model,
            "responseId": f"wire-{n}"}


def _chunks(reply: Reply, model: str, n: int) -> Iterator[dict[str, Any]]:
    finish = reply.stop_reason or "STOP"
    texts = [{"text": piece} for piece in reply.text]
    last = _calls(reply, n) or texts[-1:]
    for part in texts if reply.tool_calls else texts[:-1]:
        yield _chunk([part], model, n, _usage(reply, final=False))
    yield _chunk(last, model, n, _usage(reply), finish)


def _model(path: str) -> str:
    found = re.search(r"/(?:models|tunedModels)/([^/:]+):", path)
    return found.group(1) if found else ""


def render(reply: Reply, body: Any, n: int, path: str = "") -> Wire:
    stream = "streamGenerateContent" in path
    model = _model(path)
    headers = dict(reply.headers)
    if reply.status != 200:
        err = {"error": {"code": reply.status, "message": reply.message,
                         "status": STATUSES.get(reply.status, "UNKNOWN")}}
        if reply.mid_stream and stream:
            chunks = [_event(c) for c in list(_chunks(reply, model, n))[:2]] + [_event(err)]
            return Wire(200, "text/event-stream", chunks, stream=True, headers=headers)
        return Wire(reply.status, "application/json", [json.dumps(err).encode()],
                    headers=headers)
    if reply.garbage:
        chunk = b"data: {not json" + _END if stream else b"{not json"
        return Wire(200, "text/event-stream" if stream else "application/json", [chunk],
                    stream=stream, headers=headers)
    if stream:
        wire = Wire(200, "text/event-stream", [_event(c) for c in _chunks(reply, model, n)],
                    stream=True, headers=headers)
    else:
        parts = ([{"text": reply.full_text}] if reply.text else []) + _calls(reply, n)
        whole = _chunk(parts, model, n, _usage(reply), reply.stop_reason or "STOP")
        wire = Wire(200, "application/json", [json.dumps(whole).encode()], headers=headers)
    if reply.drop == "before":
        wire.drop_after = 0
    elif reply.drop == "mid":
        wire.drop_after = 1  # the first text piece
        if not stream:
            wire.chunks = [wire.chunks[0][:20], wire.chunks[0][20:]]
    return wire


def prompt_blocked(reason: str = "SAFETY", message: str | None = None) -> Reply:
    """A streamed reply with no candidate: the prompt was refused (``blockReason``)."""
    feedback: dict[str, Any] = {"blockReason": reason, "safetyRatings": [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}]}
    if message:
        feedback["blockReasonMessage"] = message
    return raw(_event({"promptFeedback": feedback,
                       "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
                       "modelVersion": "wire", "responseId": "wire-blocked"}))


def no_candidates() -> Reply:
    """A streamed reply with no candidate and no reason given."""
    return raw(_event({"usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
                       "modelVersion": "wire", "responseId": "wire-empty"}))


def _server(script: Iterable[Reply]) -> WireServer:
    srv: WireServer

    def rendered(reply: Reply, body: Any, n: int) -> Wire:
        # the method (stream or not) and the model are in the path of request n
        return render(reply, body, n, srv.received[n - 1].path)

    srv = WireServer(rendered, script, paths=_Routes(),  # type: ignore[arg-type]
                     stream_type="text/event-stream")
    return srv


@contextmanager
def gemini_server(script: Iterable[Reply] = (), *,
                  api_key: str = "test-gemini-key") -> Iterator[WireServer]:
    """A local Gemini API; ``env`` sets GEMINI_BASE_URL and GEMINI_API_KEY."""
    with serve(_server(script)) as srv:
        srv.env = {"GEMINI_BASE_URL": srv.base_url, "GEMINI_API_KEY": api_key}
        yield srv
