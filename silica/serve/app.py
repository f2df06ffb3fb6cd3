"""The daemon's ASGI app: thin routes over the agent, the event bus and its transports.

    app = create_app(ServeOptions.make(settings))     # run it with uvicorn (silica.serve.daemon)

Routes (errors are ``{"error": {"code", "message"}}``; docs/serve.md has the shapes):

    GET    /                                  the page (static/index.html)
    GET    /static/{name}                     its script and style
    GET    /static/vendor/{name}              the libraries it uses (markdown-it)
    GET    /sessions                          {"sessions": [...]}, newest first
    POST   /sessions                          201 {"session_id"}  (JSON agent, provider, ...)
    DELETE /sessions/{sid}                    {"deleted": sid}
    POST   /sessions/{sid}/messages           202 {"turn_id", "turn"}; ?wait=true: 200 the outcome
    GET    /sessions/{sid}/history            {"session_id", ..., "messages", "turns"}
    GET    /sessions/{sid}/images/{image_id}  the image (ETag, immutable); 307 to the object
                                              store with [storage] image_urls = "presigned"
    GET    /sessions/{sid}/events             server-sent events
    POST   /sessions/{sid}/elicitations/{eid} {"action", "content"}: answer a tool's request
    GET    /sessions/{sid}/apps/{call_id}     the MCP App of a call's result (HTML, CSP, data)
    POST   /sessions/{sid}/apps/{call_id}/calls  {"name", "arguments"}: a call from that app
    GET    /apps/sandbox                      the apps' sandbox page (other loopback name only)
    POST   /sessions/{sid}/approvals/{aid}    {"decision"}: approve or deny a shell command
    POST   /api/chat                          the AI SDK's chat request: the turn's UI stream
    GET    /api/chat/{sid}/stream             the running turn's UI stream again; 204 idle
    /socket.io                                Socket.IO, namespace /events

Around them: ``Guard`` (Host, Origin, token; ``silica.serve.auth``) for everything, and
Starlette's ``CORSMiddleware`` for the routes when ``[serve] cors_origins`` names origins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import socketio  # type: ignore[import-untyped]  # the package ships no type hints
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from silica.agent.sessions import SessionError, check_id, list_sessions, load_session
from silica.errors import SilicaError
from silica.images.store import ID_PATTERN, StoreError, open_image_store
from silica.providers.clients import close_all
from silica.serve import history as views
from silica.serve.approvals import ANSWER_EXAMPLE as DECISION_EXAMPLE
from silica.serve.approvals import read_answer
from silica.serve.apps import AppHost, sandbox_origin
from silica.serve.asking import ANSWER_EXAMPLE
from silica.serve.auth import SANDBOX_PATH, Guard
from silica.serve.bodies import json_object
from silica.serve.bus import EventBus, make_bus
from silica.serve.errors import ApiError, error_response, no_session, response_for
from silica.serve.options import ServeOptions, check_exposure
from silica.serve.replay import TurnLogs
from silica.serve.sio import make_sio
from silica.serve.sse import event_stream, resume_point
from silica.serve.turns import TurnRunner
from silica.serve.uichat import UiChat

log = logging.getLogger("silica.serve")

STATIC = Path(__file__).parent / "static"
MAX_JSON = 64 * 1024  # bytes of a POST /sessions body
IMMUTABLE = "public, max-age=31536000, immutable"
_STATIC_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,100}$")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
          ".ico": "image/x-icon", ".json": "application/json", ".txt": "text/plain"}
IMG_SRC = "img-src 'self' blob: data:"
PAGE_HEADERS = {
    # the page shows what models and tools say: nothing it shows may run as script
    "Content-Security-Policy": (f"default-src 'self'; {IMG_SRC}; "
                                "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                                "form-action 'self'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_TRUE = {"1", "true", "yes", "on"}
_APP_CALL_EXAMPLE = '{"name": "get-time", "arguments": {}}'
_SESSION_EXAMPLE = '{"agent": "...", "provider": "...", "model": "...", "workspace": "..."}'



class ServeApp:
    """The whole ASGI app, with what the daemon needs to stop it: ``bus``, ``runner``,
    ``sio``, and ``stopping()`` (end streams and turns before the server waits for its
    connections to close)."""

    def __init__(self, options: ServeOptions) -> None:
        check_exposure(options.loopback, options.token)  # before anything starts
        self.options = options
        self.bus: EventBus = make_bus(options.redis, options.home, options.settings)
        self.runner = TurnRunner(options, self.bus)
        self.logs = TurnLogs()
        self.bus.taps.append(self.logs.heard)
        self.sio = make_sio(options, self.bus, self.runner.asking, self.runner.approvals)
        self.routes = Routes(options, self.runner, self.bus,
                             UiChat(self.runner, self.bus, self.logs))
        self.starlette = Starlette(routes=self.routes.table(), lifespan=self.lifespan,
                                   exception_handlers={SilicaError: _refused,
                                                       HTTPException: _http_error,
                                                       ClientDisconnect: _gone,
                                                       Exception: _crash})
        inner: Any = self.starlette
        origins = options.settings.serve.cors_origins
        if origins:
            inner = CORSMiddleware(inner, allow_origins=origins, allow_credentials=True,
                                   allow_methods=["GET", "POST", "DELETE"],
                                   allow_headers=["Authorization", "Content-Type"])
        self.app = Guard(socketio.ASGIApp(self.sio, other_asgi_app=inner),
                         token=options.token, loopback=options.loopback,
                         cors_origins=origins)
        self._stopped = False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any):
        await self.bus.start()
        await self.runner.start()
        await asyncio.to_thread(_warm_up, self.options)
        try:
            yield
        finally:
            await self.stopping()
            await self.bus.close()
            await close_all()  # the providers' clients of this loop, with their connections
            await asyncio.to_thread(_close_mcp)

    async def stopping(self) -> None:
        """Interrupt the turns (each saved, its clients told), end the event streams and
        disconnect Socket.IO clients. Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        await self.runner.close()
        await self.bus.close()
        with contextlib.suppress(Exception):
            if self.sio.eio.sockets:
                await self.sio.eio.disconnect()
            await self.sio.shutdown()


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except OSError:  # removed since it was found
        return None


def create_app(options: ServeOptions) -> ServeApp:
    """The daemon's ASGI app for ``options``."""
    return ServeApp(options)


class Routes:
    """The route handlers: each checks what it is given, calls the library, answers JSON."""

    def __init__(self, options: ServeOptions, runner: TurnRunner, bus: EventBus,
                 ui: UiChat) -> None:
        self.options, self.runner, self.bus, self.ui = options, runner, bus, ui
        self.home = options.home
        self.apps = AppHost(options)
        self._store_origin: str | None = None  # where presigned image URLs point

    def table(self) -> list[Route]:
        return [
            Route("/", self.page, methods=["GET"]),
            Route("/static/{name}", self.static, methods=["GET"]),
            Route("/static/vendor/{name}", self.vendor, methods=["GET"]),
            Route("/sessions", self.sessions, methods=["GET", "POST"]),
            Route("/sessions/{sid}", self.session, methods=["GET", "DELETE"]),
            Route("/sessions/{sid}/messages", self.message, methods=["POST"]),
            Route("/sessions/{sid}/history", self.history, methods=["GET"]),
            Route("/sessions/{sid}/images/{image_id}", self.image, methods=["GET"]),
            Route("/sessions/{sid}/events", self.events, methods=["GET"]),
            Route("/sessions/{sid}/elicitations/{eid}", self.elicitation, methods=["POST"]),
            Route("/sessions/{sid}/apps/{call_id}", self.app_of_call, methods=["GET"]),
            Route("/sessions/{sid}/apps/{call_id}/calls", self.app_call, methods=["POST"]),
            Route(SANDBOX_PATH, self.sandbox, methods=["GET"]),
            Route("/sessions/{sid}/approvals/{aid}", self.approval, methods=["POST"]),
            Route("/api/chat", self.ui_chat, methods=["POST"]),
            Route("/api/chat/{sid}/stream", self.ui_resume, methods=["GET"]),
        ]

    # -- the page -------------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        response = self._static_file("index.html")
        policy = response.headers["Content-Security-Policy"]
        store = await self._image_origin()
        if store:  # presigned image URLs: the page's images come from the object store too
            policy = policy.replace(IMG_SRC, f"{IMG_SRC} {store}")
        sandbox = sandbox_origin(request.headers.get("host", ""), request.url.scheme)
        if sandbox:  # its MCP Apps' frames come from there, and nothing else may be framed
            policy = f"{policy}; frame-src {sandbox}"
        response.headers["Content-Security-Policy"] = policy
        return response

    async def _image_origin(self) -> str | None:
        """The object store's origin when images are served by presigned URLs, else None."""
        url = _presigned(self.options)
        if url is None:
            return None
        if self._store_origin is None:
            from silica.storage.objects import object_store

            try:
                self._store_origin = await asyncio.to_thread(object_store(url).origin)
            except SilicaError as exc:  # then no image loads, and the log says why
                log.warning("cannot allow the object store's images on the page: %s", exc)
                return None
        return self._store_origin

    async def static(self, request: Request) -> Response:
        return self._static_file(request.path_params["name"])

    async def vendor(self, request: Request) -> Response:
        return self._static_file(request.path_params["name"], STATIC / "vendor")

    def _static_file(self, name: str, folder: Path = STATIC) -> Response:
        path = folder / name
        if not _STATIC_NAME.fullmatch(name) or not path.is_file() or path.is_symlink():
            what = "the web page is not installed" if name == "index.html" else \
                f"there is no file {name[:100]!r} here"
            raise ApiError(404, "not_found", f"{what}; the API is under /sessions")
        kind = _TYPES.get(path.suffix, "application/octet-stream")
        return FileResponse(path, media_type=kind, headers=PAGE_HEADERS)

    # -- sessions -------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        if request.method == "POST":
            keys = ("agent", "provider", "model", "workspace")
            body = await _json_body(request, keys)
            for key in keys:
                if body.get(key) is not None and not isinstance(body[key], str):
                    raise ApiError(400, "invalid_field", f'"{key}" must be a string')
            sid = self.runner.create_session(agent=body.get("agent") or None,
                                             provider=body.get("provider") or None,
                                             model=body.get("model") or None,
                                             workspace=body.get("workspace"))
            return JSONResponse({"session_id": sid}, status_code=201)
        found = await asyncio.to_thread(list_sessions, self.home)
        counts = await asyncio.to_thread(self._count_images, found)  # an object store is asked
        return JSONResponse({"sessions": [self._summary(info, count)
                                          for info, count in zip(found, counts, strict=True)]})

    def _count_images(self, found: list) -> list[int]:
        return [views.count_images(self.home, info.id, self.options.settings) for info in found]

    def _summary(self, info, images: int) -> dict:
        return views.summary(info, images=images, running=self.runner.is_running(info.id))

    async def session(self, request: Request) -> Response:
        sid = self._sid(request)
        if request.method == "DELETE":
            self.runner.delete(sid)
            return JSONResponse({"deleted": sid})
        if not self.runner.exists(sid):
            raise no_session(sid)
        found = [s for s in await asyncio.to_thread(list_sessions, self.home) if s.id == sid]
        if not found:
            raise no_session(sid)
        counts = await asyncio.to_thread(self._count_images, found)
        return JSONResponse(self._summary(found[0], counts[0]))

    async def message(self, request: Request) -> Response:
        sid = self._sid(request)
        if not self.runner.exists(sid):
            raise no_session(sid)
        turn = await self.runner.begin(sid, request)
        if request.query_params.get("wait", "").lower() in _TRUE:
            return JSONResponse(await self.runner.wait(turn))
        return JSONResponse({"turn_id": turn.turn_id, "turn": turn.number}, status_code=202)

    async def history(self, request: Request) -> Response:
        sid = self._sid(request)
        if not self.runner.exists(sid):
            raise no_session(sid)
        try:
            conversation = await asyncio.to_thread(load_session, sid, self.home)
        except SessionError as exc:
            if not self.runner.exists(sid):
                raise no_session(sid) from None
            raise ApiError(500, "session_unreadable", str(exc)) from None
        running = self.runner.is_running(sid)
        body = views.history(conversation, running=running,
                             running_turn=self.runner.running_turn(sid, conversation.turn))
        body["elicitations"] = await asyncio.to_thread(self.runner.asking.listing, sid)
        body["approvals"] = await asyncio.to_thread(self.runner.approvals.listing, sid)
        return JSONResponse(body)

    async def image(self, request: Request) -> Response:
        sid = self._sid(request)
        image_id = request.path_params["image_id"]
        if not ID_PATTERN.fullmatch(image_id):
            raise ApiError(400, "invalid_image_id", "an image id is 64 lowercase hex digits "
                           "(the sha256 of the image), as in the image URLs of the history")
        headers = {"ETag": f'"{image_id}"', "Cache-Control": IMMUTABLE,
                   "X-Content-Type-Options": "nosniff",
                   "Content-Security-Policy": "default-src 'none'; sandbox"}
        store = open_image_store(self.home, sid, self.options.settings)
        try:
            if _presigned(self.options):
                url = await asyncio.to_thread(store.presigned_url, image_id)
                if url is not None:  # the browser fetches it from the store, for a while
                    return Response(status_code=307, headers={
                        "Location": url, "Cache-Control": "no-store",
                        "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"})
                found = None
            else:  # through the store: fetched into the folder and checked when not there
                found = await asyncio.to_thread(store.find, image_id)
        except StoreError as exc:
            raise ApiError(502, "image_unavailable", str(exc)) from None
        stat = _lstat(found[0]) if found is not None else None
        if found is not None and stat is not None:
            path, mime = found
            if _matches(request.headers.get("if-none-match", ""), image_id):
                return Response(status_code=304, headers=headers)
            return FileResponse(path, media_type=mime, headers=headers, stat_result=stat)
        if not self.runner.exists(sid):
            raise no_session(sid)
        raise ApiError(404, "no_image", f"session {sid} has no image {image_id[:12]}…; the "
                       "history lists its images' URLs")

    async def events(self, request: Request) -> Response:
        sid = self._sid(request)
        if not self.runner.exists(sid):
            raise no_session(sid)
        inline = request.query_params.get("inline_images", "").lower() in _TRUE
        return event_stream(self.bus, sid, inline=inline, after=resume_point(request))

    async def elicitation(self, request: Request) -> Response:
        sid = self._sid(request)
        if not self.runner.exists(sid):
            raise no_session(sid)
        body = await _json_body(request, ("action", "content"), example=ANSWER_EXAMPLE,
                                what="an answer", optional=False)
        answer = await self.runner.asking.reach(sid, request.path_params["eid"], body)
        return JSONResponse({"id": request.path_params["eid"], "action": answer.action})

    # -- MCP Apps (silica.serve.apps) --------------------------------------------------------

    async def app_of_call(self, request: Request) -> Response:
        sid = self._sid(request)
        return JSONResponse(await self.apps.app(sid, request.path_params["call_id"]))

    async def app_call(self, request: Request) -> Response:
        sid = self._sid(request)
        body = await _json_body(request, ("name", "arguments"), example=_APP_CALL_EXAMPLE,
                                what="a call", optional=False)
        return JSONResponse(await self.apps.call(sid, request.path_params["call_id"],
                                                 body.get("name"), body.get("arguments")))

    async def sandbox(self, request: Request) -> Response:
        return self.apps.sandbox(request)

    async def approval(self, request: Request) -> Response:
        sid = self._sid(request)
        if not self.runner.exists(sid):
            raise no_session(sid)
        body = await _json_body(request, ("decision",), example=DECISION_EXAMPLE,
                                what="an answer", optional=False)
        decision = read_answer(body)
        await self.runner.approvals.reach(sid, request.path_params["aid"], decision)
        return JSONResponse({"id": request.path_params["aid"], "decision": decision})

    # -- the AI SDK UI message stream ------------------------------------------------------

    async def ui_chat(self, request: Request) -> Response:
        return await self.ui.post(request)

    async def ui_resume(self, request: Request) -> Response:
        return await self.ui.resume(self._sid(request), request)

    def _sid(self, request: Request) -> str:
        sid = request.path_params["sid"]
        try:
            check_id(sid)
        except SessionError:
            raise ApiError(400, "invalid_session_id", "a session id is 1-64 letters, digits, "
                           "'_' or '-' (starting with a letter or digit); GET /sessions lists "
                           "them") from None
        return sid


async def _json_body(request: Request, keys: tuple[str, ...], *,
                     example: str = _SESSION_EXAMPLE, what: str = "a session",
                     optional: bool = True) -> dict:
    """A small JSON object body with only ``keys`` (shaped like ``example``, for ``what``;
    ``optional``: each key may be left out); ``ApiError`` otherwise."""
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > MAX_JSON:
            raise ApiError(413, "body_too_large", f"the body is over {MAX_JSON:,} bytes; "
                           f"send a JSON object with {', '.join(keys)}")
    if not chunks.strip():
        return {}
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(415, "unsupported_media_type", "send the body as application/json, "
                       f"an object with {', '.join(keys)}"
                       + (" (all optional)" if optional else f", like {example}"))
    body = json_object(chunks, example=example)
    unknown = [k for k in body if k not in keys]
    if unknown:
        raise ApiError(400, "unknown_field", f"unknown field {str(unknown[0])[:100]!r}; "
                       f"{what} takes {', '.join(keys)}")
    return body


def _presigned(options: ServeOptions) -> str | None:
    """The object store's URL when the page gets images by presigned URLs from it."""
    storage = options.settings.storage
    return storage.images if storage.images and storage.image_urls == "presigned" else None


def _matches(header: str, image_id: str) -> bool:
    """Whether an ``If-None-Match`` header names the image's ETag (or ``*``)."""
    tags = [t.strip().removeprefix("W/").strip('"') for t in header.split(",")]
    return "*" in tags or image_id in tags


async def _refused(request: Request, exc: Exception) -> Response:
    """``ApiError``, ``UploadRefused`` (each has a status and a code), or another
    ``SilicaError`` (a message a user can act on, from the library: a 500)."""
    if hasattr(exc, "status") and hasattr(exc, "code"):
        return response_for(exc)
    return error_response(500, "failed", str(exc))


async def _gone(request: Request, exc: Exception) -> Response:
    """The client went away while sending its body: nothing was taken, nobody to answer."""
    return error_response(400, "client_disconnected", "the request ended before its body did; "
                          "nothing was taken")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error_response(404, "not_found", f"there is no route {request.url.path[:200]}"
                              "; the API is under /sessions (see docs/serve.md)")
    if exc.status_code == 405:
        return error_response(405, "method_not_allowed", f"{request.method} is not allowed "
                              f"on {request.url.path[:200]}", headers=exc.headers)
    return error_response(exc.status_code, "http_error", str(exc.detail))


async def _crash(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed inside silica", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", f"silica failed on this request "
                          f"({type(exc).__name__}); the daemon's log says more")


def _warm_up(options: ServeOptions) -> None:
    """Load the plugins and the configured provider's SDK before the first request, which
    would otherwise wait for them."""
    from silica.plugins import get_plugin_manager
    from silica.providers.registry import get_provider

    get_plugin_manager()
    with contextlib.suppress(Exception):  # a provider that cannot be built says so later
        get_provider(options.settings.provider, options.settings)


def _close_mcp() -> None:
    """Close the MCP servers silica started (loaded only if one was used)."""
    connections = sys.modules.get("silica.mcp.connections")
    if connections is not None:
        connections.connections().close()
