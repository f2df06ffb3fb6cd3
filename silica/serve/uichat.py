"""``POST /api/chat`` and ``GET /api/chat/{id}/stream``: the AI SDK's chat transport
(``DefaultChatTransport``, what ``useChat`` uses) over silica's sessions. The chunks are
``silica.serve.uistream``'s.

    chat = UiChat(runner, bus, logs)
    response = await chat.post(request)          # a turn's UI message stream
    response = await chat.resume(session_id, request)  # 204 when no turn runs

The body is ``{"id", "messages", "trigger", "messageId"}``, and for a session that does not
exist yet optionally ``"agent"``, ``"provider"``, ``"model"`` (as ``POST /sessions``); a
``"workspace"`` goes with the message. ``id`` is the session: it is made if new. silica keeps
the session's history itself, so only the last message is read:

- a ``user`` message: its ``text`` parts (joined by line breaks) are the message, its
  ``file`` parts its images, through the message intake (``silica.serve.uploads``: a ``data:``
  URL, or an http(s) URL fetched as an image URL is). A part's ``mediaType`` and the type its
  ``data:`` URL names must agree, and both must be what the bytes are. ``data-*`` parts are
  left aside; another part is refused. The answer is the turn's stream.
- an ``assistant`` message (the AI SDK sends it after ``addToolApprovalResponse``): its tool
  parts whose ``approval`` holds ``approved`` answer those approvals (``approved``: run it
  once; else deny), and the answer is the rest of the turn's stream.

Everything is checked before anything is taken: a refused body changes nothing, and a session
this request made is removed again. Besides the intake's refusals: 400 ``invalid_field``
(a wrong shape), ``unknown_field``, ``invalid_session_id``, ``unsupported_trigger``
(``regenerate-message``: silica does not rewrite a session's history), ``no_approval``; 413
``too_many_parts`` (more than ``MAX_PARTS`` parts in all, or ``MAX_MESSAGE_PARTS`` in the
last message); 422 ``invalid_image`` (a part whose ``mediaType`` and ``data:`` URL disagree).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from silica.agent.sessions import SessionError, check_id
from silica.security.text import safe_text
from silica.serve.bus import EventBus, turn_start
from silica.serve.errors import ApiError, no_session
from silica.serve.eventlog import before
from silica.serve.replay import TurnLogs
from silica.serve.turns import TurnRunner
from silica.serve.uistream import answered_stream, stream_from, ui_stream
from silica.serve.uploads import UploadRefused, data_url, json_body, json_cap

MAX_PARTS = 5000  # parts of every message of a body together
MAX_MESSAGE_PARTS = 200  # parts of the last message
HISTORY_BYTES = 8 * 1024 * 1024  # what earlier messages may add to the intake's cap
KEYS = ("id", "messages", "trigger", "messageId", "agent", "provider", "model", "workspace")
EXAMPLE = ('{"id": "<session>", "messages": [{"id": "...", "role": "user", "parts": '
           '[{"type": "text", "text": "..."}]}], "trigger": "submit-message"}')


@dataclass
class ChatBody:
    """What a ``POST /api/chat`` asks for: a message (the intake's JSON, ``{"message",
    "images", "workspace"?}``) or answers to approvals (``(id, approved)``)."""

    session_id: str
    message: dict | None = None
    approvals: list[tuple[str, bool]] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)  # agent, provider, model


def parse_chat(doc: Any, home: Path) -> ChatBody:
    """The request in a ``POST /api/chat`` body (a parsed JSON value); ``ApiError`` saying
    what is wrong for anything else. Never raises another exception."""
    if not isinstance(doc, dict):
        raise _bad(f"the body must be a JSON object like {EXAMPLE}")
    unknown = [k for k in doc if k not in KEYS]
    if unknown:
        raise ApiError(400, "unknown_field", f"unknown field {safe_text(str(unknown[0]))[:100]!r}"
                       f"; a chat request has {', '.join(KEYS)}")
    sid = doc.get("id")
    try:
        if not isinstance(sid, str):
            raise SessionError("not a string")
        check_id(sid)
    except SessionError:
        raise ApiError(400, "invalid_session_id", '"id" (the chat, a silica session) must be '
                       "1-64 letters, digits, '_' or '-', starting with a letter or digit") \
            from None
    trigger = doc.get("trigger", "submit-message")
    if trigger == "regenerate-message":
        raise ApiError(400, "unsupported_trigger", "silica keeps each session's history and "
                       "does not rewrite it, so a reply cannot be regenerated; send the "
                       "message again")
    if trigger != "submit-message":
        raise _bad('"trigger" must be "submit-message"')
    if doc.get("messageId") is not None and not isinstance(doc["messageId"], str):
        raise _bad('"messageId" must be a string')
    options = {}
    for key in ("agent", "provider", "model", "workspace"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise _bad(f'"{key}" must be a string')
        if doc.get(key) and key != "workspace":
            options[key] = doc[key]
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad(f'"messages" must be a list of UI messages, the last one being the '
                   f"person's; a chat request is like {EXAMPLE}")
    parts = sum(len(m["parts"]) for m in messages
                if isinstance(m, dict) and isinstance(m.get("parts"), list))
    if len(messages) + parts > MAX_PARTS:
        raise ApiError(413, "too_many_parts", f"the body holds {len(messages):,} messages "
                       f"with {parts:,} parts, more than the {MAX_PARTS:,} silica reads; "
                       "silica keeps the history itself: send only the last message "
                       "(prepareSendMessagesRequest in the AI SDK's transport)")
    last = messages[-1]
    if not isinstance(last, dict) or not isinstance(last.get("parts"), list):
        raise _bad('the last message must be an object with "role" and "parts" (a list)')
    if len(last["parts"]) > MAX_MESSAGE_PARTS:
        raise ApiError(413, "too_many_parts", f"the last message has {len(last['parts']):,} "
                       f"parts, more than the {MAX_MESSAGE_PARTS} one message may have")
    body = ChatBody(sid, options=options)
    if last.get("role") == "user":
        body.message = _message(last["parts"], doc.get("workspace"))
    elif last.get("role") == "assistant":
        body.approvals = _approvals(last["parts"])
    else:
        raise _bad("the last message must be the person's (role \"user\"), or the "
                   "assistant's answering approvals")
    return body


def _message(parts: list, workspace: str | None) -> dict:
    texts: list[str] = []
    images: list[dict] = []
    for index, part in enumerate(parts):
        where = f"the last message's parts[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise _bad(f'{where} must be an object with a "type"')
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise _bad(f'{where}.text must be a string')
            texts.append(part["text"])
        elif kind == "file":
            images.append(_image(part, where, len(images) + 1))
        elif not kind.startswith("data-"):
            raise _bad(f'{where} is a {safe_text(kind)[:60]!r} part; a person\'s message has '
                       '"text" and "file" (image) parts')
    message: dict = {"message": "\n".join(texts), "images": images}
    if workspace is not None:
        message["workspace"] = workspace
    return message


def _image(part: dict, where: str, number: int) -> dict:
    url, media = part.get("url"), part.get("mediaType")
    if not isinstance(url, str) or not isinstance(media, str):
        raise _bad(f'{where} (a file) must have "url" and "mediaType" strings')
    name = part.get("filename")
    image: dict = {"name": name if isinstance(name, str) else None}
    if url[:5].lower() == "data:":
        try:  # its mediaType and the type its data: URL names must agree
            data_url(url, media, f"image {number}", f"{where}'s mediaType")
        except UploadRefused as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None
        image.update(data=url, mime=media)
    elif url[:8].lower() == "https://" or url[:7].lower() == "http://":
        image["url"] = url
    else:
        raise _bad(f"{where} (a file) must have a data: or http(s) URL")
    return {k: v for k, v in image.items() if v is not None}


def _approvals(parts: list) -> list[tuple[str, bool]]:
    found = []
    for part in parts:
        if not isinstance(part, dict) or part.get("state") != "approval-responded":
            continue
        approval = part.get("approval")
        if not isinstance(approval, dict) or not isinstance(approval.get("id"), str) \
                or not isinstance(approval.get("approved"), bool):
            raise _bad('an answered tool part\'s "approval" must be {"id": str, "approved": '
                       "bool}")
        found.append((approval["id"], approval["approved"]))
    if not found:
        raise ApiError(400, "no_approval", "the last message is the assistant's and answers "
                       "no approval; send the person's message last")
    return found


def _bad(message: str) -> ApiError:
    return ApiError(400, "invalid_field", message)


class UiChat:
    """The two routes' work (see the module docstring)."""

    def __init__(self, runner: TurnRunner, bus: EventBus, logs: TurnLogs) -> None:
        self.runner, self.bus, self.logs = runner, bus, logs

    async def post(self, request: Request) -> Response:
        try:
            return await self._post(request)
        except UploadRefused as exc:
            if exc.code != "body_too_large":
                raise
            raise UploadRefused(413, exc.code, f"{exc.message}. silica keeps the chat's "
                                "history itself: send only the last message "
                                "(prepareSendMessagesRequest in the AI SDK's transport)") \
                from None

    async def _post(self, request: Request) -> Response:
        runner = self.runner
        cap = json_cap(runner.options.settings.images) + HISTORY_BYTES
        async with json_body(request, cap=cap, budget=runner.bodies, example=EXAMPLE) as doc:
            body = parse_chat(doc, runner.home)
            sid = body.session_id
            if body.message is None:
                return await self._answer(request, body)
            made = not runner.exists(sid)
            if made:
                runner.create_session(session_id=sid, **body.options)
            try:
                turn = await runner.begin(sid, request, doc=body.message)
            except BaseException:
                if made:
                    with contextlib.suppress(Exception):
                        await asyncio.to_thread(runner.delete, sid)
                raise
            # before anything is awaited: the turn has not run yet
            message = self.bus.published(sid) if self.bus.shared else None
            if message is not None:  # its events come back through the shared bus
                return stream_from(self.bus, sid, turn.turn_id, before(message),
                                   base_url=_base(request))
            turn_log = self.logs.start(sid, turn.turn_id)
        return ui_stream(self.bus, turn_log, base_url=_base(request))

    async def _answer(self, request: Request, body: ChatBody) -> Response:
        sid = body.session_id
        if not self.runner.exists(sid):
            raise no_session(sid)
        for approval_id, approved in body.approvals:
            await self.runner.approvals.reach(sid, approval_id,
                                              "once" if approved else "deny")
        ids = [approval_id for approval_id, _ in body.approvals]
        turn_log = self.logs.running(sid)
        if turn_log is None:  # not followed here: read from the session's events
            found = await turn_start(self.bus, sid)
            if found is None:
                return answered_stream()
            key, turn_id = found
            return stream_from(self.bus, sid, turn_id, before(key), base_url=_base(request),
                               answered=ids)
        starts = [turn_log.after("approval", "id", approval_id) or 0 for approval_id in ids]
        start = max([turn_log.paused_at, *starts])
        return ui_stream(self.bus, turn_log, base_url=_base(request), start=start,
                         answered=ids)

    async def resume(self, session_id: str, request: Request) -> Response:
        """The running turn's stream from its start, wherever it runs (read from the
        session's events when not here); 204 when none runs."""
        if not self.runner.exists(session_id):
            raise no_session(session_id)
        turn_log = self.logs.running(session_id)
        if turn_log is None:
            found = await turn_start(self.bus, session_id)
            if found is None:
                return Response(status_code=204)
            key, turn_id = found
            return stream_from(self.bus, session_id, turn_id, before(key),
                               base_url=_base(request))
        if turn_log.overflowed:
            raise ApiError(409, "turn_too_long", "the running turn has said more than silica "
                           "keeps to replay; wait for it to end and read GET "
                           f"/sessions/{session_id}/history")
        return ui_stream(self.bus, turn_log, base_url=_base(request))


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")
