"""A threaded HTTP server on 127.0.0.1 that replays a script in one wire protocol.

A protocol is a ``render(reply, body, n) -> Wire`` function: what to send for scripted
``reply`` to request number ``n`` (1-based) whose parsed JSON is ``body``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .script import Received, Reply, error

MAX_REQUESTS = 200  # a runaway client gets errors, not an endless conversation
SOCKET_TIMEOUT = 10.0  # seconds a connection may sit idle before the server gives up on it


@dataclass
class Wire:
    """Bytes to send: a stream (``stream``: chunked encoding, as the APIs' SSE/NDJSON) or one
    body. ``drop_after`` cuts the connection after that many chunks."""

    status: int
    content_type: str
    chunks: list[bytes]
    stream: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    drop_after: int | None = None
    delay: float = 0.0  # seconds between two chunks of a stream


Render = Callable[[Reply, Any, int], Wire]
Route = Callable[[Received], Wire | None]
"""Asked before the script: a ``Wire`` answers the request (no scripted reply is used)."""


class WireServer:
    """A running server: ``base_url``, what it ``received``, and the ``env`` for the SDK."""

    def __init__(self, render: Render, script: Iterable[Reply], paths: tuple[str, ...],
                 exhausted: Callable[[int], Reply] | None = None,
                 stream_type: str = "application/octet-stream") -> None:
        self.script: list[Reply] = list(script)
        self.stream_type = stream_type  # the content type of a ``raw`` reply
        self.received: list[Received] = []
        self.root = ""  # http://127.0.0.1:PORT
        self.keep_alive = False  # True: a connection stays open for the client's next request
        self.peers: list[int] = []  # the client's port for each request, in order
        self.base_url = ""  # what the SDK is given (the root, or the root plus /v1)
        self.env: dict[str, str] = {}
        self._render = render
        self._paths = paths
        self.routes: list[Route] = []  # asked in order before the script (the Files API)
        self._lock = threading.Lock()
        self._exhausted = exhausted or (lambda n: error(
            500, f"wire server: the script has no reply left for request {n}",
            retry_after=None, headers={"x-should-retry": "false"}))

    @property
    def requests(self) -> list[Any]:
        """The parsed JSON bodies received so far, in order."""
        return [r.body for r in self.received]

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self.script.extend(replies)

    def use(self, monkeypatch) -> WireServer:
        """Point the SDK at this server: set ``env`` with pytest's ``monkeypatch``."""
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)
        return self

    def _next(self, received: Received) -> Wire:
        with self._lock:
            self.received.append(received)
            n = len(self.received)
            for route in self.routes if n <= MAX_REQUESTS else ():
                wire = route(received)
                if wire is not None:
                    return wire
            reply = self.script.pop(0) if self.script else self._exhausted(n)
        if n > MAX_REQUESTS:
            reply = self._exhausted(n)
        if received.path.split("?")[0] not in self._paths:
            reply = error(404, f"wire server: no route {received.path}", retry_after=None)
        if reply.raw:
            wire = Wire(200, self.stream_type, list(reply.raw) * reply.repeat, stream=True)
        else:
            wire = self._render(reply, received.body, n)
        wire.delay = reply.delay
        return wire


def _handler(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = SOCKET_TIMEOUT

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.peers.append(self.client_address[1])
            wire = server._next(Received(self.command, self.path, headers, body, raw))
            self.close_connection = not server.keep_alive
            if wire.drop_after == 0:
                return  # close without a word
            # the client may stop reading (a bound, a deadline): nothing to report then
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._send(wire)

        def _send(self, wire: Wire) -> None:
            self.send_response(wire.status)
            self.send_header("content-type", wire.content_type)
            if not server.keep_alive:
                self.send_header("connection", "close")
            for key, value in wire.headers.items():
                self.send_header(key, value)
            sent = wire.chunks if wire.drop_after is None else wire.chunks[:wire.drop_after]
            if wire.stream:
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i, chunk in enumerate(sent):
                    if wire.delay and i:
                        time.sleep(wire.delay)
                    self.wfile.write(b"%x\r\n" % len(chunk))
                    self.wfile.write(chunk)  # not joined: a large chunk is not copied
                    self.wfile.write(b"\r\n")
                    self.wfile.flush()
                if wire.drop_after is None:
                    self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("content-length", str(sum(len(c) for c in wire.chunks)))
                self.end_headers()
                self.wfile.write(b"".join(sent))
            self.wfile.flush()

        do_GET = do_DELETE = do_POST

    return Handler


@contextmanager
def serve(server: WireServer) -> Iterator[WireServer]:
    """Run ``server`` in a thread for the ``with`` block; it stops by itself at the end."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              name="wire-server", daemon=True)
    thread.start()
    server.root = server.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def sse(event: str | None, data: Any) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already text."""
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def split_json(s: str, parts: int = 3) -> list[str]:
    """``s`` in ``parts`` roughly equal pieces, as models stream tool arguments."""
    size = max(1, -(-len(s) // parts))
    return [s[i:i + size] for i in range(0, len(s), size)] or [""]
