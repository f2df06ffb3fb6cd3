"""Running any command (not a tool file) the way a tool runs: the library under
``silica exec`` and the ``shell`` built-in tool.

    run = await run_command(["chafa", "-f", "kitty", "pic.png"], cwd=Path.cwd(), timeout=60)
    run = await run_command("ls | head", cwd=workdir, timeout=10)     # a str: /bin/sh -c
    run.result     # ToolResult: text and image blocks, as ``build_result`` makes them
    run.status     # the exit status a shell would report (see ``exit_status``)

The command gets what a tool file gets: silica's environment without its secrets (``tool_env``
with the ``EnvPolicy`` given, plus what the ``silica_tool_env`` plugins add, e.g.
``AGENT_GRAPHICS``), stdin closed, stdout capped, a timeout, and nothing it starts outlives it
(``run_process``); the shell tool's commands (and ``silica exec --sandbox``) run in the
sandbox (``run_confined``). Images its output holds are checked off the event loop (``off_loop``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pluggy

from silica.blocks import ToolResult
from silica.images.limits import ANTHROPIC, ImageLimits
from silica.plugins import get_plugin_manager
from silica.security.env import EnvPolicy
from silica.tools.confined import Sandboxed
from silica.tools.environment import tool_env
from silica.tools.model import DEFAULT_STDOUT_CAP, RawOutput

SHELL = "/bin/sh"
NOT_FOUND = 127  # what a shell reports for a command it cannot find
NOT_EXECUTABLE = 126  # ... and for one it found but cannot run
TIMED_OUT = 124  # what timeout(1) reports


@dataclass(frozen=True)
class CommandRun:
    """One finished command: what the model gets (``result``), what the process left
    (``raw``), and its exit status as a shell reports it (``status``; 0 only on success)."""

    result: ToolResult
    raw: RawOutput
    status: int


def exit_status(raw: RawOutput) -> int:
    """The command's own exit code; 128+N when signal N ended it; ``TIMED_OUT`` when it was
    stopped at its timeout; ``NOT_EXECUTABLE`` when it could not be started."""
    if raw.error:
        return NOT_EXECUTABLE
    if raw.timed_out:
        return TIMED_OUT
    if raw.exit_code is None:
        return 1
    return 128 - raw.exit_code if raw.exit_code < 0 else raw.exit_code


def command_argv(command: Sequence[str] | str) -> list[str]:
    """``command`` as the argv run: a list as it is, a str as ``/bin/sh -c LINE``."""
    if isinstance(command, str):
        return [SHELL, "-c", command]
    return list(command)


def find_program(name: str, cwd: Path, path: str | None) -> tuple[str | None, int, str]:
    """Where ``name`` is (``path`` is a ``$PATH`` value; a name with a slash is taken from
    ``cwd``): ``(program, 0, "")``, or ``(None, NOT_FOUND | NOT_EXECUTABLE, why)``."""
    if "/" in name:
        candidate = Path(name) if os.path.isabs(name) else cwd / name
        if not candidate.exists():
            return None, NOT_FOUND, f"{name}: no such file"
        if candidate.is_dir() or not os.access(candidate, os.X_OK):
            return None, NOT_EXECUTABLE, f"{name}: not an executable file (chmod +x it?)"
        return str(candidate), 0, ""
    found = shutil.which(name, path=path)
    if found:
        return found, 0, ""
    # Found but not executable: a shell says "permission denied" (126), not "not found".
    for folder in (path or "").split(os.pathsep):
        candidate = Path(folder or ".") / name
        if candidate.is_file() and not os.access(candidate, os.X_OK):
            return None, NOT_EXECUTABLE, f"{candidate}: not executable (chmod +x it?)"
    return None, NOT_FOUND, f"{name}: command not found (check the name, or $PATH)"


async def run_command(command: Sequence[str] | str, *, cwd: Path, timeout: float,
                      pm: pluggy.PluginManager | None = None,
                      policy: EnvPolicy | None = None,
                      image_limits: ImageLimits = ANTHROPIC,
                      stdout_cap: int = DEFAULT_STDOUT_CAP,
                      sandbox: Sandboxed | None = None) -> CommandRun:
    """Run ``command`` (an argv, never through a shell; or a str, a ``/bin/sh -c`` line) in
    ``cwd`` and build its result as a tool's is built (``build_result``, fitted to
    ``image_limits``), confined as ``sandbox`` says (unconfined when it is ``None``).

    Never raises for the command: one that cannot be found or started gives an ``is_error``
    result saying so, with ``status`` ``NOT_FOUND`` or ``NOT_EXECUTABLE``, and runs nothing.
    """
    from silica.results.pipeline import build_result
    from silica.tools.confined import run_confined
    from silica.tools.workers import off_loop

    pm = pm or get_plugin_manager()
    argv = command_argv(command)
    if not argv:
        raw = RawOutput(b"", b"", None, 0.0, error="no command given")
        return CommandRun(ToolResult.error("no command given"), raw, NOT_FOUND)
    if not cwd.is_dir():
        why = f"cannot run in {cwd}: not a folder"
        return CommandRun(ToolResult.error(why), RawOutput(b"", b"", None, 0.0, error=why),
                          NOT_EXECUTABLE)
    # PATH is never withheld, so silica's own PATH finds what the command's env would
    program, status, why = find_program(argv[0], cwd, os.environ.get("PATH"))
    if program is None:
        raw = RawOutput(b"", b"", None, 0.0, error=why)
        return CommandRun(ToolResult.error(f"[{why}]"), raw, status)
    env = tool_env(pm, Path(program), policy)
    deadline = time.monotonic() + timeout
    raw = await run_confined(argv, sandbox=sandbox, env=env, cwd=cwd, timeout=timeout,
                             stdout_cap=stdout_cap)
    raw.subject = "the command"  # not a tool file: its messages say what it is
    # Images are checked off the event loop, within what is left of the call's time.
    work = partial(build_result, raw, pm, image_limits, deadline=deadline)
    result = await off_loop(work, deadline=deadline,
                            what=f"checking the images of {argv[0]}")
    return CommandRun(result, raw, exit_status(raw))
