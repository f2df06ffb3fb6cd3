"""Changes to the packs folder that a crash cannot leave half done.

An install, update or remove works in a hidden folder ``$SILICA_HOME/packs/.staging-*``
(``new_work_folder``). Before it touches the installed pack it writes a journal there: the
pack's name and the lock entry it is about to record. Then it moves the installed folder
aside into the work folder, moves the new one in, writes the lock file, and deletes the
journal. Killed at any point (even by ``kill -9``), the next command's ``recover`` finds the
work folder and finishes the change if the new folder is in place (it writes the lock entry)
or undoes it if not (it puts the old folder back). A work folder without a journal is an
interrupted fetch, and is deleted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from silica.fsutil import write_atomic
from silica.packs.errors import PackError
from silica.packs.folders import PACK_NAME_PATTERN
from silica.packs.lock import LockEntry, read_lock, write_lock

WORK_PREFIX = ".staging-"
STAGED = "pack"  # in a work folder: the new version, checked and ready to go in
JOURNAL_NAME = "journal.json"
_OLD = "old"  # the version it replaces, until the change is done
_GONE = "removed"  # a pack being removed
# Left by a killed command: work folders (".removing-": older silica), lock file writes.
_STALE = (WORK_PREFIX, ".removing-")
_STALE_LOCK_WRITE = re.compile(r"^\.lock-.*\.part$")


def new_work_folder(packs: Path) -> Path:
    """A new private work folder in ``packs``; ``recover`` deletes it if this process dies."""
    return Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=packs))


def discard(work: Path) -> None:
    """Delete the work folder ``work``, unless a change there could be neither finished nor
    undone (its journal is still there): then it is kept for ``recover``."""
    if not (work / JOURNAL_NAME).exists():
        shutil.rmtree(work, ignore_errors=True)


def swap_in(work: Path, target: Path, entry: LockEntry, home: Path | None) -> None:
    """Put ``work/pack`` at ``target`` and record ``entry`` in the lock file, as one change.

    On an error both are put back as they were and the error is raised; if the process is
    killed, the next ``recover`` finishes or undoes the change. The version replaced is left
    in ``work/old``; the caller deletes ``work`` with ``discard``.
    """
    journal = _begin(work, {"action": "install", "name": entry.name,
                            "entry": entry.model_dump(mode="json")})
    try:
        if os.path.lexists(target):
            os.replace(target, work / _OLD)
        os.replace(work / STAGED, target)
        _record(home, entry.name, entry)
    except BaseException:
        _undo_install(work, target)
        journal.unlink()
        raise
    journal.unlink()


def move_out(work: Path, target: Path, name: str, home: Path | None) -> None:
    """Move the pack folder ``target`` (if there is one) into ``work`` and drop ``name`` from
    the lock file, as one change; on an error, put it back. The caller deletes ``work`` with
    ``discard``."""
    journal = _begin(work, {"action": "remove", "name": name})
    try:
        if os.path.lexists(target):
            os.replace(target, work / _GONE)
        _record(home, name, None)
    except BaseException:
        if os.path.lexists(work / _GONE) and not os.path.lexists(target):
            os.replace(work / _GONE, target)
        journal.unlink()
        raise
    journal.unlink()


def recover(packs: Path, home: Path | None) -> None:
    """Finish or undo every change a killed command left in ``packs``; delete its leftovers.

    Call it only while holding the packs lock: then no other command is running, and every
    work folder is stale. Raises ``PackError`` for a journal that cannot be read.
    """
    try:
        names = sorted(os.listdir(packs))
    except FileNotFoundError:
        return
    for name in names:
        path = packs / name
        if _STALE_LOCK_WRITE.match(name) and path.is_file():
            path.unlink()
        elif name.startswith(_STALE) and path.is_dir() and not path.is_symlink():
            journal = path / JOURNAL_NAME
            if journal.is_file():
                _replay(path, _read_journal(journal), packs, home)
                journal.unlink()
            shutil.rmtree(path, ignore_errors=True)


def _replay(work: Path, record: dict[str, Any], packs: Path, home: Path | None) -> None:
    name = record["name"]
    target = packs / name
    if record["action"] == "install":
        if os.path.lexists(work / STAGED):  # the new version never went in
            _undo_install(work, target)
        else:  # it is in place: record it, as the killed command was about to
            _record(home, name, LockEntry.model_validate(record["entry"]))
    elif os.path.lexists(work / _GONE):  # "remove": the folder is out, so is the entry
        _record(home, name, None)


def _undo_install(work: Path, target: Path) -> None:
    if not os.path.lexists(work / STAGED) and os.path.lexists(target):
        os.replace(target, work / STAGED)
    if os.path.lexists(work / _OLD) and not os.path.lexists(target):
        os.replace(work / _OLD, target)


def _record(home: Path | None, name: str, entry: LockEntry | None) -> None:
    """Set (or with None, drop) the lock entry of ``name``, reading the lock file afresh."""
    lock = read_lock(home)
    if entry is None:
        lock.packs.pop(name, None)
    else:
        lock.packs[name] = entry
    write_lock(lock, home)


def _begin(work: Path, record: dict[str, Any]) -> Path:
    journal = work / JOURNAL_NAME
    write_atomic(journal, json.dumps(record), prefix=".journal-")
    return journal


def _read_journal(journal: Path) -> dict[str, Any]:
    try:
        record = json.loads(journal.read_text(encoding="utf-8"))
        ok = record["action"] in ("install", "remove") and \
            re.match(PACK_NAME_PATTERN, record["name"])
        if ok and record["action"] == "install":
            LockEntry.model_validate(record["entry"])
    except (OSError, ValueError, KeyError, TypeError, ValidationError):
        ok = False
    if not ok:
        raise PackError(f"{journal} is damaged, so an interrupted change cannot be finished; "
                        f"move {journal.parent} out of {journal.parent.parent} (its 'old' "
                        "folder, if any, is the previous version of a pack), then try again")
    return record
