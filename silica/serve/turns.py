"""Turns run by the daemon: one at a time per session, in the background, as bus events.

    runner = TurnRunner(options, bus)
    sid = runner.create_session(provider=None, model=None, workspace=None)
    turn = await runner.begin(sid, request)        # intake done, images stored, "message" sent
    outcome = await runner.wait(turn)              # {"turn_id", "text", "stop_reason", "usage"}

``begin`` claims the session (``409 turn_running`` when a turn of it runs here or in another
process: the session's ``TurnLock`` is taken before the message is read and held until the
turn ends), reads the message (``silica.serve.uploads.read_message``), stores its images in
the session's ``ImageStore`` and sends the ``message`` event, all before it returns; then the
turn runs as a task. Its ``AgentEvents`` become ``text_delta``, ``tool_call``,
``tool_result``, ``image`` and ``tool_note`` events (``silica.serve.events``), and it ends
with ``turn_end`` (after an ``error`` event when it failed: the provider refused, the daemon
stopped...). Its tools' requests for values (``silica.serve.asking``) and its shell commands
outside ``[shell] allow`` (``silica.serve.approvals``) are put to whoever watches the session,
and a turn that ends denies what it left open. Every event of a session goes through one
queue (its ``Pump``), so clients see them in the order they happened, and the turn never
waits for a slow client. The turn lock is given back before ``turn_end`` is sent, so a client
may send the next message as soon as it sees it.

The daemon keeps an ``Agent`` per session it has used (the ``MAX_AGENTS`` most recent); a
turn saved meanwhile by ``silica chat`` is read back before the next turn (``Agent.send``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from silica.agent.loop import Agent, TurnLimitReached
from silica.agent.profiles import UnknownAgent
from silica.agent.sessions import SessionError, delete_session, session_path
from silica.agent.turnlock import SessionBusy, TurnLock, busy
from silica.blocks import ImageBlock, ImageRefBlock, TextBlock
from silica.errors import SilicaError
from silica.images.store import StoreError, image_file
from silica.providers.base import ProviderError
from silica.serve.approvals import Approvals
from silica.serve.asking import Elicitations
from silica.serve.bodies import BodyBudget
from silica.serve.bus import EventBus
from silica.serve.errors import ApiError, no_session, turn_running
from silica.serve.events import Pump, agent_events, image_item
from silica.serve.history import count_images
from silica.serve.options import ServeOptions
from silica.serve.uploads import read_message
from silica.serve.workspaces import check_workspace, session_workspace, write_workspace

log = logging.getLogger("silica.serve")

MAX_AGENTS = 64  # sessions whose Agent (provider, toolbox) is kept between turns
_MODEL = re.compile(r"^[\x21-\x7e]{1,200}$")


@dataclass
class Turn:
    """One turn: ``outcome`` (the ``?wait=true`` answer) or ``failure`` once ``done``."""

    turn_id: str
    session_id: str
    number: int
    task: asyncio.Task | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: dict | None = None
    failure: ApiError | None = None


@dataclass
class Slot:
    """What the daemon holds of one session."""

    pump: Pump
    agent: Agent | None = None
    claimed: bool = False  # a message is being taken or its turn runs, in this daemon
    turn: Turn | None = None


class TurnRunner:
    """The daemon's turns (see the module docstring)."""

    def __init__(self, options: ServeOptions, bus: EventBus) -> None:
        self.options, self.bus = options, bus
        self.home = options.home
        self.slots: collections.OrderedDict[str, Slot] = collections.OrderedDict()
        self.tasks: set[asyncio.Task] = set()
        self.bodies = BodyBudget(options.settings.serve.max_body_memory)
        self.asking = Elicitations(self.home, timeout=options.settings.mcp.elicitation_timeout)
        self.approvals = Approvals(self.home, timeout=options.settings.serve.approval_timeout)

    # -- sessions -------------------------------------------------------------------------

    def exists(self, session_id: str) -> bool:
        return session_path(session_id, self.home).is_file()

    def running_here(self, session_id: str) -> Slot | None:
        slot = self.slots.get(session_id)
        return slot if slot is not None and slot.claimed else None

    def is_running(self, session_id: str) -> bool:
        """Whether a turn of the session runs now, here or in another process."""
        return self.running_here(session_id) is not None or busy(session_id, self.home)

    def running_turn(self, session_id: str, last_turn: int) -> int | None:
        """The number of the turn that runs here now (``None``: not known here)."""
        slot = self.running_here(session_id)
        if slot is None:
            return None
        return slot.turn.number if slot.turn else last_turn + 1

    def create_session(self, *, agent: str | None = None, provider: str | None = None,
                       model: str | None = None, workspace: str | None = None,
                       session_id: str | None = None) -> str:
        """A new, empty, saved session (as profile ``agent``, if given: remembered with the
        session; ``session_id``: its id, instead of a new one); ``ApiError`` for an unknown
        agent or provider, a bad model name or a workspace not allowed."""
        options, settings = self.options, self.options.settings
        if model is not None and not _MODEL.fullmatch(model):
            raise ApiError(400, "invalid_model", "model must be a model name of 1-200 "
                           "printable characters without spaces, e.g. claude-sonnet-4-5")
        folder = (check_workspace(workspace, options.workspaces, options.default_workspace)
                  if workspace is not None else options.default_workspace)
        try:
            made = Agent.start(settings, agent=agent, provider=provider, model=model,
                               home=self.home, workdir=folder, session_id=session_id)
            made.save()
        except UnknownAgent as exc:
            raise ApiError(400, "unknown_agent", str(exc)) from None
        except ProviderError as exc:
            raise ApiError(400, "unknown_provider", str(exc)) from None
        except SilicaError as exc:
            raise ApiError(500, "session_not_saved", str(exc)) from None
        session_id = made.conversation.id
        if workspace is not None:
            write_workspace(session_id, self.home, folder)
        made.keep()  # saved on purpose: never forgotten as unanswered
        self._slot(session_id).agent = made
        return session_id

    def delete(self, session_id: str) -> None:
        """Remove the session, its images and outputs; 404 unknown, 409 while a turn runs."""
        if self.running_here(session_id):
            raise turn_running(session_id)
        lock = TurnLock(session_id, self.home)
        try:
            lock.acquire()
        except SessionBusy:
            raise turn_running(session_id) from None
        try:
            try:
                delete_session(session_id, self.home)
            except SessionError as exc:
                if not self.exists(session_id):
                    raise no_session(session_id) from None
                raise ApiError(500, "session_not_deleted", str(exc)) from None
            lock.remove_lock_file()
        finally:
            lock.release()
        self.slots.pop(session_id, None)

    # -- turns ----------------------------------------------------------------------------

    async def begin(self, session_id: str, request: Any, *, doc: dict | None = None) -> Turn:
        """Take a message for the session and start its turn (see the module docstring);
        ``doc``: the message's JSON, already read from ``request``."""
        slot = self._slot(session_id)
        if slot.claimed:
            raise turn_running(session_id)
        slot.claimed = True  # before the first await: a second message gets a 409
        agent: Agent | None = None
        try:
            agent = await asyncio.to_thread(self._agent, session_id, slot)  # reads a file
            agent.claim_turn()
        except SessionBusy:
            slot.claimed = False
            raise turn_running(session_id) from None
        except BaseException:
            slot.claimed = False
            raise
        try:
            await asyncio.to_thread(_catch_up, agent)  # may read the session file again
            stored = await asyncio.to_thread(count_images, self.home, session_id,
                                             agent.settings)  # an object store is asked
            incoming = await read_message(request, settings=agent.settings,
                                          limits=agent.info.limits, stored_images=stored,
                                          budget=self.bodies, doc=doc)
            if incoming.workspace is not None:
                self._use_workspace(agent, check_workspace(
                    incoming.workspace, self.options.workspaces,
                    self.options.default_workspace))
            refs = await asyncio.to_thread(_store_images, agent, incoming.images)
            turn = Turn(turn_id=secrets.token_hex(8), session_id=session_id,
                        number=agent.conversation.turn + 1)
            slot.turn = turn
            slot.pump.put("message", {
                "turn_id": turn.turn_id, "session_id": session_id, "turn": turn.number,
                "text": incoming.text,
                "images": [image_item(ref, session_id, name=ref.alt) for ref in refs]})
            await slot.pump.drain()
        except BaseException:
            agent.release_turn()
            slot.claimed, slot.turn = False, None
            raise
        turn.task = asyncio.get_running_loop().create_task(
            self._run(slot, turn, agent, incoming.text, refs))
        self.tasks.add(turn.task)
        turn.task.add_done_callback(self.tasks.discard)
        return turn

    async def wait(self, turn: Turn) -> dict:
        """The turn's outcome once it ends (a client that goes away does not stop it);
        ``ApiError`` if it failed."""
        await asyncio.shield(turn.done.wait())
        if turn.failure is not None:
            raise turn.failure
        assert turn.outcome is not None
        return turn.outcome

    async def close(self, wait: float = 10.0) -> None:
        """Stop every turn (each tool call is answered and the session saved) and wait for
        them, at most ``wait`` seconds."""
        tasks = [t for t in self.tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=wait)

    async def _run(self, slot: Slot, turn: Turn, agent: Agent, text: str,
                   refs: list[ImageRefBlock]) -> None:
        agent.listen(agent_events(slot.pump, self.bus, turn.session_id, turn.turn_id))
        # its tools' requests for values are put to whoever watches the session
        agent.elicit = self.asking.asker(slot.pump, turn.session_id, turn.turn_id,
                                          turn.number)
        # and its shell commands outside [shell] allow wait for that person's approval
        agent.approve = self.approvals.approver(slot.pump, turn.session_id, turn.turn_id,
                                                turn.number)
        failure: ApiError | None = None
        reply_text, stop_reason = "", "error"
        cancelled = False
        try:
            reply_text = await agent.send(text, refs)
            stop_reason = agent.last_reply.stop_reason if agent.last_reply else ""
        except asyncio.CancelledError:
            cancelled, stop_reason = True, "interrupted"
            failure = ApiError(503, "interrupted", (
                "silica serve stopped while this turn ran; every tool call in it was "
                "answered and the session was saved: send the next message to go on"))
        except Exception as exc:  # every failure is an event; the session stays usable
            failure = _failure(exc)
        finally:
            self.asking.end_turn(turn.turn_id)
            self.approvals.end_turn(turn.turn_id)
            agent.release_turn()
            slot.claimed, slot.turn = False, None
        usage = agent.usage.model_dump()
        if failure is not None:
            turn.failure = ApiError(failure.status, failure.code, failure.message,
                                    turn_id=turn.turn_id)
            slot.pump.put("error", {"turn_id": turn.turn_id, "code": failure.code,
                                    "message": failure.message})
        turn.outcome = {"turn_id": turn.turn_id, "text": reply_text,
                        "stop_reason": stop_reason, "usage": usage}
        slot.pump.put("turn_end", dict(turn.outcome))
        try:
            await slot.pump.drain()
        finally:
            turn.done.set()
        if cancelled:
            raise asyncio.CancelledError

    # -- agents ---------------------------------------------------------------------------

    def _slot(self, session_id: str) -> Slot:
        slot = self.slots.get(session_id)
        if slot is None:
            slot = self.slots[session_id] = Slot(pump=Pump(self.bus, session_id))
        self.slots.move_to_end(session_id)
        idle = [sid for sid, s in self.slots.items()
                if not s.claimed and s.pump.idle.is_set() and sid != session_id]
        for sid in idle[:max(0, len(self.slots) - MAX_AGENTS)]:
            del self.slots[sid]
        return slot

    def _agent(self, session_id: str, slot: Slot) -> Agent:
        if slot.agent is not None:
            return slot.agent
        if not self.exists(session_id):
            raise no_session(session_id)
        options = self.options
        folder = session_workspace(session_id, self.home, options.workspaces,
                                   options.default_workspace)
        try:
            slot.agent = Agent.resume(session_id, options.settings, home=self.home,
                                      workdir=folder)
        except SessionBusy:
            raise
        except (ProviderError, UnknownAgent) as exc:
            code = "agent_unknown" if isinstance(exc, UnknownAgent) else "provider_unusable"
            raise ApiError(409, code, f"session {session_id} cannot go on: {exc}") from None
        except SilicaError as exc:
            raise ApiError(500, "session_unreadable", str(exc)) from None
        return slot.agent

    def _use_workspace(self, agent: Agent, folder: Path) -> None:
        """Run the session's tools in ``folder`` from now on (kept with the session)."""
        agent.set_workspace(folder)
        write_workspace(agent.conversation.id, self.home, folder)


def _catch_up(agent: Agent) -> None:
    try:
        agent.catch_up()
    except SilicaError as exc:
        raise ApiError(500, "session_unreadable", str(exc)) from None


def _store_images(agent: Agent, images: list[ImageBlock]) -> list[ImageRefBlock]:
    """Put a message's images in the session's store (off the event loop); if one cannot
    be kept, the files this call added are removed and ``ApiError`` says why."""
    store = agent.store
    added: list[Path] = []
    refs: list[ImageRefBlock] = []
    try:
        for image in images:
            target = image_file(store.root, store.session,
                                hashlib.sha256(image.data).hexdigest(), image.media_type)
            existed = target.exists()
            kept = store.put(image, alt=image.source)
            if isinstance(kept, TextBlock):
                raise ApiError(413, "image_not_kept", kept.text.strip("[]") + "; nothing "
                               "was sent")
            if not existed:
                added.append(target)
            refs.append(kept)
    except StoreError as exc:
        _remove(added)
        raise ApiError(507, "image_not_stored", f"{exc}; nothing was sent") from None
    except BaseException:
        _remove(added)
        raise
    return refs


def _remove(paths: list[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


def _failure(exc: Exception) -> ApiError:
    """What the ``error`` event (and ``?wait=true``) say of a turn that failed."""
    if isinstance(exc, ProviderError):
        return ApiError(502, "provider_error", str(exc))
    if isinstance(exc, TurnLimitReached):
        return ApiError(500, "turn_limit", str(exc))
    if isinstance(exc, SessionBusy):
        return ApiError(409, "turn_running", str(exc))
    if isinstance(exc, SessionError):
        return ApiError(500, "session_not_saved", str(exc))
    if isinstance(exc, SilicaError):
        return ApiError(500, "turn_failed", str(exc))
    log.error("a turn failed inside silica", exc_info=exc)
    return ApiError(500, "internal_error", f"the turn failed inside silica "
                    f"({type(exc).__name__}: {exc}); the session was saved up to the failure: "
                    "send the next message to go on")
