"""``silica trust`` and ``silica untrust``: which projects' tool folders may run code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from silica.cli.output import fail, out, plain, print_json, print_table, say, table, warn
from silica.paths import PROJECT_TOOL_DIRS, silica_home
from silica.security.trust import TrustStore


def trust(path: Path | None = None, *,
          list_: Annotated[bool, Parameter(name="--list", negative="")] = False,
          json_: Annotated[bool, Parameter(name="--json", negative="")] = False):
    """Let the tools of a project (its git root, or the folder) run.

    Parameters
    ----------
    path
        A folder of the project to trust (default: the current folder).
    list_
        Show the trusted projects instead.
    json_
        With --list: print them as JSON.
    """
    store = TrustStore(silica_home())
    if list_:
        _show(store, json_)
        return
    root = store.add(path or Path.cwd())
    folders = " and ".join(PROJECT_TOOL_DIRS)
    say(f"Trusted {root}: tool files in its {folders} folders may now run.\n"
        f"Undo with: silica untrust {root}")


def untrust(path: Path | None = None):
    """Stop a project's tools from running (until it is trusted again).

    Parameters
    ----------
    path
        A folder of the project (default: the current folder).
    """
    store = TrustStore(silica_home())
    target = path or Path.cwd()
    removed = store.remove(target)
    if not removed:
        fail(f"{target.resolve()} is not trusted; 'silica trust --list' shows what is")
    for root in removed:
        say(f"No longer trusted: {root}")
    if (still := store.trusted_by(target)) is not None:
        warn(f"{target.resolve()} is still trusted, as a folder in {still}; to stop its tools "
             f"too: silica untrust {still}")


def _show(store: TrustStore, json_: bool) -> None:
    entries = store.entries()
    if store.problem:
        warn(store.problem)
    if json_:
        print_json([{"path": str(e.path), "since": e.since} for e in entries])
        return
    if not entries:
        out.print("No project is trusted yet. Trust one with: silica trust PATH", markup=False)
        return
    grid = table("path", "since", whole=("path",))
    for e in entries:
        grid.add_row(plain(e.path), plain(e.since))
    print_table(grid)
