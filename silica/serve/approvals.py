"""Shell approvals in the daemon: a command outside ``[shell] allow`` waits for a person.

    approvals = Approvals(home, timeout=settings.serve.approval_timeout)
    agent.approve = approvals.approver(pump, session_id, turn_id, number)  # for one turn
    approvals.answer(session_id, approval_id, "once")     # POST .../approvals/{id}
    await approvals.reach(session_id, approval_id, "once")  # the same, wherever it is open
    approvals.end_turn(turn_id)                           # a turn that ends: deny its own

The approver publishes ``approval`` ``{turn_id, call_id, id, command, pattern, timeout}`` on
the session's events (through its ``Pump``, so after the ``tool_call`` that asked, and on
every transport and daemon the bus reaches) and waits. ``command`` is the line as it would
run; ``pattern`` is what "always" would allow from then on
(``silica.tools.shell.always_pattern``: what the person saw, kept narrow; ``null`` when the
command is not offered "always"); ``timeout`` the seconds until it is denied. Once it ends,
``approval_done`` ``{turn_id, id, decision, reason}`` follows, always: ``decision`` is
``once``, ``always`` or ``deny``; ``reason`` is ``answered`` (a person chose), ``covered``
(an "always" given meanwhile allows it), ``timeout`` or ``turn ended``.

"always" is remembered for the session in this daemon (kept across its turns, not saved:
a restarted daemon asks again, as a new ``silica chat`` does), and a later command is let
through only if ``silica.tools.shell.allowed_by`` finds it an instance of one of those
patterns, the rule ``SessionApproval`` applies in chat. At most ``MAX_OPEN`` approvals of
a session are open at once; more are denied without being shown.

What is saved: each finished approval (``turn``, the event's fields, ``decision`` and
``reason``) in ``approvals.jsonl`` in the session's folder (``silica.serve.records``), so a
reloaded page shows it as answered. The command is already in the session's history (the
tool call's input); nothing else is kept.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn, cast

from silica.agent.loop import Approve, current_call
from silica.serve.errors import ApiError
from silica.serve.events import Pump
from silica.serve.records import Records
from silica.tools.shell import allowed_by, always_pattern

if TYPE_CHECKING:  # redis, an extra, is imported only with --redis
    from silica.serve.relay import Relay

Decision = Literal["once", "always", "deny"]
DECISIONS: tuple[Decision, ...] = ("once", "always", "deny")
MAX_OPEN = 8               # open approvals of one session; more are denied at once
MAX_SESSIONS = 1024        # sessions whose "always" patterns this daemon remembers
MAX_PATTERNS = 100         # "always" patterns remembered per session (the oldest go first)
FILE_NAME = "approvals.jsonl"
ANSWER_EXAMPLE = '{"decision": "once"}'


@dataclass
class Pending:
    """An approval waiting for the person."""

    id: str
    session_id: str
    turn_id: str
    turn: int
    call_id: str
    command: str
    pattern: str | None
    timeout: float
    decision: asyncio.Future[tuple[Decision, str]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    def shown(self) -> dict:
        """The ``approval`` event's fields."""
        return {"turn_id": self.turn_id, "call_id": self.call_id, "id": self.id,
                "command": self.command, "pattern": self.pattern, "timeout": self.timeout}


def read_answer(body: object) -> Decision:
    """The decision of an answer body (``{"decision": "once" | "always" | "deny"}``, as the
    route and Socket.IO take it); ``ApiError`` 400 saying what to send for anything else."""
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", f"an answer is a JSON object like {ANSWER_EXAMPLE}")
    unknown = [k for k in body if k != "decision"]
    if unknown:
        raise ApiError(400, "unknown_field", f"unknown field {str(unknown[0])[:100]!r}; an "
                       f"answer is {ANSWER_EXAMPLE}")
    decision = body.get("decision")
    if not isinstance(decision, str) or decision not in DECISIONS:
        raise ApiError(400, "invalid_decision", '"decision" must be "once" (run it this '
                       'time), "always" (run it and what its pattern allows, for the rest of '
                       f'the session) or "deny"; an answer is {ANSWER_EXAMPLE}')
    return cast(Decision, decision)


class Approvals:
    """The daemon's open approvals and the sessions' "always" patterns (see the module
    docstring)."""

    def __init__(self, home: Path, *, timeout: float, limit: int = MAX_OPEN) -> None:
        self.home, self.timeout, self.limit = home, timeout, limit
        self.open: dict[str, Pending] = {}
        self.finished: dict[str, tuple[str, str]] = {}  # id -> (session, reason), here
        self.patterns: collections.OrderedDict[str, list[str]] = collections.OrderedDict()
        self.kept = Records(home, FILE_NAME,
                            finished=lambda item: item.get("decision") in DECISIONS)
        self.relay: Relay | None = None  # with Redis: answers given at other daemons

    def approver(self, pump: Pump, session_id: str, turn_id: str, turn: int) -> Approve:
        """The shell tool's ``approve`` for turn ``turn`` (``turn_id``) of the session: True
        if a remembered "always" covers the command, else what the person answers on
        ``pump``'s events (False when denied, timed out or the turn ends)."""

        async def approve(command: str) -> bool:
            if await self._covered(session_id, command):
                return True
            call = current_call.get()
            # off the loop: a long line takes the other sessions no time (as allowed_by is)
            pattern = await asyncio.to_thread(always_pattern, command)
            pending = Pending(secrets.token_hex(8), session_id, turn_id, turn,
                              call.id if call else "", command, pattern, self.timeout)
            return await self._ask(pump, pending)

        return approve

    async def _covered(self, session_id: str, command: str) -> bool:
        patterns = list(self.patterns.get(session_id, ()))
        return bool(patterns) and await asyncio.to_thread(allowed_by, command, patterns) \
            is not None

    async def _ask(self, pump: Pump, pending: Pending) -> bool:
        session_id = pending.session_id
        if sum(1 for o in self.open.values() if o.session_id == session_id) >= self.limit:
            return False
        self.open[pending.id] = pending
        if self.relay is not None:
            self.relay.opened(pending.id, session_id, self.timeout)
        pump.put("approval", pending.shown())
        decision: Decision = "deny"
        reason = "turn ended"
        try:
            decision, reason = await asyncio.wait_for(asyncio.shield(pending.decision),
                                                      self.timeout)
        except TimeoutError:
            reason = "timeout"
        finally:  # answered, timed out, or the call (its turn) went away: denied
            del self.open[pending.id]
            if self.relay is not None:
                self.relay.closed(pending.id)
            self.finished[pending.id] = (session_id, reason)
            if len(self.finished) > 10_000:
                del self.finished[next(iter(self.finished))]
            done = {"turn_id": pending.turn_id, "id": pending.id, "decision": decision,
                    "reason": reason}
            pump.put("approval_done", done)
            self.kept.add(session_id, {"turn": pending.turn, **pending.shown(), **done})
        return decision != "deny"

    async def reach(self, session_id: str, approval_id: str, decision: str) -> None:
        """``answer``, where the approval is open: here, or (through ``relay``) in the
        process whose turn asked; the same errors."""
        if self.relay is not None and approval_id not in self.open \
                and await self.relay.forward("approval", session_id, approval_id,
                                             {"decision": decision}) is not None:
            return
        self.answer(session_id, approval_id, decision)

    def answer(self, session_id: str, approval_id: str, decision: str) -> None:
        """Answer the open approval ``approval_id`` of the session; ``ApiError``: 404
        unknown or gone (timed out, or its turn ended), 409 already answered, 400 a decision
        that is not ``once``, ``always`` (for a command offered it) or ``deny``."""
        pending = self.open.get(approval_id)
        if pending is None or pending.session_id != session_id:
            self._not_open(session_id, approval_id)
        if decision not in DECISIONS:
            read_answer({"decision": decision})  # raises, saying what to send
        if decision == "always" and pending.pattern is None:
            raise ApiError(400, "always_not_offered", "this command is not offered \"always\" "
                           "(it has a substitution, a redirection or a here-document, or "
                           'cannot be read): answer "once" or "deny"')
        if pending.decision.done():
            raise ApiError(409, "approval_answered", f"approval {approval_id[:64]} was "
                           "already answered")
        pending.decision.set_result((cast(Decision, decision), "answered"))
        if decision == "always" and pending.pattern is not None:
            self._remember(session_id, pending.pattern)

    def _not_open(self, session_id: str, approval_id: str) -> NoReturn:
        """Raise the 409 or 404 for an approval that is not open here."""
        here = self.finished.get(approval_id)
        reason = here[1] if here is not None and here[0] == session_id else None
        if reason is None:
            reason = next((str(item.get("reason")) for item in self.kept.read(session_id)
                           if item.get("id") == approval_id), None)
        if reason in ("answered", "covered"):
            raise ApiError(409, "approval_answered", f"approval {approval_id[:64]} was "
                           "already answered")
        if reason is not None:
            why = "nobody answered in time" if reason == "timeout" else "its turn ended"
            raise ApiError(404, "approval_gone", f"approval {approval_id[:64]} is gone "
                           f"({why}): the command was denied; ask the model to run it again")
        raise ApiError(404, "no_approval", f"session {session_id} has no open approval "
                       f"{approval_id[:64]}; the approval events and the history name them")

    def _remember(self, session_id: str, pattern: str) -> None:
        """Allow ``pattern`` for the rest of the session, and let the session's open
        approvals it covers run (``covered``)."""
        patterns = self.patterns.setdefault(session_id, [])
        self.patterns.move_to_end(session_id)
        if pattern not in patterns:
            patterns.append(pattern)
            del patterns[:-MAX_PATTERNS]
        while len(self.patterns) > MAX_SESSIONS:
            self.patterns.popitem(last=False)
        for other in list(self.open.values()):
            if other.session_id == session_id and not other.decision.done() \
                    and allowed_by(other.command, [pattern]) is not None:
                other.decision.set_result(("once", "covered"))

    def end_turn(self, turn_id: str) -> None:
        """Deny the turn's approvals still open (it ended, or was stopped)."""
        for pending in list(self.open.values()):
            if pending.turn_id == turn_id and not pending.decision.done():
                pending.decision.set_result(("deny", "turn ended"))

    def listing(self, session_id: str) -> list[dict]:
        """The session's finished approvals (the last ``records.MAX_SAVED``, oldest first,
        each with ``turn``, ``decision`` and ``reason``), then its open ones (``decision``
        null)."""
        shown = self.kept.read(session_id)
        shown += [{"turn": o.turn, **o.shown(), "decision": None, "reason": ""}
                  for o in self.open.values() if o.session_id == session_id]
        return shown
