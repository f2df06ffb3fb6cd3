"""The ``silica`` command: a thin layer over the library.

Command groups are registered by import path, so each invocation imports only the modules
of the command it runs (``silica --version`` and ``silica tools list`` stay quick).
"""

from __future__ import annotations

from cyclopts import App

from silica import __version__

app = App(name="silica", version=__version__,
          help="Give LLM agents their own script tools, with images as first-class results.")
app.command("silica.cli.agent:ask", name="ask",
            help="Ask once: the model uses your tools as it needs, then answers.")
app.command("silica.cli.agent:chat", name="chat",
            help="Talk with the model and your tools; resumable sessions.")
app.command("silica.cli.tools:app", name="tools",
            help="Find, inspect, check, run and create user tools.")
app.command("silica.cli.packs:app", name="packs",
            help="Install, update and remove tool packs.")
app.command("silica.cli.sessions:app", name="sessions", help="Saved conversations.")
app.command("silica.cli.mcp:app", name="mcp", help="Serve silica's tools over MCP.")


def main() -> None:
    app()
