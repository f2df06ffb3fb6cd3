"""The agent's ``shell`` built-in tool: one ``/bin/sh -c`` line in the workspace, run as a
tool runs (``silica.tools.commands``), its images returned as images.

It is registered only when ``[shell] enabled`` (``--allow-shell`` on ``ask``/``chat``,
``silica mcp serve --shell``). Which commands run:

- one matching a pattern of ``[shell] allow`` (``allowed_by``) runs at once;
- any other is put to ``ToolContext.approve`` (the person, in ``chat``): no refuses it, a
  pattern (str) allows it and, through ``SessionApproval``, the rest of that pattern;
- with nobody to ask (``approve`` is ``None``: ``ask``, a host with ``[shell] allow`` set)
  it is refused, NOT run, with a result that says how to allow it.
"""

from __future__ import annotations

import asyncio
import fnmatch
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from silica.blocks import ToolResult
from silica.config import CONFIG_NAME, Settings, ShellSettings
from silica.images.limits import ANTHROPIC
from silica.paths import silica_home
from silica.tools.builtin import BuiltinTool, ToolContext

EVERYTHING = "*"  # the pattern alone allows every command (what --allow-shell sets)
# A match with these in the command but not in the pattern would let "chafa x; rm -rf ~"
# pass as "chafa *": such a command is asked about instead.
_OPERATORS = frozenset(";&|`$<>()\n\r")
_FIRST_WORD = re.compile(r"[^\s;&|`$<>()'\"\\]+")

Approve = Callable[[str], Awaitable[bool | str]]

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string",
                    "description": "The command line, run with /bin/sh -c in the workspace."},
        "timeout": {"type": "integer", "minimum": 1,
                    "description": "Seconds before it is stopped (default and most: the "
                                   "tools timeout)."},
    },
    "required": ["command"],
}


def allowed_by(command: str, patterns: list[str]) -> str | None:
    """The first of ``patterns`` that lets ``command`` run without asking, or ``None``.

    A pattern is matched (``fnmatch``, case-sensitive) against the whole command line with
    its outer blanks stripped; ``"*"`` alone matches every command. Any other pattern
    matches only if every shell operator in the command (``; & | ` $ < > ( )`` and line
    ends) is written in the pattern too."""
    line = command.strip()
    operators = _OPERATORS.intersection(line)
    for pattern in patterns:
        if pattern == EVERYTHING:
            return pattern
        if fnmatch.fnmatchcase(line, pattern) and operators <= set(pattern):
            return pattern
    return None


def always_pattern(command: str) -> str | None:
    """The pattern "always" adds for ``command``: its program name and `` *``
    (``"python plot.py 3"`` gives ``"python *"``); ``None`` if it has no plain first word."""
    found = _FIRST_WORD.match(command.strip())
    if found is None:
        return None
    word = re.sub(r"([*?\[])", r"[\1]", found.group())  # literal in fnmatch
    return f"{word} *"


class SessionApproval:
    """An ``approve`` callback that remembers: ``prompt(command)`` is asked (one prompt at
    a time) unless an earlier answer's pattern covers the command; a str answer is that
    pattern, allowed for the rest of this object's life. Calls return True or False."""

    def __init__(self, prompt: Approve) -> None:
        self.prompt = prompt
        self.patterns: list[str] = []
        self._lock = asyncio.Lock()

    async def __call__(self, command: str) -> bool:
        async with self._lock:
            if allowed_by(command, self.patterns):
                return True
            answer = await self.prompt(command)
            if isinstance(answer, str):
                self.patterns.append(answer)
                return True
            return bool(answer)


async def host_asks(command: str) -> bool:
    """The ``approve`` of an MCP server: the host asks its user before each call."""
    return True


def description(settings: ShellSettings, timeout: float) -> str:
    """What the model is told: how commands run, which run at once, that images work."""
    if EVERYTHING in settings.allow:
        who = "Every command runs without asking."
    elif settings.allow:
        shown = ", ".join(f"`{p}`" for p in settings.allow)
        who = (f"Commands matching these patterns run at once: {shown} (shell operators such "
               "as ; | && $( ) > count against a match). Any other command needs the user's "
               "approval and may be refused; prefer the allowed ones.")
    else:
        who = "Every command needs the user's approval and may be refused."
    return (
        "Run a shell command line (/bin/sh -c) in the workspace. stdin is closed; stdout "
        "comes back as text (stderr only when it fails); the command is stopped after its "
        f"timeout (at most {timeout:g} s), with every process it started. {who}\n\n"
        "Images work: a program that prints an image with kitty, iTerm2 or sixel escape "
        "sequences gives it to you as an image you can see (e.g. `chafa -f kitty "
        "picture.png`, or a script that writes one to stdout; $AGENT_GRAPHICS lists the "
        "protocols read).")


def refusal(command: str) -> str:
    """Why ``command`` was not run where nobody can approve it, and how to allow it."""
    example = always_pattern(command) or "program *"
    return (f"[refused: `{command}` was not run. It matches no pattern under [shell] allow "
            "and nobody can approve it here. To allow it: run silica with --allow-shell "
            f"(every command), or add a pattern such as \"{example}\" under [shell] allow in "
            f"{silica_home() / CONFIG_NAME}]")


async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    """The ``BuiltinTool.run`` of ``shell`` (see the module docstring)."""
    from silica.security.env import EnvPolicy, withhold_from_environment
    from silica.tools.commands import run_command

    started = time.monotonic()
    command = arguments.get("command")
    if not isinstance(command, str) or not command.strip():
        return ToolResult.error("command must be a non-empty string, e.g. \"ls -l\"")
    settings: Settings = context.settings
    limit = settings.tools.timeout
    asked = arguments.get("timeout", limit)
    if isinstance(asked, bool) or not isinstance(asked, int | float) or asked <= 0:
        return ToolResult.error("timeout must be a whole number of seconds above 0")
    if not allowed_by(command, settings.shell.allow):
        if context.approve is None:
            return ToolResult.error(refusal(command))
        if not await context.approve(command):
            return ToolResult.error(f"[refused: the user did not allow `{command}`; it was not "
                                    "run. Do not retry it: ask the user what to do instead]")
    # The call as a whole has the tools timeout; time spent asking comes out of it.
    left = limit - (time.monotonic() - started) - 1.0
    if left <= 0:
        return ToolResult.error(f"[`{command}` was not run: approving it took the call's "
                                f"whole time ({limit:g} s); ask for it again]")
    policy = EnvPolicy(withhold=(*withhold_from_environment(), *settings.tools.env_withhold))
    done = await run_command(command, cwd=context.workdir, timeout=min(float(asked), left),
                             policy=policy, image_limits=settings.images.apply(ANTHROPIC))
    return done.result


def shell_tool(settings: Settings) -> BuiltinTool:
    """The ``shell`` tool as ``settings`` describe it (its description names the patterns)."""
    return BuiltinTool(name="shell", description=description(settings.shell,
                                                             settings.tools.timeout),
                       input_schema=INPUT_SCHEMA, run=run)
