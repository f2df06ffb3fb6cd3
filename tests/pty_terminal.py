"""A process on the slave side of a real pseudo-terminal, and the test as the terminal on the
master side: it sees every byte written, types, and (as a fake terminal) answers queries."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

# Variables by which a terminal names itself: none of the machine's reach a test.
TERMINAL_HINTS = ("TERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "KITTY_WINDOW_ID",
                  "LC_TERMINAL", "LC_TERMINAL_VERSION", "WEZTERM_PANE", "KONSOLE_VERSION",
                  "WT_SESSION", "TERMINAL_NAME", "TMUX", "TMUX_PANE", "COLORTERM", "COLUMNS",
                  "LINES", "SILICA_INLINE_IMAGES")
DA1_QUERY = b"\x1b[c"


def clean_env(**changes: str) -> dict[str, str]:
    """This process's environment without any terminal's hints, with ``changes``."""
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_HINTS}
    return {**env, **changes}


class Terminal:
    """``argv`` run on a pty of ``columns`` x ``rows`` cells (``pixels``: the size of a cell
    the kernel reports, None for none). ``answer``: bytes written back, once, when the
    program's DA1 query (the last of silica's queries) arrives; None: never answered."""

    answer: bytes | None = None  # also for subclasses that start the process their own way
    answered = False

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, *,
                 columns: int = 80, rows: int = 24,
                 pixels: tuple[int, int] | None = (10, 20),
                 answer: bytes | None = None) -> None:
        self.master, slave = os.openpty()
        width, height = pixels or (0, 0)
        fcntl.ioctl(slave, termios.TIOCSWINSZ,
                    struct.pack("HHHH", rows, columns, columns * width, rows * height))
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     cwd=cwd, start_new_session=True)
        os.close(slave)
        self.seen = b""
        self.answer = answer
        self.answered = False

    def read_until(self, marker: bytes, limit: float = 120, since: int = 0) -> None:
        """Read until ``marker`` is seen past byte ``since`` of what was read."""
        end = time.monotonic() + limit
        while marker not in self.seen[since:]:
            if time.monotonic() > end:
                raise AssertionError(f"no {marker!r} in {self.seen[-2000:]!r}")
            if not self._read_some(0.5):
                assert self.proc.poll() is None, f"it ended: {self.seen[-2000:]!r}"

    def _read_some(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the slave side is closed
            return False
        self.seen += data
        if self.answer is not None and not self.answered and DA1_QUERY in self.seen:
            self.answered = True
            os.write(self.master, self.answer)
        return bool(data)

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    def finish(self, limit: float = 120) -> int:
        end = time.monotonic() + limit
        while self.proc.poll() is None and time.monotonic() < end:
            self._read_some(0.2)
        while self._read_some(0.2):  # what is left in the pty after the exit
            pass
        return self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:  # a failed test: stop what it started
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self.master)


def run(argv: list[str], env: dict[str, str], cwd: Path, **options) -> tuple[int, bytes]:
    """Run ``argv`` to its end on a ``Terminal``; its status and every byte it wrote."""
    term = Terminal(argv, env, cwd, **options)
    try:
        code = term.finish()
    finally:
        term.close()
    return code, term.seen
