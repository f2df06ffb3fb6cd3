"""Which protocol ``silica.display.detect`` picks: from the setting, the environment, the
terminal's answers (parsed by ``parse_answers``, property-tested), and tmux; on a real
pseudo-terminal whose other side is this test."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from silica.display import detect as detect_module
from silica.display.detect import by_environment, choose_setting, detect
from silica.display.query import DA1_QUERY, QUERY, Answers, parse_answers


@pytest.fixture(autouse=True)
def fresh():
    detect_module._asked.cache_clear()
    detect_module._tmux.cache_clear()
    yield
    detect_module._asked.cache_clear()
    detect_module._tmux.cache_clear()


class FakeTerminal:
    """A pty: ``stream`` is its slave side as a program's stdout; a thread reads the master
    side and, when the DA1 query arrives, writes ``answer`` (None: stays silent)."""

    def __init__(self, answer: bytes | None = None) -> None:
        import fcntl
        import struct
        import termios

        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.stream = open(slave, "w", closefd=True)  # noqa: SIM115
        self.answer, self.seen, self.done = answer, b"", False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import select

        answered = False
        while not self.done:
            if not select.select([self.master], [], [], 0.05)[0]:
                continue
            try:
                self.seen += os.read(self.master, 4096)
            except OSError:
                return
            if self.answer is not None and not answered and DA1_QUERY in self.seen:
                answered = True
                os.write(self.master, self.answer)

    def close(self) -> None:
        self.done = True
        self.thread.join(5)
        self.stream.close()
        os.close(self.master)


@pytest.fixture
def terminal():
    made: list[FakeTerminal] = []

    def make(answer: bytes | None = None) -> FakeTerminal:
        made.append(FakeTerminal(answer))
        return made[-1]

    yield make
    for fake in made:
        fake.close()


PLAIN = {"TERM": "xterm-256color"}


def test_a_silent_terminal_gets_the_fallback_after_one_query(terminal):
    fake = terminal(None)
    start = time.monotonic()
    first = detect(environ=PLAIN, stream=fake.stream)
    spent = time.monotonic() - start
    again = detect(environ=PLAIN, stream=fake.stream)
    assert first.protocol == again.protocol == "blocks"
    assert spent < 1.0  # 0.1 s asked; loosely, as no test asserts a time precisely
    time.sleep(0.2)
    assert fake.seen.count(QUERY) == 1


@pytest.mark.parametrize(("answer", "protocol", "cell"), [
    (b"\x1b_Gi=31;OK\x1b\\\x1b[?62;22c", "kitty", (10, 20)),
    (b"\x1b[6;18;9t\x1b[?63;1;2;4;6;9c", "sixel", (9, 18)),
    (b"\x1b[4;600;1000t\x1b[?64;4c", "sixel", (10, 20)),
    (b"\x1bP>|WezTerm 20240203\x1b\\\x1b_Gi=31;OK\x1b\\\x1b[?65;4c", "iterm2", (10, 20)),
    (b"\x1b[?62;22c", "blocks", (10, 20)),
    (b"\x00\xff garbage \x1b[?x\x1b_Gi=31;NOPE\x1b\\", "blocks", (10, 20)),
])
def test_the_terminals_answers_decide(terminal, answer, protocol, cell):
    fake = terminal(answer)
    found = detect(environ=PLAIN, stream=fake.stream)
    assert found.protocol == protocol and not found.tmux
    assert (found.cells.columns, found.cells.rows) == (100, 30)
    assert (found.cells.cell_width, found.cells.cell_height) == cell


def test_the_terminal_mode_is_restored(terminal):
    import termios

    fake = terminal(b"\x1b[?62;4c")
    before = termios.tcgetattr(fake.stream.fileno())
    detect(environ=PLAIN, stream=fake.stream)
    assert termios.tcgetattr(fake.stream.fileno()) == before


def test_no_terminal_or_a_dumb_one_draws_nothing_whatever_the_setting(terminal):
    fake = terminal(b"\x1b_Gi=31;OK\x1b\\\x1b[?62;4c")
    for setting in ("auto", "kitty", "iterm2", "sixel", "blocks"):
        assert detect(setting, environ={"TERM": "xterm-kitty"},
                      stream=io.StringIO()).protocol is None
        assert detect(setting, environ={"TERM": "dumb"}, stream=fake.stream).protocol is None
    assert detect("off", environ={"TERM": "xterm-kitty"}, stream=fake.stream).protocol is None
    assert fake.seen == b""  # and nothing was asked


def test_a_named_protocol_is_used_as_it_is(terminal):
    fake = terminal(None)
    assert detect("iterm2", environ=PLAIN, stream=fake.stream).protocol == "iterm2"
    assert detect("kitty", environ={"TERM": "tmux-256color", "TMUX": "/x,1,0"},
                  stream=fake.stream).tmux
    assert fake.seen == b""


@pytest.mark.parametrize(("environ", "protocol"), [
    ({"TERM": "xterm-kitty"}, "kitty"),
    ({"TERM": "xterm-256color", "KITTY_WINDOW_ID": "3"}, "kitty"),
    ({"TERM": "xterm-ghostty", "TERM_PROGRAM": "ghostty"}, "kitty"),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "WezTerm"}, "iterm2"),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "iTerm.app"}, "iterm2"),
    ({"TERM": "xterm-256color", "LC_TERMINAL": "iTerm2"}, "iterm2"),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "mintty"}, "iterm2"),
    ({"TERM": "xterm-256color", "KONSOLE_VERSION": "240202"}, "kitty"),
    ({"TERM": "xterm-256color", "WT_SESSION": "abc"}, "sixel"),
    ({"TERM": "foot"}, "sixel"),
    ({"TERM": "mlterm"}, "sixel"),
    ({"TERM": "xterm-256color"}, None),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "Apple_Terminal"}, None),
])
def test_the_environment_names_the_terminal(environ, protocol):
    assert by_environment(environ) == protocol


@pytest.mark.parametrize(("configured", "flag", "variable", "chosen"), [
    ("auto", None, None, "auto"),
    ("sixel", None, None, "sixel"),
    ("off", True, None, "auto"),
    ("sixel", True, None, "sixel"),
    ("kitty", False, None, "off"),
    ("auto", None, "0", "off"),
    ("off", None, "1", "auto"),
    ("off", False, "1", "off"),
    ("kitty", True, "0", "kitty"),
    ("auto", None, "maybe", "auto"),
])
def test_flag_variable_and_setting(configured, flag, variable, chosen):
    environ = {} if variable is None else {"SILICA_INLINE_IMAGES": variable}
    setting, notice = choose_setting(configured, flag, environ)
    assert setting == chosen
    assert bool(notice) == (variable is not None)
    assert "[display] images" in notice or not notice


# -- the parser of answers ---------------------------------------------------------------

ANSWERS = {
    "kitty": b"\x1b_Gi=31;OK\x1b\\",
    "sixel": b"\x1b[?62;4;22c",
    "name": b"\x1bP>|kitty(0.35.2)\x1b\\",
    "cell": b"\x1b[6;20;9t",
    "window": b"\x1b[4;480;810t",
}
NOISE = st.binary(max_size=200).map(lambda b: b.replace(b"\x1b", b""))  # no ESC: no answer


@given(st.binary(max_size=2000))
def test_any_bytes_parse_to_answers_without_error(data):
    answers = parse_answers(data)
    assert isinstance(answers, Answers)
    assert len(answers.name) <= 128 and answers.name.isascii()
    for size in (answers.cell, answers.window):
        assert size is None or (0 < size[0] <= 99999 and 0 < size[1] <= 99999)
    assert answers.sixel <= answers.complete


@given(st.lists(st.sampled_from(sorted(ANSWERS)), unique=True), st.lists(NOISE, min_size=6,
                                                                         max_size=6))
def test_answers_are_found_among_noise_in_any_order(kinds, noise):
    data = noise[0] + b"".join(ANSWERS[k] + noise[i + 1] for i, k in enumerate(kinds))
    answers = parse_answers(data)
    assert answers.kitty == ("kitty" in kinds)
    assert answers.sixel == ("sixel" in kinds) == answers.complete
    assert answers.name == ("kitty(0.35.2)" if "name" in kinds else "")
    assert answers.cell == ((9, 20) if "cell" in kinds else None)
    assert answers.window == ((810, 480) if "window" in kinds else None)


@given(st.sampled_from(sorted(ANSWERS)), st.data())
def test_a_cut_answer_is_no_answer(kind, data):
    whole = ANSWERS[kind]
    cut = whole[:data.draw(st.integers(0, len(whole) - 1))]
    assert parse_answers(cut) == Answers()


# -- tmux ----------------------------------------------------------------------------------

@pytest.fixture
def tmux_server(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    sock = tmp_path / "tmux.sock"
    subprocess.run(["tmux", "-S", str(sock), "-f", "/dev/null", "new-session", "-d", "-x",
                    "80", "-y", "24"], check=True, timeout=30)
    yield sock
    subprocess.run(["tmux", "-S", str(sock), "kill-server"], timeout=30, check=False)


def test_tmux_without_passthrough_gets_the_fallback(tmux_server, terminal):
    subprocess.run(["tmux", "-S", str(tmux_server), "set", "-g", "allow-passthrough", "off"],
                   check=True, timeout=30)
    environ = {"TERM": "tmux-256color", "TMUX": f"{tmux_server},1,0", "KITTY_WINDOW_ID": "1",
               "PATH": os.environ["PATH"]}
    found = detect(environ=environ, stream=terminal(None).stream)
    assert (found.protocol, found.tmux) == ("blocks", False)


def test_tmux_with_passthrough_wraps_for_the_outer_terminal(tmux_server, terminal):
    subprocess.run(["tmux", "-S", str(tmux_server), "set", "-g", "allow-passthrough", "on"],
                   check=True, timeout=30)
    environ = {"TERM": "tmux-256color", "TERM_PROGRAM": "tmux", "KITTY_WINDOW_ID": "1",
               "TMUX": f"{tmux_server},1,0", "PATH": os.environ["PATH"]}
    fake = terminal(None)
    found = detect(environ=environ, stream=fake.stream)
    assert (found.protocol, found.tmux) == ("kitty", True)
    unknown = {k: v for k, v in environ.items() if k != "KITTY_WINDOW_ID"}
    detect_module._tmux.cache_clear()
    assert detect(environ=unknown, stream=fake.stream).protocol == "blocks"
    assert fake.seen == b""  # tmux was asked, not the terminal


# -- drawing -------------------------------------------------------------------------------

def test_an_image_that_cannot_be_drawn_writes_nothing(terminal):
    from silica.display.draw import draw
    from silica.display.encode import Cells

    fake = terminal(None)
    kitty = detect("kitty", environ=PLAIN, stream=fake.stream)
    assert kitty.protocol == "kitty" and kitty.cells == Cells(100, 30, 10, 20)
    assert draw(fake.stream, kitty, b"\x89PNG\r\n\x1a\n not really \x1b]0;title\x07") is False
    off = detect("off", environ=PLAIN, stream=fake.stream)
    assert draw(fake.stream, off, b"anything") is False
    time.sleep(0.2)
    assert fake.seen == b""


BACKGROUND_JOB = """
import os, sys
from silica.display.detect import detect
master, slave = os.openpty()
os.setsid()
tty = os.open(os.ttyname(slave), os.O_RDWR)  # a session leader opening it: its own terminal
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)  # a job of its own, not the terminal's foreground one
    found = detect(environ={"TERM": "xterm-256color"}, stream=open(tty, "w", closefd=False))
    os.write(1, f"{found.protocol}\\n".encode())
    os._exit(0)
_, status = os.waitpid(pid, os.WUNTRACED)
print("stopped" if os.WIFSTOPPED(status) else "exited")
if os.WIFSTOPPED(status):
    os.kill(pid, 9)
"""


def test_a_background_job_does_not_ask_its_terminal_and_is_not_stopped():
    import sys

    done = subprocess.run([sys.executable, "-c", BACKGROUND_JOB], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == ["blocks", "exited"], done.stdout + done.stderr


def test_sixel_without_libsixel_is_drawn_in_half_blocks(terminal, monkeypatch):
    import io as bytes_io

    from PIL import Image

    from silica.display import draw as draw_module
    from silica.display.encode import encode
    from silica.display.sixel import SixelUnavailable

    def no_libsixel(data, protocol, cells, **options):
        if protocol == "sixel":
            raise SixelUnavailable("libsixel is not installed")
        return encode(data, protocol, cells, **options)

    monkeypatch.setattr(draw_module, "encode", no_libsixel)
    png = bytes_io.BytesIO()
    Image.new("RGB", (40, 20), (200, 10, 10)).save(png, format="PNG")
    out = bytes_io.StringIO()
    sixel = draw_module.Terminal("sixel", detect("sixel", environ=PLAIN,
                                                 stream=terminal(None).stream).cells)
    assert draw_module.draw(out, sixel, png.getvalue())
    assert "▀" in out.getvalue() and "\x1bP" not in out.getvalue()
