"""Which way the terminal on a stream can draw an image, and its size in cells (``detect``).

In order: no terminal (a pipe, a file), ``TERM=dumb`` or the setting ``"off"``: nothing is
drawn. A protocol named by the setting is used as it is. Otherwise (``"auto"``) the
environment decides where it names the terminal (``by_environment``); then the terminal is
asked (``silica.display.query``, at most ``query_timeout`` seconds, once per process and
terminal); what neither tells gets the fallback, ``"blocks"``: half-block cells in 24-bit
colour, which any terminal but a dumb one shows.

Inside tmux, an image reaches the outer terminal only through tmux's passthrough: when
tmux says it is allowed (``allow-passthrough``), the outer terminal is found from what tmux
knows of its client and from the environment, and the sequences are wrapped
(``Terminal.tmux``); when it is not, the fallback. A protocol named by the setting is
wrapped inside tmux whatever tmux says (unwrapped, tmux would drop it anyway).
"""

from __future__ import annotations

import fcntl
import functools
import os
import struct
import subprocess
import sys
import termios
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, cast, get_args

from silica.config import ImagesSetting
from silica.display.query import Answers, ask_terminal

if TYPE_CHECKING:  # encode imports Pillow: only a drawing needs it
    from silica.display.encode import Cells, Protocol

SETTINGS: tuple[str, ...] = get_args(ImagesSetting)
FORCE_VAR = "SILICA_INLINE_IMAGES"  # the variable ``[display] images`` replaces
QUERY_TIMEOUT = 0.1  # seconds the terminal has to answer, all queries together
DEFAULT_CELL = (10, 20)  # pixels of a cell when the terminal does not say
TMUX_TIMEOUT = 1.0  # seconds for tmux to answer (it takes a few milliseconds)

# Words in a terminal's name (TERM, TERM_PROGRAM, its XTVERSION answer, tmux's name for its
# client), lower case, and the protocol that terminal draws best. WezTerm's kitty graphics
# delete earlier placements and are off by default: its iTerm2 images are its own.
_NAMES: tuple[tuple[str, Protocol], ...] = (
    ("kitty", "kitty"), ("ghostty", "kitty"), ("konsole", "kitty"),
    ("iterm", "iterm2"), ("wezterm", "iterm2"), ("mintty", "iterm2"), ("rio", "iterm2"),
    ("foot", "sixel"), ("mlterm", "sixel"), ("contour", "sixel"), ("yaft", "sixel"),
)


@dataclass(frozen=True)
class Terminal:
    """How to draw on one stream: ``protocol`` None draws nothing (the description alone),
    ``cells`` is the terminal's size, ``tmux``: wrap each sequence for tmux's passthrough."""

    protocol: Protocol | None
    cells: Cells
    tmux: bool = False


def detect(setting: str = "auto", *, environ: Mapping[str, str] = os.environ,
           stream: IO[str] = sys.stdout, query_timeout: float = QUERY_TIMEOUT) -> Terminal:
    """The way to draw images on ``stream`` under ``setting`` (one of ``SETTINGS``); see the
    module docstring. Never writes to ``stream`` itself; the terminal is asked (at most
    once per process) only when ``setting`` is "auto" and the environment does not say."""
    fd = _fileno(stream)
    cells = _cells(fd)
    if fd is None or not os.isatty(fd) or environ.get("TERM", "") == "dumb" \
            or setting not in SETTINGS or setting == "off":
        return Terminal(None, cells)
    in_tmux = bool(environ.get("TMUX")) or environ.get("TERM", "").startswith(("screen",
                                                                                 "tmux"))
    if setting != "auto":
        return Terminal(cast("Protocol", setting), cells, in_tmux and setting != "blocks")
    if in_tmux:
        outer = _outer_terminal(environ)
        return Terminal(outer or "blocks", cells, outer not in (None, "blocks"))
    protocol = by_environment(environ)
    if protocol is None or (protocol == "sixel" and not _pixels_known(fd)):
        answers = _asked(_device(fd), query_timeout) if _may_ask(fd) else Answers()
        cells = _with_answers(cells, answers)
        protocol = protocol or by_answers(answers)
    return Terminal(protocol, cells)


def by_name(name: str) -> Protocol | None:
    """The protocol of the terminal called ``name`` (any of its names), None if unknown."""
    lower = name.lower()
    return next((protocol for word, protocol in _NAMES if word in lower), None)


def by_environment(environ: Mapping[str, str], *, outer: bool = False) -> Protocol | None:
    """The protocol the environment names, None when it does not. ``outer``: inside tmux,
    whose ``TERM`` and ``TERM_PROGRAM`` are its own; only the outer terminal's own
    variables, which tmux leaves, count."""
    if environ.get("KITTY_WINDOW_ID"):
        return "kitty"
    if environ.get("LC_TERMINAL") == "iTerm2" or environ.get("WEZTERM_PANE"):
        return "iterm2"  # LC_* reaches over ssh
    if environ.get("KONSOLE_VERSION"):
        return "kitty"
    if environ.get("WT_SESSION"):
        return "sixel"  # Windows Terminal (1.22 and later)
    if environ.get("TERMINAL_NAME") == "contour":
        return "sixel"
    if outer:
        return None
    return by_name(environ.get("TERM_PROGRAM", "")) or by_name(environ.get("TERM", ""))


def by_answers(answers: Answers) -> Protocol:
    """The protocol the terminal's answers show: its name if known, then kitty graphics,
    then sixel (DA1), else the fallback."""
    return by_name(answers.name) or (
        "kitty" if answers.kitty else "sixel" if answers.sixel else "blocks")


def choose_setting(configured: str, flag: bool | None,
                   environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """The setting in force, and a notice to show ("" for none). ``flag`` (``--images``
    True, ``--no-images`` False) wins, then ``SILICA_INLINE_IMAGES`` (1 or 0), then
    ``configured`` (``[display] images``). To draw (True, 1) keeps a protocol the setting
    names and turns "off" into "auto"; not to draw is "off"."""
    forced = environ.get(FORCE_VAR)
    notice = "" if forced is None else (
        f"{FORCE_VAR} is replaced by [display] images in config.toml (\"auto\", \"kitty\", "
        "\"iterm2\", \"sixel\", \"blocks\" or \"off\") and --images/--no-images")
    if flag is None and forced is not None and forced.strip() in ("0", "1"):
        flag = forced.strip() == "1"
    if flag is False:
        return "off", notice
    if flag and configured == "off":
        return "auto", notice
    return configured, notice


def _fileno(stream: IO[str]) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # a StringIO, a closed stream
        return None


def _winsize(fd: int | None) -> tuple[int, int, int, int]:
    """rows, columns, width and height in pixels (0: unknown)."""
    if fd is None:
        return 0, 0, 0, 0
    try:
        return cast(tuple[int, int, int, int], struct.unpack(
            "HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)))
    except OSError:
        return 0, 0, 0, 0


def _cells(fd: int | None) -> Cells:
    from silica.display.encode import Cells

    rows, columns, width, height = _winsize(fd)
    if not rows or not columns:
        return Cells(80, 24, *DEFAULT_CELL)
    return Cells(columns, rows, width // columns or DEFAULT_CELL[0],
                 height // rows or DEFAULT_CELL[1])


def _device(fd: int) -> str:
    try:
        return os.ttyname(fd)
    except OSError:
        return ""


def _may_ask(fd: int) -> bool:
    """Whether the terminal on ``fd`` may be asked: not when it is this process's own
    terminal and the process a background job there (changing its mode or reading it would
    stop the process: SIGTTOU, SIGTTIN). A terminal that is not its own (a run the
    resident forked has none) has no job control: it may."""
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:  # ENOTTY: not this process's controlling terminal
        return True


def _pixels_known(fd: int) -> bool:
    _, _, width, height = _winsize(fd)
    return bool(width and height)


def _with_answers(cells: Cells, answers: Answers) -> Cells:
    """``cells`` with the cell size the terminal gave (its cell, else its window divided
    by the cells), where the kernel did not know it."""
    size = answers.cell or (answers.window and (answers.window[0] // cells.columns,
                                                answers.window[1] // cells.rows))
    if not size or not all(size) or (cells.cell_width, cells.cell_height) != DEFAULT_CELL:
        return cells
    from silica.display.encode import Cells

    return Cells(cells.columns, cells.rows, size[0], size[1])


@functools.cache
def _asked(device: str, timeout: float) -> Answers:
    """The answers of the terminal ``device`` (asked once per process: a resident's run
    asks again, its caches being cleared); no answers when it cannot be opened."""
    if not device:
        return Answers()
    try:
        fd = os.open(device, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return Answers()
    try:
        return ask_terminal(fd, timeout)
    except (OSError, termios.error):
        return Answers()
    finally:
        os.close(fd)


def _outer_terminal(environ: Mapping[str, str]) -> Protocol | None:
    """Inside tmux: the outer terminal's protocol when tmux passes sequences through to it
    ("blocks" when it is unknown), None when tmux does not."""
    passthrough, client = _tmux(environ.get("TMUX", ""), environ.get("PATH", ""))
    if not passthrough:
        return None
    name, kind, features = (client.split("\t") + ["", "", ""])[:3]
    return (by_name(kind) or by_name(name) or by_environment(environ, outer=True)
            or ("sixel" if "sixel" in features.split(",") else "blocks"))


@functools.cache
def _tmux(socket: str, path: str) -> tuple[bool, str]:
    """Whether tmux (at ``socket``, as ``$TMUX`` names it) passes sequences through, and
    what it knows of its client: name, type and features, tab-separated. tmux before 3.3
    has no ``allow-passthrough`` and always passes them."""
    env = {"TMUX": socket, "PATH": path or os.defpath}
    shown = _run_tmux(["show", "-gv", "allow-passthrough"], env)
    if shown is None:
        return False, ""
    code, out, err = shown
    passthrough = out.strip() in ("on", "all") if code == 0 else "invalid option" in err
    if not passthrough:
        return False, ""
    client = _run_tmux(["display", "-p",
                        "#{client_termname}\t#{client_termtype}\t#{client_termfeatures}"], env)
    return True, client[1].strip() if client and client[0] == 0 else ""


def _run_tmux(args: list[str], env: dict[str, str]) -> tuple[int, str, str] | None:
    try:
        done = subprocess.run(["tmux", *args], capture_output=True, text=True, env=env,
                              timeout=TMUX_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.returncode, done.stdout, done.stderr
