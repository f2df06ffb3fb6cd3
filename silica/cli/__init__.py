"""The ``silica`` command: a thin layer over the library."""

from __future__ import annotations

from cyclopts import App

from silica import __version__
from silica.cli import agent, mcp, packs, sessions, tools

app = App(name="silica", version=__version__,
          help="Give LLM agents their own script tools, with images as first-class results.")
app.command(tools.app)
app.command(packs.app)
app.command(sessions.app)
app.command(mcp.app)
app.command(agent.ask)
app.command(agent.chat)


def main() -> None:
    app()
