"""The pieces of talking to one MCP server: its transport, its stderr, its errors explained.

``transport(name, server, stderr, start)`` is the SDK transport for a server's settings
(stdio, started where ``silica.security.server_start`` says; streamable HTTP or SSE, with
``headers`` expanded from the environment). ``explain`` turns
whatever went wrong into one message for the model and the person, with the end of the
server's stderr. Connections themselves are ``silica.mcp.connections``'s business.

A stdio server's stderr goes to a pipe drained as it arrives; only its last ``STDERR_KEEP``
bytes are kept (in memory, never on disk), however much the server writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from silica.config import McpServerSettings
from silica.errors import SilicaError
from silica.security.sandbox import SandboxPolicy
from silica.security.server_start import ServerStart, server_cache

_STDERR_TAIL = 600  # characters of stderr quoted in a message
STDERR_KEEP = 64 * 1024  # bytes of a server's stderr kept while it runs
_STDERR_READ = 64 * 1024
STDERR_DRAIN = 1.0  # seconds to wait for the last of stderr once the server is stopped
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpServerError(SilicaError):
    """An MCP server could not be used for one operation; the message says why."""


class AnswerTooLarge(McpServerError):
    """An MCP server's answer was longer than silica reads of it (``silica.mcp.bounded``)."""


class StderrTail:
    """A pipe to give a server as its stderr, drained by a thread that keeps only the last
    ``keep`` bytes: memory stays bounded whatever the server writes, and it never blocks on
    a full pipe."""

    def __init__(self, keep: int = STDERR_KEEP) -> None:
        read_fd, write_fd = os.pipe()  # neither end is inherited but by the server's stderr
        self.writer: TextIO = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._keep = keep
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(read_fd,), daemon=True,
                                        name="mcp-stderr")
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, _STDERR_READ):
                with self._lock:
                    self._kept += chunk
                    if len(self._kept) > 2 * self._keep:  # trim now and then, not per chunk
                        del self._kept[:-self._keep]
        except OSError:
            pass
        finally:
            os.close(fd)

    def close(self) -> None:
        """Close silica's end of the pipe: the drain ends once the server's end is closed."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def text(self, wait: float = 0.0) -> str:
        """The last bytes written so far as text; first closes silica's end and waits up to
        ``wait`` seconds for the server's last words (a server that left a child holding the
        pipe is not waited for longer)."""
        self.close()
        self._thread.join(wait)
        with self._lock:
            return bytes(self._kept[-self._keep:]).decode("utf-8", "replace")


def expand_value(name: str, where: str, key: str, value: str,
                 environ: Mapping[str, str] | None = None) -> str:
    """``value`` with every ``${VAR}`` replaced by the environment's value; a variable that
    is not set raises ``McpServerError`` naming it, ``where`` it was (e.g. "its header
    'Authorization'") and the config ``key`` to change."""
    environ = os.environ if environ is None else environ
    missing = [v for v in _VARIABLE.findall(value) if v not in environ]
    if missing:
        raise McpServerError(
            f"the MCP server {name!r} needs the environment variable {missing[0]} "
            f"(in {where}); set it, or change {key} in config.toml")
    return _VARIABLE.sub(lambda m: environ[m.group(1)], value)


def expand_headers(name: str, headers: Mapping[str, str],
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``headers`` with every ``${VAR}`` replaced by the environment's value; a variable
    that is not set raises ``McpServerError`` naming it and the header."""
    return {key: expand_value(name, f"its header {key!r}", "headers", value, environ)
            for key, value in headers.items()}


def transport(name: str, server: McpServerSettings, stderr: TextIO | None,
              start: ServerStart | None = None, sandbox: SandboxPolicy | None = None,
              approval: Any = None):
    """The SDK transport (an async context manager of the two streams) for ``server``; a
    stdio server runs ``start.command`` in ``start.cwd`` (``silica.security.server_start``
    decides both; every stdio server silica starts is given one), confined by ``sandbox``
    (``silica.security.sandbox``) with its start folder writable. An HTTP server logs in
    with OAuth when it asks (``silica.mcp.oauth``; ``approval``: how a person approves,
    default as its config says)."""
    if server.url:
        return _http(name, server, approval)
    if start is None:
        raise ValueError("a stdio MCP server needs its ServerStart")
    return _stdio(name, server, stderr, start, sandbox)


@contextlib.asynccontextmanager
async def _stdio(name: str, server: McpServerSettings, stderr: TextIO | None,
                 start: ServerStart, sandbox: SandboxPolicy | None) -> AsyncIterator[Any]:
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    from silica.paths import cache_dir
    from silica.tools.confined import Sandboxed, SandboxRefused, confined_command

    confined, caches = None, {}
    if sandbox is not None and sandbox.mode != "off":
        cache = server_cache(name)
        caches = {"UV_CACHE_DIR": str(cache / "uv"), "npm_config_cache": str(cache / "npm"),
                  "XDG_CACHE_HOME": str(cache)}
        confinement = sandbox.confinement(
            label=f"the MCP server {name!r}", workspace=start.cwd, network=server.network,
            writable=[cache, *(Path(p).expanduser() for p in server.write)],
            readable=[start.cwd],
            network_setting=f'[mcp.servers.{_toml_key(name)}] network = ["{{host}}"]')
        confined = Sandboxed(sandbox, confinement, cache_dir())
    try:
        async with confined_command([start.command, *server.args], confined,
                                    start.cwd) as (argv, extra, _proxy):
            extra = {**caches, **extra}
            env = {**extra, **server.env} if (server.env or extra) else None
            params = StdioServerParameters(command=argv[0], args=argv[1:], env=env,
                                           cwd=start.cwd)
            client = stdio_client(params, errlog=stderr) if stderr else stdio_client(params)
            async with client as streams:
                yield streams
    except SandboxRefused as exc:
        raise McpServerError(str(exc)) from None


@contextlib.asynccontextmanager
async def _http(name: str, server: McpServerSettings, approval: Any) -> AsyncIterator[Any]:
    from silica.mcp import oauth

    headers = expand_headers(name, server.headers)  # at connect time: tokens stay out of files
    url = server.url or ""
    # OAuth answers a 401; a server given its own Authorization header is left to it
    given = any(key.lower() == "authorization" for key in headers)
    login = oauth.auth(name, server, approval) if server.oauth or not given else None
    if server.kind == "sse":
        from mcp.client.sse import sse_client

        async with sse_client(url, headers=headers or None, auth=login) as streams:
            yield streams
        return
    from mcp.client.streamable_http import streamable_http_client

    from silica.mcp.bounded import bounded_http_client

    async with bounded_http_client(headers or None) as http:
        if login is not None:
            http.auth = login
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def _toml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else '"' + name.replace('"', '\\"') + '"'


_NOT_STARTED = re.compile(r"^could not start .*: No such file or directory$", re.MULTILINE)


# What a server says when the sandbox kept it from its registry or from writing.
_CONFINED = re.compile(r"Read-only file system|EROFS|EAI_AGAIN|ENOTFOUND|ECONNREFUSED|"
                       r"name resolution|Failed to fetch|Network is unreachable|"
                       r"Operation not permitted|403 Forbidden|may not reach", re.IGNORECASE)


def explain(exc: BaseException, name: str, server: McpServerSettings, timeout: float,
            what: str, started: bool, stderr: str, noise: list[str],
            start: ServerStart | None = None) -> str:
    """One message for the model and the person: what failed, and what the server said."""
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError

    leaf = _leaf(exc)
    where = f"MCP server {name!r}"
    # the sandbox's stage runs the command, and says so when it is not there
    not_found = bool(server.command) and not started and (
        isinstance(leaf, FileNotFoundError) or bool(_NOT_STARTED.search(stderr or "")))
    if not_found:
        stderr = ""  # its one line is said above
    if isinstance(leaf, McpServerError):  # already says what to do
        return str(leaf)
    if server.url and (said := _oauth_explain(leaf, name)):
        return said
    if isinstance(leaf, TimeoutError):  # before OSError, of which it is a kind
        step = what if started else "starting up"
        message = f"the {where} did not answer within {timeout:g} s ({step})"
    elif not_found:
        command = start.command if start is not None else server.command
        message = (f"cannot start the {where}: no command {command!r} "
                   "(is it installed and on PATH?)")
    elif isinstance(leaf, OSError) and server.command and not started:
        message = f"cannot start the {where}: {leaf.strerror or leaf}"
    elif isinstance(leaf, MCPError) and "closed" in str(leaf).lower():
        message = (f"the {where} stopped during {what}" if started else
                   f"the {where} stopped before it was ready")
    elif isinstance(leaf, MCPError):
        message = f"the {where} refused {what}: {leaf}"
    elif isinstance(leaf, ValidationError):
        message = f"the {where} sent an answer that is not valid MCP during {what}"
    elif server.url and not started:
        message = f"cannot reach the {where} at {server.url}: {type(leaf).__name__}: {leaf}"
    else:
        message = f"the {where} failed during {what}: {type(leaf).__name__}: {leaf}"
    if noise:
        message += f"; it printed text that is not MCP on stdout: {noise[0]!r}"
    if start is not None and not started:  # did it look for something in the project?
        message += start.hint(stderr, not_found)
        if _CONFINED.search(stderr) and not server.network:
            message += ("; it runs in the sandbox, with no network and only its start folder "
                        "writable: a server fetched at start (uvx, npx) needs its registry, "
                        "e.g. network = [\"pypi.org\", \"files.pythonhosted.org\"] (uvx) or "
                        "[\"registry.npmjs.org\"] (npx) under its [mcp.servers] entry")
    if stderr:
        message += f"; its stderr ends:\n{stderr}"
    return message


def _oauth_explain(exc: BaseException, name: str) -> str | None:
    from silica.mcp import oauth

    return oauth.explain(exc, name)


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (the server stopped, the stream broke)."""
    import anyio
    from mcp.shared.exceptions import MCPError

    leaf = _leaf(exc)
    if isinstance(leaf, MCPError):
        return "closed" in str(leaf).lower()
    return isinstance(leaf, (anyio.ClosedResourceError, anyio.BrokenResourceError,
                             anyio.EndOfStream, ConnectionError))


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the SDK's task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)),
                   exc.exceptions[0])
    return exc


def unparsed(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            given = errors()[0].get("input")
            if isinstance(given, str):
                return given[:120]
    return str(exc)[:120]


def stderr_tail(text: str) -> str:
    """The end of a server's stderr for a message: blank lines dropped, the last
    ``_STDERR_TAIL`` characters."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    tail = "\n".join(lines)
    return tail if len(tail) <= _STDERR_TAIL else "..." + tail[-_STDERR_TAIL:]


class CompleteByDefault:
    """A server's messages as the SDK reads them, each result that names no ``resultType``
    given ``"complete"``: an absent one means that (SEP-2322), and the SDK's checks of a
    2026-07-28 answer require the field (an older revision's results allow it)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # ``last_context`` and the like: the stream's
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        item = await self._inner.receive()
        result = getattr(getattr(item, "message", None), "result", None)
        if isinstance(result, dict) and "resultType" not in result:
            result["resultType"] = "complete"
        return item

    def __aiter__(self) -> CompleteByDefault:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> CompleteByDefault:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    async def aclose(self) -> None:
        await self._inner.aclose()


@contextlib.asynccontextmanager
async def complete_by_default(streams: Any) -> AsyncIterator[Any]:
    """``streams`` (a transport: ``transport(...)``) with every result the server sends
    without a ``resultType`` read as ``"complete"`` (``CompleteByDefault``)."""
    async with streams as (read, write, *rest):
        yield (CompleteByDefault(read), write, *rest)
