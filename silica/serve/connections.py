"""Connections that have not shown the token are kept few and brief, so nobody without it can
starve the daemon of sockets or file descriptors.

    door = Doorkeeper(token, settings.serve)
    config = uvicorn.Config(app, http=door.protocol(), backlog=ACCEPT_BATCH, ...)

Each connection is served by uvicorn's own HTTP protocol (h11) with three rules added:

- A connection is *pending* until one of its requests carries the token (any complete
  request, when the daemon has none). At most ``[serve] max_pending_connections`` are
  pending (fewer when the file-descriptor limit is low); a new connection past that closes
  the oldest pending one that has had its turn to send (it was read from, or is ``GRACE``
  old; failing that, the oldest), so a flood of connections that never finish their
  headers cannot keep a client with the token out. A request without the token is
  answered with ``Connection: close``.
- Headers must be complete within ``[serve] header_timeout`` seconds of the connection (or
  of the previous answer); a body may pause at most ``[serve] body_timeout`` seconds while
  the daemon waits for it. Past either, the connection is closed.
- Running out of file descriptors (``EMFILE``) is one warning line (at most one a minute),
  not a traceback per accept; accepting goes on when descriptors are free again.

Why a protocol class: uvicorn's own limits act too late (``limit_concurrency`` counts
connections only once their headers are in and then refuses everyone alike;
``timeout_keep_alive`` starts only after an answer), while the protocol sees every
connection from its first byte. uvicorn accepts up to ``backlog`` connections at once before
any protocol sees them, so that batch is kept small (``ACCEPT_BATCH``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from silica.serve.auth import login_token, token_from, token_matches

if TYPE_CHECKING:
    from silica.config import ServeSettings

log = logging.getLogger("silica.serve")

ACCEPT_BATCH = 16
"""Connections accepted at once (uvicorn's ``backlog``; the daemon then lets the kernel
queue more, ``silica.serve.daemon.LISTEN_QUEUE``)."""

GRACE = 0.25
"""Seconds a new connection is not closed to make room unless it has been read from: its
request may be waiting in the kernel, unread yet because the daemon is busy accepting."""

WARN_EVERY = 60.0  # seconds between two "out of file descriptors" lines
_OUT_OF_FDS = "socket.accept() out of system resource"


class Doorkeeper:
    """The shared state of the rules above: the pending connections, oldest first."""

    def __init__(self, token: str | None, serve: ServeSettings) -> None:
        self.token = token
        self.header_timeout = serve.header_timeout
        self.body_timeout = serve.body_timeout
        self.max_pending = min(serve.max_pending_connections, fd_share())
        self.pending: collections.OrderedDict[Any, None] = collections.OrderedDict()
        self._warned = 0.0

    def protocol(self) -> type[H11Protocol]:
        """The HTTP protocol class for uvicorn's ``http=``, bound to this doorkeeper."""
        return type("GuardedH11Protocol", (GuardedH11Protocol,), {"door": self})

    def admit(self, conn: Any) -> None:
        """A new connection: pending, after closing the oldest pending one that has had
        its turn to send (``GuardedH11Protocol.had_its_turn``; failing that, the oldest)
        if full. Since fewer than ``max_pending`` are accepted at once, a connection is
        read from before that many newer ones arrive."""
        while len(self.pending) >= self.max_pending:
            now = time.monotonic()
            victim = next((c for c in self.pending if c.had_its_turn(now)),
                          next(iter(self.pending)))
            del self.pending[victim]
            victim.refuse()
        self.pending[conn] = None

    def settled(self, conn: Any) -> None:
        """``conn`` showed the token, closed, or left HTTP (a WebSocket): not pending."""
        self.pending.pop(conn, None)

    def carries_token(self, scope: Mapping[str, Any]) -> bool:
        """Whether the request of ``scope`` shows the token (header, cookie, or the start
        link's ``GET /?token=``); always, when the daemon has none."""
        if not self.token:
            return True
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", ())}
        return token_matches(self.token, token_from(headers)) \
            or token_matches(self.token, login_token(scope) or "")

    def exception_handler(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """The loop's exception handler: ``EMFILE`` on accept is one short line."""
        if context.get("message") != _OUT_OF_FDS:
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY:
            self._warned = now
            exc = context.get("exception")
            reason = getattr(exc, "strerror", None) or "out of resources"
            log.warning("cannot accept connections (%s); %d pending, %d "
                        "allowed. Raise the limit (ulimit -n) or lower [serve] "
                        "max_pending_connections", reason, len(self.pending),
                        self.max_pending)


def fd_share() -> int:
    """A quarter of the file descriptors this process may open: the most connections
    without the token may hold, leaving the rest to clients with it, files and tools."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(2 * ACCEPT_BATCH, soft // 4)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the rules of the module docstring."""

    door: Doorkeeper

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._born, self._heard = time.monotonic(), False
        self._phase: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._seen: Any = None
        self.door.admit(self)
        self._settle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self.door.settled(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._heard = True
        if self._phase == "body":  # an idle timeout: every chunk restarts it
            self._arm("body")
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        self._settle()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._settle()

    def had_its_turn(self, now: float) -> bool:
        """Whether the daemon has read what this connection sent (and its headers are
        still not complete), or it has been open ``GRACE`` seconds."""
        return self._heard or now - self._born >= GRACE

    def refuse(self) -> None:
        """Close at once: room for a newer connection, or a timeout."""
        self._cancel()
        if not self.transport.is_closing():
            self.transport.close()

    # -- the phases ---------------------------------------------------------------------

    def _settle(self) -> None:
        """After h11 moved on: note a request whose headers just arrived, and time the
        phase the connection is in (headers, body, or none while it is answered)."""
        if self.transport.is_closing():
            self._cancel()
            return
        if self.transport.get_protocol() is not self:  # now a WebSocket (Socket.IO bounds it)
            self._cancel()
            self.door.settled(self)
            return
        if self.cycle is not None and self.cycle is not self._seen:
            self._seen = self.cycle
            if self.door.carries_token(self.scope):
                self.door.settled(self)
            else:  # answered, then closed: a refused client does not keep the socket
                self.cycle.keep_alive = False
                # uvicorn then says so (Connection: close), so no client reuses it
                headers = cast(list[tuple[bytes, bytes]], self.scope["headers"])  # uvicorn's
                headers.append((b"connection", b"close"))
        state = self.conn.their_state
        phase = "headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase != self._phase:
            self._cancel()
            if phase is not None:
                self._arm(phase)

    def _arm(self, phase: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._phase = phase
        delay = self.door.header_timeout if phase == "headers" else self.door.body_timeout
        self._timer = self.loop.call_later(delay, self._expired)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._phase = None, None

    def _expired(self) -> None:
        self._timer = None
        if self._phase == "body" and (self.flow.read_paused
                                      or self.cycle.waiting_for_100_continue):
            self._arm("body")  # the daemon is not reading yet: not the client's pause
            return
        log.info("closed a connection that sent no complete %s in time",
                 "request headers" if self._phase == "headers" else "body")
        self.refuse()
