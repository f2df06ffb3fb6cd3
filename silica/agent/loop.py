"""The agent loop: a person's message, then model and tools in turn until the model answers.

    agent = Agent.start(settings)              # or Agent.resume(session_id, settings)
    answer = await agent.send("plot 3,1,4 and describe it", images=[Path("shot.png")])

An agent may run as a profile (``Agent.start(settings, agent="reviewer")``, ``[agents.NAME]``
in config.toml; see ``silica.agent.profiles``): its provider, model, vision and system prompt,
and only the tools it allows are offered (a call to another is refused). The session keeps
the profile's name, and ``resume`` applies it again.

Nothing here imports a provider's SDK: the first ``send`` starts its import in a thread
(``silica.providers.clients.warm_up``) while the tools are found, and the first request
waits for it.

Every tool call the model makes in one reply runs at once. Each step is saved, so a session
survives a provider error or Ctrl-C: an interrupted turn leaves every tool call answered
(with an error result saying it was interrupted), and the history stays valid to resume.

A session runs one turn at a time wherever it is used (``silica.agent.turnlock``): ``send``
holds the session's turn lock, and raises ``SessionBusy`` when a turn of the session runs
elsewhere (``resume`` raises it too, rather than open a session that is busy). A turn saved by
someone else since this agent last saved or loaded the session (a ``silica chat`` and
``silica serve`` taking turns) is read back first, so no turn overwrites another.

Every tool call is answered whatever fails on the way: a tool that crashes inside silica, an
image the store cannot write (it becomes a notice saying why), a flood of output (the model
gets ``max_result_chars`` of it, the rest is saved beside the session; see
``silica.agent.results``). A failed save raises ``SessionError`` and ``saved`` turns false.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from silica.agent.conversation import Conversation, ToolResultBlock, answer_every_call
from silica.agent.profiles import ToolRule, find_profile, settings_for, tool_rule
from silica.agent.render import build_request
from silica.agent.results import Kept, keep_result
from silica.agent.sessions import (
    delete_session,
    load_session,
    new_session_id,
    save_session,
    session_folder,
    session_version,
)
from silica.agent.turnlock import SessionBusy, TurnLock, busy, busy_message
from silica.allocator import release_memory, tune_allocator
from silica.blocks import ImageBlock, ImageRefBlock, TextBlock, ToolCall, ToolResult
from silica.config import Settings
from silica.elicitation import Asker
from silica.errors import SilicaError
from silica.images.store import ImageStore, cleanup, open_image_store
from silica.paths import silica_home
from silica.providers.base import ModelInfo, Provider, Reply, Request, RequestMessage, Usage
from silica.providers.clients import warm_up
from silica.providers.registry import get_provider
from silica.tools.toolbox import Approve, Toolbox
from silica.words import counted

DEFAULT_SYSTEM = (
    "You are a helpful assistant with tools. Use them when they help; when a tool returns "
    "an image, look at it before you answer."
)
INTERRUPTED = "[interrupted by the user before this tool call finished]"

current_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "silica_tool_call", default=None)
"""The tool call being run, in the task that runs it (each call has its own): a front end's
``approve`` or ``elicit`` reads it to say which call asks."""


@dataclass
class AgentEvents:
    """Callbacks for a view of the loop (the terminal, a server). All optional."""

    on_text: Callable[[str], None] | None = None
    on_tool_call: Callable[[ToolCall], None] | None = None
    # the result as the tool gave it, and where each of its images is kept (None: not kept);
    # it holds every block: a view shows only those ``silica.blocks.for_user`` allows
    on_tool_result: Callable[[ToolCall, ToolResult, list[Path | None]], None] | None = None
    # what the person should know of a result: output cut (and where all of it is), an
    # image not kept and why; one sentence each, after on_tool_result
    on_tool_note: Callable[[ToolCall, str], None] | None = None


class TurnLimitReached(SilicaError):
    """The model kept calling tools past ``max_turns``."""


@dataclass
class Agent:
    settings: Settings
    provider: Provider
    model: str
    conversation: Conversation
    toolbox: Toolbox
    store: ImageStore
    home: Path
    events: AgentEvents = field(default_factory=AgentEvents)
    saved: bool = False  # the stored session holds the conversation as it is now
    started_here: bool = False  # a new session (start), not a resumed one
    usage: Usage = field(default_factory=Usage)  # of the latest turn, every request added up
    last_reply: Reply | None = None  # the model's latest reply (its stop_reason)
    turn_lock: TurnLock | None = None  # the session's; made by ``_make``
    tool_rule: ToolRule = field(default_factory=ToolRule)  # the tools its profile allows
    _on_disk: str | None = None  # the session's version as last saved or loaded
    _warmed: bool = False  # the provider's SDK import was started (``send``)

    # -- construction -------------------------------------------------------------------

    @classmethod
    def start(cls, settings: Settings, *, agent: str | None = None,
              provider: str | None = None, model: str | None = None,
              toolbox: Toolbox | None = None, home: Path | None = None,
              events: AgentEvents | None = None, workdir: Path | None = None,
              session_id: str | None = None) -> Agent:
        """A new session with the configured provider and model, or those of profile
        ``agent`` (``[agents.NAME]``, remembered with the session; ``UnknownAgent`` if
        config.toml does not define it), or ``provider`` and ``model`` if given (see
        ``silica.agent.profiles``). Image folders of sessions untouched for
        ``store.keep_days`` are removed first. ``workdir`` is where tools run (default: the
        current directory), unless a ``toolbox`` is given; ``session_id``: the session's id
        (default: a new one)."""
        settings = settings_for(settings, agent, provider=provider, model=model)
        chosen = get_provider(settings.provider, settings)
        cleanup(Path(home or silica_home()) / "images", settings.store.keep_days)
        model = settings.model or _default_model(chosen)
        conversation = Conversation(id=session_id or new_session_id(),
                                    provider=settings.provider,
                                    model=model, agent=agent or "",
                                    system=settings.system or DEFAULT_SYSTEM)
        made = cls._make(settings, chosen, model, conversation, toolbox, home, events, workdir)
        made.started_here = True
        return made

    @classmethod
    def resume(cls, session_id: str, settings: Settings, *, agent: str | None = None,
               provider: str | None = None, model: str | None = None,
               toolbox: Toolbox | None = None, home: Path | None = None,
               events: AgentEvents | None = None, workdir: Path | None = None) -> Agent:
        """A saved session, with the session's provider and model unless ``provider`` or
        ``model`` name others; ``workdir`` as for ``start``. The session's profile applies
        again (``UnknownAgent`` if config.toml no longer defines it); ``agent`` names
        another, whose provider, model and system prompt it takes. ``SessionBusy`` if a turn
        of the session runs now."""
        home = home or silica_home()
        if busy(session_id, home):
            raise SessionBusy(busy_message(session_id))
        conversation = load_session(session_id, home)
        profile_name = agent or conversation.agent
        switching = bool(agent) and agent != conversation.agent
        if profile_name:
            profile = find_profile(settings, profile_name,
                                   session=None if agent else session_id)
            if switching:
                provider, model = provider or profile.provider, model or profile.model
            settings = settings_for(settings, profile_name)
        if switching:
            conversation.agent = profile_name
            conversation.system = settings.system or DEFAULT_SYSTEM
        name = provider or conversation.provider or settings.provider
        same = name == conversation.provider
        chosen = get_provider(name, settings)
        model = model or (conversation.model if same else None) or settings.model or \
            _default_model(chosen)
        conversation.provider, conversation.model = name, model
        made = cls._make(settings, chosen, model, conversation, toolbox, home, events, workdir)
        made.saved = not switching  # a new profile is saved with the next turn
        made._on_disk = session_version(session_id, home)
        return made

    @classmethod
    def _make(cls, settings, provider, model, conversation, toolbox, home, events,
              workdir=None) -> Agent:
        home = home or silica_home()
        info = provider.model_info(model)
        toolbox = toolbox or Toolbox(cwd=workdir, settings=settings, image_limits=info.limits)
        store = open_image_store(home, conversation.id, settings)
        return cls(settings, provider, model, conversation, toolbox, store, home,
                   events or AgentEvents(), turn_lock=TurnLock(conversation.id, home),
                   tool_rule=tool_rule(settings, conversation.agent))

    @property
    def info(self) -> ModelInfo:
        return self.provider.model_info(self.model)

    # -- the session's surroundings: workspace, approval, events, turn ----------------------

    @property
    def workspace(self) -> Path:
        """The folder the session's tools run in (and their ``SILICA_WORKDIR``)."""
        return self.toolbox.cwd

    def set_workspace(self, folder: Path) -> None:
        """Run the session's tools in ``folder`` from now on; the approval callback stays.
        Tools are found again there at the next turn."""
        folder = Path(folder).resolve()
        if self.toolbox.cwd == folder:
            return
        approve, elicit = self.toolbox.approve, self.toolbox.elicit
        self.toolbox = Toolbox(cwd=folder, settings=self.settings,
                               image_limits=self.info.limits)
        self.toolbox.approve, self.toolbox.elicit = approve, elicit

    @property
    def approve(self) -> Approve | None:
        """Who approves a built-in's command (the shell tool): an async callable given the
        command, answering True, False or a reason to refuse; None: nobody is asked."""
        return self.toolbox.approve

    @approve.setter
    def approve(self, approve: Approve | None) -> None:
        self.toolbox.approve = approve

    @property
    def elicit(self) -> Asker | None:
        """Who answers a tool's request for values (``silica.elicitation``): an MCP server's
        elicitation during a call; None: nobody is asked, every request is declined."""
        return self.toolbox.elicit

    @elicit.setter
    def elicit(self, elicit: Asker | None) -> None:
        self.toolbox.elicit = elicit

    def listen(self, events: AgentEvents) -> None:
        """Send the loop's events (text, tool calls and results) to ``events`` from now on."""
        self.events = events

    def on(self, event: str, callback: Callable[..., None] | None) -> None:
        """Set one callback of ``AgentEvents`` by its short name (``"text"`` for
        ``on_text``); None stops it."""
        name = f"on_{event}"
        if name not in AgentEvents.__dataclass_fields__:
            raise ValueError(f"no event {event!r}: one of "
                             + ", ".join(f[3:] for f in AgentEvents.__dataclass_fields__))
        setattr(self.events, name, callback)

    @property
    def new_session(self) -> bool:
        """Whether this agent started the session (``start``), rather than resumed it."""
        return self.started_here

    def keep(self) -> None:
        """Keep the session even if the model never answers (``forget_if_unanswered`` leaves
        it): a session saved on purpose, e.g. one a server made for a person to use."""
        self.started_here = False

    def claim_turn(self) -> None:
        """Hold the session's turn lock until ``release_turn`` (``SessionBusy`` if a turn of
        the session runs elsewhere); ``send`` inside still works (the lock is reentrant)."""
        self._lock().acquire()

    def release_turn(self) -> None:
        self._lock().release()

    @contextlib.contextmanager
    def turn(self) -> Iterator[Agent]:
        """``with agent.turn():`` owns the session's turn from here to the block's end."""
        self.claim_turn()
        try:
            yield self
        finally:
            self.release_turn()

    def _lock(self) -> TurnLock:
        if self.turn_lock is None:
            self.turn_lock = TurnLock(self.conversation.id, self.home)
        return self.turn_lock

    # -- the loop -----------------------------------------------------------------------

    async def send(self, text: str,
                   images: Sequence[Path | ImageBlock | ImageRefBlock] = ()) -> str:
        """Send a person's message; run model and tools until the model answers.

        ``images`` are files to read and check, ``ImageBlock``s already checked and fitted
        (an upload, a fetched URL), or ``ImageRefBlock``s already in this session's
        ``store``. ``usage`` holds what the turn cost when it ends. The session's turn lock
        is held until this returns.

        Returns the model's final text. Raises ``ProviderError`` (the session is saved up to
        the failed request), ``TurnLimitReached``, ``SessionError`` when the session cannot
        be saved (the conversation in memory stays valid), ``SessionBusy`` when a turn of
        the session runs elsewhere, or ``SilicaError`` for an unusable image or a
        ``max_turns`` under 1 (for these three, nothing is sent or saved).
        """
        if self.settings.max_turns < 1:  # model_copy skips validation: check it here
            raise SilicaError(f"max_turns must be 1 or more, not {self.settings.max_turns}")
        if not self._warmed:  # the SDK is imported in a thread while the tools are found
            self._warmed = True
            warm_up(self.provider)
            tune_allocator()  # before the turn's large buffers
        with self._lock():
            self.catch_up()
            try:
                return await self._send(text, images)
            finally:
                release_memory()

    def catch_up(self) -> None:
        """Read the session back if someone else saved a turn of it since this agent last
        saved or loaded it (``session_version`` changes with each save)."""
        if self._on_disk is None:
            return
        now = session_version(self.conversation.id, self.home)
        if now is None or now == self._on_disk:
            return  # unchanged, or removed (the next save writes it again)
        conversation = load_session(self.conversation.id, self.home)
        conversation.provider = self.conversation.provider
        conversation.model = self.conversation.model
        conversation.agent = self.conversation.agent  # this agent's profile, and its prompt
        conversation.system = self.conversation.system
        self.conversation, self._on_disk, self.saved = conversation, now, True

    async def _send(self, text: str, images: Sequence[Path | ImageBlock | ImageRefBlock]) -> str:
        if answer_every_call(self.conversation):  # a turn that failed half-way
            self.saved = False
        content: list = [TextBlock(text=text)] if text else []
        content.extend(image if isinstance(image, ImageBlock | ImageRefBlock)
                       else self._user_image(image) for image in images)
        self.usage, self.last_reply = Usage(), None
        await self.toolbox.adiscover()  # once per Toolbox; later requests reuse it
        self.conversation.add("user", self.store.put_message(content), new_turn=True)
        self._save()
        for _ in range(self.settings.max_turns):
            # images are re-fitted with Pillow here: off the event loop, which serves others
            request = await asyncio.to_thread(self._request)
            reply = await self.provider.complete(request, self.events.on_text)
            self.usage, self.last_reply = self.usage + reply.usage, reply
            said: list = [TextBlock(text=reply.text)] if reply.text else []
            self.conversation.add("assistant", said + list(reply.tool_calls),
                                  usage=reply.usage.model_dump(),
                                  stop_reason=reply.stop_reason or None)
            # off the event loop: the reply's last events go out to listeners meanwhile
            await asyncio.to_thread(self._save)
            if not reply.tool_calls:
                return reply.text
            await self._run_tools(reply.tool_calls)
        raise TurnLimitReached(
            f"the model was still calling tools after "
            f"{counted(self.settings.max_turns, 'request')}; "
            "the session is saved: resume it, or raise max_turns in config.toml")

    def _request(self) -> Request:
        request = build_request(self.conversation, self.store, model=self.model,
                                info=self.info, aging=self.settings.aging,
                                tools=self.tool_rule.offered(self.toolbox.specs()),
                                system=self.conversation.system,
                                max_tokens=self.settings.max_tokens)
        return request.model_copy(update={"messages": _merge_same_role(request.messages)})

    async def _run_tools(self, calls: list[ToolCall]) -> None:
        tasks = [asyncio.ensure_future(self._call(call)) for call in calls]
        try:
            results = await asyncio.gather(*tasks)
        except (asyncio.CancelledError, KeyboardInterrupt):
            for task in tasks:
                task.cancel()
            results = [_finished_or_interrupted(task) for task in tasks]
            self._answer(calls, results)
            raise
        self._answer(calls, results)

    async def _call(self, call: ToolCall) -> ToolResult:
        current_call.set(call)  # this call's own task: no other call sees it
        try:
            if self.events.on_tool_call:
                self.events.on_tool_call(call)
            if not self.tool_rule.allows(call.name):  # never offered: refused, not run
                return ToolResult.error(self.tool_rule.refusal(call.name))
            return await self.toolbox.acall(call.name, call.arguments)
        except Exception as exc:  # a bug must not leave the call unanswered
            return ToolResult.error(f"[the tool call failed inside silica: "
                                    f"{type(exc).__name__}: {exc}]")

    def _answer(self, calls: list[ToolCall], results: list[ToolResult]) -> None:
        """Every call answered in one user message, then saved; the events see each result
        (a failing view does not stop the save)."""
        kept = [self._keep(call, result) for call, result in zip(calls, results, strict=True)]
        self.conversation.add("user", [
            ToolResultBlock(call_id=call.id, name=call.name, is_error=result.is_error,
                            content=k.content)
            for call, result, k in zip(calls, results, kept, strict=True)])
        self.saved = False
        on_result, on_note = self.events.on_tool_result, self.events.on_tool_note
        try:
            for call, result, k in zip(calls, results, kept, strict=True):
                if on_result:
                    on_result(call, result, k.images)
                if on_note:
                    for note in k.notes:
                        on_note(call, note)
        finally:
            self._save()

    def _keep(self, call: ToolCall, result: ToolResult) -> Kept:
        try:
            return keep_result(result, name=call.name, store=self.store,
                               folder=session_folder(self.conversation.id, self.home),
                               max_chars=self.settings.max_result_chars)
        except Exception as exc:  # the answer must exist, even if only as an error
            problem = f"[the result could not be kept: {type(exc).__name__}: {exc}]"
            return Kept(content=[TextBlock(text=problem)], images=[None] * len(result.images),
                        notes=[problem.strip("[]")])

    def _user_image(self, path: Path) -> ImageBlock:
        """A person's image file, through the one intake of a person's image (the limit,
        checks and wording of a URL or an upload: ``silica.images.intake``)."""
        from silica.images.intake import read_image_file

        return read_image_file(Path(path), limits=self.info.limits,
                               max_bytes=self.settings.images.max_size_bytes)

    def save(self) -> str:
        """Save the session now; returns its new version (``session_version``).
        ``SessionError`` (and ``saved`` false) if it cannot be saved."""
        self.saved = False
        version = save_session(self.conversation, self.home)
        self.saved = True
        self._on_disk = version
        return version

    def _save(self) -> None:
        self.save()

    def forget_if_unanswered(self) -> bool:
        """Remove the session if it was started here and the model never answered: nothing
        in it is worth resuming. Whether it was removed (a resumed session never is)."""
        if not self.started_here or any(m.role == "assistant"
                                        for m in self.conversation.messages):
            return False
        with contextlib.suppress(SilicaError):
            delete_session(self.conversation.id, self.home, missing_ok=True)
        self.saved = False
        return True


def _default_model(provider: Provider) -> str:
    from silica.providers.models import DEFAULT_MODELS

    return DEFAULT_MODELS.get(provider.name, "")


def _finished_or_interrupted(task: asyncio.Future) -> ToolResult:
    if task.done() and not task.cancelled():
        with contextlib.suppress(Exception):
            return task.result()
    return ToolResult.error(INTERRUPTED)


def _merge_same_role(messages: list[RequestMessage]) -> list[RequestMessage]:
    """Providers want roles to alternate; a request left unanswered (a provider error, then
    a new message) would put two user messages in a row, so they are joined."""
    merged: list[RequestMessage] = []
    for message in messages:
        if merged and merged[-1].role == message.role:
            merged[-1] = RequestMessage(role=message.role,
                                        content=[*merged[-1].content, *message.content])
        else:
            merged.append(message)
    return merged
