"""Turns waiting for a ``silica worker``: the Redis stream ``silica:turns``, group ``workers``.

    queue = await TurnQueue.connect(url, lease=30.0)   # SilicaError if Redis is not there
    # a front daemon, when it accepts a message
    if not await queue.take_lease(session_id, turn_id): ...   # 409 turn_running
    await queue.add(Job(session_id, turn_id, number, text, images, workspace))
    # a worker
    jobs = await queue.read(consumer, count)           # XREADGROUP; pending until acked
    queue.beat(consumer, jobs)                         # every lease/3 (a thread): still mine
    stale = await queue.reclaim(consumer)              # XAUTOCLAIM of entries idle > lease
    await queue.done(job)                              # XACK, XDEL, lease removed

A job is owned through the group's pending list: the worker that read it re-claims its own
entries (``XCLAIM ... JUSTID``) every ``lease / 3`` seconds, which resets their idle time,
and another worker takes an entry idle longer than ``lease`` seconds (``XAUTOCLAIM``): its
worker stopped beating (it died). What then happens to that turn is the worker's policy
(``silica.serve.worker``: it ends as interrupted, never run again).

One turn at a time per session, across machines: the session lease ``silica:lease:{sid}``
holds the id of the turn that owns the session. The front sets it (``SET NX``) before it
reads the message, for ``QUEUED`` seconds (the job may wait for a free worker); the worker
that runs the turn renews it for ``2 * lease`` seconds with each beat, so a dead worker's
turn is reclaimed (after ``lease``) before its session frees; the turn's end removes it
(compare-and-delete: only the turn that holds it).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import redis
from redis import asyncio as aioredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from silica.errors import SilicaError
from silica.security.urls import mask_urls

TURNS = "silica:turns"
GROUP = "workers"
MAX_JOBS = 100_000  # entries the stream keeps (acked ones are deleted at once)
QUEUED = 600.0  # seconds a lease taken by a front holds while its job waits for a worker
CONNECT_TIMEOUT = 3.0  # seconds to reach Redis (the bus's too)

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


def lease_key(session_id: str) -> str:
    return f"silica:lease:{session_id}"


@dataclass
class Job:
    """One turn to run: the message as the front stored it (images as stored refs)."""

    session_id: str
    turn_id: str
    number: int
    text: str
    images: list[dict[str, Any]] = field(default_factory=list)  # ImageRefBlock dumps
    workspace: str | None = None
    entry: str = ""  # the stream entry's id, once read

    def fields(self) -> dict[Any, Any]:
        doc = asdict(self)
        doc.pop("entry")
        return {"job": json.dumps(doc)}

    @classmethod
    def read(cls, entry: str, fields: dict[str, str]) -> Job | None:
        """The job of a stream entry (``None``: not one silica wrote)."""
        try:
            doc = json.loads(fields.get("job", ""))
            job = cls(**doc, entry=entry)
        except (ValueError, TypeError, RecursionError):
            return None
        good = (all(isinstance(v, str) for v in (job.session_id, job.turn_id, job.text))
                and type(job.number) is int and isinstance(job.images, list)
                and all(isinstance(i, dict) for i in job.images)
                and (job.workspace is None or isinstance(job.workspace, str)))
        return job if good else None


def redis_error(url: str, exc: BaseException, what: str) -> SilicaError:
    """The one message for a Redis that does not answer (the bus's start says it too)."""
    return SilicaError(f"cannot reach Redis at {mask_urls(url)}: {exc}; {what}")


class TurnQueue:
    """The turn queue and the session leases on one Redis (see the module docstring)."""

    errors = (redis.RedisError, OSError)  # what a call raises when Redis does not answer

    def __init__(self, url: str, *, lease: float) -> None:
        self.url, self.lease = url, lease
        self.client = aioredis.Redis.from_url(url, decode_responses=True,
                                              socket_connect_timeout=CONNECT_TIMEOUT)
        # for the few answers a route needs without awaiting (is a turn running?)
        self.sync = redis.Redis.from_url(url, decode_responses=True,
                                         socket_connect_timeout=CONNECT_TIMEOUT,
                                         socket_timeout=CONNECT_TIMEOUT,
                                         retry=Retry(NoBackoff(), 1))

    @classmethod
    async def connect(cls, url: str, *, lease: float,
                      what: str = "start it, or check the --redis URL") -> TurnQueue:
        """A queue on Redis at ``url``, its group made; ``SilicaError`` saying ``what`` to
        do if Redis does not answer."""
        queue = cls(url, lease=lease)
        try:
            await queue.client.ping()
            with contextlib.suppress(redis.ResponseError):  # BUSYGROUP: made already
                await queue.client.xgroup_create(TURNS, GROUP, id="0", mkstream=True)
        except (redis.RedisError, OSError) as exc:
            await queue.close()
            raise redis_error(url, exc, what) from None
        return queue

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.aclose()
        with contextlib.suppress(Exception):
            self.sync.close()

    # -- the session lease ------------------------------------------------------------------

    async def take_lease(self, session_id: str, turn_id: str) -> bool:
        """Own the session for ``turn_id``; ``False`` if another turn owns it."""
        return bool(await self.client.set(lease_key(session_id), turn_id, nx=True,
                                          px=int(QUEUED * 1000)))

    async def drop_lease(self, session_id: str, turn_id: str) -> None:
        """Free the session if ``turn_id`` owns it."""
        await self.client.eval(_RELEASE, 1, lease_key(session_id), turn_id)

    def leased(self, session_id: str) -> bool:
        """Whether a turn owns the session now (a blocking call: a route's quick look)."""
        try:
            return bool(self.sync.exists(lease_key(session_id)))
        except (redis.RedisError, OSError):
            return False

    # -- jobs ----------------------------------------------------------------------------

    async def add(self, job: Job) -> str:
        return str(await self.client.xadd(TURNS, job.fields(), maxlen=MAX_JOBS,
                                          approximate=True))

    async def read(self, consumer: str, count: int, block: float = 1.0) -> list[Job]:
        """Up to ``count`` new jobs for ``consumer``, waiting at most ``block`` seconds."""
        found: Any = await self.client.xreadgroup(GROUP, consumer, {TURNS: ">"}, count=count,
                                                  block=int(block * 1000))
        return self._jobs(entry for _, entries in found or () for entry in entries)

    def beat(self, consumer: str, jobs: list[Job]) -> None:
        """Keep ``jobs`` owned: their idle time starts again, their sessions' leases too.
        A blocking call, made from a thread of its own: a worker whose event loop is busy
        for a while (a tool's large output, a slow import) still beats; only one that died
        stops."""
        if not jobs:
            return
        self.sync.xclaim(TURNS, GROUP, consumer, 0, [j.entry for j in jobs], justid=True)
        ttl = str(int(2 * self.lease * 1000))
        for job in jobs:
            self.sync.eval(_RENEW, 1, lease_key(job.session_id), job.turn_id, ttl)

    async def reclaim(self, consumer: str, count: int = 16) -> list[Job]:
        """Jobs whose worker stopped beating for ``lease`` seconds, now ``consumer``'s."""
        found = await self.client.xautoclaim(TURNS, GROUP, consumer,
                                             int(self.lease * 1000), "0-0", count=count)
        entries = found[1] if isinstance(found, list | tuple) and len(found) > 1 else []
        jobs = self._jobs(entries)
        known = {job.entry for job in jobs}
        junk = [entry for entry, _ in entries if entry not in known]
        if junk:  # not silica's: acked, so nobody claims them again
            await self.client.xack(TURNS, GROUP, *junk)
        return jobs

    async def done(self, job: Job) -> None:
        """The turn ended: the entry is acked and removed, the session freed."""
        await self.client.xack(TURNS, GROUP, job.entry)
        await self.client.xdel(TURNS, job.entry)
        await self.drop_lease(job.session_id, job.turn_id)

    @staticmethod
    def _jobs(entries: Any) -> list[Job]:
        jobs = []
        for entry in entries:
            if not entry or entry[1] is None:  # deleted meanwhile
                continue
            job = Job.read(entry[0], entry[1])
            if job is not None:
                jobs.append(job)
        return jobs
