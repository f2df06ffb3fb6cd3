"""The rules every pack's files must follow before any of them is installed.

A pack comes from someone else. Whatever its source, its files may not reach outside the
pack: no absolute paths, no ``..``, no link that resolves outside, no devices, FIFOs or
sockets, and no more than ``MAX_FILES`` entries (files, folders and links: each costs an
inode) or ``MAX_TOTAL_BYTES`` bytes in all. Every rule is checked before a byte is written, and
again while copying (a file can grow in between).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from silica.packs.errors import UnsafePack

MAX_FILES = 10_000  # entries: files, folders and links alike
MAX_TOTAL_BYTES = 50 * 1024 * 1024  # unpacked, all files together
MAX_DOWNLOAD_BYTES = 50 * 1024 * 1024  # an archive fetched over http(s)
MAX_NAME = 1024  # characters in an archive member's path: deep paths cost time and inodes

# Never part of a pack: version control, bytecode.
SKIPPED_NAMES = frozenset({".git", "__pycache__"})


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB"


def member_path(name: str) -> PurePosixPath | None:
    """The relative path an archive member may be written to, or None for the root itself.

    Raises ``UnsafePack`` for an absolute path, a ``..`` component, a drive, a backslash or a
    NUL (names that could land outside the pack on some system), or a name longer than
    ``MAX_NAME`` characters.
    """
    if len(name) > MAX_NAME:
        raise UnsafePack(f"the entry {name[:60]!r}... has a name longer than {MAX_NAME:,} "
                         "characters; such names are refused")
    if "\0" in name or "\\" in name:
        raise UnsafePack(f"the entry {name!r} has a backslash or NUL in its name; "
                         "such names are refused")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafePack(f"the entry {name!r} has an absolute path; a pack may hold only "
                         "paths inside itself")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafePack(f"the entry {name!r} has a '..' component and would be written "
                         "outside the pack")
    return PurePosixPath(*parts) if parts else None


def check_link_target(rel: PurePosixPath, target: str) -> None:
    """Refuse a symlink at ``rel`` whose target is absolute or leads out of the pack.

    A lexical check on the link alone; ``check_link_resolves`` checks chains of links once
    they are on disk.
    """
    if not target or target.startswith("/") or "\\" in target or "\0" in target:
        raise UnsafePack(f"the link {rel} points to {target!r}, outside the pack; "
                         "links may point only inside the pack")
    joined = posixpath.normpath(posixpath.join(str(rel.parent), target))
    if joined == ".." or joined.startswith("../"):
        raise UnsafePack(f"the link {rel} points to {target!r}, outside the pack; "
                         "links may point only inside the pack")


def check_link_resolves(root: Path, path: Path, rel: PurePosixPath) -> None:
    """Refuse the symlink ``path`` if, followed through other links, it leaves ``root``."""
    base = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != base and not real.startswith(base + os.sep):
        raise UnsafePack(f"the link {rel} leads outside the pack (through "
                         f"{os.readlink(path)!r}); links may point only inside it")


class Budget:
    """Counts entries (files, folders, links) and bytes against the caps; raises
    ``UnsafePack`` past either."""

    def __init__(self, max_entries: int = MAX_FILES, max_bytes: int = MAX_TOTAL_BYTES) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.entries = self.bytes = 0

    def add_entry(self, rel: PurePosixPath | str) -> None:
        """Count one file, folder or link; a folder costs an inode like any file."""
        self.entries += 1
        if self.entries > self.max_entries:
            raise UnsafePack(f"the pack holds more than {self.max_entries:,} files, folders and "
                             "links (the limit); a pack should hold tools, not data sets")

    def add_bytes(self, rel: PurePosixPath | str, size: int) -> None:
        self.bytes += size
        if self.bytes > self.max_bytes:
            raise UnsafePack(f"the pack unpacks to more than {_mib(self.max_bytes)} (the "
                             f"limit), reached at {rel}; a pack should hold tools, not data")


def describe_mode(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, words in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "a special file"


@dataclass(frozen=True)
class Entry:
    """One thing in a pack's tree, checked: a folder, a regular file or a symlink."""

    rel: PurePosixPath
    path: Path
    kind: str  # "dir", "file" or "link"
    mode: int = 0
    link: str = ""


def walk_pack(root: Path, budget: Budget | None = None) -> Iterator[Entry]:
    """Every entry under ``root`` (parents before children, sorted), each checked.

    ``.git`` and ``__pycache__`` are skipped. Raises ``UnsafePack`` for a link that leads
    out of ``root``, a device, FIFO or socket, or a tree over the caps (folders count as
    entries too).
    """
    budget = budget or Budget()
    queue = [(root, PurePosixPath())]
    while queue:
        folder, rel_folder = queue.pop(0)
        try:
            names = sorted(os.listdir(folder))
        except OSError as exc:
            raise UnsafePack(f"cannot read {folder}: {exc.strerror or exc}") from exc
        for name in names:
            if name in SKIPPED_NAMES:
                continue
            path, rel = folder / name, rel_folder / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                check_link_target(rel, os.readlink(path))
                check_link_resolves(root, path, rel)
                budget.add_entry(rel)
                yield Entry(rel, path, "link", link=os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                budget.add_entry(rel)
                yield Entry(rel, path, "dir")
                queue.append((path, rel))
            elif stat.S_ISREG(st.st_mode):
                budget.add_entry(rel)
                budget.add_bytes(rel, st.st_size)
                yield Entry(rel, path, "file", mode=st.st_mode)
            else:
                raise UnsafePack(f"{rel} is {describe_mode(st.st_mode)}; a pack may hold "
                                 "only files, folders and links inside itself")


def file_mode(mode: int) -> int:
    """The mode a pack's file is written with: readable, executable only if it was."""
    return 0o755 if mode & 0o111 else 0o644
