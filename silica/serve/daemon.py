"""Run the daemon: listen, say where, serve until Ctrl-C or SIGTERM, stop cleanly.

    serve(options, host="127.0.0.1", port=8700, on_start=print)

The socket is bound before anything is printed, so the start line (``on_start(url)``) means
the daemon listens. A signal (SIGINT, SIGTERM) first interrupts the running turns (each tool
call answered, the session saved, clients told with ``error`` and ``turn_end``), ends the
event streams and Socket.IO connections, then lets uvicorn finish the requests left (at most
``GRACE`` seconds), and closes the MCP servers silica started; a second signal stops at once.
Connections without the token are kept few and brief (``silica.serve.connections``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import uvicorn

from silica.errors import SilicaError
from silica.serve.app import ServeApp, create_app
from silica.serve.connections import ACCEPT_BATCH, Doorkeeper
from silica.serve.options import ServeOptions

GRACE = 5  # seconds uvicorn waits for requests still open once stopping
LISTEN_QUEUE = 1024  # connections the kernel holds until the daemon accepts them


def start_url(host: str, port: int, token: str | None = None) -> str:
    """The address to open: ``http://HOST:PORT/`` (``?token=T`` with a token)."""
    shown = f"[{host}]" if ":" in host else host
    # quoted whole: a token may hold '#', '&', '+' or '%', which would cut the link short
    return f"http://{shown}:{port}/" + (f"?token={quote(token, safe='')}" if token else "")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; ``SilicaError`` saying what to do if it cannot be had."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family, reuse_port=False)
    except OSError as exc:
        raise SilicaError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick "
                          "another --port (0 takes a free one) or stop what uses it") from exc
    sock.set_inheritable(True)
    # accepted sockets inherit it (asyncio sets it only where proto is IPPROTO_TCP, and
    # create_server's is 0): without it a keep-alive answer waits ~40 ms for an ACK
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def serve(options: ServeOptions, *, host: str, port: int,
          on_start: Callable[[str], None]) -> None:
    """Serve until a signal stops it (see the module docstring). ``SilicaError`` if the
    address cannot be listened on or the bus cannot start."""
    app = create_app(options)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    door = Doorkeeper(options.token, options.settings.serve)
    config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=GRACE, lifespan="on",
                            server_header=False, http=door.protocol(), backlog=ACCEPT_BATCH)
    server = _Server(config, app, door)
    try:
        on_start(start_url(host, bound, options.token))
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
    if server.started is False and not server.should_exit:
        raise SilicaError("silica serve could not start; the lines above say why")


class _Server(uvicorn.Server):
    """uvicorn's server, stopping in order: on the first signal the turns are interrupted,
    their clients told and the streams ended (``ServeApp.stopping``), and only then does
    uvicorn close the connections (it would otherwise wait for every open stream to close
    by itself, and close Socket.IO connections before the last events reach them). A
    second signal stops at once."""

    def __init__(self, config: uvicorn.Config, app: ServeApp, door: Doorkeeper) -> None:
        super().__init__(config)
        self.serve_app, self.door = app, door
        self.stopping = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self.door.exception_handler)
        await super().startup(sockets)
        for sock in sockets or ():  # uvicorn listened with its backlog, the accept batch:
            sock.listen(LISTEN_QUEUE)  # the kernel may queue more (a full queue drops SYNs)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.stopping:
            super().handle_exit(sig, frame)
            return
        try:
            loop = asyncio.get_running_loop()  # signal handlers run on the loop's thread
        except RuntimeError:  # not serving yet: nothing to end first
            super().handle_exit(sig, frame)
            return
        self.stopping = True
        loop.call_soon_threadsafe(_spawn, self._stop())

    async def _stop(self) -> None:
        try:
            await self.serve_app.stopping()
        finally:
            self.should_exit = True


_KEEP: set[asyncio.Task] = set()


def _spawn(coro: Any) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _KEEP.add(task)
    task.add_done_callback(_KEEP.discard)
