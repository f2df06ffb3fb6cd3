"""Logging in to an HTTP MCP server with OAuth 2.1, on the SDK's client (``mcp.client.auth``).

The SDK does the protocol: protected resource metadata (RFC 9728, from ``WWW-Authenticate``
or the well-known URLs), authorization server metadata (RFC 8414, then OpenID discovery),
the metadata's issuer check, PKCE S256, the ``resource`` parameter, scopes (the challenge's,
else ``scopes_supported``, else none; step-up on 403 ``insufficient_scope``), client
registration (a client ID metadata document where the server supports one, else dynamic
registration), the RFC 9207 ``iss`` check and refreshing. silica adds:

- ``auth(name, server, approval)``: the ``httpx`` auth for one server, over its
  ``TokenFile`` (``silica.mcp.tokens``), with a pre-registered ``client_id`` from config
  (sent with the token endpoint method the server lists first of basic, post, none), the
  configured ``scopes`` and what discovery found kept for the next run;
- how a person approves: ``Loopback`` (``silica mcp login``: a browser, or the URL
  printed, and a listener on 127.0.0.1 for the redirect), ``Direct`` (the authorization
  URL fetched and its redirects followed without a browser, ``approve = "direct"``), or
  none (``ask``, ``chat``, ``tools``: a login that is needed is the error ``LoginNeeded``);
- ``login`` and ``logout``, which the CLI calls, and ``explain``, one message per failure
  naming the server and what to do; tokens are never in one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

from silica.config import McpServerSettings
from silica.mcp.client import McpServerError, expand_value
from silica.mcp.tokens import TokenFile, token_path
from silica.security.text import safe_text

LOGIN_TIMEOUT = 300.0  # seconds a person has to approve in the browser
_DIRECT_HOPS = 10  # redirects followed on the direct path
_DIRECT_REDIRECT = "http://127.0.0.1/silica/callback"  # never listened on: intercepted
_CALLBACK_PATH = "/silica/callback"
_REASON_CHARS = 200

# The SDK logs every flow failure with its traceback; silica says it once, as a message.
logging.getLogger("mcp.client.auth").addHandler(logging.NullHandler())
logging.getLogger("mcp.client.auth").propagate = False


class LoginNeeded(McpServerError):
    """The server needs a login that silica has not got, and may not ask a person for now."""


class LoginFailed(McpServerError):
    """A login did not complete: refused, timed out, or the server sent nonsense."""


def store_of(name: str, server: McpServerSettings) -> TokenFile:
    return TokenFile(token_path(name, server.url or ""))


def logged_in(name: str, server: McpServerSettings) -> bool:
    """Whether silica holds tokens for ``server`` (they may need a refresh)."""
    return bool(server.url) and store_of(name, server).logged_in()


def logout(name: str, server: McpServerSettings) -> bool:
    """Forget the login to ``server``; ``False`` when there was none."""
    return store_of(name, server).delete()


# -- how an authorization is approved ----------------------------------------------------


def callback_result(name: str, query: str) -> Any:
    """The SDK's ``AuthorizationCodeResult`` from the query of the redirect back to silica;
    an ``error`` (the person or the server refused) or a missing ``code`` is
    ``LoginFailed``."""
    from mcp.shared.auth import AuthorizationCodeResult

    fields = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items() if v}
    if "error" in fields:
        reason = fields["error"] + (f": {fields['error_description']}"
                                    if fields.get("error_description") else "")
        raise LoginFailed(f"the authorization server of the MCP server {name!r} refused the "
                          f"login ({safe_text(reason[:_REASON_CHARS])}); run silica mcp "
                          f"login {name} to try again")
    if not fields.get("code"):
        raise LoginFailed(f"the authorization server of the MCP server {name!r} redirected "
                          "back without a code; run silica mcp login "
                          f"{name} to try again")
    return AuthorizationCodeResult(code=fields["code"], state=fields.get("state"),
                                   iss=fields.get("iss"))


class Approval:
    """How the authorization URL reaches a person (or not) and the code comes back; the
    base class is the non-interactive kind: a needed login is ``LoginNeeded``."""

    redirect_uri = _DIRECT_REDIRECT

    def __init__(self, name: str) -> None:
        self.name = name

    async def open(self, url: str) -> None:
        raise LoginNeeded(f"the MCP server {self.name!r} needs a login: run "
                          f"silica mcp login {self.name}")

    async def result(self) -> Any:  # never reached: ``open`` raised
        raise LoginNeeded(f"the MCP server {self.name!r} needs a login")


class Direct(Approval):
    """Fetch the authorization URL and follow its redirects, without a browser, until one
    goes back to silica: for an authorization server that approves at once."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._result: Any = None

    async def open(self, url: str) -> None:
        import httpx2

        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as http:
            for _ in range(_DIRECT_HOPS):
                try:
                    response = await http.get(url)
                except httpx2.HTTPError as exc:
                    raise LoginFailed(f"cannot reach the authorization server of the MCP "
                                      f"server {self.name!r}: {type(exc).__name__}") from None
                location = response.headers.get("location")
                if not response.is_redirect or not location:
                    raise LoginFailed(
                        f"the authorization server of the MCP server {self.name!r} did not "
                        f"approve at once (HTTP {response.status_code}); set approve = "
                        f'"browser" under its oauth in config.toml and run silica mcp '
                        f"login {self.name}")
                url = urljoin(str(response.url), location)
                if _same_endpoint(url, self.redirect_uri):
                    self._result = callback_result(self.name, urlsplit(url).query)
                    return
        raise LoginFailed(f"the authorization server of the MCP server {self.name!r} "
                          f"redirected more than {_DIRECT_HOPS} times")

    async def result(self) -> Any:
        return self._result


class Loopback(Approval):
    """A person approves in a browser: ``open`` shows the page (``browser``) or prints the
    URL with ``show``, and a listener on 127.0.0.1 takes the redirect back. Use as an async
    context manager: the listener runs inside it."""

    def __init__(self, name: str, browser: bool, show: Callable[[str], None],
                 timeout: float = LOGIN_TIMEOUT) -> None:
        super().__init__(name)
        self.browser, self.show, self.timeout = browser, show, timeout
        self._got: asyncio.Future[str] | None = None
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Loopback:
        self._got = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.redirect_uri = f"http://127.0.0.1:{port}{_CALLBACK_PATH}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            parts = line.decode("latin-1").split()
            target = urlsplit(parts[1]) if len(parts) >= 2 and parts[0] == "GET" else None
            if target is not None and target.path == _CALLBACK_PATH:
                body, status = (b"<!doctype html><title>silica</title><p>Done: you may close "
                                b"this tab and return to silica.</p>"), "200 OK"
                if self._got is not None and not self._got.done():
                    self._got.set_result(target.query)
            else:
                body, status = b"not found", "404 Not Found"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                         + body)
            await writer.drain()
        except (TimeoutError, OSError, UnicodeError):
            pass
        finally:
            writer.close()

    async def open(self, url: str) -> None:
        if self.browser:
            import webbrowser

            if await asyncio.to_thread(webbrowser.open, url):
                self.show(f"silica: approve the login to {self.name!r} in your browser (if it "
                          f"did not open, open this URL):\n{url}")
                return
        self.show(f"silica: to log in to the MCP server {self.name!r}, open this URL in a "
                  f"browser and approve:\n{url}\nWaiting for the redirect back to "
                  f"{self.redirect_uri} ...")

    async def result(self) -> Any:
        assert self._got is not None, "Loopback is used inside async with"
        # asyncio.wait, not wait_for: a Ctrl-C (a cancel) must stay a cancel, never a timeout
        await asyncio.wait({self._got}, timeout=self.timeout)
        if not self._got.done():
            raise LoginFailed(f"no login to the MCP server {self.name!r} within "
                              f"{self.timeout:g} s; run silica mcp login {self.name} to try "
                              "again")
        return callback_result(self.name, self._got.result())


def headless() -> bool:
    """Whether no browser can be opened here (no display, and no $BROWSER)."""
    if os.environ.get("BROWSER"):
        return False
    if os.name == "posix" and os.uname().sysname != "Darwin":
        return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return False


def _same_endpoint(url: str, base: str) -> bool:
    a, b = urlsplit(url), urlsplit(base)
    return (a.scheme, a.hostname, a.port, a.path) == (b.scheme, b.hostname, b.port, b.path)


# -- the SDK's provider, with silica's storage and settings --------------------------------


def auth(name: str, server: McpServerSettings, approval: Approval | None = None) -> Any:
    """The ``httpx`` auth that logs in to ``server`` as its settings say; ``approval``
    (default: by config, ``Direct`` or none) is how a person approves."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import (
        OAuthClientInformationFull,
        OAuthClientMetadata,
        OAuthMetadata,
        ProtectedResourceMetadata,
    )

    settings = server.oauth
    if approval is None:
        direct = settings is not None and settings.approve == "direct"
        approval = Direct(name) if direct else Approval(name)
    redirect = approval.redirect_uri
    store = store_of(name, server)
    metadata = OAuthClientMetadata(
        client_name="silica", redirect_uris=[redirect],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        scope=" ".join(settings.scopes) if settings and settings.scopes else None)
    client_id = settings.client_id if settings else None
    secret = (expand_value(name, "its oauth client_secret", "oauth.client_secret",
                           settings.client_secret)
              if settings and settings.client_secret else None)

    class Provider(OAuthClientProvider):
        async def _initialize(self) -> None:
            await super()._initialize()
            context = self.context
            if client_id is not None:
                stored = context.client_info
                if stored is None or stored.client_id != client_id:
                    context.client_info = OAuthClientInformationFull(
                        client_id=client_id, client_secret=secret,
                        redirect_uris=[redirect],  # type: ignore[list-item]
                        token_endpoint_auth_method="client_secret_basic" if secret else "none")
            found = store.metadata()
            with contextlib.suppress(ValueError):  # pydantic's errors are ValueErrors
                if "resource" in found:
                    context.protected_resource_metadata = \
                        ProtectedResourceMetadata.model_validate(found["resource"])
                if "server" in found:
                    context.oauth_metadata = OAuthMetadata.model_validate(found["server"])
                context.auth_server_url = found.get("issuer")
            if context.current_tokens is not None:
                context.token_expiry_time = store.expires_at()

        async def _perform_authorization(self) -> Any:
            context = self.context
            if client_id is not None and context.client_info is not None:
                context.client_info.token_endpoint_auth_method = _auth_method(
                    context.oauth_metadata, secret)
            if settings is not None and settings.scopes:
                context.client_metadata.scope = " ".join(settings.scopes)
            return await super()._perform_authorization()

        async def _handle_token_response(self, response: Any) -> None:
            try:
                await super()._handle_token_response(response)
            except Exception as exc:
                raise _token_failure(name, exc) from None
            self._keep_found()

        async def _handle_refresh_response(self, response: Any) -> bool:
            renewed = await super()._handle_refresh_response(response)
            if renewed:
                self._keep_found()
            return renewed

        def _keep_found(self) -> None:
            context = self.context
            prm, asm = context.protected_resource_metadata, context.oauth_metadata
            store.set_metadata(
                resource=prm.model_dump(mode="json", exclude_none=True) if prm else None,
                server=asm.model_dump(mode="json", exclude_none=True) if asm else None,
                issuer=context.auth_server_url)

    return Provider(server.url or "", metadata, store, redirect_handler=approval.open,
                    callback_handler=approval.result,
                    client_metadata_url=settings.client_metadata_url if settings else None)


def _auth_method(metadata: Any, secret: str | None) -> str:
    """The token endpoint auth method for a pre-registered client: the first of basic,
    post and none that the server lists (RFC 8414's default when it lists none: basic)."""
    if secret is None:
        return "none"
    listed = (getattr(metadata, "token_endpoint_auth_methods_supported", None)
              or ["client_secret_basic"])
    for method in ("client_secret_basic", "client_secret_post"):
        if method in listed:
            return method
    return "none" if "none" in listed else "client_secret_basic"


def _token_failure(name: str, exc: Exception) -> LoginFailed:
    """The token endpoint's failure, said without its body (it may hold anything)."""
    text = str(exc)
    if text.startswith("Token exchange failed ("):
        status = text[len("Token exchange failed ("):].split(")", 1)[0]
        what = f"refused the token request (HTTP {status})"
    else:
        what = "answered the token request with something that is not a token"
    return LoginFailed(f"the authorization server of the MCP server {name!r} {what}; "
                       f"run silica mcp login {name} to try again, or check its oauth "
                       "settings in config.toml")


def explain(exc: BaseException, name: str) -> str | None:
    """One message for an OAuth failure of the server ``name`` (``None``: not one)."""
    from mcp.client.auth import OAuthFlowError, OAuthRegistrationError

    if isinstance(exc, McpServerError):
        return str(exc)
    if isinstance(exc, OAuthRegistrationError):
        return (f"the authorization server of the MCP server {name!r} did not register "
                f"silica as a client; give a client_id under [mcp.servers.{name}.oauth] "
                "in config.toml, then run silica mcp login " + name)
    if isinstance(exc, OAuthFlowError):
        text = str(exc)
        if "issuer mismatch" in text or "iss mismatch" in text or "missing iss" in text:
            why = "names another issuer than the one silica asked (it may be an impostor)"
        elif "State parameter mismatch" in text:
            why = "redirected back with a state that silica did not send"
        elif "does not match expected" in text:
            why = "says it protects another resource than this server's URL"
        else:
            why = f"could not be used: {safe_text(text[:_REASON_CHARS])}"
        return (f"the OAuth login to the MCP server {name!r} failed: its authorization "
                f"server {why}; check its url in config.toml, then run silica mcp login "
                f"{name}")
    return None


async def login(name: str, server: McpServerSettings, approval: Approval,
                timeout: float = LOGIN_TIMEOUT) -> bool:
    """Log in to ``server`` afresh (its old tokens are dropped): connect, and approve
    through ``approval`` when it asks. ``False`` when the server asked for no login."""
    from mcp import Client

    from silica.mcp.client import transport

    store_of(name, server).forget_tokens()
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout + 60):
            async with Client(transport(name, server, None, approval=approval),
                              cache=None) as client:
                await client.list_tools()
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
            raise
        from silica.mcp.client import explain as explain_any

        leaf = _first(exc)
        if isinstance(leaf, TimeoutError) and time.monotonic() - started >= timeout:
            raise LoginFailed(f"no login to the MCP server {name!r} within {timeout:g} s; "
                              f"run silica mcp login {name} to try again") from None
        raise McpServerError(explain_any(exc, name, server, timeout, "logging in", False, "",
                                         [])) from None
    return store_of(name, server).logged_in()


def _first(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
