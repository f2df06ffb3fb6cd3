"""A protected MCP server with its own OAuth 2.1 authorization server, on one port.

    python oauth_server.py PORT [--log P] [--expires S] [--refuse] [--garbage]
                                [--bad-issuer] [--client ID:SECRET]

``/mcp`` is an MCP server (official SDK) with the tool ``whoami``; without a valid bearer
token it answers 401 with ``WWW-Authenticate: Bearer resource_metadata=...``. The
authorization server (issuer ``http://127.0.0.1:PORT``) publishes RFC 9728 and RFC 8414
metadata, registers clients (``/register``), approves every authorization at once
(``/authorize`` redirects back with a code, ``state`` and ``iss``) and issues tokens
(``/token``), checking what a client must send: PKCE S256 (the verifier against the
challenge), ``resource`` (the MCP URL, on every request), the registered ``redirect_uri``
and client, and, for ``--client``, HTTP basic client authentication.

``--expires S``: access tokens last S seconds; ``--refuse``: every authorization is
refused (``error=access_denied``); ``--garbage``: the token endpoint answers with HTML;
``--bad-issuer``: the metadata names another issuer. ``--log`` gets one line per event
(``register``, ``authorize``, ``token authorization_code``, ``token refresh_token``,
``mcp TOKEN``: the token a request to /mcp carried); a failed check is logged as
``refused WHY`` and answered 400.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import secrets
import time
from urllib.parse import urlencode

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("--log")
parser.add_argument("--expires", type=int, default=3600)
parser.add_argument("--refuse", action="store_true")
parser.add_argument("--garbage", action="store_true")
parser.add_argument("--bad-issuer", action="store_true")
parser.add_argument("--client")
options = parser.parse_args()

BASE = f"http://127.0.0.1:{options.port}"
RESOURCE = f"{BASE}/mcp"
clients: dict[str, dict] = {}
codes: dict[str, dict] = {}
access: dict[str, float] = {}  # token -> when it expires
refresh: dict[str, str] = {}  # refresh token -> client id
if options.client:
    cid, secret = options.client.split(":", 1)
    clients[cid] = {"secret": secret, "redirect_uris": None}


def log(line: str) -> None:
    if options.log:
        with open(options.log, "a") as f:
            f.write(line + "\n")


def refused(why: str) -> Response:
    log(f"refused {why}")
    return JSONResponse({"error": "invalid_request", "error_description": why}, 400)


async def resource_metadata(request: Request) -> Response:
    return JSONResponse({"resource": RESOURCE, "authorization_servers": [BASE],
                         "scopes_supported": ["tools"]})


async def server_metadata(request: Request) -> Response:
    return JSONResponse({
        "issuer": "http://127.0.0.2:1" if options.bad_issuer else BASE,
        "authorization_endpoint": f"{BASE}/authorize", "token_endpoint": f"{BASE}/token",
        "registration_endpoint": f"{BASE}/register", "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "none"],
        "authorization_response_iss_parameter_supported": True,
    })


async def register(request: Request) -> Response:
    body = await request.json()
    cid = "c-" + secrets.token_hex(8)
    clients[cid] = {"secret": None, "redirect_uris": body.get("redirect_uris")}
    log("register")
    return JSONResponse({**body, "client_id": cid, "token_endpoint_auth_method": "none"}, 201)


async def authorize(request: Request) -> Response:
    q = request.query_params
    client = clients.get(q.get("client_id", ""))
    if client is None:
        return refused("unknown client")
    if client["redirect_uris"] is not None and q.get("redirect_uri") not in client["redirect_uris"]:
        return refused("redirect_uri not registered")
    if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256":
        return refused("not code with PKCE S256")
    if q.get("resource") != RESOURCE:
        return refused(f"resource {q.get('resource')!r}")
    log("authorize")
    back = {"state": q.get("state", ""), "iss": BASE}
    if options.refuse:
        back.update(error="access_denied", error_description="the person said no")
    else:
        code = secrets.token_hex(8)
        codes[code] = {"client": q["client_id"], "challenge": q.get("code_challenge"),
                       "redirect_uri": q.get("redirect_uri")}
        back["code"] = code
    return RedirectResponse(f"{q.get('redirect_uri')}?{urlencode(back)}", 302)


def _client_of(request: Request, form) -> str | None:
    header = request.headers.get("authorization", "")
    if header.startswith("Basic "):
        cid, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        known = clients.get(cid)
        return cid if known is not None and known["secret"] == secret else None
    cid = form.get("client_id", "")
    known = clients.get(cid)
    return cid if known is not None and known["secret"] is None else None


def _tokens(cid: str) -> Response:
    if options.garbage:
        return Response("<html>Service Unavailable</html>", 200, media_type="text/html")
    token, renew = "at-" + secrets.token_hex(12), "rt-" + secrets.token_hex(12)
    access[token] = time.time() + options.expires
    refresh[renew] = cid
    return JSONResponse({"access_token": token, "token_type": "Bearer",
                         "expires_in": options.expires, "refresh_token": renew})


async def token(request: Request) -> Response:
    form = await request.form()
    cid = _client_of(request, form)
    if cid is None:
        return refused("client authentication")
    if form.get("resource") != RESOURCE:
        return refused(f"token resource {form.get('resource')!r}")
    grant = form.get("grant_type")
    log(f"token {grant}")
    if grant == "authorization_code":
        given = codes.pop(str(form.get("code", "")), None)
        if given is None or given["client"] != cid:
            return refused("code")
        verifier = str(form.get("code_verifier", ""))
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        if challenge.decode().rstrip("=") != given["challenge"]:
            return refused("PKCE verifier")
        if form.get("redirect_uri") != given["redirect_uri"]:
            return refused("redirect_uri")
        return _tokens(cid)
    if grant == "refresh_token":
        if refresh.pop(str(form.get("refresh_token", "")), None) != cid:
            return refused("refresh token")
        return _tokens(cid)
    return refused(f"grant {grant}")


server = MCPServer("protected")


@server.tool()
def whoami() -> str:
    """Say that the caller got in."""
    return "hello from the protected server"


mcp_app = server.streamable_http_app()
routes = Starlette(routes=[
    Route("/.well-known/oauth-protected-resource/mcp", resource_metadata),
    Route("/.well-known/oauth-protected-resource", resource_metadata),
    Route("/.well-known/oauth-authorization-server", server_metadata),
    Route("/register", register, methods=["POST"]),
    Route("/authorize", authorize),
    Route("/token", token, methods=["POST"]),
])


async def app(scope, receive, send):
    if scope["type"] == "http" and scope["path"].startswith("/mcp"):
        header = dict(scope["headers"]).get(b"authorization", b"").decode()
        given = header[7:] if header.startswith("Bearer ") else ""
        if access.get(given, 0) < time.time():
            where = f"{BASE}/.well-known/oauth-protected-resource/mcp"
            challenge = f'Bearer resource_metadata="{where}"'
            await PlainTextResponse("unauthorized", 401,
                                    headers={"WWW-Authenticate": challenge})(scope, receive, send)
            return
        log(f"mcp {given}")
        await mcp_app(scope, receive, send)
    elif scope["type"] == "http":
        await routes(scope, receive, send)
    else:
        await mcp_app(scope, receive, send)


uvicorn.run(app, host="127.0.0.1", port=options.port, log_level="warning")
