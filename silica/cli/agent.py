"""``silica ask`` and ``silica chat``: the agent with the auto-discovered tools."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, NoReturn

from cyclopts import Parameter
from rich.text import Text

from silica.cli.output import err, fail, out, plain, print_json, say
from silica.cli.show import ImagesFlag, describe_image, draw_image, images_setting
from silica.cli.transcript import call_line, replay, summary
from silica.security.text import safe_text

CHAT_COMMANDS = {
    "/help": "list these commands",
    "/exit": "save the session and leave (so does Ctrl-D)",
    "/quit": "the same as /exit",
}
"""What a chat line can be besides a message; Ctrl-C stops the turn that is running."""

_COMMAND = re.compile(r"^/[A-Za-z]+$")  # "/etc/hosts?" is a message, "/hlep" a typo


AllowShell = Annotated[bool, Parameter(name="--allow-shell", negative="", help=(
    "Offer the model the shell tool and let every command it gives run without asking "
    "(for this run only; see [shell] in config.toml for a narrower choice)."))]


AcceptDefaults = Annotated[bool, Parameter(name=["--yes", "-y"], negative="", help=(
    "When an MCP server's tool asks for input, accept the defaults of its form (declined "
    "when a required field has none); without it such requests are declined, unless "
    "[mcp] elicitation = \"defaults\" in config.toml."))]


AgentName = Annotated[str | None, Parameter(name="--agent", help=(
    "A profile from config.toml ([agents.NAME]): its provider, model, vision, system prompt "
    "and the tools it may use; --provider and --model still win."))]


def _settings(max_turns: int | None, allow_shell: bool = False):
    from silica.config import load_settings
    from silica.images.store import check_image_store

    if max_turns is not None and max_turns < 1:
        fail(f"--max-turns must be 1 or more (the model requests one message may take), "
             f"not {max_turns}", 2)
    settings = load_settings()
    check_image_store(settings)  # an object store that cannot be used is said now, once
    changes: dict = {"max_turns": max_turns} if max_turns is not None else {}
    if allow_shell:  # "*" alone allows every command (silica.tools.shell)
        changes["shell"] = settings.shell.model_copy(update={"enabled": True, "allow": ["*"]})
    return settings.model_copy(update=changes)


async def _ask_to_run(command: str) -> bool | str:
    """The chat's answer to the shell tool: ask the person on the terminal. True, False, or
    the pattern to allow from now on ("always"). No answer (end of input) is no."""
    from silica.tools.shell import always_pattern

    pattern = always_pattern(command)
    # The pattern is the model's text too (its program words): made safe like the command.
    always = plain(f" / [a]lways for `{pattern}`") if pattern else ""
    while True:
        err.print(Text.assemble(("  ? ", "yellow"), "run ", plain(f"`{command}`", "bold"),
                                "? [y]es / [n]o", always, " "), end="")
        try:
            # On the loop, not in a thread: Ctrl-C here stops the turn like anywhere else.
            answer = input().strip().lower()
        except EOFError:
            err.print("")
            return False
        if answer in ("y", "yes"):
            return True
        if answer in ("n", "no"):
            return False
        if pattern and answer in ("a", "always"):
            return pattern


class AgentView:
    """The loop as the person sees it: the model's words on stdout, tools on stderr.

    The model's text pieces on either side of a tool call are kept apart by a newline, so
    stdout reads as lines even when it is a file. Images (a tool's, the person's) are drawn
    on stdout as ``images`` (``[display] images``) says, each described on stderr.
    """

    def __init__(self, images: str = "auto") -> None:
        self.images = images
        self.line_open = False  # stdout holds text not yet ended by a newline
        self.tool_since_text = False

    def events(self):
        from silica.agent.loop import AgentEvents

        return AgentEvents(on_text=self.on_text, on_tool_call=self.on_tool_call,
                           on_tool_result=self.on_tool_result, on_tool_note=self.on_tool_note)

    def on_text(self, piece: str) -> None:
        if not piece:
            return
        if self.tool_since_text and self.line_open:
            out.file.write("\n")
        self.tool_since_text = False
        out.file.write(safe_text(piece))  # the model's words, maybe quoting a tool's
        out.file.flush()
        self.line_open = not piece.endswith("\n")

    def end_turn(self) -> None:
        """End the answer's line (once), after a turn or a failed one."""
        if self.line_open:
            out.file.write("\n")
            out.file.flush()
        self.line_open = self.tool_since_text = False

    def on_tool_call(self, call) -> None:
        self.tool_since_text = True
        name, args = call_line(call).split(" ", 1)
        err.print(Text.assemble(("\n→ ", "cyan"), plain(name, "bold"), plain(f" {args}")))

    def on_tool_result(self, call, result, paths) -> None:
        from silica.blocks import for_user

        style = "red" if result.is_error else "green"
        err.print(Text.assemble(("  ← ", style), plain(f"{call.name}: {summary(result.blocks)}")))
        for image, path in zip(result.images, paths, strict=False):
            if not for_user(image):  # for the model only
                continue
            self.show_image(image, path)

    def show_image(self, image, path: Path | None = None) -> None:
        """Draw ``image`` (an ``ImageBlock``) and describe it beneath."""
        draw_image(out, self.images, image.data)
        say("  " + describe_image(image, path), console=err)

    def on_tool_note(self, call, note: str) -> None:
        err.print(Text.assemble(("  ! ", "yellow"), plain(f"{call.name}: {note}")))


def _run_turn(runner: asyncio.Runner, agent, view: AgentView, text: str,
              images: list[str]) -> bool:
    """One turn on the session's event loop (``runner``: every turn of a session shares it,
    and so the provider's client and its connections); False if it failed (the error is
    printed, the session kept)."""
    from silica.errors import SilicaError

    async def turn() -> None:
        most = agent.settings.images.max_per_message
        if len(images) > most:
            raise SilicaError(f"{len(images)} images given, more than the {most} one message "
                              "may carry ([images] max_per_message); attach fewer")
        attached = [await _attachment(agent, image) for image in images]
        for block in attached:
            view.show_image(block)
        await agent.send(text, attached)

    try:
        runner.run(turn())
    except SilicaError as exc:
        view.end_turn()
        err.print(Text.assemble(("error: ", "bold red"), plain(exc)))
        return False
    view.end_turn()
    return True


@contextlib.contextmanager
def _session_loop() -> Iterator[asyncio.Runner]:
    """The one event loop of an ``ask`` or ``chat`` session; at its end the providers'
    clients made on it are closed, while the loop still runs."""
    from silica.providers.clients import close_all

    with asyncio.Runner() as runner:
        try:
            yield runner
        finally:
            with contextlib.suppress(Exception, KeyboardInterrupt):
                runner.run(close_all())


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


async def _attachment(agent, image: str):
    """An ``--image`` as a checked ``ImageBlock``: a file, read and checked as the agent
    reads a person's file, or an http(s) URL fetched and checked here as ``silica serve``
    does (``[serve] fetch_private``, ``fetch_timeout``; ``[images] max_size_bytes``)."""
    from silica.images.intake import prepare_upload, read_image_file

    settings = agent.settings
    if not _URL.match(image):
        return await asyncio.to_thread(read_image_file, Path(image), limits=agent.info.limits,
                                       max_bytes=settings.images.max_size_bytes)
    from silica.images.fetch import fetch_image, shown_url

    fetched = await fetch_image(image, max_bytes=settings.images.max_size_bytes,
                                timeout=settings.serve.fetch_timeout,
                                allow_private=settings.serve.fetch_private)
    return await asyncio.to_thread(
        prepare_upload, fetched.data, name=fetched.name, declared=fetched.mime,
        limits=agent.info.limits, max_bytes=settings.images.max_size_bytes,
        label=f"the image at {shown_url(image)}")


def _start(settings, resume: str | None = None, agent: str | None = None,
           provider: str | None = None, model: str | None = None,
           images: bool | None = None):
    from silica.agent.loop import Agent
    from silica.agent.sessions import open_sessions

    open_sessions()  # an unusable sessions database: one line, before anything is asked
    view = AgentView(images_setting(images, settings))
    if resume:
        return Agent.resume(resume, settings, agent=agent, provider=provider, model=model,
                            events=view.events()), view
    return Agent.start(settings, agent=agent, provider=provider, model=model,
                       events=view.events()), view


def _closing(agent) -> None:
    """At the end of a chat, say what became of the session: removed (the model never
    answered), saved (tried once more if the last save failed), or not saved (exit 1)."""
    from silica.errors import SilicaError

    session = agent.conversation.id
    if agent.forget_if_unanswered():
        say("nothing saved: the model did not answer", console=err, style="dim")
        return
    if not agent.saved:
        try:
            agent.save()
        except SilicaError as exc:
            raise SilicaError(f"session {session} was not saved: {exc}") from exc
    say(f"session {session} saved", console=err, style="dim")


def ask(
    prompt: str,
    *,
    image: Annotated[list[str] | None, Parameter(name="--image", negative="")] = None,
    agent_: AgentName = None,
    provider: str | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    allow_shell: AllowShell = False,
    yes: AcceptDefaults = False,
    json_: Annotated[bool, Parameter(name="--json", negative="")] = False,
    images: ImagesFlag = None,
):
    """Ask once: the model uses your tools as it needs, then answers.

    Parameters
    ----------
    prompt
        What to ask.
    image
        An image file, or an http(s) URL of one, to attach to the message (may be given
        several times).
    provider
        anthropic, openai, openai-responses, gemini or ollama (default: the agent
        profile, config, then anthropic).
    model
        The model name (default: config, then the provider's default).
    max_turns
        How many model requests one question may take (1 or more).
    json_
        Print one JSON object on stdout when done instead of streaming the answer:
        ``answer`` (null if the turn failed), ``session`` (null if nothing was saved),
        ``stop_reason`` and ``usage`` (input, output, cache-read and cache-write tokens of
        every request of the turn).
    """
    # No one answers a prompt here: a shell command outside [shell] allow is refused, and
    # an MCP server's request for input is declined (or given its defaults: --yes).
    settings = _settings(max_turns, allow_shell)
    agent, view = _start(settings, agent=agent_, provider=provider, model=model,
                         images=images)
    from silica.cli.elicit import unattended_asker

    agent.elicit = unattended_asker("defaults" if yes else settings.mcp.elicitation)
    if json_:  # stdout holds the JSON alone
        agent.on("text", None)
        view.images = "off"
    with _session_loop() as runner:
        ok = _run_turn(runner, agent, view, prompt, image or [])
    session = agent.conversation.id
    forgotten = agent.forget_if_unanswered()
    if forgotten:  # a bad --image, no API key: nothing to resume
        say("nothing saved: the model did not answer", console=err, style="dim")
    elif agent.saved:  # a failed save was reported by the turn: no advice to resume it
        say(f"session {session} (continue: silica chat --resume {session})", console=err,
            style="dim")
    if json_:
        reply = agent.last_reply
        print_json({"answer": reply.text if ok and reply else None,
                    "session": None if forgotten or not agent.saved else session,
                    "stop_reason": reply.stop_reason if reply else None,
                    "usage": agent.usage.model_dump()})
    _leave(0 if ok and agent.saved else 1)


def chat(
    *,
    resume: str | None = None,
    image: Annotated[list[str] | None, Parameter(name="--image", negative="")] = None,
    agent_: AgentName = None,
    provider: str | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    allow_shell: AllowShell = False,
    images: ImagesFlag = None,
):
    """Talk with the model and your tools; /help lists the commands, /exit or Ctrl-D ends,
    Ctrl-C stops a turn.

    Parameters
    ----------
    resume
        A session id to continue (see silica sessions list).
    image
        An image file, or an http(s) URL of one, to attach to your first message.
    provider
        anthropic, openai, openai-responses, gemini or ollama.
    model
        The model name.
    max_turns
        How many model requests one message may take (1 or more).
    """
    settings = _settings(max_turns, allow_shell)
    agent, view = _start(settings, resume, agent_, provider, model, images)
    from silica.cli.elicit import terminal_asker
    from silica.tools.shell import SessionApproval

    agent.approve = SessionApproval(_ask_to_run)  # "always" lasts this session
    agent.elicit = terminal_asker(settings.mcp.elicitation_timeout)  # a form on the terminal
    profile = f", agent {agent.conversation.agent}" if agent.conversation.agent else ""
    say(f"silica chat: {agent.provider.name} {agent.model}{profile}, session "
        f"{agent.conversation.id}; /help for commands, /exit to leave", console=err,
        style="dim")
    if resume:
        replay(agent.conversation)
    pending = list(image or [])
    with _session_loop() as runner:
        while True:
            try:
                line = _next_line()
            except (EOFError, KeyboardInterrupt):
                err.print("")
                break
            command = line.strip()
            if command in ("/exit", "/quit"):
                break
            if command == "/help":
                _help()
                continue
            if _COMMAND.fullmatch(command):
                say(f"unknown command {command}; /help lists the commands", console=err)
                continue
            if not command:
                continue
            try:
                _run_turn(runner, agent, view, line, pending)
                _show_usage(agent.usage)
            except KeyboardInterrupt:
                view.end_turn()
                say("\nstopped (tools still running were stopped too); type your next "
                    "message, or /exit", console=err, style="dim")
            pending = []
    _closing(agent)
    _leave(0)


def _next_line() -> str:
    """The person's next message. Typed at a terminal, after the prompt ``you> ``; read from
    a pipe, it is written out whole after the prompt, on a line of its own, so a piped
    chat's output reads as a transcript (each reply under its message)."""
    if sys.stdin.isatty():
        return input("you> ")
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    line = line.rstrip("\r\n")
    out.file.write(f"you> {safe_text(line)}\n")
    out.file.flush()
    return line


def _leave(code: int) -> NoReturn:
    """End ``ask`` or ``chat`` with exit status ``code`` by ``SystemExit``: the exit
    handlers run (MCP servers are stopped) and no thread of silica's is left to wait for
    (they are daemons or joined, the session's clients closed); someone else's thread left
    running does not hold the exit (``_leave_now``). When silica is the program
    (``silica.cli.PROGRAM``), what is alive now is frozen out of the garbage collector
    first: an SDK's thousands of modules cost the interpreter's last collections about half
    a second and free nothing the process's end would not."""
    import gc
    import threading

    from silica import cli

    if cli.PROGRAM:
        gc.freeze()
        if any(not thread.daemon and thread is not threading.main_thread()
               for thread in threading.enumerate()):
            _leave_now(code)
    raise SystemExit(code)


def _leave_now(code: int) -> NoReturn:
    """End the process at once: a thread silica did not start (a plugin's, an SDK's) is
    still running, and the interpreter would wait for it before the exit handlers, perhaps
    forever. The session is saved by now; silica's own clean-up (its MCP servers) is done
    here, and what was printed is flushed."""
    from silica.mcp.connections import stop_all

    stop_all()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)


def usage_line(usage) -> str:
    """A turn's ``Usage`` in a few words: ``in 12,345 (cache read 10,000, write 1,200) ·
    out 321`` (the cache part only when the provider reported one); "" if it reported
    nothing."""
    if not any(usage.model_dump().values()):
        return ""
    cache = [f"{label} {n:,}" for label, n in (("cache read", usage.cache_read_tokens),
                                               ("write", usage.cache_write_tokens)) if n]
    if cache and not usage.cache_read_tokens:
        cache[0] = f"cache {cache[0]}"
    shown = f" ({', '.join(cache)})" if cache else ""
    return f"in {usage.input_tokens:,}{shown} · out {usage.output_tokens:,}"


def _show_usage(usage) -> None:
    line = usage_line(usage)
    if line:
        say(line, console=err, style="dim")


def _help() -> None:
    width = max(len(name) for name in CHAT_COMMANDS)
    lines = [f"  {name:<{width}}  {what}" for name, what in CHAT_COMMANDS.items()]
    say("\n".join(["commands:", *lines, "  Ctrl-C stops the turn that is running; "
                   "anything else is sent to the model"]), console=err)
