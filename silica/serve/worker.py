"""``silica worker``: runs the turns that front daemons (``silica serve --no-worker``) queue.

    worker = Worker(options, say=print_to_stderr)    # options.redis: the shared Redis
    await worker.run()                              # until worker.stop() (SIGTERM)

A worker reads jobs from the turn queue (``silica.serve.turnqueue``), at most ``[worker]
concurrency`` at once, and runs each as the daemon runs a turn (``silica.serve.turns.
run_turn``: the agent's events, its tools' requests for values and approvals, failures,
``turn_end``), its events published on the shared bus so every front's clients see them.
Tools run here, under the sandbox, in the session's workspace. Answers to its requests given
at any front reach it through Redis (``silica.serve.relay``). Every ``lease / 3`` seconds it
beats: its jobs stay its own, their sessions' leases renewed.

The reclaim policy: a job whose worker stopped beating for ``[worker] lease`` seconds (it
died) is claimed by another worker, and never run again (its tools may have had effects):
that worker takes the session's turn lock, loads the session, answers every tool call left
unanswered with an error result, saves it, sends ``error`` (``interrupted``) and
``turn_end`` (``stop_reason`` ``interrupted``), acks the job and frees the session.

``stop()`` (SIGTERM): no more jobs are taken; the running turns end as the daemon's do when
it stops (every tool call answered, the session saved, ``interrupted``), each acked.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable

from silica.agent.conversation import answer_every_call
from silica.agent.loop import Agent
from silica.agent.sessions import SessionError, load_session, save_session
from silica.agent.turnlock import SessionBusy, TurnLock
from silica.blocks import ImageRefBlock
from silica.errors import SilicaError
from silica.providers.base import Usage
from silica.security.urls import mask_urls
from silica.serve.approvals import Approvals
from silica.serve.asking import Elicitations
from silica.serve.bus import EventBus, make_bus
from silica.serve.errors import ApiError
from silica.serve.events import Pump
from silica.serve.options import ServeOptions
from silica.serve.relay import Relay
from silica.serve.turnqueue import Job, TurnQueue
from silica.serve.turns import (
    MAX_AGENTS,
    Turn,
    answerer,
    catch_up,
    end_turn,
    failure_for,
    run_turn,
)
from silica.serve.workspaces import session_workspace

log = logging.getLogger("silica.serve")

STOP_WAIT = 10.0  # seconds the running turns get to end once stopping
RETRY = 1.0  # seconds before the queue is read again after Redis failed
INTERRUPTED = ("the worker running this turn stopped (it died or lost Redis); the turn was "
               "not run again, as its tools may have had effects: every tool call in it was "
               "answered with an error and the session was saved; send the next message to go "
               "on")


class Worker:
    """One ``silica worker`` process (see the module docstring)."""

    def __init__(self, options: ServeOptions, *, say: Callable[[str], None]) -> None:
        assert options.redis, "a worker needs the Redis URL"
        self.options, self.settings, self.home = options, options.settings, options.home
        self.say = say
        self.name = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.lease = self.settings.worker.lease
        self.concurrency = self.settings.worker.concurrency
        self.asking = Elicitations(self.home, timeout=self.settings.mcp.elicitation_timeout)
        self.approvals = Approvals(self.home, timeout=self.settings.serve.approval_timeout)
        self.agents: collections.OrderedDict[str, Agent] = collections.OrderedDict()
        self.jobs: dict[asyncio.Task, Job] = {}
        self.owned: dict[str, Job] = {}  # by entry: what the heartbeat thread keeps owned
        self.owned_lock = threading.Lock()
        self.beating = threading.Event()  # set: the heartbeat thread stops
        self.stopping = asyncio.Event()
        self.queue: TurnQueue | None = None
        self.bus: EventBus | None = None

    def stop(self) -> None:
        if not self.stopping.is_set():
            self.say("stopping: no more turns are taken; the running ones end as interrupted")
        self.stopping.set()

    async def run(self) -> None:
        """Take and run turns until ``stop()``; ``SilicaError`` if Redis is not there."""
        url = str(self.options.redis)
        self.queue = queue = await TurnQueue.connect(
            url, lease=self.lease, what="start it, or point --redis (or $SILICA_SERVE_REDIS) "
            "at the Redis the front daemons use")
        helpers: list[asyncio.Task] = []
        serving: asyncio.Task | None = None
        try:
            self.bus = await _start_bus(url, self.home)
            relay = Relay(queue.client, self.name)
            self.asking.relay = self.approvals.relay = relay
            loop = asyncio.get_running_loop()
            serving = loop.create_task(relay.serve(answerer(self.asking, self.approvals)))
            helpers = [loop.create_task(self._reclaim())]
            heart = threading.Thread(target=self._beat, name="silica-worker-beat",
                                     daemon=True)
            heart.start()
            self.say(f"{self.name} takes turns from {mask_urls(url)} (at most "
                     f"{self.concurrency} at once)")
            await self._take()
            await self._finish()
            await relay.stop(serving)
        finally:
            self.beating.set()
            if serving is not None and not serving.done():
                helpers.append(serving)
            for task in helpers:
                task.cancel()
            for task in helpers:
                with contextlib.suppress(BaseException):
                    await task
            if self.bus is not None:
                await self.bus.close()
            await queue.close()

    # -- jobs ---------------------------------------------------------------------------------

    async def _take(self) -> None:
        assert self.queue is not None
        stop = asyncio.get_running_loop().create_task(self.stopping.wait())
        try:
            while not self.stopping.is_set():
                free = self.concurrency - len(self.jobs)
                if free <= 0:
                    await asyncio.wait([stop, *self.jobs], return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    jobs = await self.queue.read(self.name, free)
                except self.queue.errors as exc:
                    log.warning("could not read the turn queue: %s", exc)
                    await asyncio.sleep(RETRY)
                    continue
                for job in jobs:
                    self._spawn(job, self._turn(job))
        finally:
            stop.cancel()

    async def _finish(self) -> None:
        """Interrupt the running turns and wait for them (each ends and is acked)."""
        running = list(self.jobs)
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=STOP_WAIT)

    def _spawn(self, job: Job, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.jobs[task] = job
        with self.owned_lock:
            self.owned[job.entry] = job
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        job = self.jobs.pop(task, None)
        if job is not None:
            with self.owned_lock:
                self.owned.pop(job.entry, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("a turn failed inside silica worker", exc_info=task.exception())

    def _beat(self) -> None:
        """Every ``lease / 3`` seconds, in a thread of its own (a busy event loop does not
        stop it; only the process's death does): the running jobs stay this worker's."""
        assert self.queue is not None
        while not self.beating.wait(self.lease / 3):
            with self.owned_lock:
                jobs = list(self.owned.values())
            try:
                self.queue.beat(self.name, jobs)
            except self.queue.errors as exc:
                log.warning("could not renew this worker's turns in Redis: %s", exc)

    async def _reclaim(self) -> None:
        """Every ``lease / 3`` seconds: claim the jobs of workers that stopped beating."""
        assert self.queue is not None
        while True:
            await asyncio.sleep(self.lease / 3)
            if self.stopping.is_set():
                return
            try:
                for job in await self.queue.reclaim(self.name):
                    self._spawn(job, self._interrupted(job))
            except self.queue.errors as exc:
                log.warning("could not look for turns of stopped workers: %s", exc)

    # -- one turn -------------------------------------------------------------------------------

    async def _turn(self, job: Job) -> None:
        assert self.queue is not None and self.bus is not None
        queue, sid = self.queue, job.session_id
        turn = Turn(turn_id=job.turn_id, session_id=sid, number=job.number)
        pump = Pump(self.bus, sid)
        self.say(f"turn {job.number} of session {sid} ({job.turn_id}) starts")
        try:
            agent = await asyncio.to_thread(self._agent, sid)
            agent.claim_turn()
        except (SilicaError, SessionBusy) as exc:
            failure = exc if isinstance(exc, ApiError) else failure_for(exc)
            await end_turn(pump, turn, failure, _outcome(job, "error"))
            await self._done(job)
            return

        async def release() -> None:
            agent.release_turn()
            with contextlib.suppress(*queue.errors):  # the next message may come at once
                await queue.drop_lease(sid, job.turn_id)

        try:
            try:
                await asyncio.to_thread(catch_up, agent)
                refs = [ImageRefBlock.model_validate(ref) for ref in job.images]
            except BaseException as exc:  # the turn never ran
                await release()
                stopped = isinstance(exc, asyncio.CancelledError)
                await end_turn(pump, turn, exc if isinstance(exc, ApiError) else ApiError(
                    503, "interrupted", "silica worker stopped before this turn ran; send "
                    "the message again") if stopped else ApiError(
                    400, "invalid_job", f"the queued turn cannot be read: {exc}"),
                    _outcome(job, "interrupted" if stopped else "error"))
                if stopped:
                    raise
                return
            await run_turn(agent, pump, self.bus, self.asking, self.approvals, turn, job.text,
                           refs, release=release, who="silica worker")
        finally:
            await self._done(job)
            ended = turn.outcome.get("stop_reason") if turn.outcome else "?"
            self.say(f"turn {job.number} of session {sid} ({job.turn_id}) ended: {ended}")

    def _agent(self, session_id: str) -> Agent:
        """The session's agent, in its workspace (kept for the next turns)."""
        options = self.options
        folder = session_workspace(session_id, self.home, options.workspaces,
                                   options.default_workspace)
        agent = self.agents.get(session_id)
        if agent is None:
            agent = Agent.resume(session_id, self.settings, home=self.home, workdir=folder)
            self.agents[session_id] = agent
            while len(self.agents) > MAX_AGENTS:
                self.agents.popitem(last=False)
        else:
            agent.set_workspace(folder)
        self.agents.move_to_end(session_id)
        return agent

    async def _interrupted(self, job: Job) -> None:
        """End a dead worker's turn as the reclaim policy says (the module docstring)."""
        assert self.queue is not None and self.bus is not None
        sid = job.session_id
        if not await asyncio.to_thread(_answer_calls, sid, self.home):
            # the session's turn lock is held: its worker is slow, not dead (its beat takes
            # the job back), or a later turn runs (the job is claimed again after it)
            return
        self.say(f"turn {job.number} of session {sid} ({job.turn_id}) lost its worker: "
                 "ended as interrupted")
        turn = Turn(turn_id=job.turn_id, session_id=sid, number=job.number)
        with contextlib.suppress(*self.queue.errors):  # the next message may come at once
            await self.queue.drop_lease(sid, job.turn_id)
        await end_turn(Pump(self.bus, sid), turn, ApiError(503, "interrupted", INTERRUPTED),
                       _outcome(job, "interrupted"))
        await self._done(job)

    async def _done(self, job: Job) -> None:
        assert self.queue is not None
        try:
            await self.queue.done(job)
        except self.queue.errors as exc:  # claimed again later, and ended as interrupted
            log.warning("could not mark turn %s done in Redis: %s", job.turn_id, exc)


def _answer_calls(session_id: str, home) -> bool:
    """Under the session's turn lock: every tool call left unanswered gets an error result,
    and the session is saved. ``False``: the lock is held (nothing was done)."""
    lock = TurnLock(session_id, home)
    try:
        lock.acquire()
    except SessionBusy:
        return False
    try:
        conversation = load_session(session_id, home)
        if answer_every_call(conversation):
            save_session(conversation, home)
    except SessionError as exc:
        log.warning("could not answer the tool calls of session %s: %s", session_id, exc)
    finally:
        lock.release()
    return True


def _outcome(job: Job, stop_reason: str) -> dict:
    return {"turn_id": job.turn_id, "text": "", "stop_reason": stop_reason,
            "usage": Usage().model_dump()}


async def _start_bus(url: str, home) -> EventBus:
    """The shared bus: publishing needs no Socket.IO server."""
    bus = make_bus(url, home)
    await bus.start()
    return bus
