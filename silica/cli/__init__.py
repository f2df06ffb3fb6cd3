"""The ``silica`` command: a thin layer over the library.

Every command group is registered by import path and loads only when it runs, so
``silica --version`` and ``silica --help`` import neither the toolbox nor an SDK; and
``silica --version`` alone is answered before the command line parser is even imported.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING

from silica import __version__

if TYPE_CHECKING:
    from cyclopts import App

PROGRAM = False
"""True once ``main`` runs: silica is the program, not a library inside another one (so a
command may end the process at once when its work is done; see ``silica.cli.agent``)."""


@functools.cache
def _app() -> App:
    from cyclopts import App

    app = App(name="silica", version=__version__,
              help="Give LLM agents their own script tools, with images as first-class "
                   "results.")
    app.command("silica.cli.agent:ask", name="ask",
                help="Ask once: the model uses your tools as it needs, then answers.")
    app.command("silica.cli.agent:chat", name="chat",
                help="Talk with the model and your tools; resumable sessions.")
    app.command("silica.cli.tools:app", name="tools",
                help="Find, inspect, check, run and create user tools.")
    app.command("silica.cli.exec:exec_command", name="exec",
                help="Run any command as a tool runs; show the text and images a model gets.")
    app.command("silica.cli.packs:app", name="packs",
                help="Install, update and remove tool packs.")
    app.command("silica.cli.sessions:app", name="sessions", help="Saved conversations.")
    app.command("silica.cli.mcp:app", name="mcp", help="Serve silica's tools over MCP.")
    app.command("silica.cli.serve:serve", name="serve",
                help="The agent as a local daemon: HTTP, Socket.IO, SSE and a web page.")
    app.command("silica.cli.worker:worker", name="worker",
                help="Run the turns that silica serve --no-worker daemons queue in Redis.")
    app.command("silica.cli.sandbox:sandbox", name="sandbox",
                help="Which confinement layers work here, and what tools may touch.")
    app.command("silica.cli.resident:app", name="resident",
                help="The warm process silica ask, chat and tools run/list hand their runs to.")
    app.command("silica.cli.trust:trust", name="trust",
                help="Let a project's tools run (project folders run nothing until trusted).")
    app.command("silica.cli.trust:untrust", name="untrust",
                help="Stop a project's tools from running.")
    return app


def __getattr__(name: str):
    if name == "app":  # the cyclopts App, built on first use
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the commands a resident runs (``silica.resident``): the agent's, and the tool commands a
# person or a script runs again and again
HANDED = (("ask",), ("chat",), ("tools", "run"), ("tools", "list"))


def _handed(args: list[str]) -> bool:
    return any(tuple(args[:len(command)]) == command for command in HANDED)


def main() -> None:
    """Run the ``silica`` command. First the process hides its secrets from other processes
    (``silica.security.process``; ``--version`` alone is answered before: it runs nothing).
    Ctrl-C ends any command (but ``mcp serve``, which stops quietly) with the one line
    "interrupted" on stderr and exit code 130, as a shell reports SIGINT: never a
    traceback. What the command started is stopped as it unwinds. Likewise any
    ``SilicaError`` a command lets out (an error a user can act on) ends it here, with its
    message as one "error: " line on stderr and its ``exit_code``: commands need no
    handler of their own."""
    global PROGRAM
    PROGRAM = True
    if sys.argv[1:] == ["--version"]:  # the one answer that needs no parser
        print(__version__)
        return
    if _handed(sys.argv[1:]):  # a resident has the SDKs and the CLI imported already
        from silica.resident.client import hand_off

        code = hand_off()
        if code is not None:
            raise SystemExit(code)
    from silica.security.process import harden_process

    harden_process()  # before anything else: secrets leave /proc/<pid>/environ and cmdline
    app = _app()
    app.suppress_keyboard_interrupt = False  # cyclopts would exit 130 without a word
    from silica.errors import SilicaError

    try:
        app()
    except KeyboardInterrupt:
        from silica.cli.output import err, say

        say("interrupted", console=err)
        raise SystemExit(130) from None
    except SilicaError as exc:
        from silica.cli.output import fail

        fail(str(exc), exc.exit_code)
