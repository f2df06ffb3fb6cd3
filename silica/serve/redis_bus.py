"""The event bus shared through Redis: several ``silica serve`` processes behind one address.

    bus = RedisBus("redis://127.0.0.1:6379/0")   # SilicaError if Redis cannot be reached
    sio = socketio.AsyncServer(client_manager=bus.client_manager(), ...)
    bus.attach(sio); await bus.start()           # then as ``EventBus``

Every event goes through python-socketio's Redis manager (``SharedManager``, an
``AsyncRedisManager`` on the channel ``silica-serve``): the daemon that runs a turn hands each
event to its own clients and publishes it once; every other daemon reads it from the channel.
Each daemon's manager, where it hands an event of room ``session:{sid}`` (or its ``:refs`` /
``:inline`` form) to its Socket.IO clients, also hands it to its SSE streams of that session,
so ``publish`` never delivers locally a second time: every client sees an event once, in the
order the turn made them. Sessions and images are files under the shared ``SILICA_HOME``.

Clients that asked for inline images may sit on another daemon than the turn: each daemon
says on the channel which sessions have such clients (when one joins, then every
``PRESENCE_EVERY`` seconds), and ``wants_inline`` counts those claims until they age out.

Redis that goes away never stops the daemon: it logs a warning, its own clients keep getting
their events (the other daemons' clients miss what is said meanwhile), it reconnects with a
growing pause (at most ``RETRY_MAX`` seconds) and logs again once it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import redis
import socketio  # type: ignore[import-untyped]  # the package ships no type hints
from redis import asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from silica.errors import SilicaError
from silica.security.urls import mask_urls
from silica.serve.bus import NAMESPACE, Event, EventBus, Subscription

log = logging.getLogger("silica.serve")

CHANNEL = "silica-serve"
CONNECT_TIMEOUT = 3.0  # seconds to reach Redis
COMMAND_TIMEOUT = 10.0  # seconds a publish may take before Redis counts as gone
POLL = 1.0  # seconds the listener waits for a message before it looks at its state again
HEALTH_EVERY = 5  # seconds between pings on the listener's connection (finds a dead one)
RETRY_FIRST, RETRY_MAX = 0.5, 5.0  # seconds between reconnection attempts
PRESENCE_EVERY = 10.0  # seconds between a daemon's claims of inline-image clients
PRESENCE_TTL = 3 * PRESENCE_EVERY  # a claim not renewed for this long is forgotten
INLINE = "silica_inline"  # the channel message that carries such a claim


def shown_url(url: str) -> str:
    """``url`` without its password (for messages and logs): the one rule of
    ``silica.security.urls``."""
    return mask_urls(url)


def check_reachable(url: str) -> None:
    """Ping Redis once; ``SilicaError`` saying what to do if it does not answer."""
    client = None
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT,
                                      socket_timeout=CONNECT_TIMEOUT, retry=Retry(NoBackoff(), 0))
        client.ping()
    except (redis.RedisError, OSError, ValueError) as exc:
        raise SilicaError(f"cannot reach Redis at {shown_url(url)}: {exc}; start it, or drop "
                          "--redis (and [serve] redis in the config) to serve alone") from None
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


class RedisBus(EventBus):
    """The bus shared by the daemons on one Redis (see the module docstring)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        check_reachable(url)
        self.url, self.shown = url, shown_url(url)
        self.manager = SharedManager(self, url)
        self.up = True  # Redis answered the last time it was asked
        self.closed = False
        self.remote_inline: dict[str, dict[str, float]] = {}  # host -> session -> until
        self._claimed = False  # the last claim this daemon sent named sessions
        self._presence: asyncio.Task | None = None

    # -- wiring -------------------------------------------------------------------------

    def client_manager(self) -> SharedManager:
        return self.manager

    async def start(self) -> None:
        """Listen on the channel now (python-socketio itself would wait for the first
        Socket.IO client, and SSE streams need the events too)."""
        assert self.sio is not None, "attach the Socket.IO server first"
        if not self.sio.manager_initialized:
            self.sio.manager_initialized = True
            self.manager.initialize()
        self._presence = asyncio.get_running_loop().create_task(self._claim_every())

    async def close(self) -> None:
        await super().close()
        if self.closed:
            return
        self.closed = True
        for task in (self._presence, getattr(self.manager, "thread", None)):
            if isinstance(task, asyncio.Future) and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        with contextlib.suppress(Exception):
            await self.manager.redis.aclose()

    # -- events -------------------------------------------------------------------------

    async def publish(self, session_id: str, event: str, data: dict,
                      inline: dict | None = None) -> None:
        # the manager hands the event to this daemon's SSE streams and to the others
        await self.emit(session_id, event, data, inline)

    def publish_now(self, session_id: str, event: str, data: dict,
                    inline: dict | None = None) -> bool:
        return False  # the other daemons are reached through Redis: awaited, in order

    def hand_to_streams(self, room_name: Any, event: str, payload: Any) -> None:
        """An event for Socket.IO room ``room_name``, given to the SSE streams of its
        session here: ``session:{sid}`` to all, ``:inline`` / ``:refs`` to those that did /
        did not ask for inline images; the taps get the form without inline images."""
        if not isinstance(room_name, str) or not room_name.startswith("session:"):
            return
        _, _, rest = room_name.partition(":")
        session_id, _, form = rest.partition(":")
        if form != "inline":
            self.tap(session_id, event, payload)
        item = Event(event, payload)  # encoded once for every stream it goes to
        for stream in list(self._streams.get(session_id, ())):
            if not form or (form == "inline") == stream.inline:
                stream.put_event(item)

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str, *,
                        inline: bool = False) -> AsyncIterator[Subscription]:
        async with super().subscribe(session_id, inline=inline) as stream:
            if inline:
                await self.claim()
            yield stream

    def wants_inline(self, session_id: str) -> bool:
        if super().wants_inline(session_id):
            return True
        now = time.monotonic()
        return any(claims.get(session_id, 0.0) > now for claims in self.remote_inline.values())

    # -- inline-image clients on other daemons ------------------------------------------

    def inline_here(self) -> list[str]:
        """Sessions with a client here that asked for inline images."""
        found = {sid for sid, streams in self._streams.items() if any(s.inline for s in streams)}
        rooms = self.manager.rooms.get(NAMESPACE, {})
        found |= {name.split(":")[1] for name, members in list(rooms.items())
                  if isinstance(name, str) and name.startswith("session:")
                  and name.endswith(":inline") and len(members)}
        return sorted(found)

    async def claim(self) -> None:
        """Tell the other daemons which sessions have inline-image clients here."""
        sessions = self.inline_here()
        if sessions or self._claimed:
            self._claimed = bool(sessions)
            await self.manager._publish({"method": INLINE, "host_id": self.manager.host_id,
                                         "sessions": sessions})

    def heard_claim(self, message: dict) -> None:
        host, sessions = message.get("host_id"), message.get("sessions")
        if not isinstance(host, str) or not isinstance(sessions, list):
            return
        until = time.monotonic() + PRESENCE_TTL
        self.remote_inline[host] = {s: until for s in sessions[:10_000] if isinstance(s, str)}

    async def _claim_every(self) -> None:
        while True:
            await asyncio.sleep(PRESENCE_EVERY)
            try:
                await self.claim()
            except Exception:  # never ends the loop; the next round tries again
                log.warning("could not tell the other daemons about inline-image clients",
                            exc_info=True)

    # -- Redis's state --------------------------------------------------------------------

    def lost(self, exc: BaseException) -> None:
        if self.up and not self.closed:
            log.warning("lost Redis at %s (%s): events of this daemon's turns reach only its "
                        "own clients until it is back; reconnecting", self.shown,
                        str(exc) or type(exc).__name__)
        self.up = False

    def back(self) -> None:
        if not self.up:
            log.warning("Redis at %s is back: events are shared with the other daemons again",
                        self.shown)
        self.up = True


class SharedManager(socketio.AsyncRedisManager):
    """python-socketio's Redis manager, with this bus's SSE streams as listeners too, and
    publishing and listening that log a lost Redis once and reconnect."""

    def __init__(self, bus: RedisBus, url: str) -> None:
        super().__init__(url, channel=CHANNEL, logger=logging.getLogger("silica.serve.redis"))
        self.bus = bus
        # a second try at once (a pooled connection may be stale after Redis restarted),
        # no backoff: a Redis that is gone is found out at once
        self.redis = aioredis.Redis.from_url(
            url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=COMMAND_TIMEOUT,
            health_check_interval=HEALTH_EVERY, retry=AsyncRetry(NoBackoff(), 1))
        self.connected = True

    def _redis_connect(self) -> None:  # the client above reconnects by itself
        self.connected = True

    async def _handle_emit(self, message: dict) -> None:
        data = message.get("data")
        if (message.get("namespace") == NAMESPACE and not message.get("binary")
                and isinstance(data, list) and len(data) == 1):
            self.bus.hand_to_streams(message.get("room"), str(message.get("event")), data[0])
        await super()._handle_emit(message)

    async def enter_room(self, sid: str, namespace: str, room: Any,
                         eio_sid: Any = None) -> None:
        await super().enter_room(sid, namespace, room, eio_sid=eio_sid)
        if namespace == NAMESPACE and isinstance(room, str) and room.endswith(":inline"):
            await self.bus.claim()

    async def _publish(self, data: dict) -> None:
        if self.bus.closed or not self.bus.up:
            return  # while Redis is gone only this daemon's clients hear its events
        try:
            await self.redis.publish(self.channel, self.json.dumps(data))
        except Exception as exc:  # a transport's failure must not reach the turn
            self.bus.lost(exc)

    async def _listen(self) -> AsyncIterator[dict]:
        """The channel's messages (decoded) from the other daemons; reconnects for ever."""
        pause = RETRY_FIRST
        while True:  # ends when the daemon cancels the listener
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                self.bus.back()
                pause = RETRY_FIRST
                while self.bus.up:  # a failed publish sets it down: subscribe again
                    message = await pubsub.get_message(timeout=POLL)
                    data = _decode(message)
                    if data is None or data.get("host_id") == self.host_id:
                        continue
                    if data.get("method") == INLINE:
                        self.bus.heard_claim(data)
                    else:
                        yield data
            except Exception as exc:
                self.bus.lost(exc)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX)


def _decode(message: Any) -> dict | None:
    """A channel message's JSON object, ``None`` for anything else."""
    if not isinstance(message, dict) or message.get("type") != "message":
        return None
    try:
        data = json.loads(message.get("data") or b"")
    except (ValueError, TypeError, RecursionError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("method"), str) else None
