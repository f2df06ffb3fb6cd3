"""Unpacking a pack's archive (tar, tar.gz, tgz, tar.bz2, tar.xz, zip), member by member.

Every member is checked first (``silica.packs.safety``): a bad name, a link out of the
pack, a device or FIFO, or an archive over the caps (every file, folder and link counts, the
folders a member's path implies too) is refused before anything is written.
Then folders are made, files written (never through a link: links are made last), hard
links copied from the file they name, and every link is checked once more as it resolves
on disk. Nothing is ever written outside ``dest``.
"""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from silica.packs.errors import PackError, UnsafePack
from silica.packs.safety import (
    Budget,
    check_link_resolves,
    check_link_target,
    describe_mode,
    file_mode,
    member_path,
)

_MAX_LINK_TARGET = 4096
# What a damaged, truncated, encrypted or unknown archive raises while being read.
_UNREADABLE = (tarfile.TarError, zipfile.BadZipFile, EOFError, gzip.BadGzipFile, zlib.error,
               lzma.LZMAError, RuntimeError, NotImplementedError)


@dataclass
class _Member:
    rel: PurePosixPath
    kind: str  # "dir", "file", "link" (symlink) or "hardlink"
    size: int = 0
    mode: int = 0o644
    target: str = ""  # link target; for a hard link, the member it copies
    source: object = None  # the tar or zip member to read


# The first bytes of each format we read: (offset, magic).
_MAGIC = ((0, b"PK\x03\x04"), (0, b"PK\x05\x06"), (0, b"\x1f\x8b"), (0, b"BZh"),
          (0, b"\xfd7zXZ\x00"), (257, b"ustar"))


def extract(archive: Path, dest: Path, label: str | None = None) -> None:
    """Unpack ``archive`` into the new folder ``dest``; raises ``PackError``/``UnsafePack``.

    A file that is not a readable archive is refused with a message naming ``label`` (default:
    the file's name) and why, never the archive libraries' internals.
    """
    label = label or archive.name
    with open(archive, "rb") as f:
        head = f.read(512)
    try:
        if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
            with zipfile.ZipFile(archive) as zf:
                members: Iterable[_Member | None] = [_zip_member(zf, info)
                                                     for info in zf.infolist()]
                _unpack(members, dest, lambda m: zf.open(m.source))
            return
        with tarfile.open(archive, "r:*") as tar:
            # Lazily: a member over a cap stops the reading before the rest is decompressed.
            members = (_tar_member(m) for m in tar)
            _unpack(members, dest, lambda m: tar.extractfile(m.source))
    except _UNREADABLE as exc:
        raise PackError(f"{label} is not a .tar.gz, .tgz, .tar or .zip archive: "
                        f"{_why_unreadable(head, exc)}; give a pack folder, a git URL or an "
                        "archive") from exc


def _why_unreadable(head: bytes, exc: BaseException) -> str:
    """In words, why ``head`` (a file's first bytes) did not unpack."""
    if not head:
        return "it is empty"
    if not any(head[at:at + len(magic)] == magic for at, magic in _MAGIC):
        try:
            head[:-4].decode("utf-8")  # the last bytes may cut a character in two
        except UnicodeDecodeError:
            return "its first bytes are not those of any of these formats"
        return "it is a text file" if b"\0" not in head else \
            "its first bytes are not those of any of these formats"
    detail = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
    if isinstance(exc, tarfile.ReadError) and "could not be opened" in detail:
        detail = "no tar archive inside"  # tarfile lists every method it tried: not for users
    return f"it is damaged or cut short ({detail})"


def _tar_member(m: tarfile.TarInfo) -> _Member | None:
    rel = member_path(m.name)
    if rel is None:
        return None
    if m.isdir():
        return _Member(rel, "dir")
    if m.isreg():
        return _Member(rel, "file", m.size, file_mode(m.mode), source=m)
    if m.issym():
        check_link_target(rel, m.linkname)
        return _Member(rel, "link", target=m.linkname)
    if m.islnk():
        outside = UnsafePack(f"the hard link {rel} points to {m.linkname!r}, outside the "
                             "pack; links may point only inside the pack")
        try:
            target = member_path(m.linkname)
        except UnsafePack:
            raise outside from None
        if target is None:
            raise outside
        return _Member(rel, "hardlink", target=target.as_posix())
    kinds = {tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
             tarfile.FIFOTYPE: "a FIFO"}
    raise UnsafePack(f"the entry {rel} is {kinds.get(m.type, 'a special file')}; a pack may "
                     "hold only files, folders and links inside itself")


def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> _Member | None:
    rel = member_path(info.filename)
    if rel is None:
        return None
    mode = info.external_attr >> 16
    if info.is_dir() or stat.S_ISDIR(mode):
        return _Member(rel, "dir")
    if stat.S_ISLNK(mode):
        if info.file_size > _MAX_LINK_TARGET:
            raise UnsafePack(f"the link {rel} has a target longer than {_MAX_LINK_TARGET} bytes")
        target = zf.read(info).decode("utf-8", errors="replace")
        check_link_target(rel, target)
        return _Member(rel, "link", target=target)
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        raise UnsafePack(f"the entry {rel} is {describe_mode(mode)}; a pack may hold only "
                         "files, folders and links inside itself")
    return _Member(rel, "file", info.file_size, file_mode(mode), source=info)


def _plan(members: Iterable[_Member | None]) -> list[_Member]:
    """Check the members as a whole: caps, duplicates, a file used as a folder, hard links."""
    budget = Budget()
    kinds: dict[PurePosixPath, str] = {}
    plan = []
    for m in members:
        if m is None:
            continue
        # Deepest first, up to the first folder already known: its own parents are known too.
        for parent in m.rel.parents:
            known = kinds.get(parent)
            if not parent.parts or known == "dir":
                break
            if known is not None:
                raise UnsafePack(f"{parent} is both a file and a folder in the archive")
            kinds[parent] = "dir"
            budget.add_entry(parent)  # a folder a path implies is made all the same
        seen = kinds.get(m.rel)
        if seen is not None and not (seen == m.kind == "dir"):
            raise UnsafePack(f"the archive holds {m.rel} twice; refusing to guess which to use")
        if m.kind == "hardlink" and kinds.get(PurePosixPath(m.target)) != "file":
            raise UnsafePack(f"the hard link {m.rel} points to {m.target!r}, which is not "
                             "a file earlier in the archive; links may point only inside")
        if seen is None:
            budget.add_entry(m.rel)
        kinds[m.rel] = m.kind
        if m.kind == "file":
            budget.add_bytes(m.rel, m.size)  # the header's word; checked again while writing
        plan.append(m)
    return plan


def _unpack(members: Iterable[_Member | None], dest: Path, open_member) -> None:
    plan = _plan(members)
    dest.mkdir(mode=0o755)
    written = Budget()
    for m in plan:  # folders first, so that every file's parent exists
        if m.kind == "dir":
            dest.joinpath(*m.rel.parts).mkdir(mode=0o755, parents=True, exist_ok=True)
    for m in plan:
        target = dest.joinpath(*m.rel.parts)
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if m.kind == "file":
            src = open_member(m)
            if src is None:
                raise PackError(f"cannot read {m.rel} from the archive")
            with src:
                _write(src, target, m, written)
            os.chmod(target, m.mode)
    for m in plan:
        if m.kind == "hardlink":
            target = dest.joinpath(*m.rel.parts)
            source = dest.joinpath(*PurePosixPath(m.target).parts)
            written.add_bytes(m.rel, source.stat().st_size)
            shutil.copyfile(source, target)  # a copy, not a link: the pack owns its files
            os.chmod(target, source.stat().st_mode & 0o777)
    for m in plan:
        if m.kind == "link":
            os.symlink(m.target, dest.joinpath(*m.rel.parts))
    for m in plan:
        if m.kind == "link":
            check_link_resolves(dest, dest.joinpath(*m.rel.parts), m.rel)


def _write(src: IO[bytes], target: Path, m: _Member, written: Budget) -> None:
    size = 0
    with open(target, "xb") as out:
        while chunk := src.read(1024 * 1024):
            size += len(chunk)
            if size > m.size:
                raise UnsafePack(f"{m.rel} holds more bytes than its header says; the archive "
                                 "is damaged or crafted")
            written.add_bytes(m.rel, len(chunk))
            out.write(chunk)
