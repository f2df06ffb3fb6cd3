"""The Anthropic Messages API: ``POST /v1/messages``, JSON or SSE (``"stream": true``); and
the Files API (beta): ``POST /v1/files`` (multipart) and ``DELETE /v1/files/{id}``
(``FilesApi``)."""

from __future__ import annotations

import email
import email.policy
import itertools
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .script import Received, Reply, error
from .server import Wire, WireServer, serve, split_json, sse

FILES_BETA = "files-api-2025-04-14"

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
                      "output_tokens": reply.usage[1] if final else 1,
                      "cache_read_input_tokens": reply.cache[0],
                      "cache_creation_input_tokens": reply.cache[1]}}


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


@dataclass(frozen=True)
class Upload:
    """A file the Files API took: its id, and the multipart part as sent."""

    file_id: str
    filename: str
    media_type: str
    data: bytes


class FilesApi:
    """The Files API of a local Anthropic API, in memory; answered before the script, so it
    uses no scripted reply. Uploads and deletes need the ``anthropic-beta: files-api-...``
    header (else HTTP 400), as does a message that names a file (``{"type": "file",
    "file_id"}`` as an image's source); a message naming a file not stored gets HTTP 404
    naming it, as the API answers for an expired or deleted file.

    Recorded: ``uploads`` (every ``Upload`` taken, in order), ``delete_requests`` (every id a
    DELETE named), ``deleted`` (those deleted). Scripted: ``refuse_uploads(*replies)`` and
    ``refuse_deletes(*replies)`` answer the next uploads / deletes with those replies
    (``error(...)``), one each; ``expire(file_id)`` forgets a file; ``lose_next(n)``: the next
    ``n`` messages that name files get HTTP 404 naming their first file, which is forgotten.
    """

    def __init__(self) -> None:
        self.stored: dict[str, Upload] = {}
        self.uploads: list[Upload] = []
        self.delete_requests: list[str] = []
        self.deleted: list[str] = []
        self._upload_replies: list[Reply] = []
        self._delete_replies: list[Reply] = []
        self._lose = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def refuse_uploads(self, *replies: Reply) -> None:
        with self._lock:
            self._upload_replies.extend(replies)

    def refuse_deletes(self, *replies: Reply) -> None:
        with self._lock:
            self._delete_replies.extend(replies)

    def expire(self, file_id: str) -> None:
        with self._lock:
            self.stored.pop(file_id, None)

    def lose_next(self, n: int = 1) -> None:
        with self._lock:
            self._lose += n

    def route(self, received: Received) -> Wire | None:
        path = received.path.split("?")[0]
        with self._lock:
            if path == "/v1/files" and received.method == "POST":
                return self._upload(received)
            if path.startswith("/v1/files/") and received.method == "DELETE":
                return self._delete(received, path.removeprefix("/v1/files/"))
            if path == "/v1/messages":
                return self._check(received)
        return None

    def _upload(self, received: Received) -> Wire:
        if not _beta(received):
            return _error(400, f"the Files API needs the header anthropic-beta: {FILES_BETA}")
        if self._upload_replies:
            return _error_reply(self._upload_replies.pop(0))
        part = _file_part(received)
        if part is None:
            return _error(400, "file: a multipart part named 'file' is required")
        upload = Upload(f"file_wire_{next(self._ids)}", *part)
        self.uploads.append(upload)
        self.stored[upload.file_id] = upload
        return _json(200, {"id": upload.file_id, "type": "file", "filename": upload.filename,
                           "mime_type": upload.media_type, "size_bytes": len(upload.data),
                           "created_at": "2025-06-01T12:00:00Z", "downloadable": False})

    def _delete(self, received: Received, file_id: str) -> Wire:
        self.delete_requests.append(file_id)
        if not _beta(received):
            return _error(400, f"the Files API needs the header anthropic-beta: {FILES_BETA}")
        if self._delete_replies:
            return _error_reply(self._delete_replies.pop(0))
        if self.stored.pop(file_id, None) is None:
            return _error(404, f"File {file_id} not found.")
        self.deleted.append(file_id)
        return _json(200, {"id": file_id, "type": "file_deleted"})

    def _check(self, received: Received) -> Wire | None:
        named = file_ids(received.body)
        if not named:
            return None
        if not _beta(received):
            return _error(400, "messages.0.content.1.image.source: file sources need the "
                               f"header anthropic-beta: {FILES_BETA}")
        if self._lose:
            self._lose -= 1
            self.stored.pop(named[0], None)
        for file_id in named:
            if file_id not in self.stored:
                return _error(404, f"File {file_id} not found.")
        return None


def file_ids(body: Any) -> list[str]:
    """The file ids a message request names as image sources, in order."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            source = value.get("source")
            if value.get("type") == "image" and isinstance(source, dict) \
                    and source.get("type") == "file":
                found.append(source.get("file_id"))
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(body)
    return found


def _beta(received: Received) -> bool:
    return FILES_BETA in received.headers.get("anthropic-beta", "")


def _file_part(received: Received) -> tuple[str, str, bytes] | None:
    """(filename, content type, bytes) of the multipart part named ``file``."""
    head = f"Content-Type: {received.headers.get('content-type', '')}\r\n\r\n".encode()
    message = email.message_from_bytes(head + received.raw, policy=email.policy.HTTP)
    if not message.is_multipart():
        return None
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "file":
            return (part.get_filename() or "", part.get_content_type(),
                    part.get_payload(decode=True) or b"")
    return None


def _json(status: int, body: Any) -> Wire:
    return Wire(status, "application/json", [json.dumps(body).encode()])


def _error(status: int, message: str) -> Wire:
    return _error_reply(error(status, message, retry_after=None))


def _error_reply(reply: Reply) -> Wire:
    return render(reply, {}, 0)


@contextmanager
def anthropic_server(script: Iterable[Reply] = (), *,
                     api_key: str = "test-anthropic-key") -> Iterator[WireServer]:
    """A local Anthropic Messages API with its Files API (``srv.files``, a ``FilesApi``);
    ``env`` sets ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY."""
    with serve(WireServer(render, script, paths=("/v1/messages",),
                          stream_type="text/event-stream")) as srv:
        srv.files = FilesApi()
        srv.routes.append(srv.files.route)
        srv.env = {"ANTHROPIC_BASE_URL": srv.base_url, "ANTHROPIC_API_KEY": api_key}
        yield srv
