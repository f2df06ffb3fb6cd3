"""The Socket.IO transport: namespace ``/events`` on path ``/socket.io``.

A client connects (with ``auth={"token": T}``, or the ``Authorization`` header or the cookie,
when the daemon has a token), then emits ``join`` ``{"session_id", "inline_images"?: bool,
"after"?: "<event id>"}`` and gets the ack ``{"ok": true}`` or ``{"error": {"code",
"message"}}``. Each event's data carries its id as ``event_id``; a client that joins again
with ``after`` (on this daemon or another sharing its Redis) first gets the events after that
id, or a ``reset`` when they are no longer kept, then the live ones, none twice. A joined
client is in room ``session:{sid}`` and in ``session:{sid}:refs`` or
``session:{sid}:inline`` (see ``silica.serve.bus``). ``leave`` ``{"session_id"}`` takes it
out. A joined client may answer a tool's request for values with ``elicitation_answer``
``{"session_id", "id", "action", "content"}`` (as ``POST
/sessions/{sid}/elicitations/{id}``); the ack is ``{"ok": true, "id", "action"}`` or the
error the route would send. It may approve a shell command with ``approval_answer``
``{"session_id", "id", "decision"}`` (as ``POST /sessions/{sid}/approvals/{id}``); the ack
is ``{"ok": true, "id", "decision"}`` or the route's error. A refused connect gets a
``connect_error`` with the message and the data ``{"code", "message"}``.

Before the token is checked a client costs little and not for long: at most ``[serve]
max_pending_socketio`` Engine.IO sessions may be open without a connected ``/events``
(a new one disconnects the oldest), each for at most ``[serve] header_timeout`` seconds.

A malformed packet (JSON nested too deeply, not an event list, a reserved event name)
disconnects its client; it never reaches a handler or a traceback.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
from collections.abc import Callable
from typing import Any

import engineio  # type: ignore[import-untyped]  # the package ships no type hints
import socketio  # type: ignore[import-untyped]  # the package ships no type hints

from silica.agent.sessions import SessionError, session_exists
from silica.security.text import safe_text
from silica.serve.approvals import Approvals, read_answer
from silica.serve.asking import Elicitations
from silica.serve.auth import cookie_token, host_allowed, origin_allowed, token_matches
from silica.serve.bodies import JSON
from silica.serve.bus import NAMESPACE, EventBus, room
from silica.serve.errors import ApiError, error_body
from silica.serve.eventlog import parse_id
from silica.serve.options import ServeOptions

log = logging.getLogger("silica.serve")


def make_sio(options: ServeOptions, bus: EventBus, asking: Elicitations | None = None,
             approvals: Approvals | None = None) -> socketio.AsyncServer:
    """The Socket.IO server, its events emitted through ``bus``; ``asking`` takes its
    clients' answers to elicitations, ``approvals`` to shell approvals (``None``: none are
    taken)."""

    def allowed(origin: str | None, environ: dict) -> bool:
        return origin_allowed(origin, environ.get("HTTP_HOST", ""),
                              environ.get("wsgi.url_scheme", "http"),
                              options.settings.serve.cors_origins)

    serve = options.settings.serve
    sio = Server(async_mode="asgi", client_manager=LocalManager(),
                 cors_allowed_origins=allowed, logger=False, engineio_logger=OneLine(log),
                 max_pending=serve.max_pending_socketio, timeout=serve.header_timeout)
    sio.register_namespace(Events(options, bus, asking, approvals))
    bus.attach(sio)
    return sio


class Server(socketio.AsyncServer):
    """python-socketio's server with two rules added: packets are read as silica reads
    every client body (``silica.serve.bodies``), and a malformed one closes its connection
    with one log line, not a traceback; clients that have not connected to ``/events`` with
    the token are few (``max_pending``: a new one disconnects the oldest) and brief
    (disconnected after ``timeout`` seconds)."""

    def __init__(self, *, max_pending: int, timeout: float, **kwargs: Any) -> None:
        super().__init__(json=JSON, **kwargs)
        self.max_pending, self.handshake_timeout = max_pending, timeout
        self.pending: collections.OrderedDict[str, asyncio.TimerHandle] = \
            collections.OrderedDict()

    async def _handle_eio_connect(self, eio_sid: str, environ: dict) -> Any:
        while len(self.pending) >= self.max_pending:
            oldest, timer = self.pending.popitem(last=False)
            timer.cancel()
            _spawn(self.eio.disconnect(oldest))
        self.pending[eio_sid] = asyncio.get_running_loop().call_later(
            self.handshake_timeout, self._expired, eio_sid)
        return await super()._handle_eio_connect(eio_sid, environ)

    def _expired(self, eio_sid: str) -> None:
        if self.pending.pop(eio_sid, None) is not None:
            _spawn(self.eio.disconnect(eio_sid))

    def _settled(self, eio_sid: str) -> None:
        timer = self.pending.pop(eio_sid, None)
        if timer is not None:
            timer.cancel()

    async def _handle_connect(self, eio_sid: str, namespace: str | None, data: Any) -> None:
        await super()._handle_connect(eio_sid, namespace, data)
        sid = self.manager.sid_from_eio_sid(eio_sid, namespace or "/")
        if sid is not None and self.manager.is_connected(sid, namespace or "/"):
            self._settled(eio_sid)  # connected: the token was shown (or none is needed)

    async def _handle_eio_disconnect(self, eio_sid: str, reason: Any = None) -> None:
        self._settled(eio_sid)
        await super()._handle_eio_disconnect(eio_sid, reason)

    def _engineio_server_class(self) -> type[engineio.AsyncServer]:
        return EngineIO

    async def _handle_eio_message(self, eio_sid: str, data: Any) -> None:
        try:
            await super()._handle_eio_message(eio_sid, data)
        except _MALFORMED as exc:
            log.info("silica serve: a Socket.IO client sent a malformed packet (%s); "
                     "disconnected it", type(exc).__name__)
            await self.eio.disconnect(eio_sid)

    async def _handle_event(self, eio_sid: str, namespace: str | None, id: Any,
                            data: Any) -> None:
        if not (isinstance(data, list) and data and isinstance(data[0], str)) \
                or data[0] in _RESERVED:
            raise ValueError("an event is a list: [name, argument]")
        await super()._handle_event(eio_sid, namespace, id, data)


class LocalManager(socketio.AsyncManager):
    """python-socketio's in-process manager, with ``emit_now``: what its ``emit`` does for an
    event without a callback (the packet encoded once, then queued for each client of the
    room, whose writer task sends it), done at once, without a task per client nor a wait
    for them. A client whose pings stopped is closed by Engine.IO's own check, as ever."""

    def emit_now(self, event: str, data: Any, namespace: str, room_name: str) -> None:
        eio = self.server.eio
        sockets = [eio.sockets.get(eio_sid)
                   for _, eio_sid in self.get_participants(namespace, room_name)]
        sockets = [s for s in sockets if s is not None and not s.closed]
        if not sockets:
            return
        encoded = self.server.packet_class(socketio.packet.EVENT, namespace=namespace,
                                           data=[event, data]).encode()
        packets = [engineio.packet.Packet(engineio.packet.MESSAGE, p)
                   for p in (encoded if isinstance(encoded, list) else [encoded])]
        for socket in sockets:
            for one in packets:
                socket.queue.put_nowait(one)


class OneLine(logging.LoggerAdapter):
    """python-engineio's log with no tracebacks: a client's bad packet or payload (bytes
    that are not UTF-8, a packet type it may not send) is one line naming the error."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})

    def exception(self, msg: object, *args: Any, **kwargs: Any) -> None:
        exc = sys.exc_info()[1]
        text = str(msg) % args if args else str(msg)
        self.warning("Socket.IO: %s (%s: %s)", text, type(exc).__name__,
                     safe_text(str(exc))[:200])


class EngineIO(engineio.AsyncServer):
    """python-engineio's server, disconnecting without waiting for the client: its own
    ``disconnect`` waits until a polling client fetches the close, which one that never
    polls never does, and the session and the request that asked stay meanwhile (a bad
    packet from such a client would hang its request for good)."""

    async def handle_request(self, *args: Any, **kwargs: Any) -> Any:
        """The library's, but a POST whose packets ended their own session and then held a
        bad one gets a 400: the library leaves its answer unset there and fails
        (``UnboundLocalError``) once ``disconnect`` below has already let the session go."""
        try:
            return await super().handle_request(*args, **kwargs)
        except UnboundLocalError:
            scope, _receive, send = args[:3]
            if scope.get("type") != "http":
                raise
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Bad packet"})

    async def disconnect(self, sid: str | None = None) -> None:
        for one in [sid] if sid is not None else list(self.sockets):
            socket = self.sockets.pop(one, None)
            if socket is None:
                continue
            await socket.close(wait=False)  # the client is told; disconnect handlers run
            await socket.queue.put(None)  # a WebSocket's writer then ends and closes it


_MALFORMED = (ValueError, TypeError, LookupError, AttributeError, RecursionError)
_RESERVED = frozenset({"connect", "connect_error", "disconnect", "__disconnect_final"})
_ONE_OBJECT = ("join", "leave", "elicitation_answer", "approval_answer")
_KEEP: set[asyncio.Task] = set()


def _spawn(coro: Any) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _KEEP.add(task)
    task.add_done_callback(_KEEP.discard)


class Events(socketio.AsyncNamespace):
    """Handlers of the ``/events`` namespace."""

    def __init__(self, options: ServeOptions, bus: EventBus, asking: Elicitations | None = None,
                 approvals: Approvals | None = None) -> None:
        super().__init__(NAMESPACE)
        self.options, self.bus, self.asking, self.approvals = options, bus, asking, approvals
        self.exists: Callable[[str], bool] = self._exists

    async def on_connect(self, sid: str, environ: dict, auth: Any = None) -> None:
        if not host_allowed(environ.get("HTTP_HOST", ""), self.options.loopback):
            raise _refused("host_not_allowed", "this daemon answers requests for 127.0.0.1 "
                           "or localhost only")
        if not self.options.token:
            return
        given = auth.get("token") if isinstance(auth, dict) else None
        if not isinstance(given, str):
            header = environ.get("HTTP_AUTHORIZATION", "")
            scheme, _, value = header.partition(" ")
            given = value.strip() if scheme.lower() == "bearer" else \
                cookie_token(environ.get("HTTP_COOKIE", ""))
        if not token_matches(self.options.token, given):
            raise _refused("unauthorized", "this daemon needs its token: connect with "
                           'auth={"token": "<token>"}')

    async def trigger_event(self, event: str, *args: Any) -> Any:
        if event in _ONE_OBJECT and len(args) > 2:  # (sid, data): one argument
            return error_body(f"invalid_{event}", f'emit "{event}" with one object')
        return await super().trigger_event(event, *args)

    async def on_join(self, sid: str, data: Any = None) -> dict:
        if not isinstance(data, dict) or not isinstance(data.get("session_id"), str):
            return error_body("invalid_join", 'join with {"session_id": "<id>", '
                              '"inline_images": false}')
        session_id = data["session_id"]
        inline = data.get("inline_images", False)
        if not isinstance(inline, bool):
            return error_body("invalid_join", '"inline_images" must be true or false')
        after = data.get("after")
        if after is not None:
            after = parse_id(after)
            if after is None:
                return error_body("invalid_event_id", '"after" must be an event id as the '
                                  'events carry it in "event_id", like "1764230000000-0"')
        try:
            known = self.exists(session_id)
        except SessionError as exc:
            return error_body("invalid_session_id", str(exc))
        if not known:
            return error_body("no_session", f"there is no session {session_id}; GET "
                              "/sessions lists them")
        await self.leave_session(sid, session_id)
        await self.bus.join(sid, session_id, inline=inline, after=after)
        return {"ok": True, "session_id": session_id, "inline_images": inline}

    async def on_leave(self, sid: str, data: Any = None) -> dict:
        if not isinstance(data, dict) or not isinstance(data.get("session_id"), str):
            return error_body("invalid_leave", 'leave with {"session_id": "<id>"}')
        await self.leave_session(sid, data["session_id"])
        return {"ok": True}

    async def on_elicitation_answer(self, sid: str, data: Any = None) -> dict:
        example = ('{"session_id": "<id>", "id": "<request id>", "action": "accept", '
                   '"content": {...}}')
        if not isinstance(data, dict) or not isinstance(data.get("session_id"), str) \
                or not isinstance(data.get("id"), str):
            return error_body("invalid_elicitation_answer", f"answer with {example}")
        session_id = data["session_id"]
        if self.asking is None or room(session_id) not in self.rooms(sid):
            return error_body("not_joined", f"join session {session_id[:64]} before "
                              "answering its requests")
        body = {k: v for k, v in data.items() if k not in ("session_id", "id")}
        try:
            answer = await self.asking.reach(session_id, data["id"], body)
        except ApiError as exc:
            return error_body(exc.code, exc.message, **exc.extra)
        return {"ok": True, "id": data["id"], "action": answer.action}

    async def on_approval_answer(self, sid: str, data: Any = None) -> dict:
        example = '{"session_id": "<id>", "id": "<approval id>", "decision": "once"}'
        if not isinstance(data, dict) or not isinstance(data.get("session_id"), str) \
                or not isinstance(data.get("id"), str):
            return error_body("invalid_approval_answer", f"answer with {example}")
        session_id = data["session_id"]
        if self.approvals is None or room(session_id) not in self.rooms(sid):
            return error_body("not_joined", f"join session {session_id[:64]} before "
                              "answering its approvals")
        try:
            decision = read_answer({k: v for k, v in data.items()
                                    if k not in ("session_id", "id")})
            await self.approvals.reach(session_id, data["id"], decision)
        except ApiError as exc:
            return error_body(exc.code, exc.message, **exc.extra)
        return {"ok": True, "id": data["id"], "decision": decision}

    async def leave_session(self, sid: str, session_id: str) -> None:
        for name in (room(session_id), room(session_id, "refs"), room(session_id, "inline")):
            await self.leave_room(sid, name)

    def _exists(self, session_id: str) -> bool:
        return session_exists(session_id, self.options.home)


def _refused(code: str, message: str) -> socketio.exceptions.ConnectionRefusedError:
    """A refused connect: the client's ``connect_error`` gets ``message``, and ``data``
    ``{"code", "message"}``."""
    return socketio.exceptions.ConnectionRefusedError(message,
                                                      {"code": code, "message": message})
