"""The built-in ``read_file`` tool: a text file as numbered lines, an image file as an image.

What a file is comes from its bytes, not its name: an image (by magic bytes) comes back as an
``ImageBlock`` of raw bytes, which the Toolbox fits to the provider through
``silica_prepare_image``; anything with a NUL byte near its start is binary and not shown;
everything else is text, numbered like ``cat -n``. Paths are relative to the workspace (the
Toolbox's working directory), and nothing outside it is read unless the settings allow it
(``read_file.allow_outside_workspace``, ``read_file.allowed_paths``); the file is opened by
descriptor from the workspace (``silica.tools.safe_open``), so a path changed during the call
cannot lead outside. Only regular files are opened for reading, non-blocking, so a FIFO or a
device can never hang the host. The work is bounded whatever the file's size: a page reads
its own lines, reaching ``offset`` scans at most ``SKIP_BYTES``, and the lines left are
counted only within ``COUNT_BYTES``. Every problem is an error result that says what to do;
nothing here raises.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from silica.blocks import ImageBlock, TextBlock, ToolResult
from silica.config import ReadFileSettings
from silica.images.sniff import describe_media_type, sniff_media_type
from silica.tools.builtin import BuiltinTool, ToolContext
from silica.tools.safe_open import NotRegular, OutsideRoots, open_regular

DEFAULT_LIMIT = 2000
SNIFF_BYTES = 8192  # a NUL byte in these marks a binary file (as git decides)
_NOT_SEEN = {"image/svg+xml", "application/pdf"}  # sniffed, but no model sees them as images
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
         (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))
_MAX_WIDE_TEXT = 16 * 1024 * 1024  # UTF-16/32 files are decoded whole, up to this size
SKIP_BYTES = 256 * 1024 * 1024  # the farthest into a file `offset` can reach
COUNT_BYTES = 16 * 1024 * 1024  # lines left after a page are counted only within this
_CHUNK = 1024 * 1024
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
                        run=run, title="Read a file", read_only=True, destructive=False,
                        idempotent=True, open_world=False)


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


def _open(path: str, workdir: Path, settings: ReadFileSettings) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file ``path`` names, if reading it is allowed,
    and its ``fstat``: opened beneath the workspace (or an allowed root) with no window
    between the check and the open (see ``silica.tools.safe_open``)."""
    workspace = os.path.realpath(workdir)
    roots = [workspace, *(os.path.realpath(os.path.join(workspace, allowed.expanduser()))
                          for allowed in settings.allowed_paths)]
    if settings.allow_outside_workspace:
        roots.append("/")
    try:
        return open_regular(os.path.expanduser(path), workspace, roots)
    except OutsideRoots as exc:
        shown = path if exc.resolved == path else f"{path} (which resolves to {exc.resolved})"
        raise _Refused(
            f"{shown} is outside the workspace {workspace}, so it was not read. Read files "
            "inside the workspace; to allow this one, add its folder to "
            "read_file.allowed_paths, or set read_file.allow_outside_workspace = true, in "
            "silica's config.toml") from None
    except NotRegular as exc:
        kind = next((name for test, name in _KINDS if test(exc.st.st_mode)),
                    "not a regular file")
        hint = "; list its files with a shell tool instead" if stat.S_ISDIR(exc.st.st_mode) \
            else ""
        raise _Refused(f"{path} is {kind}, not a regular file, so it was not read{hint}") \
            from None
    except FileNotFoundError:
        raise _Refused(f"{path} does not exist; check the path (relative paths start at "
                       "the workspace)") from None
    except NotADirectoryError:
        raise _Refused(f"{path} does not exist: a part of the path is a file, "
                       "not a folder") from None


# -- what --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Page:
    offset: int
    limit: int
    max_bytes: int


def _read(path: str, workdir: Path, settings: ReadFileSettings, offset: int,
          limit: int) -> ToolResult:
    fd, st = _open(path, workdir, settings)
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
    """The page of numbered lines ``page`` asks for, reading only that much of the file:
    the lines before ``offset`` are skipped within ``SKIP_BYTES``, the lines after the page
    are counted only if they end within ``COUNT_BYTES`` (otherwise the hint has no total)."""
    src: _Lines = _Utf8Lines(f, page.max_bytes) if encoding == "utf-8" else \
        _WideLines(f, encoding)
    hint_room = len(json.dumps(path)) + 96  # the read-on line fits in the cap too
    budget = max(page.max_bytes - hint_room, page.max_bytes // 2)
    skipped, ended = src.skip(page.offset - 1)
    if skipped < page.offset - 1:
        if ended and skipped == 0:
            return ToolResult(blocks=[TextBlock(text=note + f"({path} is empty)")])
        if ended:
            raise _Refused(f"offset {page.offset} is past the end of {path}, which has "
                           f"{_lines_word(skipped)}; use an offset from 1 to {skipped}")
        raise _Refused(
            f"offset {page.offset} is past the first {src.reach} of {path} ({skipped:,} "
            "lines), which is as far into a file as read_file looks; read further with a "
            f"shell tool (e.g. tail -n +{page.offset})")
    out: list[str] = [note] if note else []
    used = len(note.encode())
    number, shown, hint = page.offset - 1, 0, ""
    while (item := src.next()) is not None:
        raw, complete = item
        number += 1
        if shown < page.limit:
            text = raw.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
            entry = f"{number:>6}\t{text}\n"
            size = len(entry.encode())
            if complete and used + size <= budget:
                out.append(entry)
                used += size
                shown += 1
                continue
            if not shown:  # one line alone over the cap: its start, then read on after it
                marker = f"\n[line {number} is longer than the {page.max_bytes:,}-byte " \
                         "cap; only its start is shown]\n"
                room = max(0, budget - used - len(marker))
                out.append(entry.encode()[:room].decode("utf-8", errors="ignore") + marker)
                hint = _read_on(path, number + 1, src.after(complete), known_more=False)
                break
        after = src.after(complete)  # this line starts the next page
        hint = _read_on(path, number, None if after is None else after + 1, known_more=True)
        break
    else:
        if number == 0:
            return ToolResult(blocks=[TextBlock(text=note + f"({path} is empty)")])
        if shown == 0:
            raise _Refused(f"offset {page.offset} is past the end of {path}, which has "
                           f"{_lines_word(number)}; use an offset from 1 to {number}")
        if not src.whole:
            hint = (f"[... {path} goes on past the first {src.reach}, which is as far as "
                    "read_file reads; read the rest with a shell tool]")
    return ToolResult(blocks=[TextBlock(text=("".join(out) + hint).rstrip("\n"))])


def _lines_word(count: int) -> str:
    return f"{count:,} line{'s' if count != 1 else ''}"


def _read_on(path: str, offset: int, more: int | None, *, known_more: bool) -> str:
    """The last line of a page: how many lines are left (when that was cheap to count)
    and the call that reads on."""
    call = f"read_file({json.dumps(path)}, offset={offset})"
    if more is None:
        return f"[... more lines {'follow' if known_more else 'may follow'}: {call}]"
    return f"[... {_lines_word(more).replace(' line', ' more line')}: {call}]" if more else ""


class _Lines(Protocol):
    """A file's lines as UTF-8, read forward with bounded work."""

    whole: bool  # False when lines past ``reach`` exist but are never given

    @property
    def reach(self) -> str:
        """How far into the file lines are looked for, in words."""

    def skip(self, count: int) -> tuple[int, bool]:
        """Skip up to ``count`` lines: how many were, and whether the file ended."""

    def next(self) -> tuple[bytes, bool] | None:
        """The next line (at most the cap in bytes) and whether that was all of it."""

    def after(self, complete: bool) -> int | None:
        """Lines after the one just read (``complete``: read to its end); ``None`` when
        counting them would take more than ``COUNT_BYTES``."""


class _Utf8Lines:
    """Lines read with ``readline(cap + 1)``: memory and work stay bounded whatever the
    line lengths and the file size."""

    whole = True

    @property
    def reach(self) -> str:
        return f"{SKIP_BYTES // 2**20} MiB" if SKIP_BYTES >= 2**20 else f"{SKIP_BYTES:,} bytes"

    def __init__(self, f: IO[bytes], cap: int) -> None:
        self.f, self.cap = f, cap

    def skip(self, count: int) -> tuple[int, bool]:
        skipped = scanned = 0
        partial = False  # bytes after the last newline: a last line with no newline
        while skipped < count:
            if scanned >= SKIP_BYTES:
                return skipped, False
            chunk = self.f.read(min(_CHUNK, SKIP_BYTES - scanned))
            if not chunk:
                return skipped + partial, True
            newlines = chunk.count(b"\n")
            if skipped + newlines >= count:  # stop just after the last line skipped
                pos = -1
                for _ in range(count - skipped):
                    pos = chunk.index(b"\n", pos + 1)
                self.f.seek(pos + 1 - len(chunk), os.SEEK_CUR)
                return count, False
            skipped += newlines
            scanned += len(chunk)
            partial = not chunk.endswith(b"\n")
        return skipped, False

    def next(self) -> tuple[bytes, bool] | None:
        line = self.f.readline(self.cap + 1)
        if not line:
            return None
        if len(line) <= self.cap or line.endswith(b"\n"):
            return line, True
        return line[:self.cap], False

    def after(self, complete: bool) -> int | None:
        newlines = scanned = 0
        last = b"\n"
        while True:
            room = COUNT_BYTES - scanned
            chunk = self.f.read(min(_CHUNK, room) if room > 0 else 1)
            if not chunk:
                lines = newlines + (last != b"\n")
                # Mid-line, the first line counted is the rest of the line just read.
                return lines if complete else max(0, lines - 1)
            if room <= 0:
                return None
            newlines += chunk.count(b"\n")
            scanned += len(chunk)
            last = chunk[-1:]


class _WideLines:
    """Lines of a UTF-16/32 text, decoded whole up to ``_MAX_WIDE_TEXT`` bytes."""

    reach = f"{_MAX_WIDE_TEXT // 2**20} MiB (of a UTF-16/32 file)"

    def __init__(self, f: IO[bytes], encoding: str) -> None:
        data = f.read(_MAX_WIDE_TEXT + 1)
        self.whole = len(data) <= _MAX_WIDE_TEXT
        text = data[:_MAX_WIDE_TEXT].decode(encoding, errors="replace")
        self.lines = text.splitlines(keepends=True)
        self.at = 0

    def skip(self, count: int) -> tuple[int, bool]:
        skipped = min(count, len(self.lines))
        self.at = skipped
        return skipped, self.whole

    def next(self) -> tuple[bytes, bool] | None:
        if self.at >= len(self.lines):
            return None
        self.at += 1
        return self.lines[self.at - 1].encode("utf-8"), True

    def after(self, complete: bool) -> int | None:
        return len(self.lines) - self.at if self.whole else None
