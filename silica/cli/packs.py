"""``silica packs ...``: install, list, show, update and remove tool packs; start and check one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cyclopts import App
from rich.text import Text

from silica.cli.output import (
    JsonFlag,
    err,
    labelled,
    out,
    plain,
    print_json,
    print_table,
    say,
    table,
    warn,
)
from silica.errors import SilicaError
from silica.security.urls import mask_urls
from silica.words import counted

app = App(name="packs", help="Install, update and remove tool packs; start and check your own.")



@contextmanager
def _status() -> Iterator[Any]:
    """A spinner with what is happening (cloning, downloading, waiting for another command)
    on stderr, on a terminal only; it appears with the first message."""
    if not err.is_terminal:
        yield None
        return
    spinner = None

    def update(message: str) -> None:
        nonlocal spinner
        if spinner is None:
            spinner = err.status(plain(message))  # may name a URL: not markup
            spinner.start()
        else:
            spinner.update(plain(message))

    try:
        yield update
    finally:
        if spinner is not None:
            spinner.stop()


def _commit_or_digest(entry) -> str:
    if entry.commit:
        return f"commit {entry.commit[:12]}"
    return f"{entry.digest[:19]}" if entry.digest else ""


@app.command
def install(source: str, *, ref: str | None = None, force: bool = False):
    """Install a pack from a folder, a git repository or an archive (a file or an http URL).

    Parameters
    ----------
    source
        A folder, a git URL or repository path (SOURCE#REF picks a ref), or a .tar.gz, .tgz
        or .zip file or URL.
    ref
        For git: the branch, tag or commit to install (default: the default branch).
    force
        Replace a pack of the same name from another source, or overwrite local edits.
    """
    from silica.packs import install as install_pack
    from silica.packs.contents import is_tool_file

    with _status() as status:
        change = install_pack(source, ref, force=force, status=status)
    entry = change.entry
    what = "Reinstalled" if change.old_version else "Installed"
    tools = ", ".join(sorted(p[:-3] for p in entry.files if is_tool_file(p))) or "none"
    say(f"{what} {entry.name} {entry.version} from {mask_urls(entry.source)} "
        f"({entry.kind}{', ' + _commit_or_digest(entry) if entry.kind != 'folder' else ''})"
        f"\nTools: {tools}\nSee them with 'silica tools list'.")


@app.command(name="list")
def list_packs(*, json_: JsonFlag = False):
    """List the installed packs: version, source, and whether they were edited in place."""
    from silica.packs import installed

    with _status() as status:
        packs = installed(status=status)
    rows = [_row(p) for p in packs]
    if json_:
        print_json(rows)
        return
    if not rows:
        out.print("No packs installed. Install one with 'silica packs install SOURCE'.",
                  markup=False)
        return
    grid = table("name", "version", "description / problem", "source", "state",
                 whole=("name", "source"))
    for r in rows:
        state = Text("edited", style="yellow") if r["edited"] else Text("ok", style="green")
        if r["problem"]:
            state = Text("broken", style="red")
        source = r["source"] + (f"#{r['ref']}" if r["ref"] else "")
        cells = (r["name"], r["version"], r["problem"] or r["description"], source)
        grid.add_row(*(plain(c) for c in cells), state)  # manifests are outside text
    print_table(grid)


def _row(pack) -> dict[str, Any]:
    entry = pack.entry
    edits = pack.local_edits()
    return {
        "name": pack.name,
        "version": pack.manifest.version if pack.manifest else (entry.version if entry else ""),
        "description": pack.manifest.description if pack.manifest else "",
        "path": str(pack.path),
        "source": mask_urls(entry.source) if entry else "",
        "kind": entry.kind if entry else "",
        "ref": entry.ref if entry else None,
        "commit": entry.commit if entry else None,
        "digest": entry.digest if entry else None,
        "content_hash": entry.content_hash if entry else None,
        "installed_at": entry.installed_at if entry else None,
        "edited": bool(edits),
        "local_edits": edits,
        "problem": pack.problem or ("" if entry else "not in the lock file; install it again"),
    }


@app.command
def show(name: str, *, json_: JsonFlag = False):
    """Show pack NAME: its manifest, where it came from, and its tools with their status.

    Parameters
    ----------
    name
        The installed pack, as 'silica packs list' names it.
    json_
        Print the pack as JSON (for programs) instead of text.
    """
    from silica.cli.tools import discover_tools
    from silica.packs import get_pack

    with _status() as status:
        pack = get_pack(name, status=status)
    tools = [t for t in discover_tools().tools if t.folder.origin == f"pack:{name}"]
    if json_:
        lock = pack.entry.model_dump(mode="json") if pack.entry else None
        print_json({**_row(pack), "manifest": pack.manifest.model_dump() if pack.manifest
                    else None, "lock": lock, "tools": [t.to_row() for t in tools]})
        return
    row = _row(pack)
    lines = [f"{name} {row['version']}", row["description"] or row["problem"],
             f"path:      {row['path']}"]
    if pack.entry:
        e = pack.entry
        lines += [f"source:    {mask_urls(e.source)} ({e.kind})",
                  *([f"ref:       {e.ref}"] if e.ref else []),
                  *([f"resolved:  {_commit_or_digest(e)}"] if e.commit or e.digest else []),
                  f"installed: {e.installed_at}"]
    if pack.manifest and pack.manifest.min_silica:
        lines.append(f"needs:     silica {pack.manifest.min_silica} or newer")
    lines += [f"edited:    {edit}" for edit in row["local_edits"]]
    say("\n".join(lines))
    if tools:
        from silica.cli.tools import print_tools

        print_tools(tools)
    else:
        out.print("No tools.", markup=False)


@app.command
def update(name: str | None = None, *, force: bool = False):
    """Fetch pack NAME (default: every pack) again from its source and ref; show what changed.

    Parameters
    ----------
    name
        The pack to update; all of them if left out.
    force
        Overwrite local edits to the installed pack.
    """
    from silica.packs import installed
    from silica.packs import update as update_pack

    with _status() as status:
        names = [name] if name else [p.name for p in installed(status=status) if p.entry]
    if not names:
        out.print("No packs installed.", markup=False)
        return
    failed = False
    for pack_name in names:
        try:
            with _status() as status:
                change = update_pack(pack_name, force=force, status=status)
        except SilicaError as exc:
            labelled("error: ", "bold red", f"{pack_name}: {exc}")
            failed = True
            continue
        say(_describe_change(change))
    if failed:
        raise SystemExit(1)


def _describe_change(change) -> str:
    if change.up_to_date:
        text = f"{change.name} {change.entry.version}: up to date"
        if change.kept_edits:
            text += f" (local edits kept: {'; '.join(change.kept_edits)})"
        return text
    head = f"{change.name} {change.old_version} -> {change.entry.version}:"
    parts = [f"{what} {', '.join(names)}" for what, names in
             (("added", change.added), ("changed", change.changed), ("removed", change.removed))
             if names]
    tools = "; ".join(parts) or "no tool changed"
    return f"{head} {tools} ({counted(change.files_changed, 'file')} changed)"


@app.command
def remove(name: str):
    """Uninstall pack NAME: its folder and its lock entry.

    Parameters
    ----------
    name
        The installed pack, as 'silica packs list' names it.
    """
    from silica.packs import remove as remove_pack

    with _status() as status:
        pack = remove_pack(name, status=status)
    version = f" {pack.entry.version}" if pack.entry else ""
    say(f"Removed {name}{version}")


@app.command
def new(name: str, *, path: Path | None = None):
    """Start pack NAME: a folder with a manifest and one working tool (default: ./NAME).

    Parameters
    ----------
    name
        The new pack's name (lowercase letters, digits, '_' or '-').
    path
        The folder to create (default: ./NAME).
    """
    from silica.packs import new_pack

    folder = new_pack(name, path)
    say(f"Created {folder}\nDescribe the pack in {folder / 'silica-pack.toml'} and its tool "
        f"in its docstrings (the placeholder text must go before it can be published)\n"
        f"Add a tool: silica packs add-tool {folder} NAME\n"
        f"Check it: silica packs check {folder}\nInstall it: silica packs install {folder}")


@app.command(name="add-tool")
def add_tool(path: Path, name: str):
    """Add tool NAME to the pack at PATH: PATH/NAME.py, a working tool to start from.

    Parameters
    ----------
    path
        The pack's folder (where silica-pack.toml is).
    name
        The tool's name: letters, digits and '_', starting with a letter.
    """
    from silica.packs import add_tool as add_pack_tool
    from silica.packs import read_manifest

    tool = add_pack_tool(path, name)
    listed = read_manifest(tool.parent).tools
    say(f"Created {tool}\nDescribe what it does in its docstrings, then check the pack: "
        f"silica packs check {tool.parent}")
    if listed is not None and name not in listed:
        warn(f"{tool.parent / 'silica-pack.toml'} lists its tools: add {name!r} to 'tools' "
             "there, or the tool is left out when the pack is installed")


@app.command
def check(path: Path, *, json_: JsonFlag = False):
    """Check the pack at PATH before publishing: manifest, files, every tool's spec.

    Reading specs runs each tool with --toolspec. Exits non-zero if anything is broken.

    Parameters
    ----------
    path
        The pack's folder (the one holding silica-pack.toml).
    json_
        Print the findings as JSON (for programs) instead of text.
    """
    from silica.cli.tools import print_tools, spec_progress
    from silica.packs import check_pack

    with spec_progress() as progress:
        report = check_pack(path, progress)
    if json_:
        print_json(report.to_json())
    else:
        if report.tools:
            print_tools(report.tools)
        for warning in report.warnings:
            warn(warning)
        for problem in report.problems:
            labelled("problem: ", "bold red", problem)
        broken = sum(t.broken for t in report.tools)
        summary = (f"{counted(len(report.tools), 'tool')}, {broken} broken, "
                   f"{counted(len(report.problems), 'problem')}")
        if report.ok:
            out.print(f"{summary}: ready to publish", markup=False)
        else:
            err.print(summary, markup=False)
    if not report.ok:
        raise SystemExit(1)
