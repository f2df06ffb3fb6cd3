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
import os
import re
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from silica.agent.loop import Agent, TurnLimitReached
from silica.agent.profiles import UnknownAgent
from silica.agent.sessions import SessionError, delete_session, session_exists
from silica.agent.turnlock import SessionBusy, TurnLock, busy
from silica.blocks import ImageBlock, ImageRefBlock, TextBlock
from silica.errors import SilicaError
from silica.images.store import StoreError, image_file
from silica.providers.base import ProviderError
from silica.serve.approvals import Approvals, read_answer
from silica.serve.asking import Elicitations
from silica.serve.bodies import BodyBudget
from silica.serve.bus import EventBus
from silica.serve.errors import ApiError, no_session, turn_running
from silica.serve.events import Pump, agent_events, image_item
from silica.serve.history import count_images
from silica.serve.options import ServeOptions
from silica.serve.uploads import read_message
from silica.serve.workspaces import check_workspace, session_workspace, write_workspace

if TYPE_CHECKING:  # they need the redis package, which only --redis requires
    from silica.serve.relay import Answerer
    from silica.serve.turnqueue import TurnQueue

log = logging.getLogger("silica.serve")

T = TypeVar("T")
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
        self.queue: TurnQueue | None = None  # with --redis: the turn queue and leases
        self.queued: dict[str, Turn] = {}  # a front's turns added to the queue, until their end
        self._relay_task: asyncio.Task | None = None

    async def start(self) -> None:
        """With ``--redis``: reach the turn queue, and let answers to this daemon's
        requests come from the other daemons (``silica.serve.relay``). ``SilicaError`` if
        Redis does not answer."""
        if not self.options.redis:
            return
        from silica.serve.relay import Relay
        from silica.serve.turnqueue import TurnQueue

        self.queue = await TurnQueue.connect(self.options.redis,
                                             lease=self.options.settings.worker.lease)
        relay = Relay(self.queue.client, f"serve-{socket.gethostname()}-{os.getpid()}-"
                                         f"{secrets.token_hex(3)}")
        self.asking.relay = self.approvals.relay = relay
        self._relay_task = asyncio.get_running_loop().create_task(
            relay.serve(answerer(self.asking, self.approvals)))

    async def _watch(self, turn: Turn, ready: asyncio.Event) -> None:
        """Follow a queued turn on the session's events (so this front reads them: its
        ``?wait=true`` answer, the AI SDK stream) until the worker's ``turn_end``."""
        try:
            async with self.bus.subscribe(turn.session_id) as events:
                ready.set()
                async for event, data in events:
                    if not isinstance(data, dict) or data.get("turn_id") != turn.turn_id:
                        continue
                    if event == "error":
                        code = str(data.get("code"))
                        turn.failure = ApiError(_STATUS.get(code, 500), code,
                                                str(data.get("message")), turn_id=turn.turn_id)
                    elif event == "turn_end":
                        turn.outcome = {k: v for k, v in data.items() if k != "event_id"}
                        return
        finally:
            ready.set()
            self.queued.pop(turn.turn_id, None)
            if turn.outcome is None and turn.failure is None:
                turn.failure = ApiError(503, "front_stopped", "this daemon stopped "
                                        "following the turn, which goes on in a worker: read "
                                        "its end in the session's history")
            turn.done.set()

    # -- sessions -------------------------------------------------------------------------

    def exists(self, session_id: str) -> bool:
        return session_exists(session_id, self.home)

    def running_here(self, session_id: str) -> Slot | None:
        slot = self.slots.get(session_id)
        return slot if slot is not None and slot.claimed else None

    def is_running(self, session_id: str) -> bool:
        """Whether a turn of the session runs now, here or in another process."""
        return self.running_here(session_id) is not None or busy(session_id, self.home) \
            or (self.queue is not None and self.queue.leased(session_id))

    def running_turn(self, session_id: str, last_turn: int) -> int | None:
        """The number of the turn that runs here now (``None``: not known here)."""
        slot = self.running_here(session_id)
        if slot is None:
            leased = self.queue is not None and self.queue.leased(session_id)
            return last_turn + 1 if leased else None
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
        if self.running_here(session_id) or (self.queue is not None
                                             and self.queue.leased(session_id)):
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
        ``doc``: the message's JSON, already read from ``request``. A front (``--redis``
        with ``--no-worker``) holds the session by its Redis lease instead of its turn lock,
        and adds the turn to the queue for a worker instead of running it."""
        slot = self._slot(session_id)
        if slot.claimed:
            raise turn_running(session_id)
        slot.claimed = True  # before the first await: a second message gets a 409
        queue = self.queue if self.options.no_worker else None
        turn_id = secrets.token_hex(8)
        agent: Agent | None = None
        watcher: asyncio.Task | None = None
        try:
            if queue is not None and not await _redis_call(queue, queue.take_lease(
                    session_id, turn_id)):
                raise turn_running(session_id)
            agent = await asyncio.to_thread(self._agent, session_id, slot)  # reads a file
            if queue is None:
                agent.claim_turn()
        except BaseException as exc:
            slot.claimed = False
            if queue is not None and not (isinstance(exc, ApiError) and exc.code
                                          == "turn_running"):
                await _forget_lease(queue, session_id, turn_id)
            if isinstance(exc, SessionBusy):
                raise turn_running(session_id) from None
            raise
        try:
            await asyncio.to_thread(catch_up, agent)  # may read the session again
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
            turn = Turn(turn_id=turn_id, session_id=session_id,
                        number=agent.conversation.turn + 1)
            if queue is None:
                slot.turn = turn
            else:  # followed from before its message, so no event of it is missed
                self.queued[turn_id] = turn
                ready = asyncio.Event()
                turn.task = watcher = asyncio.get_running_loop().create_task(
                    self._watch(turn, ready))
                self.tasks.add(watcher)
                watcher.add_done_callback(self.tasks.discard)
                await ready.wait()
            slot.pump.put("message", {
                "turn_id": turn.turn_id, "session_id": session_id, "turn": turn.number,
                "text": incoming.text,
                "images": [image_item(ref, session_id, name=ref.alt) for ref in refs]})
            await slot.pump.drain()
            if queue is not None:
                from silica.serve.turnqueue import Job

                await _redis_call(queue, queue.add(Job(
                    session_id, turn_id, turn.number, incoming.text,
                    [ref.model_dump(mode="json") for ref in refs],
                    str(agent.workspace) if incoming.workspace is not None else None)))
        except BaseException:
            if queue is None:
                agent.release_turn()
            else:
                self.queued.pop(turn_id, None)
                await _forget_lease(queue, session_id, turn_id)
                if watcher is not None:
                    watcher.cancel()
            slot.claimed, slot.turn = False, None
            raise
        if queue is not None:
            slot.claimed = False  # the lease holds the session until the worker's turn_end
            return turn
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
        relay = self.approvals.relay
        if self._relay_task is not None and relay is not None:
            await relay.stop(self._relay_task)
        if self.queue is not None:
            await self.queue.close()

    async def _run(self, slot: Slot, turn: Turn, agent: Agent, text: str,
                   refs: list[ImageRefBlock]) -> None:
        async def release() -> None:
            agent.release_turn()
            slot.claimed, slot.turn = False, None

        await run_turn(agent, slot.pump, self.bus, self.asking, self.approvals, turn, text,
                       refs, release=release)

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


def catch_up(agent: Agent) -> None:
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


def failure_for(exc: Exception) -> ApiError:
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


STOPPED = ("{who} stopped while this turn ran; every tool call in it was answered and the "
           "session was saved: send the next message to go on")


async def run_turn(agent: Agent, pump: Pump, bus: EventBus, asking: Elicitations,
                   approvals: Approvals, turn: Turn, text: str, refs: list[ImageRefBlock], *,
                   release: Callable[[], Awaitable[None]], who: str = "silica serve") -> None:
    """Run one turn whose ``message`` event is sent: the agent's events on ``pump``, its
    requests for values and approvals put to whoever watches the session, then ``error``
    (when it failed) and ``turn_end``; ``turn`` gets its outcome or failure and is ``done``.
    ``release`` gives the session back, before ``turn_end`` is sent. Cancelled (``who``
    stopped): every tool call is answered, the session saved, the turn ends ``interrupted``
    and the cancellation goes on. The daemon's turns and a worker's run this one body."""
    agent.listen(agent_events(pump, bus, turn.session_id, turn.turn_id))
    # its tools' requests for values are put to whoever watches the session
    agent.elicit = asking.asker(pump, turn.session_id, turn.turn_id, turn.number)
    # and its shell commands outside [shell] allow wait for that person's approval
    agent.approve = approvals.approver(pump, turn.session_id, turn.turn_id, turn.number)
    failure: ApiError | None = None
    reply_text, stop_reason = "", "error"
    cancelled = False
    try:
        reply_text = await agent.send(text, refs)
        stop_reason = agent.last_reply.stop_reason if agent.last_reply else ""
    except asyncio.CancelledError:
        cancelled, stop_reason = True, "interrupted"
        failure = ApiError(503, "interrupted", STOPPED.format(who=who))
    except Exception as exc:  # every failure is an event; the session stays usable
        failure = failure_for(exc)
    finally:
        asking.end_turn(turn.turn_id)
        approvals.end_turn(turn.turn_id)
        await release()
    await end_turn(pump, turn, failure, {"turn_id": turn.turn_id, "text": reply_text,
                                         "stop_reason": stop_reason,
                                         "usage": agent.usage.model_dump()})
    if cancelled:
        raise asyncio.CancelledError


async def end_turn(pump: Pump, turn: Turn, failure: ApiError | None, outcome: dict) -> None:
    """Send the turn's ``error`` (if it failed) and ``turn_end`` (``outcome``), once they
    are published mark it ``done``."""
    if failure is not None:
        turn.failure = ApiError(failure.status, failure.code, failure.message,
                                turn_id=turn.turn_id)
        pump.put("error", {"turn_id": turn.turn_id, "code": failure.code,
                           "message": failure.message})
    turn.outcome = outcome
    pump.put("turn_end", dict(outcome))
    try:
        await pump.drain()
    finally:
        turn.done.set()


_STATUS = {"interrupted": 503, "provider_error": 502, "turn_running": 409}  # of failure_for


def answerer(asking: Elicitations, approvals: Approvals) -> Answerer:
    """What a relay does with an answer forwarded to this process: answer it here."""

    async def answer(kind: str, session_id: str, request_id: str, body: dict) -> dict:
        if kind == "approval":
            decision = read_answer(body)
            approvals.answer(session_id, request_id, decision)
            return {"ok": True, "decision": decision}
        given = asking.answer(session_id, request_id, body)
        return {"ok": True, "action": given.action}

    return answer


async def _redis_call(queue: TurnQueue, call: Awaitable[T]) -> T:
    """``call``, or ``ApiError`` 503 when Redis does not answer."""
    try:
        return await call
    except queue.errors as exc:
        raise ApiError(503, "redis_unreachable", f"the turn queue (Redis) did not answer "
                       f"({exc}); try again once it is back") from None


async def _forget_lease(queue: TurnQueue, session_id: str, turn_id: str) -> None:
    with contextlib.suppress(Exception):
        await queue.drop_lease(session_id, turn_id)
