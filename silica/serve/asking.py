"""Elicitation in the daemon: a tool's request for values, put to whoever watches the session.

    asking = Elicitations(home, timeout=settings.mcp.elicitation_timeout)
    agent.elicit = asking.asker(pump, session_id, turn_id, number)   # for one turn
    asking.answer(session_id, request_id, body)               # POST .../elicitations/{id}
    await asking.reach(session_id, request_id, body)          # the same, wherever it is open
    asking.end_turn(turn_id)                                  # a stopped turn: cancel its own

The asker publishes ``elicitation`` ``{turn_id, id, source, message, schema}`` on the
session's events (through its ``Pump``, so after the ``tool_call`` that asked, and on every
transport and daemon the bus reaches), waits for the answer, and publishes
``elicitation_done`` ``{turn_id, id, action, reason}`` once it is answered, timed out
(declined), cancelled with its turn, or the asking tool went away. An answer is checked
against the request's schema (``silica.mcp.elicit.check_answer``): one that does not fit is
refused (400, naming the field) and the request stays open. At most ``MAX_OPEN`` requests of
a session are open at once; more are declined without asking.

What is saved: each finished request (its source, message and schema, the action and why),
never the values typed, in ``elicitations.jsonl`` in the session's folder (removed with the
session), so a reloaded page shows it as answered; the values reach the tool, whose result
the session keeps.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from silica.elicitation import Action, Answer, Asker, Elicitation
from silica.mcp.elicit import ElicitationError, check_answer, check_request
from silica.serve.errors import ApiError
from silica.serve.events import Pump
from silica.serve.records import Records

if TYPE_CHECKING:  # redis, an extra, is imported only with --redis
    from silica.serve.relay import Relay

log = logging.getLogger("silica.serve")

MAX_OPEN = 8               # open requests of one session; more are declined at once
FILE_NAME = "elicitations.jsonl"
ACTIONS: tuple[Action, ...] = ("accept", "decline", "cancel")
ANSWER_EXAMPLE = '{"action": "accept", "content": {"field": "value"}}'


@dataclass
class Open:
    """A request waiting for the person."""

    request: Elicitation
    session_id: str
    turn_id: str
    turn: int
    answer: asyncio.Future[Answer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class Elicitations:
    """The daemon's open requests and the sessions' finished ones (see the module
    docstring)."""

    def __init__(self, home: Path, *, timeout: float, limit: int = MAX_OPEN) -> None:
        self.home, self.timeout, self.limit = home, timeout, limit
        self.open: dict[str, Open] = {}
        self.finished: dict[str, str] = {}  # id -> session, of requests answered here
        self.kept = Records(home, FILE_NAME,
                            finished=lambda item: item.get("action") in ACTIONS)
        self.relay: Relay | None = None  # with Redis: answers given at other daemons

    def asker(self, pump: Pump, session_id: str, turn_id: str, turn: int) -> Asker:
        """The ``Asker`` of turn ``turn`` (``turn_id``) of the session: its requests are
        shown on ``pump``."""

        async def ask(request: Elicitation) -> Answer:
            return await self._ask(pump, Open(request, session_id, turn_id, turn))

        return ask

    async def _ask(self, pump: Pump, pending: Open) -> Answer:
        request, session_id, turn_id = pending.request, pending.session_id, pending.turn_id
        try:  # a built-in's request is checked as an MCP server's is: the page shows it
            checked = check_request(request.source, request.message, request.schema)
        except ElicitationError as exc:
            return Answer("decline", reason=f"the request was not valid: {exc}")
        mine = sum(1 for o in self.open.values() if o.session_id == session_id)
        if mine >= self.limit:
            return Answer("decline", reason=f"{self.limit} requests of this session are "
                          "already waiting for an answer")
        eid = request.id if request.id and request.id not in self.open \
            and request.id not in self.finished else secrets.token_hex(8)
        pending.request = dataclasses.replace(checked, id=eid)
        self.open[eid] = pending
        if self.relay is not None:
            self.relay.opened(eid, session_id, self.timeout)
        pump.put("elicitation", {"turn_id": turn_id, **_shown(pending.request)})
        answer = Answer("cancel", reason="the tool stopped waiting (its turn was stopped, "
                        "or its own time ran out)")
        try:
            answer = await asyncio.wait_for(asyncio.shield(pending.answer), self.timeout)
        except TimeoutError:
            answer = Answer("decline", reason=f"nobody answered within {self.timeout:g} s")
        finally:  # answered, timed out, or the tool (its turn) went away: cancelled
            del self.open[eid]
            if self.relay is not None:
                self.relay.closed(eid)
            self.finished[eid] = session_id
            if len(self.finished) > 10_000:
                del self.finished[next(iter(self.finished))]
            pump.put("elicitation_done", {"turn_id": turn_id, "id": eid,
                                          "action": answer.action, "reason": answer.reason})
            self.kept.add(session_id, {
                "turn_id": turn_id, "turn": pending.turn, **_shown(pending.request),
                "action": answer.action, "reason": answer.reason})
        return answer

    async def reach(self, session_id: str, eid: str, body: dict) -> Answer:
        """``answer``, where the request is open: here, or (through ``relay``) in the
        process whose turn asked; the same errors."""
        if self.relay is not None and eid not in self.open:
            done = await self.relay.forward("elicitation", session_id, eid, body)
            if done is not None:
                return Answer(cast(Action, done.get("action", "cancel")))
        return self.answer(session_id, eid, body)

    def answer(self, session_id: str, eid: str, body: dict) -> Answer:
        """Answer the open request ``eid`` of the session with ``body`` (``{"action",
        "content"}``); ``ApiError``: 404 unknown, 409 finished, 400 an answer that does not
        fit (the request stays open)."""
        pending = self.open.get(eid)
        if pending is None or pending.session_id != session_id:
            if self.finished.get(eid) == session_id or eid in self.kept.ids(session_id):
                raise ApiError(409, "elicitation_finished", f"request {eid[:64]} was already "
                               "answered, timed out or cancelled")
            raise ApiError(404, "no_elicitation", f"session {session_id} has no open "
                           f"request {eid[:64]}; the elicitation events and the history name "
                           "them")
        unknown = [k for k in body if k not in ("action", "content")]
        if unknown:
            raise ApiError(400, "unknown_field", f"unknown field {str(unknown[0])[:100]!r}; "
                           f"an answer is {ANSWER_EXAMPLE}")
        action = body.get("action")
        if action not in ACTIONS:
            raise ApiError(400, "invalid_field", '"action" must be "accept", "decline" or '
                           f'"cancel"; an answer is {ANSWER_EXAMPLE}')
        content = body.get("content")
        if action != "accept":
            given = Answer(cast(Action, action))
        else:
            try:
                given = Answer("accept", check_answer(pending.request, content or {}))
            except ElicitationError as exc:
                raise ApiError(400, "invalid_answer", f"{exc}; the request is still open: "
                               "send a corrected answer", field=exc.field) from None
        if not pending.answer.done():
            pending.answer.set_result(given)
        return given

    def end_turn(self, turn_id: str) -> None:
        """Cancel the turn's requests still open (it was stopped)."""
        for pending in list(self.open.values()):
            if pending.turn_id == turn_id and not pending.answer.done():
                pending.answer.set_result(Answer("cancel", reason="the turn was stopped"))

    def listing(self, session_id: str) -> list[dict]:
        """The session's finished requests (the last ``records.MAX_SAVED``, oldest first, each with
        ``action`` and ``reason``), then its open ones (``action`` null)."""
        shown = self.kept.read(session_id)
        shown += [{"turn_id": o.turn_id, "turn": o.turn, **_shown(o.request), "action": None,
                   "reason": ""}
                  for o in self.open.values() if o.session_id == session_id]
        return shown


def _shown(request: Elicitation) -> dict[str, Any]:
    return {"id": request.id, "source": request.source, "message": request.message,
            "schema": request.schema}
