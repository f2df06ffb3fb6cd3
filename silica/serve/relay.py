"""Answers to approvals and elicitations, carried through Redis to the process that asked.

    relay = Relay(client, name)                 # name: this process's, unique
    relay.opened(request_id, session_id)        # a turn here asks (Approvals / Elicitations)
    relay.closed(request_id)                    # answered, timed out or its turn ended
    task = relay.serve(answer)                  # answer(kind, session_id, id, body) -> dict
    reply = await relay.forward("approval", session_id, request_id, body)  # None: not asked
                                                                           # by anyone now

A process whose turns ask (a worker, or a daemon that runs turns) names each open request in
``silica:asking:{id}`` (its own name and the session, for the request's time and a minute
more). A front that gets an answer for a request it did not make looks it up and pushes the
answer on the asker's list ``silica:inbox:{name}``; the asker answers it as if it had come
to it directly and pushes the outcome (``{"ok": true, ...}`` or the error's status, code,
message) on a reply list the front waits on, so the codes are the ones one daemon gives
(404 unknown, 409 already answered, 400 an answer that does not fit). A request nobody has
open is answered by the front itself, from the session's records (409 answered, 404 gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from redis import asyncio as aioredis

from silica.serve.errors import ApiError

log = logging.getLogger("silica.serve")

REPLY_WAIT = 15.0  # seconds a front waits for the asker's reply
POLL = 1.0  # seconds the asker's inbox is waited on before it looks at its state again
MARGIN = 60.0  # seconds a request's name outlives its timeout

Answerer = Callable[[str, str, str, dict], Awaitable[dict]]


def _asking(request_id: str) -> str:
    return f"silica:asking:{request_id}"


def _inbox(name: str) -> str:
    return f"silica:inbox:{name}"


class Relay:
    """This process's end of the relay (see the module docstring)."""

    def __init__(self, client: aioredis.Redis, name: str, *, ttl: float = 3600.0) -> None:
        self.client, self.name, self.ttl = client, name, ttl
        self._tasks: set[asyncio.Task] = set()
        self._stop = False

    # -- the asker ---------------------------------------------------------------------------

    def opened(self, request_id: str, session_id: str, timeout: float) -> None:
        value = json.dumps({"name": self.name, "session": session_id})
        self._spawn(self.client.set(_asking(request_id), value,
                                    px=int((timeout + MARGIN) * 1000)))

    def closed(self, request_id: str) -> None:
        self._spawn(self.client.delete(_asking(request_id)))

    async def serve(self, answer: Answerer) -> None:
        """Answer what fronts forward here, until ``stop`` (within ``POLL`` seconds: a
        blocking Redis call is not cancelled, which could leave it hanging)."""
        down = False
        while not self._stop:
            try:
                got = await self.client.blpop([_inbox(self.name)], timeout=POLL)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: said once, tried again shortly
                if not down:
                    log.warning("answers given at other daemons cannot reach this process "
                                "until Redis answers again (%s)", exc)
                down = True
                await asyncio.sleep(POLL)
                continue
            if down:
                log.warning("Redis answers again: answers given at other daemons reach this "
                            "process")
                down = False
            if not got:
                continue
            try:
                doc = json.loads(got[1])
                kind, sid, rid = str(doc["kind"]), str(doc["session_id"]), str(doc["id"])
                body, reply = dict(doc["body"]), str(doc["reply"])
            except (ValueError, KeyError, TypeError):
                continue
            try:
                outcome = await answer(kind, sid, rid, body)
            except ApiError as exc:
                outcome = {"ok": False, "status": exc.status, "code": exc.code,
                           "message": exc.message, "extra": exc.extra}
            with contextlib.suppress(Exception):
                await self.client.rpush(reply, json.dumps(outcome))
                await self.client.expire(reply, int(REPLY_WAIT * 2))

    async def stop(self, task: asyncio.Task) -> None:
        """End ``task``, which runs ``serve``."""
        self._stop = True
        try:
            await asyncio.wait_for(asyncio.shield(task), POLL * 3)
        except BaseException:
            task.cancel()

    # -- a front -------------------------------------------------------------------------

    async def forward(self, kind: str, session_id: str, request_id: str,
                      body: dict) -> dict | None:
        """The asker's outcome for the answer ``body`` (``ApiError`` as it raised);
        ``None`` when no process has that request of the session open."""
        found = await self.client.get(_asking(request_id))
        try:
            owner = json.loads(found) if found else None
        except ValueError:
            owner = None
        if not isinstance(owner, dict) or owner.get("session") != session_id:
            return None
        reply = f"silica:reply:{secrets.token_hex(12)}"
        await self.client.rpush(_inbox(str(owner.get("name"))), json.dumps({
            "kind": kind, "session_id": session_id, "id": request_id, "body": body,
            "reply": reply}))
        got = await self.client.blpop([reply], timeout=REPLY_WAIT)
        if not got:
            raise ApiError(504, "asker_unreachable", f"the process whose turn made request "
                           f"{request_id[:64]} did not answer; try again")
        outcome = json.loads(got[1])
        if not outcome.get("ok"):
            raise ApiError(int(outcome.get("status", 500)), str(outcome.get("code")),
                           str(outcome.get("message")), **dict(outcome.get("extra") or {}))
        return dict(outcome)

    def _spawn(self, coro: Any) -> None:
        async def quietly() -> None:
            try:
                await coro
            except Exception as exc:
                log.warning("could not note an open request in Redis: %s", exc)

        task = asyncio.get_running_loop().create_task(quietly())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
