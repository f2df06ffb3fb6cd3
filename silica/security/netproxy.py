"""The network proxy silica runs for one call of a tool granted some hosts.

A sandboxed tool has no network of its own. Inside its sandbox a forwarder listens on
127.0.0.1 and relays each connection, byte for byte, to a Unix socket; this proxy listens on
that socket outside the sandbox, on silica's event loop, and lets each connection through
only to a host the user granted the tool (``silica.security.hosts``):

    rules = HostRules.parse(settings.tools.network_grant.get("weather", []))
    async with NetworkProxy(rules, private_dir / "net.sock", tool="weather") as proxy:
        ...                         # run the tool with HTTP(S)_PROXY pointing at the forwarder
    proxy.denied                    # ["evil.example:443"]: for the call's result note

It speaks HTTP/1.1 proxying (``silica.security.proxy_head``): ``CONNECT host:port`` opens a
tunnel (HTTPS and any TCP protocol), and an absolute-form ``GET http://host/path`` is sent on
in origin form, one request per connection. The proxy resolves names itself.

What a caller may rely on:

- A host that is not granted gets ``403 Forbidden`` with a body saying how to grant it, and
  its ``host:port`` is added to ``denied``; a granted one is added to ``used`` (each once, in
  the order first seen, the first ``MAX_NOTED`` of each). A granted host that cannot be
  reached gets ``502 Bad Gateway``; a request that is not one of the two forms gets ``400``.
  Every answer closes the connection.
- Bounds: a request head of at most ``max_head`` bytes (``431`` beyond), sent within
  ``head_timeout`` seconds (``408`` after); at most ``max_connections`` open connections
  (``503`` for more); ``connect_timeout`` to reach a host; a tunnel with no bytes either way
  for ``idle_timeout`` is closed. Each direction buffers at most ``BUFFER`` bytes and waits
  for the other side to take them.
- The socket file is created with mode 0600 and never over an existing path (``OSError``
  names it); leaving the ``async with`` closes every connection and removes the file.
  It is made by ``bind`` before it can be chmod-ed: give a private folder.
- Nothing a client sends ends the proxy: a connection's failure ends that connection only.
  Names are looked up in ``RESOLVERS`` threads of the proxy's own, so lookups that hang
  hold up only this proxy's later lookups, not the threads the rest of silica uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from itertools import zip_longest
from pathlib import Path

from silica.security.hosts import HostRules, InvalidHostGrant, format_host, is_address
from silica.security.proxy_head import BadRequest, HeadScanner, ProxyRequest, parse_head

__all__ = ["BUFFER", "MAX_NOTED", "HostRules", "InvalidHostGrant", "NetworkProxy"]

BUFFER = 64 * 1024
"""Bytes read at once from either side of a connection, and the most held for the other."""

MAX_NOTED = 100
"""At most this many targets are kept in ``denied`` and in ``used``: a tool asking for a
million hosts costs neither memory nor a million-line note."""

RESOLVERS = 2
"""Threads each proxy looks names up in, at most."""

STAGGER = 0.25
"""Seconds an address of a name is given before the next one is tried beside it."""

_MAX_UNIX_PATH = 107  # sun_path is 108 bytes with its terminating NUL
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

log = logging.getLogger("silica.security.netproxy")


class _HeadTooLarge(Exception):
    pass


@dataclass
class _Activity:
    last: float


class NetworkProxy:
    """The proxy for one call of ``tool`` (see the module docstring)."""

    def __init__(self, rules: HostRules, socket_path: str | os.PathLike[str], *, tool: str,
                 connect_timeout: float = 10.0, head_timeout: float = 10.0,
                 idle_timeout: float = 300.0, max_connections: int = 64,
                 max_head: int = 16 * 1024) -> None:
        self.rules = rules
        self.socket_path = Path(socket_path)
        self.tool = tool
        self.connect_timeout = connect_timeout
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_head = max_head
        self.denied: list[str] = []
        self.used: list[str] = []
        self._server: asyncio.AbstractServer | None = None
        self._file: tuple[int, int] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._resolver: ThreadPoolExecutor | None = None

    async def __aenter__(self) -> NetworkProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Listen on ``socket_path``. ``OSError`` when it exists or cannot be made there."""
        path = os.fspath(self.socket_path)
        if len(os.fsencode(path)) > _MAX_UNIX_PATH:
            raise OSError(errno.ENAMETOOLONG, "the network proxy's socket path is longer than "
                          f"{_MAX_UNIX_PATH} bytes: give a shorter folder", path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)  # fails on any existing file: nothing is replaced or followed
        except OSError as err:
            sock.close()
            if err.errno == errno.EADDRINUSE:
                raise OSError(errno.EEXIST, "the network proxy's socket path already exists: "
                              "give a new path in a private folder", path) from None
            raise OSError(err.errno, f"the network proxy cannot listen there: {err.strerror}",
                          path) from None
        try:
            info = os.lstat(path)
            self._file = (info.st_dev, info.st_ino)
            os.chmod(path, 0o600)
            self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=BUFFER)
        except BaseException:
            sock.close()
            self._unlink()
            raise

    async def close(self) -> None:
        """Stop listening, close every open connection and remove the socket file."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await server.wait_closed()
        self._unlink()
        if self._resolver is not None:  # a hanging lookup ends on its own, unwaited
            self._resolver.shutdown(wait=False, cancel_futures=True)

    def _unlink(self) -> None:
        """Remove the socket file, if it is still the one this proxy made."""
        with contextlib.suppress(OSError):
            info = os.lstat(self.socket_path)
            if (info.st_dev, info.st_ino) == self._file:
                os.unlink(self.socket_path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if self._server is None or task is None:  # accepted as the proxy closed
            writer.close()
            return
        self._handlers.add(task)
        try:
            if len(self._handlers) > self.max_connections:
                await _answer(writer, 503, "silica: too many connections through the network "
                              f"proxy (at most {self.max_connections} at once)")
            else:
                await self._handle(reader, writer)
        except (OSError, EOFError):
            pass  # the client or the host went away: nothing left to tell anyone
        except asyncio.CancelledError:
            # close() ends the connection: end quietly, since asyncio's streams (3.11, 3.12.0)
            # log every connection task that ends cancelled as an error
            pass
        except Exception:  # a bug here must end this connection, never the proxy
            log.exception("network proxy for %s: connection failed", self.tool)
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self.head_timeout):
                head, rest = await self._read_head(reader)
            if not head:
                return
            request = parse_head(head)
        except TimeoutError:
            return await _answer(writer, 408, "silica: the request head took too long")
        except _HeadTooLarge:
            return await _answer(writer, 431, "silica: the request head is longer than "
                                 f"{self.max_head} bytes")
        except BadRequest as err:
            return await _answer(writer, 400, f"silica: the network proxy cannot serve this: {err}")
        if not self.rules.allows(request.host, request.port):
            _note(self.denied, request.target)
            return await _answer(writer, 403, self._not_granted(request))
        _note(self.used, request.target)
        try:
            async with asyncio.timeout(self.connect_timeout):
                up_reader, up_writer = await self._open(request.host, request.port)
        except TimeoutError:
            return await _answer(writer, 502, f"silica: {request.target} did not answer within "
                                 f"{self.connect_timeout:g} s")
        except OSError as err:
            return await _answer(writer, 502, f"silica: cannot reach {request.target}: "
                                 f"{_reason(err)}")
        try:
            if request.tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request.forward)
            up_writer.write(rest)
            await self._relay(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader,
                                                         asyncio.StreamWriter]:
        """A connection to ``host`` (a canonical name or address). Names are looked up in
        this proxy's own threads: a lookup that hangs (a tool may ask for any name a wildcard
        allows) ties up those, not the pool the rest of silica's loop works in."""
        if is_address(host):
            return await asyncio.open_connection(host, port, limit=BUFFER)
        if self._resolver is None:
            self._resolver = ThreadPoolExecutor(RESOLVERS, "silica-netproxy-dns")
        infos = await asyncio.get_running_loop().run_in_executor(
            self._resolver, partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM))
        by_family: dict[int, list[str]] = {}
        for family, *_, sockaddr in infos:
            if sockaddr[0] not in by_family.setdefault(family, []):
                by_family[family].append(str(sockaddr[0]))
        # families alternate, so one whose route is dead costs a stagger, not the timeout
        return await _first_to_connect([a for group in zip_longest(*by_family.values())
                                        for a in group if a is not None], port)

    async def _read_head(self, reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
        """The head and the bytes after it (``b""`` twice when the client sent nothing)."""
        scanner = HeadScanner()
        while True:
            chunk = await reader.read(BUFFER)
            if not chunk:
                if scanner.data:
                    raise BadRequest("the request ended before its blank line")
                return b"", b""
            end = scanner.feed(chunk)
            if end > self.max_head or (end == -1 and len(scanner.data) > self.max_head):
                raise _HeadTooLarge
            if end != -1:
                return bytes(scanner.data[:end]), bytes(scanner.data[end:])

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> None:
        """Copy bytes both ways until the host is done, or nothing moves for the idle timeout.
        When the client finishes sending first, the host's answer still comes back."""
        activity = _Activity(asyncio.get_running_loop().time())
        up = asyncio.create_task(_pump(reader, up_writer, activity))
        down = asyncio.create_task(_pump(up_reader, writer, activity))
        idle = asyncio.create_task(self._idle(activity))
        try:
            done, _ = await asyncio.wait({up, down, idle}, return_when=asyncio.FIRST_COMPLETED)
            if done == {up} and up.exception() is None:
                await asyncio.wait({down, idle}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down, idle):
                task.cancel()
            await asyncio.gather(up, down, idle, return_exceptions=True)

    async def _idle(self, activity: _Activity) -> None:
        loop = asyncio.get_running_loop()
        while (left := activity.last + self.idle_timeout - loop.time()) > 0:
            await asyncio.sleep(left)

    def _not_granted(self, request: ProxyRequest) -> str:
        host = format_host(request.host)
        key = self.tool if _BARE_KEY.fullmatch(self.tool) else json.dumps(self.tool)
        return (f"silica: {self.tool} may not reach {host} (not granted). Grant it in "
                f'config.toml: [tools.network_grant] {key} = ["{host}"]')


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                activity: _Activity) -> None:
    loop = asyncio.get_running_loop()
    while chunk := await reader.read(BUFFER):
        activity.last = loop.time()
        writer.write(chunk)
        await writer.drain()
    if writer.can_write_eof():
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = (text + "\n").encode()
    writer.write(f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                 "Content-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(OSError):
        await writer.drain()


def _reason(err: OSError) -> str:
    if isinstance(err, socket.gaierror):
        return "the name does not resolve"
    if err.errno:
        return os.strerror(err.errno).lower()
    return (str(err) or type(err).__name__).splitlines()[0]


async def _first_to_connect(addresses: list[str], port: int) -> tuple[asyncio.StreamReader,
                                                                        asyncio.StreamWriter]:
    """The first of ``addresses`` to connect: each is tried in turn, the next one starting
    when the last fails or after ``STAGGER`` seconds while it is still pending (the
    others are then given up). The last failure when none connects."""
    pending: set[asyncio.Task[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = set()
    failure: BaseException = OSError("the name has no address")
    left = iter(addresses)
    try:
        while True:
            address = next(left, None)
            if address is not None:
                pending.add(asyncio.create_task(
                    asyncio.open_connection(address, port, limit=BUFFER)))
            if not pending:
                raise failure
            done, pending = await asyncio.wait(
                pending, timeout=STAGGER if address is not None else None,
                return_when=asyncio.FIRST_COMPLETED)
            connected = [task.result() for task in done if task.exception() is None]
            for _, extra in connected[1:]:
                extra.close()
            if connected:
                return connected[0]
            for task in done:
                failure = task.exception() or failure
    finally:
        for task in pending:
            task.cancel()


def _note(seen: list[str], target: str) -> None:
    if len(seen) < MAX_NOTED and target not in seen:
        seen.append(target)
