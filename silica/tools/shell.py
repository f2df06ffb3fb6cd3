"""The agent's ``shell`` built-in tool: one ``/bin/sh -c`` line in the workspace, run as a
tool runs (``silica.tools.commands``), its images returned as images.

It is registered only when ``[shell] enabled`` (``--allow-shell`` on ``ask``/``chat``,
``silica mcp serve --shell``). Which commands run:

- one matching a pattern of ``[shell] allow`` (``allowed_by``) runs at once;
- any other is put to ``ToolContext.approve`` (the person: in ``chat`` at the terminal, in
  ``serve`` on the page or the API, ``silica.serve.approvals``): no refuses it, a pattern
  (str) allows it and, through ``SessionApproval``, the rest of that pattern; the call's
  clock stops while the person is asked;
- with nobody to ask (``approve`` is ``None``: ``ask``, a host with ``[shell] allow`` set)
  it is refused, NOT run, with a result that says how to allow it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from silica.blocks import ToolResult
from silica.config import CONFIG_NAME, Settings, ShellSettings
from silica.images.limits import ANTHROPIC
from silica.paths import cache_dir, silica_home
from silica.security.sandbox import SandboxPolicy
from silica.tools.builtin import BuiltinTool, ToolContext
from silica.tools.confined import Sandboxed

EVERYTHING = "*"  # the pattern alone allows every command (what --allow-shell sets)

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

    ``"*"`` alone allows every command, and a pattern that is the command itself (outer
    blanks aside) allows it. Otherwise both are read as ``/bin/sh`` reads them
    (``silica.security.shell_syntax``) and the command must be an instance of the pattern:
    the same pipelines and list operators (``|``, ``;``, ``&``, ``&&``, ``||``), each simple
    command matched against the pattern's at its place, word by word (``fnmatch``,
    case-sensitive; a ``*`` word stands for one or more words), with the same redirections
    and here-documents; a ``$(...)``, backquote, arithmetic or ``${...}`` expansion only where
    the pattern has the same text. A command the parser cannot vouch for (compound
    commands, bash-only syntax, unparseable text) matches nothing but ``"*"``."""
    from silica.security.shell_syntax import CommandLine, matches, parse, parse_pattern

    line = command.strip()
    parsed: CommandLine | None = None
    read = False  # the command is parsed once, and only if a pattern needs it
    for pattern in patterns:
        if pattern == EVERYTHING or (line and pattern.strip() == line):
            return pattern
        if not read:
            parsed, read = parse(line), True
        shape = parse_pattern(pattern.strip())
        if parsed is not None and shape is not None and matches(parsed, shape):
            return pattern
    return None


def always_pattern(command: str) -> str | None:
    """The pattern "always" adds for ``command``: what the person saw, kept narrow. The same
    pipelines and operators, each stage's assignments and program word literally, then
    `` *`` where it has arguments (``"FOO=bar rm -rf x | head -n 1"`` gives
    ``"FOO=bar rm * | head *"``, ``"ls"`` gives ``"ls"``). ``None`` (no "always") for a
    command with a substitution, a redirection or a here-document, or one that cannot be
    parsed."""
    from silica.security.shell_syntax import literal_pattern, parse

    parsed = parse(command.strip())
    return None if parsed is None else literal_pattern(parsed)


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
        who = (f"Commands matching these patterns run at once: {shown} (matched as the shell "
               "parses them: each command of a pipeline or list against the pattern's at its "
               "place, so an extra | ; && stage, a $( ), backquote or > redirection not in "
               "the pattern needs approval). Any other command needs the user's approval "
               "and may be refused; prefer the allowed ones.")
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
    asking = 0.0
    # Off the loop: a long line takes a server's other calls no time (at most ~0.3 s here).
    if not await asyncio.to_thread(allowed_by, command, settings.shell.allow):
        if context.approve is None:
            return ToolResult.error(refusal(command))
        asked_at = time.monotonic()
        if not await context.approve(command):
            return ToolResult.error(f"[refused: the user did not allow `{command}`; it was not "
                                    "run. Do not retry it: ask the user what to do instead]")
        asking = time.monotonic() - asked_at
    # The call as a whole has the tools timeout; the time the person took to answer is not
    # counted (the toolbox stops the call's clock while they are asked).
    left = limit - (time.monotonic() - started - asking) - 1.0
    if left <= 0:
        return ToolResult.error(f"[`{command}` was not run: the call had no time left of "
                                f"its {limit:g} s; ask for it again]")
    policy = EnvPolicy(withhold=(*withhold_from_environment(), *settings.tools.env_withhold))
    done = await run_command(command, cwd=context.workdir, timeout=min(float(asked), left),
                             policy=policy, image_limits=settings.images.apply(ANTHROPIC),
                             sandbox=shell_sandbox(settings, context.workdir))
    return done.result


def shell_sandbox(settings: Settings, workdir: Path, label: str = "shell") -> Sandboxed:
    """Where a shell command runs: the sandbox with ``workdir`` writable and the network of
    ``[shell] network`` (none by default)."""
    sandbox = SandboxPolicy.from_settings(settings, silica_home())
    confinement = sandbox.confinement(label=label, workspace=workdir,
                                      network=settings.shell.network,
                                      network_setting='[shell] network = ["{host}"]')
    return Sandboxed(sandbox, confinement, cache_dir())


def shell_tool(settings: Settings) -> BuiltinTool:
    """The ``shell`` tool as ``settings`` describe it (its description names the patterns)."""
    return BuiltinTool(name="shell", description=description(settings.shell,
                                                             settings.tools.timeout),
                       input_schema=INPUT_SCHEMA, run=run, title="Run a shell command",
                       read_only=False, destructive=True, idempotent=False, open_world=True)
