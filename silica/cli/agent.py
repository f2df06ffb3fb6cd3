"""``silica ask`` and ``silica chat``: the agent with the auto-discovered tools."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter
from rich.text import Text

from silica.cli.output import err, fail, out, plain, say
from silica.security.text import safe_text

CHAT_COMMANDS = {
    "/help": "list these commands",
    "/exit": "save the session and leave (so does Ctrl-D)",
    "/quit": "the same as /exit",
}
"""What a chat line can be besides a message; Ctrl-C stops the turn that is running."""

_COMMAND = re.compile(r"^/[A-Za-z]+$")  # "/etc/hosts?" is a message, "/hlep" a typo
_FIRST_WORDS = re.compile(r"\S")
_SHOWN = 160  # characters of a result's first line shown after its tool call


AllowShell = Annotated[bool, Parameter(name="--allow-shell", negative="", help=(
    "Offer the model the shell tool and let every command it gives run without asking "
    "(for this run only; see [shell] in config.toml for a narrower choice)."))]


def _settings(provider: str | None, model: str | None, max_turns: int | None,
              allow_shell: bool = False):
    from silica.config import load_settings
    from silica.errors import SilicaError

    if max_turns is not None and max_turns < 1:
        fail(f"--max-turns must be 1 or more (the model requests one message may take), "
             f"not {max_turns}", 2)
    try:
        settings = load_settings()
    except SilicaError as exc:
        fail(str(exc))
    changes = {k: v for k, v in (("provider", provider), ("model", model),
                                 ("max_turns", max_turns)) if v is not None}
    if allow_shell:  # "*" alone allows every command (silica.tools.shell)
        changes["shell"] = settings.shell.model_copy(update={"enabled": True, "allow": ["*"]})
    return settings.model_copy(update=changes)


async def _ask_to_run(command: str) -> bool | str:
    """The chat's answer to the shell tool: ask the person on the terminal. True, False, or
    the pattern to allow from now on ("always"). No answer (end of input) is no."""
    from silica.tools.shell import always_pattern

    pattern = always_pattern(command)
    always = f" / [a]lways for `{pattern}`" if pattern else ""
    while True:
        err.print(Text.assemble(("  ? ", "yellow"), "run ", plain(f"`{command}`", "bold"),
                                f"? [y]es / [n]o{always} "), end="")
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
    stdout reads as lines even when it is a file.
    """

    def __init__(self) -> None:
        self.inline = _kitty_supported()
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
        args = json.dumps(call.arguments, ensure_ascii=False)
        args = args if len(args) <= 200 else args[:197] + "..."
        err.print(Text.assemble(("\n→ ", "cyan"), plain(call.name, "bold"),
                                plain(f" {args}")))

    def on_tool_result(self, call, result, paths) -> None:
        from silica.blocks import for_user
        from silica.cli.show import describe_image
        from silica.cli.terminal import kitty_image

        style = "red" if result.is_error else "green"
        err.print(Text.assemble(("  ← ", style), plain(f"{call.name}: {_first_line(result)}")))
        for image, path in zip(result.images, paths, strict=False):
            if not for_user(image):  # for the model only
                continue
            if self.inline:
                out.file.write(kitty_image(image.data) + "\n")
            say("  " + describe_image(image, path), console=err)

    def on_tool_note(self, call, note: str) -> None:
        err.print(Text.assemble(("  ! ", "yellow"), plain(f"{call.name}: {note}")))


def _kitty_supported() -> bool:
    from silica.cli.terminal import kitty_supported

    return kitty_supported(os.environ, sys.stdout.isatty())


def _first_line(result) -> str:
    """The first non-blank line of ``result``'s text shown to the person (text for the model
    only is skipped), at most ``_SHOWN`` characters; cheap for any size of output (nothing
    past it is read)."""
    from silica.agent.results import compact_undecodable
    from silica.blocks import TextBlock, for_user

    for block in result.blocks:
        if not isinstance(block, TextBlock) or not for_user(block):
            continue
        found = _FIRST_WORDS.search(block.text)
        if found:
            line = block.text[found.start():found.start() + 4 * _SHOWN].split("\n", 1)[0]
            return compact_undecodable(line)[:_SHOWN]
    return ""


def _run_turn(agent, view: AgentView, text: str, images: list[Path]) -> bool:
    """One turn; False if it failed (the error is printed, the session kept)."""
    from silica.errors import SilicaError

    try:
        asyncio.run(agent.send(text, images))
    except SilicaError as exc:
        view.end_turn()
        err.print(Text.assemble(("error: ", "bold red"), plain(exc)))
        return False
    view.end_turn()
    return True


def _start(settings, resume: str | None = None, provider: str | None = None,
           model: str | None = None):
    from silica.agent.loop import Agent
    from silica.errors import SilicaError

    view = AgentView()
    try:
        if resume:
            return Agent.resume(resume, settings, provider=provider, model=model,
                                events=view.events()), view
        return Agent.start(settings, events=view.events()), view
    except SilicaError as exc:
        fail(str(exc))


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
            fail(f"session {session} was not saved: {exc}")
    say(f"session {session} saved", console=err, style="dim")


def ask(
    prompt: str,
    *,
    image: Annotated[list[Path] | None, Parameter(name="--image")] = None,
    provider: str | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    allow_shell: AllowShell = False,
):
    """Ask once: the model uses your tools as it needs, then answers.

    Parameters
    ----------
    prompt
        What to ask.
    image
        An image file to attach to the message (may be given several times).
    provider
        anthropic, openai or ollama (default: config, then anthropic).
    model
        The model name (default: config, then the provider's default).
    max_turns
        How many model requests one question may take (1 or more).
    """
    # No one answers a prompt here: a shell command outside [shell] allow is refused.
    agent, view = _start(_settings(provider, model, max_turns, allow_shell))
    ok = _run_turn(agent, view, prompt, image or [])
    session = agent.conversation.id
    if agent.forget_if_unanswered():  # a bad --image, no API key: nothing to resume
        say("nothing saved: the model did not answer", console=err, style="dim")
    elif agent.saved:  # a failed save was reported by the turn: no advice to resume it
        say(f"session {session} (continue: silica chat --resume {session})", console=err,
            style="dim")
    if not ok or not agent.saved:
        raise SystemExit(1)


def chat(
    *,
    resume: str | None = None,
    image: Annotated[list[Path] | None, Parameter(name="--image")] = None,
    provider: str | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    allow_shell: AllowShell = False,
):
    """Talk with the model and your tools; /help lists the commands, /exit or Ctrl-D ends,
    Ctrl-C stops a turn.

    Parameters
    ----------
    resume
        A session id to continue (see silica sessions list).
    image
        An image file to attach to your first message.
    provider
        anthropic, openai or ollama.
    model
        The model name.
    max_turns
        How many model requests one message may take (1 or more).
    """
    settings = _settings(None, None, max_turns, allow_shell)
    if not resume:
        settings = settings.model_copy(update={
            k: v for k, v in (("provider", provider), ("model", model)) if v})
    agent, view = _start(settings, resume, provider, model)
    from silica.tools.shell import SessionApproval

    agent.toolbox.approve = SessionApproval(_ask_to_run)  # "always" lasts this session
    say(f"silica chat: {agent.provider.name} {agent.model}, session "
        f"{agent.conversation.id}; /help for commands, /exit to leave", console=err,
        style="dim")
    pending = list(image or [])
    while True:
        try:
            line = input("you> ")
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
            _run_turn(agent, view, line, pending)
        except KeyboardInterrupt:
            view.end_turn()
            err.print("\n[turn interrupted; every tool call in it was answered]",
                      markup=False)
        pending = []
    _closing(agent)


def _help() -> None:
    width = max(len(name) for name in CHAT_COMMANDS)
    lines = [f"  {name:<{width}}  {what}" for name, what in CHAT_COMMANDS.items()]
    say("\n".join(["commands:", *lines, "  Ctrl-C stops the turn that is running; "
                   "anything else is sent to the model"]), console=err)
