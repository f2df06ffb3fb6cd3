"""``silica sessions ...``: saved conversations."""

from __future__ import annotations

from typing import Annotated

from cyclopts import App, Parameter
from rich.table import Table

from silica.cli.output import out, print_json

app = App(name="sessions", help="Saved conversations (resume one with silica chat --resume ID).")


@app.command(name="list")
def list_sessions(*, json_: Annotated[bool, Parameter(name="--json")] = False):
    """List saved sessions, newest first."""
    from silica.agent.sessions import list_sessions as saved

    sessions = saved()
    if json_:
        print_json([s.model_dump(mode="json") if hasattr(s, "model_dump") else vars(s)
                    for s in sessions])
        return
    if not sessions:
        out.print("No saved sessions yet. Start one with: silica chat", markup=False)
        return
    table = Table(show_edge=False, pad_edge=False)
    for col in ("id", "updated", "turns", "model", "title"):
        table.add_column(col, overflow="fold")
    for s in sessions:
        problem = getattr(s, "problem", None)
        table.add_row(s.id, str(getattr(s, "updated", "") or "")[:19],
                      str(getattr(s, "turns", "")), getattr(s, "model", "") or "",
                      f"[unreadable: {problem}]" if problem else (getattr(s, "title", "") or ""))
    out.print(table)
