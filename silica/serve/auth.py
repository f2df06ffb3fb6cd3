"""Who may reach the daemon: a token, the Host a request names, the Origin a page sends.

``Guard`` wraps the whole ASGI app (routes and Socket.IO) and checks, for every HTTP and
WebSocket request:

1. Host: a daemon on a loopback address answers only requests that name a loopback host
   (``127.0.0.1``, ``localhost``, ``[::1]``), so a web page cannot reach it through a DNS
   name rebound to 127.0.0.1.
2. Origin: a request a browser sends from another page (its ``Origin`` is not the daemon's
   own and not in ``[serve] cors_origins``) is refused, so no page can drive the daemon
   from the user's browser (a form post needs no CORS preflight). Requests without an
   ``Origin`` (scripts, curl) pass.
3. Token, when the daemon has one: ``Authorization: Bearer T`` or the cookie
   ``silica_token``. ``GET /?token=T`` sets that cookie (HttpOnly, SameSite=Strict) and
   redirects to ``/``: the link ``silica serve`` prints. Socket.IO checks the token in its
   connect handler instead (``auth={"token": T}``, the header, or the cookie), since a
   client sends it there; a CORS preflight carries no credentials, so it is let through.
   The MCP Apps sandbox page (``SANDBOX_PATH``, GET only) needs no token either: it is
   served on the daemon's other loopback name, where the browser has no cookie, holds
   nothing, and may be framed only by the page (``silica.serve.apps``).

A refusal is the JSON error of every route (401 with ``WWW-Authenticate: Bearer``, 403),
except that a browser opening a page (a ``GET`` that accepts ``text/html``) without the token
gets the token page instead (still a 401): a form that sends the token the way the start link
does, so it sets the same cookie.
"""

from __future__ import annotations

from collections.abc import Mapping
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.responses import HTMLResponse, RedirectResponse

from silica.security.tokens import bearer, token_matches
from silica.serve.errors import error_response
from silica.serve.options import is_loopback

COOKIE = "silica_token"
SOCKETIO_PATH = "/socket.io"
SANDBOX_PATH = "/apps/sandbox"  # the MCP Apps sandbox page (silica.serve.apps): no token
TOKEN_PAGE = Path(__file__).parent / "static" / "token.html"
TOKEN_PAGE_HEADERS = {
    # the form posts only here; the page runs no script and shows nothing from elsewhere
    "Content-Security-Policy": ("default-src 'none'; style-src 'unsafe-inline'; "
                                "img-src data:; form-action 'self'; base-uri 'none'; "
                                "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "WWW-Authenticate": 'Bearer realm="silica"',
}
WRONG_TOKEN = ('<p class="problem" role="alert">That is not this daemon\'s token: check it '
               'and paste it again.</p>')


def token_from(headers: Mapping[str, str]) -> str | None:
    """The token a request carries: ``Authorization: Bearer T``, else the cookie."""
    return bearer(headers) or cookie_token(headers.get("cookie", ""))


def cookie_token(header: str) -> str | None:
    if not header:
        return None
    jar = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel else None


def login_token(scope: Mapping[str, Any]) -> str | None:
    """The token of the start link (``GET /?token=T``); ``None`` for any other request."""
    if scope.get("path") != "/" or scope.get("method") not in ("GET", "HEAD"):
        return None
    given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return given[0] if given else None


def wants_page(scope: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    """Whether a request is a browser opening a page (a ``GET`` accepting ``text/html``),
    not a program (which asks for JSON, or sends another method)."""
    return scope.get("method") in ("GET", "HEAD") and "text/html" in headers.get("accept", "")


def token_page(wrong: bool) -> HTMLResponse:
    """The 401 a browser gets without the token: a form for it (``wrong``: one was given and
    is not the daemon's, which the page says)."""
    try:
        html = TOKEN_PAGE.read_text(encoding="utf-8")
    except OSError:  # not installed: the words alone still say what to do
        html = ("<!doctype html><title>silica</title><p>This daemon needs its token: open "
                "the link silica serve printed.</p><!--problem-->")
    html = html.replace("<!--problem-->", WRONG_TOKEN if wrong else "", 1)
    return HTMLResponse(html, status_code=401, headers=TOKEN_PAGE_HEADERS)


def host_allowed(host_header: str, loopback: bool) -> bool:
    """Whether a request naming ``host_header`` may be answered (see the module docstring)."""
    if not loopback:
        return True
    host = urlsplit(f"//{host_header}").hostname or ""
    return is_loopback(host)


def origin_allowed(origin: str | None, host_header: str, scheme: str,
                   cors_origins: list[str]) -> bool:
    """Whether a request from ``origin`` may be answered: none (not a browser's cross-site
    request), the daemon's own origin, or one of ``cors_origins``."""
    if not origin:
        return True
    origin = origin.rstrip("/")
    if origin in {o.rstrip("/") for o in cors_origins} or "*" in cors_origins:
        return True
    return origin == f"{scheme}://{host_header}" or _same_host(origin, host_header)


def _same_host(origin: str, host_header: str) -> bool:
    # a browser on http://localhost:8700 sends that Origin with Host localhost:8700
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc == host_header


class Guard:
    """ASGI middleware: the checks of the module docstring around ``app``."""

    def __init__(self, app: Any, *, token: str | None, loopback: bool,
                 cors_origins: list[str]) -> None:
        self.app, self.token, self.loopback = app, token, loopback
        self.cors_origins = list(cors_origins)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", ())}
        refusal = self.refusal(scope, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":  # refused before it is accepted: a 403 close
            await send({"type": "websocket.close", "code": 1008})
            return
        await refusal(scope, receive, send)

    def refusal(self, scope: dict, headers: dict[str, str]) -> Any:
        """The response refusing this request, or ``None`` to let it through."""
        host = headers.get("host", "")
        if not host_allowed(host, self.loopback):
            return error_response(403, "host_not_allowed", (
                f"this daemon listens on a loopback address and answers requests for "
                f"127.0.0.1 or localhost, not {host[:100]!r}; open http://127.0.0.1:PORT/"))
        scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
        if not origin_allowed(headers.get("origin"), host, scheme, self.cors_origins):
            return error_response(403, "origin_not_allowed", (
                "requests from other web pages are refused; to allow a page, add its origin "
                "to [serve] cors_origins in config.toml"))
        path = scope.get("path", "")
        if not self.token or path == SOCKETIO_PATH or path.startswith(SOCKETIO_PATH + "/"):
            return None
        if path == SANDBOX_PATH and scope.get("method") in ("GET", "HEAD"):
            return None
        if scope.get("method") == "OPTIONS" and "access-control-request-method" in headers:
            return None  # a CORS preflight carries no credentials; CORSMiddleware answers it
        given = login_token(scope)
        if given is not None and token_matches(self.token, given):
            return self._login()
        if token_matches(self.token, token_from(headers)):
            return None
        if wants_page(scope, headers):
            return token_page(wrong=given is not None)
        return error_response(401, "unauthorized", (
            "this daemon needs its token: send Authorization: Bearer <token>, or open the "
            "link silica serve printed (it sets a cookie)"),
            headers={"WWW-Authenticate": 'Bearer realm="silica"'})

    def _login(self) -> Any:
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, self.token or "", httponly=True, samesite="strict",
                            path="/")
        response.headers["Cache-Control"] = "no-store"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response
