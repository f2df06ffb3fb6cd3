"""The event bus shared through Redis: several ``silica serve`` daemons and ``silica worker``
processes, one stream of events per session.

    bus = RedisBus("redis://127.0.0.1:6379/0", home)   # SilicaError if Redis cannot be reached
    bus.attach(sio); await bus.start()                 # then as ``EventBus``

``publish`` appends the event to the session's Redis stream ``silica:events:{session_id}``
(``XADD ... MAXLEN ~ STREAM_MAXLEN``; a stream with no new event for ``STREAM_IDLE``
seconds expires), and nothing else: it works in a process with no Socket.IO server (a
worker). Each daemon runs one reader (``XREAD BLOCK``) over the streams of the sessions its
clients watch, woken through a stream of its own (``silica:wake:{host}``) when that set
changes, and hands what it reads to its SSE streams and Socket.IO rooms (``deliver``): the
events of its own turns come back the same way, so every client of every daemon sees one
order, and each event has one id, the stream entry's. The reader makes the inline form of an
image event (``image_data``) from the image store for its clients that asked for it; the
stream holds only refs. Socket.IO uses its in-process manager.

A client resumes from the last id it has on any daemon (``subscribe(after=...)``,
``join(after=...)``): the stream's entries after it, then live. Events older than the stream
keeps (``XINFO STREAM``'s ``max-deleted-entry-id``), or a stream that is gone, give ``reset``.

Redis that goes away never stops a daemon: it logs a warning once. The events published
meanwhile are kept in order (at most ``BACKLOG`` of them; beyond, the oldest are dropped and
their sessions get a ``reset`` event) and appended once Redis answers again, before any
newer one; the reader reconnects (pausing at most ``RETRY_MAX`` seconds) and goes on from the
last id it read of each session. A Redis that restarted empty gives new streams: their ids
are the clock's, so they come after the ones read before; a stream whose newest id is older
than the last one read (a clock that went back) is read from its start. It logs again once
Redis is back. An event Redis took but lost before any daemon read it (a restart of a Redis
that keeps nothing on disk, in that instant) is lost: run Redis with ``appendonly yes``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import secrets
from pathlib import Path
from typing import Any, cast

import redis
from redis import asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from silica.config import Settings
from silica.security.urls import mask_urls
from silica.serve.bus import REPLAY_MAX, Entry, EventBus
from silica.serve.eventlog import (
    IMAGE_EVENTS,
    ZERO,
    Key,
    Span,
    format_id,
    inline_form,
    must_reset,
    parse_id,
    reset_event,
)
from silica.serve.turnqueue import CONNECT_TIMEOUT, redis_error

log = logging.getLogger("silica.serve")

STREAM_MAXLEN = 10_000  # entries a session's stream keeps (about: MAXLEN ~)
STREAM_IDLE = 24 * 3600  # seconds after its last event that a session's stream expires
BACKLOG = 10_000  # events a publisher keeps while Redis is away
COMMAND_TIMEOUT = 10.0  # seconds a command may take before Redis counts as gone
BLOCK = 5.0  # seconds the reader waits in XREAD before it looks at its sessions again
READ_COUNT = 1000  # entries per read
HEALTH_EVERY = 5  # seconds between pings on an idle connection (finds a dead one)
RETRY_FIRST, RETRY_MAX = 0.5, 5.0  # seconds between reconnection attempts
SETTLE = 2.0  # seconds ``close`` waits for the reader to hand out what was appended


def stream_key(session_id: str) -> str:
    return f"silica:events:{session_id}"


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
        raise redis_error(url, exc, "start it, or drop --redis (and [serve] redis in the "
                          "config) to serve alone") from None
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def _client(url: str, retries: int) -> aioredis.Redis:
    return aioredis.Redis.from_url(
        url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=COMMAND_TIMEOUT,
        health_check_interval=HEALTH_EVERY, retry=AsyncRetry(NoBackoff(), retries),
        decode_responses=True)


class RedisBus(EventBus):
    """The bus shared through per-session Redis streams (see the module docstring)."""

    shared = True

    def __init__(self, url: str, home: Path | None = None,
                 settings: Settings | None = None) -> None:
        super().__init__(home, settings)
        check_reachable(url)
        self.url, self.shown = url, shown_url(url)
        # publishing: a second try at once (a pooled connection may be stale after Redis
        # restarted); reading: none, so a restart is seen and the positions checked
        self.redis = _client(url, 1)
        self.reader = _client(url, 0)
        self.up = True  # Redis answered the last time it was asked
        self.closed = False
        self.positions: dict[str, Key] = {}  # session -> last id read (sessions watched)
        self.appended: dict[str, Key] = {}  # session -> last id this process appended
        self.backlog: collections.deque[tuple[str, str, str]] = collections.deque()
        self.dropped: set[str] = set()  # sessions that lost events from the backlog
        self.wake_key = f"silica:wake:{secrets.token_hex(8)}"
        self.wake_at: Key = ZERO
        self.read = asyncio.Event()  # set after each batch the reader handed out
        self._tasks: set[asyncio.Task] = set()
        self._reading: asyncio.Task | None = None
        self._flushing: asyncio.Task | None = None

    # -- wiring -------------------------------------------------------------------------

    async def start(self) -> None:
        self._reading = asyncio.get_running_loop().create_task(self._read())

    async def close(self) -> None:
        await self._settle()
        await super().close()
        if self.closed:
            return
        self.closed = True
        if self.backlog:
            log.warning("%d events could not be appended to Redis at %s before stopping",
                        len(self.backlog), self.shown)
        for task in (self._reading, self._flushing, *self._tasks):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        for client in (self.redis, self.reader):
            with contextlib.suppress(Exception):
                await client.aclose()

    async def _settle(self) -> None:
        """Wait (at most ``SETTLE`` seconds) until the reader has handed out what this
        process appended for the sessions watched here (a stopping turn's last events)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE
        while not self.closed and self.up and loop.time() < deadline and any(
                self.positions.get(sid, key) < key for sid, key in self.appended.items()):
            self.read.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.read.wait(), max(0.0, deadline - loop.time()))

    # -- publishing -----------------------------------------------------------------------

    def wants_inline(self, session_id: str) -> bool:
        return False  # the reading daemons make the inline form, from the image store

    def publish_now(self, session_id: str, event: str, data: dict,
                    inline: dict | None = None) -> bool:
        return False  # every event goes through Redis: awaited, in order

    async def publish(self, session_id: str, event: str, data: dict,
                      inline: dict | None = None) -> None:
        try:
            entry = (session_id, event, json.dumps(data, ensure_ascii=False))
        except (TypeError, ValueError):
            log.warning("a %s event could not be written as JSON; not sent", event,
                        exc_info=True)
            return
        if self.backlog or not self.up or self.closed:
            self._keep(entry)
            return
        try:
            await self._append(*entry)
        except Exception as exc:  # a transport's failure must not reach the turn
            self.lost(exc)
            self._keep(entry)

    async def _append(self, session_id: str, event: str, payload: str) -> None:
        key = stream_key(session_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xadd(key, {"e": event, "d": payload}, maxlen=STREAM_MAXLEN, approximate=True)
            pipe.expire(key, STREAM_IDLE)
            added, _ = await pipe.execute()
        found = parse_id(added)
        if found is not None:
            self.appended[session_id] = found
            if len(self.appended) > 10_000:  # only the recent ones matter to ``close``
                self.appended.pop(next(iter(self.appended)))

    def _keep(self, entry: tuple[str, str, str]) -> None:
        if self.closed:
            return
        self.backlog.append(entry)
        if len(self.backlog) > BACKLOG:
            self.dropped.add(self.backlog.popleft()[0])
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        """Append the backlog in order once Redis answers; newer events wait behind it."""
        pause = RETRY_FIRST
        while self.backlog and not self.closed:
            try:
                await self.redis.ping()
                for session_id in sorted(self.dropped):
                    await self._append(session_id, "reset",
                                       json.dumps(reset_event(session_id)))
                    self.dropped.discard(session_id)
                while self.backlog:
                    await self._append(*self.backlog[0])
                    self.backlog.popleft()
            except Exception as exc:
                self.lost(exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX)
        if not self.closed:
            self.back()

    # -- reading ------------------------------------------------------------------------

    def watching(self, session_id: str, last: Key | None) -> None:
        if session_id in self.positions:
            return
        self.positions[session_id] = last or ZERO
        self._spawn(self._wake())

    async def _wake(self) -> None:
        with contextlib.suppress(Exception):  # a reader that is away looks again anyway
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.xadd(self.wake_key, {"w": "1"}, maxlen=10, approximate=False)
                pipe.expire(self.wake_key, 3600)
                await pipe.execute()

    async def _read(self) -> None:
        """The one reader: the watched sessions' streams, for as long as the bus runs."""
        pause, fresh = RETRY_FIRST, True
        while not self.closed:
            try:
                if fresh:
                    await self._check_positions()
                    fresh, pause = False, RETRY_FIRST
                    if not self.backlog:
                        self.back()
                for sid in [s for s in self.positions if not self.watched(s)]:
                    del self.positions[sid]
                streams: dict[Any, Any] = {stream_key(sid): format_id(key)
                           for sid, key in self.positions.items()}
                streams[self.wake_key] = format_id(self.wake_at)
                found = await self.reader.xread(streams, count=READ_COUNT,
                                                block=int(BLOCK * 1000))
                await self._hand(cast(list, found or []))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.lost(exc)
                fresh = True
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX)

    async def _check_positions(self) -> None:
        """After (re)connecting: a stream that is gone, or whose newest id is before the
        last one read (a new stream, made by a clock that is behind), is read from its
        start."""
        for sid in list(self.positions):
            span = await self._span(stream_key(sid))
            if span.last is None or span.last < self.positions.get(sid, ZERO):
                self.positions[sid] = ZERO
                for stream in self._streams.get(sid, ()):
                    stream.last = None  # a new stream: none of its ids was given before
        span = await self._span(self.wake_key)
        if span.last is None or span.last < self.wake_at:
            self.wake_at = ZERO

    async def _span(self, key: str) -> Span:
        try:
            info = await self.reader.xinfo_stream(key)
        except redis.ResponseError:  # no such key
            return Span(None, None)
        first, last = info.get("first-entry"), info.get("last-entry")
        last_id = parse_id(info.get("last-generated-id"))
        return Span(parse_id(first[0]) if first else None,
                    (parse_id(last[0]) if last else None) or last_id,
                    parse_id(info.get("max-deleted-entry-id")) or ZERO)

    async def _hand(self, found: list) -> None:
        """Give what was read to this daemon's listeners, in the stream's order."""
        batches = []
        for key, entries in found:
            if key == self.wake_key:
                if entries:
                    self.wake_at = parse_id(entries[-1][0]) or self.wake_at
                continue
            sid = key.removeprefix("silica:events:")
            decoded = [entry for entry in (_decode(one) for one in entries) if entry]
            inline = self.inline_here(sid)
            forms = []
            for entry_id, event, data in decoded:
                made = None
                if inline and event in IMAGE_EVENTS:
                    made = await asyncio.to_thread(inline_form, self.home, self.settings, sid,
                                                   event, data)
                forms.append((entry_id, event, data, made))
            batches.append((sid, forms))
        for sid, forms in batches:  # nothing awaited from here: delivered as one piece
            for entry_id, event, data, made in forms:
                at = self.positions.get(sid)
                if at is None or entry_id <= at:
                    continue  # no longer watched, or handed out already
                self.positions[sid] = entry_id
                self.deliver(sid, format_id(entry_id), event, data, made)
        self.read.set()

    # -- replay -----------------------------------------------------------------------------

    async def replay(self, session_id: str, after: Key | None, *,
                     limit: int | None = REPLAY_MAX) -> tuple[list[Entry], Key | None, bool]:
        key = stream_key(session_id)
        try:
            span = await self._span(key)
            if after is None:
                return [], span.last, False
            if must_reset(after, span):
                return [], span.last, True
            return await self._range(key, after, limit), after, False
        except (redis.RedisError, OSError) as exc:
            self.lost(exc)
            # Redis is away: the listener goes on from the newest id this daemon read
            return [], after if after is not None else self.positions.get(session_id), False

    async def _range(self, key: str, after: Key, limit: int | None) -> list[Entry]:
        """The entries after ``after``: all, or (``limit``) at least ``limit`` and one more
        when there are (that many missed is a reset for a listener)."""
        out: list[Entry] = []
        start = f"({format_id(after)}"
        while limit is None or len(out) <= limit:
            page = cast(list, await self.reader.xrange(key, min=start, max="+",
                                                       count=READ_COUNT))
            out += [entry for entry in (_decode(one) for one in page) if entry]
            if len(page) < READ_COUNT:
                return out
            start = f"({page[-1][0]}"
        return out

    def published(self, session_id: str) -> Key | None:
        return self.appended.get(session_id)

    async def recent(self, session_id: str) -> list[Entry]:
        try:
            page = cast(list, await self.reader.xrange(stream_key(session_id), min="-",
                                                       max="+"))
        except (redis.RedisError, OSError):
            return []
        return [entry for entry in (_decode(one) for one in page) if entry]

    # -- Redis's state --------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def lost(self, exc: BaseException) -> None:
        if self.up and not self.closed:
            log.warning("lost Redis at %s (%s): events are kept here (at most %d) and "
                        "appended in order once it is back; reconnecting", self.shown,
                        str(exc) or type(exc).__name__, BACKLOG)
        self.up = False

    def back(self) -> None:
        if not self.up and not self.closed:
            log.warning("Redis at %s is back: events are shared with the other daemons again",
                        self.shown)
        self.up = True


def _decode(entry: Any) -> tuple[Key, str, dict] | None:
    """A stream entry as ``(id, event, data)``; ``None`` for one silica did not write."""
    try:
        entry_id, fields = entry
        key = parse_id(entry_id)
        data = json.loads(fields.get("d") or "")
        event = fields.get("e")
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    if key is None or not isinstance(event, str) or not isinstance(data, dict):
        return None
    return key, event, data
