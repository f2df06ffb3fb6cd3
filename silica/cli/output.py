"""Shared output helpers for the CLI: stdout for results, stderr for everything else.

Text from outside (tool files and their output, MCP servers, packs, file names, error
messages quoting any of them) is printed only through these helpers or ``plain``, which pass
it through ``safe_text``: it is never markup and never drives the terminal. Silica's own
styles (the red "error: ", the table colours) are kept.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import Annotated, Any, NoReturn

from cyclopts import Parameter
from rich.console import Console
from rich.style import StyleType
from rich.text import Text

from silica.security.text import safe_text
from silica.security.urls import mask_urls

JsonFlag = Annotated[bool, Parameter(name="--json", negative="",
                                     help="Print JSON (for programs) instead of a table.")]
"""The ``--json`` flag every listing command takes."""



def to_terminal(stream) -> bool:
    """Whether ``stream`` is read by a person at a terminal (or ``$COLUMNS`` says there is
    one): off one (a pipe, a file, a log) output is whole lines for programs."""
    return bool(os.environ.get("COLUMNS")) or stream.isatty()


def _width(stream) -> int | None:
    """The terminal's width on a terminal (or ``$COLUMNS``); off one, no limit: a pipe or a
    log gets whole lines, never text wrapped at 80 columns."""
    return None if to_terminal(stream) else UNWRAPPED


UNWRAPPED = 100_000
_FOLDED_MIN = 12  # a folded column gets at least this many cells in a narrow terminal


def _options(stream) -> dict[str, Any]:
    # soft_wrap: printed messages are never broken (a path or an id stays whole).
    return {"highlight": False, "soft_wrap": True, "width": _width(stream)}


out = Console(**_options(sys.stdout))
err = Console(stderr=True, **_options(sys.stderr))


def reopen_consoles() -> None:
    """Build ``out`` and ``err`` again, in place, for the terminal and environment of now:
    a run the resident forked (``silica.resident.child``) has other streams than the
    process that imported this module."""
    out.__init__(**_options(sys.stdout))  # type: ignore[misc]
    err.__init__(stderr=True, **_options(sys.stderr))  # type: ignore[misc]


def table(*columns: str, whole: tuple[str, ...] = ()):
    """A rich table with ``columns``; the ``whole`` ones (ids, names, paths) are never
    wrapped or cut: in a narrow terminal the other columns give way."""
    from rich.table import Table

    grid = Table(show_edge=False, pad_edge=False)
    for name in columns:
        if name in whole:
            grid.add_column(name, no_wrap=True)
        else:
            grid.add_column(name, overflow="fold")
    return grid


def print_table(grid, console: Console | None = None) -> None:
    """Print a ``table``: at least as wide as its whole columns need, so a narrow terminal
    folds the other columns (and, past that, the line) but never cuts an id or a path."""
    from rich.text import Text as RichText

    def widest(column) -> int:
        cells = [column.header, *column.cells]
        return max(RichText(c).cell_len if isinstance(c, str) else c.cell_len for c in cells)

    needed = sum(widest(c) if c.no_wrap else _FOLDED_MIN for c in grid.columns)
    needed += 3 * (len(grid.columns) - 1)  # " │ " between columns
    console = console or out
    if needed <= console.width:
        console.print(grid)
        return
    saved = console._width  # print() never goes wider than the console: widen it, once
    console.width = needed
    try:
        console.print(grid)
    finally:
        console._width = saved

# json.dumps escapes C0 but not DEL, C1, bidi controls or lone surrogates when not ASCII-only.
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                          r"\ud800-\udfff]")


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout. The data is exactly ``value``; DEL, C1 and bidi
    controls and lone surrogates are written as ``\\uXXXX`` escapes (they occur only inside
    strings), so the text holds nothing a terminal would act on."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    sys.stdout.write(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


def plain(text: object, style: StyleType = "") -> Text:
    """A rich ``Text`` of outside text: made safe by ``safe_text``, never read as markup;
    ``style`` (silica's own) applies to all of it."""
    return Text(safe_text(str(text)), style=style)


def say(message: object, *, console: Console = out, style: StyleType = "") -> None:
    """Print ``message`` (which may hold outside text) as ``plain`` text on ``console``."""
    console.print(plain(message, style))


def labelled(label: str, style: StyleType, message: object) -> None:
    """Print silica's ``label`` in ``style``, then ``message`` made safe, on stderr."""
    err.print(Text.assemble((label, style), safe_text(mask_urls(str(message)))))


def warn(message: object) -> None:
    """Print "warning: " and ``message`` made safe on stderr."""
    labelled("warning: ", "yellow", message)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print "error: " and ``message`` made safe on stderr, then exit with ``code``."""
    labelled("error: ", "bold red", message)
    raise SystemExit(code)


class SafeLogFormatter(logging.Formatter):
    """A log formatter whose records (message and traceback) are made safe: a log line can
    quote a tool's warning or a client's input."""

    def format(self, record: logging.LogRecord) -> str:
        return safe_text(super().format(record))


# Libraries (the MCP SDK, provider SDKs) log warnings with no handler set up: made safe too.
if logging.lastResort is not None:
    logging.lastResort.setFormatter(SafeLogFormatter())
