"""``silica sessions ...``: saved conversations."""

from __future__ import annotations

from typing import Annotated

from cyclopts import App, Parameter
from rich.table import Table
from rich.text import Text

from silica.cli.output import out, print_json

app = App(name="sessions", help="Saved conversations (resume one with silica chat --resume ID).")


@app.command(name="list")
def list_sessions(*, json_: Annotated[bool, Parameter(name="--json")] = False):
    """List saved sessions, newest first."""
    from silica.agent.sessions import list_sessions as saved

    sessions = saved()
    if json_:
        print_json([s.model_dump(mode="json") for s in sessions])
        return
    if not sessions:
        out.print("No saved sessions yet. Start one with: silica chat", markup=False)
        return
    table = Table(show_edge=False, pad_edge=False)
    for col in ("id", "updated", "turns", "model", "title"):
        table.add_column(col, overflow="fold")
    for s in sessions:
        title = f"[unreadable: {s.problem}]" if s.problem else (s.title or "")
        table.add_row(*(Text(cell) for cell in (  # plain text: a title is the user's words
            s.id, str(s.updated or "")[:19], str(s.turns or ""), s.model or "", title)))
    out.print(table)
