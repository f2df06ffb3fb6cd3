"""``silica ask`` and ``silica chat``: the agent with the auto-discovered tools."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter
from rich.text import Text

from silica.cli.output import err, fail, out


def _settings(provider: str | None, model: str | None, max_turns: int | None):
    from silica.config import load_settings

    settings = load_settings()
    changes = {k: v for k, v in (("provider", provider), ("model", model),
                                 ("max_turns", max_turns)) if v is not None}
    return settings.model_copy(update=changes)


def _events():
    from silica.agent.loop import AgentEvents
    from silica.cli.show import describe_image
    from silica.cli.terminal import kitty_image, kitty_supported

    inline = kitty_supported(__import__("os").environ, sys.stdout.isatty())

    def on_text(piece: str) -> None:
        out.file.write(piece)
        out.file.flush()

    def on_tool_call(call) -> None:
        args = json.dumps(call.arguments, ensure_ascii=False)
        args = args if len(args) <= 200 else args[:197] + "..."
        err.print(Text.assemble(("\n→ ", "cyan"), (call.name, "bold"), f" {args}"))

    def on_tool_result(call, result, paths) -> None:
        style = "red" if result.is_error else "green"
        words = result.text.strip().splitlines()
        first = words[0][:160] if words else ""
        err.print(Text.assemble(("  ← ", style), f"{call.name}: ", first))
        for image, path in zip(result.images, paths, strict=False):
            if inline:
                out.file.write(kitty_image(image.data) + "\n")
            err.print("  " + describe_image(image, path), markup=False)

    return AgentEvents(on_text=on_text, on_tool_call=on_tool_call,
                       on_tool_result=on_tool_result)


async def _turn(agent, text: str, images: list[Path]) -> str:
    answer = await agent.send(text, images)
    out.file.write("\n")
    out.file.flush()
    return answer


def _run_turn(agent, text: str, images: list[Path]) -> bool:
    """One turn; False if it failed (the error is printed, the session kept)."""
    from silica.errors import SilicaError

    try:
        asyncio.run(_turn(agent, text, images))
    except SilicaError as exc:
        err.print(Text.assemble(("\nerror: ", "bold red"), str(exc)))
        return False
    return True


def ask(
    prompt: str,
    *,
    image: Annotated[list[Path] | None, Parameter(name="--image")] = None,
    provider: str | None = None,
    model: str | None = None,
    max_turns: int | None = None,
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
        How many model requests one question may take.
    """
    from silica.agent.loop import Agent
    from silica.errors import SilicaError

    try:
        agent = Agent.start(_settings(provider, model, max_turns), events=_events())
    except SilicaError as exc:
        fail(str(exc))
    ok = _run_turn(agent, prompt, image or [])
    err.print(f"session {agent.conversation.id} (continue: silica chat --resume "
              f"{agent.conversation.id})", markup=False, style="dim")
    if not ok:
        raise SystemExit(1)


def chat(
    *,
    resume: str | None = None,
    image: Annotated[list[Path] | None, Parameter(name="--image")] = None,
    provider: str | None = None,
    model: str | None = None,
    max_turns: int | None = None,
):
    """Talk with the model and your tools; /exit or Ctrl-D ends, Ctrl-C stops a turn.

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
        How many model requests one message may take.
    """
    from silica.agent.loop import Agent
    from silica.errors import SilicaError

    settings = _settings(None, None, max_turns)
    try:
        if resume:
            agent = Agent.resume(resume, settings, provider=provider, model=model,
                                 events=_events())
        else:
            agent = Agent.start(settings.model_copy(update={
                k: v for k, v in (("provider", provider), ("model", model)) if v}),
                events=_events())
    except SilicaError as exc:
        fail(str(exc))
    err.print(f"silica chat: {agent.provider.name} {agent.model}, session "
              f"{agent.conversation.id}; /exit to leave", markup=False, style="dim")
    pending = list(image or [])
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            err.print("")
            break
        if line.strip() in ("/exit", "/quit"):
            break
        if not line.strip():
            continue
        try:
            _run_turn(agent, line, pending)
        except KeyboardInterrupt:
            err.print("\n[turn interrupted; every tool call in it was answered]",
                      markup=False)
        pending = []
    err.print(f"session {agent.conversation.id} saved", markup=False, style="dim")
