"""The built-in ``read_file`` tool: a text file as numbered lines, an image file as an image.

What a file is comes from its bytes, not its name: an image (by magic bytes) comes back as an
``ImageBlock`` of raw bytes, which the Toolbox fits to the provider through
``silica_prepare_image``; anything with a NUL byte near its start is binary and not shown;
everything else is text, numbered like ``cat -n``. Paths are relative to the workspace (the
Toolbox's working directory), and nothing outside it is read unless the settings allow it
(``read_file.allow_outside_workspace``, ``read_file.allowed_paths``). Only regular files are
opened, non-blocking, so a FIFO or a device can never hang the host. Every problem is an
error result that says what to do; nothing here raises.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from silica.blocks import ImageBlock, TextBlock, ToolResult
from silica.config import ReadFileSettings
from silica.images.sniff import describe_media_type, sniff_media_type
from silica.tools.builtin import BuiltinTool, ToolContext

DEFAULT_LIMIT = 2000
SNIFF_BYTES = 8192  # a NUL byte in these marks a binary file (as git decides)
_NOT_SEEN = {"image/svg+xml", "application/pdf"}  # sniffed, but no model sees them as images
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
         (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))
_MAX_WIDE_TEXT = 64 * 1024 * 1024  # UTF-16/32 files are decoded whole, up to this size
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))

DESCRIPTION = """\
Read a file from the workspace. A text file comes back as numbered lines (line number, a tab,
the line), from line `offset` (1-based), at most `limit` lines; when more is left, the last
line says how to read on. An image file (PNG, JPEG, GIF, WebP, BMP, TIFF...; recognised by
its content, not its name) comes back as an image you can see. Binary files are not shown.
Relative paths are relative to the workspace."""

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string",
                 "description": "The file to read, relative to the workspace or absolute."},
        "offset": {"type": "integer", "minimum": 1, "default": 1,
                   "description": "The line number to start at (1-based)."},
        "limit": {"type": "integer", "minimum": 1, "default": DEFAULT_LIMIT,
                  "description": "The most lines to return."},
    },
    "required": ["path"],
}


class _Refused(Exception):
    """Raised inside this module to end with an error result."""


async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    """The ``BuiltinTool.run`` of ``read_file``: reads in a worker thread."""
    try:
        path = _text_arg(arguments, "path")
        offset = _int_arg(arguments, "offset", 1)
        limit = _int_arg(arguments, "limit", DEFAULT_LIMIT)
    except _Refused as exc:
        return ToolResult.error(str(exc))
    import asyncio  # loaded already: this runs on an event loop; listing tools never does

    return await asyncio.to_thread(read_file, path, context.workdir, context.settings.read_file,
                                   offset=offset, limit=limit)


READ_FILE = BuiltinTool(name="read_file", description=DESCRIPTION, input_schema=INPUT_SCHEMA,
                        run=run)


def read_file(path: str, workdir: Path, settings: ReadFileSettings | None = None, *,
              offset: int = 1, limit: int = DEFAULT_LIMIT) -> ToolResult:
    """Read ``path`` (relative to ``workdir``) as the model would: never raises.

    A text file gives one ``TextBlock`` of numbered lines; an image gives a ``TextBlock``
    naming it and an ``ImageBlock`` of its raw bytes (not yet fitted to any provider).
    """
    settings = settings or ReadFileSettings()
    try:
        return _read(path, workdir, settings, max(1, offset), max(1, limit))
    except _Refused as exc:
        return ToolResult.error(str(exc))
    except OSError as exc:
        return ToolResult.error(f"cannot read {path}: {exc.strerror or exc}")
    except Exception as exc:  # the model gets a message; the host never sees a crash
        return ToolResult.error(f"cannot read {path}: {type(exc).__name__}: {exc}")


# -- arguments ---------------------------------------------------------------------------


def _text_arg(arguments: dict[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise _Refused(f"read_file needs {name!r}: the path of a file, as a string")
    if "\x00" in value:
        raise _Refused(f"{name!r} contains a NUL character; pass a plain file path")
    return value


def _int_arg(arguments: dict[str, Any], name: str, default: int) -> int:
    value = arguments.get(name)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Refused(f"{name!r} must be a whole number of at least 1, not {value!r}")
    return value


# -- where -------------------------------------------------------------------------------


def _resolve(path: str, workdir: Path, settings: ReadFileSettings) -> Path:
    """The real path (symlinks followed) of ``path``, if reading it is allowed."""
    workspace = Path(os.path.realpath(workdir))
    real = Path(os.path.realpath(workspace / Path(path).expanduser()))
    if settings.allow_outside_workspace or real.is_relative_to(workspace):
        return real
    for allowed in settings.allowed_paths:
        if real.is_relative_to(os.path.realpath(workspace / allowed.expanduser())):
            return real
    shown = path if str(real) == path else f"{path} (which resolves to {real})"
    raise _Refused(
        f"{shown} is outside the workspace {workspace}, so it was not read. Read files inside "
        "the workspace; to allow this one, add its folder to read_file.allowed_paths, or set "
        "read_file.allow_outside_workspace = true, in silica's config.toml")


def _open_regular(path: str, real: Path) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file at ``real``, and its ``fstat``."""
    try:
        before = os.stat(real)
    except FileNotFoundError:
        raise _Refused(f"{path} does not exist; check the path (relative paths start at "
                       "the workspace)") from None
    except NotADirectoryError:
        raise _Refused(f"{path} does not exist: a part of the path is a file, "
                       "not a folder") from None
    _require_regular(path, before)
    # O_NONBLOCK: should the path become a FIFO after the check, open() still returns.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | \
        getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(real, flags)
    try:
        after = os.fstat(fd)
        _require_regular(path, after)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise _Refused(f"{path} changed while it was being opened; try again")
    except BaseException:
        os.close(fd)
        raise
    return fd, after


def _require_regular(path: str, st: os.stat_result) -> None:
    if stat.S_ISREG(st.st_mode):
        return
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    hint = "; list its files with a shell tool instead" if stat.S_ISDIR(st.st_mode) else ""
    raise _Refused(f"{path} is {kind}, not a regular file, so it was not read{hint}")


# -- what --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Page:
    offset: int
    limit: int
    max_bytes: int


def _read(path: str, workdir: Path, settings: ReadFileSettings, offset: int,
          limit: int) -> ToolResult:
    real = _resolve(path, workdir, settings)
    fd, st = _open_regular(path, real)
    with open(fd, "rb", closefd=True) as f:
        head = f.read(SNIFF_BYTES)
        kind = _image_type(head)
        if kind in _NOT_SEEN:
            label = describe_media_type(kind)
            if kind == "application/pdf":
                return ToolResult(blocks=[TextBlock(text=(
                    f"{path} is a {label} ({st.st_size:,} bytes): not an image the model can "
                    "see, and not text; it is not shown. Extract its text or render its pages "
                    "to PNG with another tool."))])
            note = (f"[{path} is an {label}: not an image the model can see; its XML source "
                    "follows]\n")
            f.seek(0)
            return _text(path, f, "utf-8", _Page(offset, limit, settings.max_text_bytes), note)
        if kind is not None:
            return _image(path, f, kind, st.st_size, settings.max_image_bytes)
        f.seek(0)
        encoding = next((enc for bom, enc in _BOMS if head.startswith(bom)), None)
        if encoding is None and b"\x00" in head:
            return ToolResult(blocks=[TextBlock(text=(
                f"{path} is a binary file ({st.st_size:,} bytes); it is not shown. "
                "read_file shows text files and images only."))])
        return _text(path, f, encoding or "utf-8", _Page(offset, limit, settings.max_text_bytes))


def _image_type(head: bytes) -> str | None:
    """The image type ``head`` starts with, checking further where the magic is weak."""
    kind = sniff_media_type(head)
    if kind == "image/bmp":  # "BM" alone starts plenty of text; a BMP has a DIB header size
        size = int.from_bytes(head[14:18], "little") if len(head) >= 18 else 0
        return kind if size in (12, 16, 40, 52, 56, 64, 108, 124) else None
    if kind == "image/x-portable-anymap":  # "P1 " too: needs width, height (and maxval)
        words = [w for line in head[2:256].split(b"\n") for w in line.split(b"#")[0].split()]
        need = 2 if head[1:2] in (b"1", b"4") else 3
        return kind if len(words) >= need and all(w.isdigit() for w in words[:need]) else None
    if kind == "image/qoi":
        return kind if len(head) >= 14 and head[12] in (3, 4) and head[13] in (0, 1) else None
    return kind


def _image(path: str, f: IO[bytes], media_type: str, size: int, max_bytes: int) -> ToolResult:
    label = describe_media_type(media_type)
    if size > max_bytes:
        raise _Refused(
            f"{path} is a {label} of {size:,} bytes, over the {max_bytes:,}-byte limit for "
            "images (read_file.max_image_bytes), so it was not read; make a smaller copy "
            "(scaled down or compressed) and read that")
    f.seek(0)
    data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _Refused(f"{path} grew past the {max_bytes:,}-byte image limit while it was read")
    return ToolResult(blocks=[TextBlock(text=f"{path}: {label}, {len(data):,} bytes"),
                              ImageBlock(media_type=media_type, data=data, source="read_file")])


def _text(path: str, f: IO[bytes], encoding: str, page: _Page, note: str = "") -> ToolResult:
    lines = _lines(f, page.max_bytes) if encoding == "utf-8" else _wide_lines(f, encoding)
    hint_room = len(json.dumps(path)) + 64  # the read-on line fits in the cap too
    budget = max(page.max_bytes - hint_room, page.max_bytes // 2)
    out: list[str] = [note] if note else []
    used = len(note.encode())
    number = shown = 0
    next_line: int | None = None
    for number, (raw, cut) in enumerate(lines, 1):
        if number < page.offset:
            continue
        if shown == page.limit:
            next_line = number
            break
        text = raw.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
        entry = f"{number:>6}\t{text}\n"
        size = len(entry.encode())
        if cut or used + size > budget:
            if shown:  # it starts the next page
                next_line = number
                break
            # One line alone over the cap: show its start, say so, read on after it.
            marker = f"\n[line {number} is longer than the {page.max_bytes:,}-byte cap; " \
                     "only its start is shown]\n"
            room = max(0, budget - used - len(marker))
            out.append(entry.encode()[:room].decode("utf-8", errors="ignore") + marker)
            next_line = number + 1
            break
        out.append(entry)
        used += size
        shown += 1
    if next_line is None:
        if number == 0:
            return ToolResult(blocks=[TextBlock(text=note + f"({path} is empty)")])
        if shown == 0:
            raise _Refused(f"offset {page.offset} is past the end of {path}, which has "
                           f"{number} line{'s' if number != 1 else ''}; use an offset from "
                           f"1 to {number}")
    else:
        # Lines after the last one shown: the one read but not shown, then the unread rest.
        rest = _count_lines(f) if encoding == "utf-8" else sum(1 for _ in lines)
        more = (next_line == number) + rest
        if more:
            out.append(f"[... {more:,} more line{'s' if more != 1 else ''}: "
                       f"read_file({json.dumps(path)}, offset={next_line})]")
    return ToolResult(blocks=[TextBlock(text="".join(out).rstrip("\n"))])


def _count_lines(f: IO[bytes]) -> int:
    """Lines from the file position to the end, counted a megabyte at a time."""
    count, last = 0, b"\n"
    while chunk := f.read(1024 * 1024):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")


def _lines(f: IO[bytes], cap: int) -> Iterator[tuple[bytes, bool]]:
    """Each line's first ``cap`` bytes and whether it was longer; memory stays bounded
    whatever the line lengths."""
    chunk = 1024 * 1024
    while True:
        line = f.readline(cap + 1)
        if not line:
            return
        if len(line) <= cap or line.endswith(b"\n"):
            yield line, False
            continue
        tail = line
        while tail and not tail.endswith(b"\n"):  # skip the rest of an over-long line
            tail = f.readline(chunk)
        yield line[:cap], True


def _wide_lines(f: IO[bytes], encoding: str) -> Iterator[tuple[bytes, bool]]:
    """Lines of a UTF-16/32 text (decoded whole, up to a bound), re-encoded as UTF-8."""
    data = f.read(_MAX_WIDE_TEXT)
    text = data.decode(encoding, errors="replace")
    for line in text.splitlines(keepends=True):
        yield line.encode("utf-8"), False
