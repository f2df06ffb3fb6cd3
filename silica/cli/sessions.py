"""``silica sessions ...``: saved conversations."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from silica.cli.output import JsonFlag, err, fail, out, plain, print_json, print_table, say, table
from silica.cli.show import ImagesFlag

app = App(name="sessions", help="Saved conversations (resume one with silica chat --resume ID).")


@app.command(name="list")
def list_sessions(*, json_: JsonFlag = False):
    """List saved sessions, newest first."""
    from silica.agent.sessions import list_sessions as saved

    sessions = saved()  # an unusable database ends the command here, in one line
    if json_:
        print_json([s.model_dump(mode="json") for s in sessions])
        return
    if not sessions:
        out.print("No saved sessions yet. Start one with: silica chat", markup=False)
        return
    grid = table("id", "updated", "turns", "model", "title", whole=("id",))
    for s in sessions:
        title = f"[unreadable: {s.problem}]" if s.problem else (s.title or "")
        grid.add_row(*(plain(cell) for cell in (  # a title or a problem quotes outside text
            s.id, str(s.updated or "")[:19], str(s.turns or ""), s.model or "", title)))
    print_table(grid)


@app.command
def show(session_id: str, *,
         json_: Annotated[bool, Parameter(name="--json", negative="")] = False,
         images: ImagesFlag = None):
    """Show a saved session from its start: your messages, the model's text, each tool
    call and its result, with their images drawn in the terminal and described.

    Parameters
    ----------
    session_id
        The session to show (see silica sessions list).
    json_
        Print the session as saved (its messages, images as references) as JSON.
    """
    from silica.agent.sessions import load_session
    from silica.cli.show import describe_image, draw_image, images_setting
    from silica.cli.transcript import replay
    from silica.config import load_settings

    settings = load_settings()
    conversation = load_session(session_id)  # a SessionError ends the command, said plainly
    if json_:
        print_json(conversation.model_dump(mode="json"))
        return
    setting = images_setting(images, settings)
    store = _store(session_id, settings)

    def image(block) -> None:
        from silica.blocks import ImageBlock
        from silica.images.store import StoreError

        try:
            data = store.read(block.ref)
        except StoreError as exc:
            say(f"  [image not shown: {exc}]", style="dim")
            return
        shown = ImageBlock(media_type=block.ref.media_type, data=data,
                           width=block.ref.width, height=block.ref.height)
        draw_image(out, setting, data)
        say("  " + describe_image(shown, store.path(block.ref)))

    replay(conversation, None, console=out, style="", image=image)


@app.command
def export(session_id: str, *, output: Annotated[Path | None, Parameter(name="--output")] = None):
    """Print a saved session as a JSON file (the format silica kept sessions in before its
    database), to stdout or into a file.

    Parameters
    ----------
    session_id
        The session to export (see silica sessions list).
    output
        Write it into this file instead (replaced if it exists).
    """
    from silica.agent.sessions import export_session
    from silica.fsutil import write_atomic

    data = export_session(session_id)
    if output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    try:
        write_atomic(output, data)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}; check the folder and its "
             "permissions")
    say(f"session {session_id} written to {output}", console=err, style="dim")


def _store(session_id: str, settings):
    from silica.images.store import open_image_store
    from silica.paths import silica_home

    return open_image_store(silica_home(), session_id, settings)


@app.command
def delete(
    *session_ids: str,
    empty: bool = False,
    older_than: float | None = None,
    json_: Annotated[bool, Parameter(name="--json")] = False,
):
    """Delete saved sessions (their file, saved tool outputs and images): by id, or all the
    sessions the model never answered (--empty), or not updated for DAYS (--older-than).

    Parameters
    ----------
    session_ids
        Sessions to delete (see silica sessions list).
    empty
        Delete every session the model never answered.
    older_than
        Delete every session not updated for this many days (with --empty: both must hold).
    json_
        Print what was deleted as JSON: [{"id", "removed": [paths]}].
    """
    from silica.agent.sessions import delete_sessions, find_sessions

    if session_ids and (empty or older_than is not None):
        fail("give session ids, or --empty / --older-than DAYS, not both", 2)
    if not session_ids and not empty and older_than is None:
        fail("say what to delete: session ids, --empty, or --older-than DAYS "
             "(see silica sessions list)", 2)
    if older_than is not None and not older_than >= 0:  # also refuses nan
        fail(f"--older-than takes a number of days, 0 or more, not {older_than:g}", 2)
    chosen = list(session_ids) or [
        s.id for s in find_sessions(empty=empty, older_than=older_than)]
    deleted = delete_sessions(chosen)
    if json_:
        print_json([d.model_dump(mode="json") for d in deleted])
        return
    for d in deleted:
        say(f"deleted session {d.id}")
    if not deleted:
        say("no session matched; nothing deleted")
