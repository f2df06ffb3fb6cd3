"""Installing, updating and removing packs, atomically, with the lock file kept in step.

Every install and update stages the new version in a folder inside ``$SILICA_HOME/packs/``
(fetch, copy with every file checked, read the manifest, keep the listed tools, hash), and
only then swaps it in with two renames in that one folder, the old version moved aside
until the new one is in place and the lock file written (``silica.packs.journal``). A
failure at any step leaves the previous version installed and the lock file as it was; a
process killed midway is finished or undone by the next command. Every function here holds
the packs lock (``silica.packs.locking``) from start to end, so commands run one at a time.
Nothing is run from a pack here: its tools are first run when discovery reads their specs.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from silica.packs import journal
from silica.packs.contents import Files, content_hash, copy_pack, diff, file_hashes, select_tools
from silica.packs.errors import LocalEdits, ManifestError, PackError
from silica.packs.folders import pack_dirs, packs_dir
from silica.packs.lock import Lock, LockEntry, read_lock, write_lock
from silica.packs.locking import exclusive
from silica.packs.manifest import (
    MANIFEST_NAME,
    PACK_NAME_PATTERN,
    PackManifest,
    check_compatible,
    read_manifest,
)
from silica.packs.sources import Fetched, Source, SourceKind, Status, fetch, parse_source


@dataclass
class Change:
    """What an install or update did to one pack (tool names are tool file stems)."""

    name: str
    entry: LockEntry  # the lock entry as it is now
    old_version: str | None = None  # None: the pack was not installed before
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    files_changed: int = 0  # files added, changed or removed, tools or not
    kept_edits: list[str] = field(default_factory=list)  # local edits left alone

    @property
    def up_to_date(self) -> bool:
        return self.old_version is not None and self.files_changed == 0


@dataclass
class InstalledPack:
    """An installed pack as found on disk and in the lock file."""

    name: str
    path: Path
    entry: LockEntry | None  # None: a folder silica did not install
    manifest: PackManifest | None = None
    problem: str = ""  # why the manifest could not be read, or the folder is missing

    def local_edits(self) -> list[str]:
        """Files added, changed or removed since install, as ``"changed: x.py"`` lines."""
        if self.entry is None or not self.path.is_dir():
            return []
        return _describe(diff(self.entry.files, file_hashes(self.path)))


def install(source: str, ref: str | None = None, *, force: bool = False,
            home: Path | None = None, status: Status | None = None) -> Change:
    """Install the pack at ``source`` (a folder, git URL or path, archive file or URL).

    Installing over a pack of the same name from another source needs ``force``; so does
    reinstalling over local edits. Raises ``PackError`` (and its kinds) with what to do.
    """
    src = parse_source(source, ref)
    with _command(home, status) as packs, _staged(src, packs, status) as staged:
        lock = read_lock(home)
        name = staged.manifest.name
        target = packs / name
        old = lock.packs.get(name)
        if old or os.path.lexists(target):
            same = old is not None and (old.kind, old.source) == (src.kind, src.location)
            if not same and not force:
                where = old.source if old else f"an unrecorded folder {target}"
                raise PackError(f"a pack named {name!r} is already installed from {where}; "
                                f"remove it first ('silica packs remove {name}') or pass "
                                "--force to replace it")
            if same and not force:
                _refuse_edits(name, old, target, f"'silica packs install {source} --force'")
        current = file_hashes(target) if target.is_dir() else {}
        entry = _entry(staged, src)
        journal.swap_in(staged.work, target, entry, home)
        return _change(entry, old.version if old else None, current, staged.files)


def update(name: str, *, force: bool = False, home: Path | None = None,
           status: Status | None = None) -> Change:
    """Fetch pack ``name`` again from its recorded source and ref, and install what changed.

    Local edits are kept unless ``force``: if the source changed too, ``LocalEdits`` is
    raised naming the edited files. A failure leaves the installed version as it was.
    """
    _check_name(name)
    with _command(home, status) as packs:
        lock = read_lock(home)
        old = lock.packs.get(name)
        target = packs / name
        if old is None:
            if target.is_dir():
                raise PackError(f"{target} was not installed by 'silica packs install', so it "
                                "has no source to update from; install it again from its "
                                "source")
            raise PackError(f"no pack named {name!r} is installed; run 'silica packs list'")
        return _update(old, lock, target, force=force, home=home, status=status)


def _update(old: LockEntry, lock: Lock, target: Path, *, force: bool, home: Path | None,
            status: Status | None) -> Change:
    """``update`` once the packs folder is locked and ``old`` is the pack's lock entry."""
    name = old.name
    src = Source(SourceKind(old.kind), old.source, old.ref)
    with _staged(src, target.parent, status) as staged:
        if staged.manifest.name != name:
            raise PackError(f"{old.source} now holds the pack {staged.manifest.name!r}, not "
                            f"{name!r}; install it under its new name and remove {name!r}")
        current = file_hashes(target) if target.is_dir() else {}
        edits = diff(old.files, current)
        if staged.files == old.files and (not force or not any(edits)):
            kept = _describe(edits)
            resolved = {"commit": staged.fetched.commit, "digest": staged.fetched.digest}
            if resolved != {"commit": old.commit, "digest": old.digest}:
                lock.packs[name] = old.model_copy(update=resolved)
                write_lock(lock, home)
            return Change(name, lock.packs[name], old.version, kept_edits=kept)
        if any(edits) and not force:
            _refuse_edits(name, old, target, f"'silica packs update {name} --force'")
        entry = _entry(staged, src)
        journal.swap_in(staged.work, target, entry, home)
        return _change(entry, old.version, current, staged.files)


def remove(name: str, *, home: Path | None = None,
           status: Status | None = None) -> InstalledPack:
    """Uninstall pack ``name``: its folder and its lock entry go together, or neither does."""
    with _command(home, status) as packs:
        pack = get_pack(name, home)
        work = journal.new_work_folder(packs)
        try:
            journal.move_out(work, pack.path, name, home)
        finally:
            journal.discard(work)
    return pack


def installed(home: Path | None = None, status: Status | None = None) -> list[InstalledPack]:
    """Every installed pack, by name: folders in the packs folder and lock entries."""
    with _command(home, status, write=False):
        lock = read_lock(home)
        folders = dict(pack_dirs(home))
        names = sorted(set(folders) | set(lock.packs))
        return [_describe_pack(n, packs_dir(home) / n, lock.packs.get(n)) for n in names]


def get_pack(name: str, home: Path | None = None,
             status: Status | None = None) -> InstalledPack:
    """The installed pack ``name``; ``PackError`` if there is none."""
    _check_name(name)
    with _command(home, status, write=False):
        path = packs_dir(home) / name
        entry = read_lock(home).packs.get(name)
        if entry is None and not path.is_dir():
            raise PackError(f"no pack named {name!r} is installed; run 'silica packs list'")
        return _describe_pack(name, path, entry)


# -- the steps ---------------------------------------------------------------------------


@dataclass
class _Staged:
    work: Path
    pack: Path
    manifest: PackManifest
    files: Files
    fetched: Fetched


@contextlib.contextmanager
def _command(home: Path | None, status: Status | None, *, write: bool = True) -> Iterator[Path]:
    """The packs folder, locked for the whole command, after finishing or undoing what a
    killed command left there. With ``write``, the folder is made if need be (and taken
    away again if this command made it and fails).

    A disk error (full, read-only, permissions) becomes a ``PackError`` saying so.
    """
    packs = packs_dir(home)
    say = status or (lambda _message: None)
    try:
        with exclusive(packs, create=write, waiting=lambda: say(
                "waiting for another 'silica packs' command to finish")) as first:
            if first:  # no other command is running: whatever it left is stale
                journal.recover(packs, home)
            yield packs
    except OSError as exc:
        where = exc.filename or packs
        if write:
            raise PackError(f"cannot write {where}: {exc.strerror or exc}; check the free "
                            f"space and the permissions of {packs}") from exc
        raise PackError(f"cannot read {where}: {exc.strerror or exc}; check the "
                        f"permissions of {packs}") from exc


@contextlib.contextmanager
def _staged(src: Source, packs: Path, status: Status | None) -> Iterator[_Staged]:
    """The pack fetched, copied, checked and hashed in a work folder beside the packs."""
    say = status or (lambda _message: None)
    work = journal.new_work_folder(packs)
    try:
        fetched = fetch(src, work / "fetch", say)
        label = str(fetched.root / MANIFEST_NAME) if src.kind is SourceKind.FOLDER else \
            f"{MANIFEST_NAME} of {src.location}" + (f" at {src.ref}" if src.ref else "")
        say("checking the pack's files")
        pack = work / journal.STAGED
        copy_pack(fetched.root, pack)
        manifest = read_manifest(pack, label)
        check_compatible(manifest, label)
        select_tools(pack, manifest, label)
        yield _Staged(work, pack, manifest, file_hashes(pack), fetched)
    finally:
        journal.discard(work)


def _entry(staged: _Staged, src: Source) -> LockEntry:
    return LockEntry(name=staged.manifest.name, version=staged.manifest.version,
                     source=src.location, kind=str(src.kind), ref=src.ref,
                     commit=staged.fetched.commit, digest=staged.fetched.digest,
                     content_hash=content_hash(staged.files), files=staged.files)


def _change(entry: LockEntry, old_version: str | None, current: Files, new: Files) -> Change:
    added, changed, removed = diff(current, new, tools_only=True)
    every = diff(current, new)
    return Change(entry.name, entry, old_version, added, changed, removed,
                  sum(len(x) for x in every))


def _describe(edits: tuple[list[str], list[str], list[str]]) -> list[str]:
    added, changed, removed = edits
    return [f"{what}: {path}" for what, paths in
            (("changed", changed), ("added", added), ("removed", removed)) for path in paths]


def _refuse_edits(name: str, entry: LockEntry | None, target: Path, retry: str) -> None:
    if entry is None or not target.is_dir():
        return
    edits = _describe(diff(entry.files, file_hashes(target)))
    if edits:
        shown = "; ".join(edits[:8]) + ("; ..." if len(edits) > 8 else "")
        raise LocalEdits(f"pack {name!r} was edited in {target} since it was installed "
                         f"({shown}); copy your edits elsewhere, then run {retry} to "
                         "overwrite them")


def _describe_pack(name: str, path: Path, entry: LockEntry | None) -> InstalledPack:
    pack = InstalledPack(name, path, entry)
    if not path.is_dir():
        pack.problem = f"the folder {path} is missing; run 'silica packs update {name} --force'"
        return pack
    try:
        pack.manifest = read_manifest(path)
    except ManifestError as exc:
        pack.problem = str(exc)
    return pack


def _check_name(name: str) -> None:
    if not re.match(PACK_NAME_PATTERN, name):
        raise PackError(f"{name!r} is not a pack name (lowercase letters, digits, '_' and '-'); "
                        "run 'silica packs list' to see the installed packs")
