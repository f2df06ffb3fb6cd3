"""``silica chat`` in a real pseudo-terminal: everything it writes to the terminal, prompts
included, holds no control sequence from outside (the model's command, its text)."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

from pty_terminal import Terminal
from wire import anthropic_server, text, tool_call

# The model's program word: ESC c (reset: clears the screen), CSI erase and conceal, OSC
# title (BEL- and ST-ended), a DCS, and the C1 forms of CSI, OSC, ST and NEL.
HOSTILE = ("'\x1bc\x1b[2J\x1b[8m\x1b]0;pwned\x07\x1b]8;;http://x\x1b\\\x1bP1$r\x1b\\"
           "\x9b2J\x9d0;t\x9c\x85\x90q\x9c'rm")
COMMAND = f"{HOSTILE} -rf victim"
# silica's own styling on a colour terminal: SGR only (colour, bold, dim, reset).
OWN_STYLE = re.compile(rb"\x1b\[[0-9;]*m")
# Left after that, nothing a terminal acts on: no ESC, no C0 but BS/TAB/LF/CR, no DEL, no C1.
RAW_CONTROL = re.compile(rb"[\x00-\x07\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]")


def test_chat_prints_no_raw_control_from_the_models_command(home, project):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[shell]\nenabled = true\nallow = ["echo *"]\n')
    victim = project / "victim"
    victim.mkdir()
    # Outside text in every other place chat shows: a tool name, arguments, a result that
    # quotes them, the model's words.
    script = [tool_call("shell", {"command": COMMAND})
              + tool_call("\x1bc\x9b2Jfake", {"a\x1b[2J": "\x9d0;x\x07"}),
              text("It was not run \x1b]0;title\x07\x9b2J.")]
    with anthropic_server(script) as srv:
        env = {**os.environ, **srv.env, "TERM": "xterm-256color", "COLUMNS": "200"}
        term = Terminal([sys.executable, "-m", "silica", "chat"], env, project)
        try:
            term.read_until(b"you> ")
            term.type("clean up")
            term.read_until(b"[y]es / [n]o")
            term.type("n")
            term.read_until(b"you> ")
            term.type("/exit")
            code = term.finish()
        finally:
            term.close()
    assert code == 0, term.seen[-2000:]
    assert victim.exists()  # "n": not run
    shown = term.seen
    # The "always" part went out raw once; a line holding controls is now never one an
    # "always" can stand for, so the prompt offers yes and no only.
    assert b"[y]es / [n]o" in shown and b"[a]lways for" not in shown
    # Every byte chat wrote, prompts and all: silica's colours, and nothing else acting.
    rest = OWN_STYLE.sub(b"", shown)
    found = RAW_CONTROL.search(rest)
    assert found is None, rest[max(0, found.start() - 80):found.end() + 80]
    assert b"\x1b" not in rest
    assert b"\x1b[8m" not in shown and b"\x1b[2J" not in shown
    text_shown = shown.decode("utf-8", "replace")
    assert "␛c" in text_shown and "<U+009B>" in text_shown  # shown, made visible
    assert "␛c<U+009B>2Jfake" in text_shown



def test_ctrl_c_stops_a_turn_in_plain_words_and_chat_goes_on(home, project):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    script = [tool_call("shell", {"command": "sleep 600"}), text("Next answer.")]
    with anthropic_server(script) as srv:
        env = {**os.environ, **srv.env, "TERM": "xterm-256color", "COLUMNS": "200"}
        term = Terminal([sys.executable, "-m", "silica", "chat", "--allow-shell"], env,
                        project)
        try:
            term.read_until(b"you> ")
            term.type("wait a while")
            term.read_until(b"sleep 600")
            time.sleep(1)  # the command has started
            mark = len(term.seen)
            # Ctrl-C as a terminal sends it to its foreground group (this pty is not the
            # chat's controlling terminal, so typing ^C would only echo it)
            os.killpg(term.proc.pid, signal.SIGINT)
            term.read_until(b"you> ", limit=60, since=mark)
            stopped = OWN_STYLE.sub(b"", term.seen[mark:]).decode()
            mark = len(term.seen)
            term.type("and now?")
            term.read_until(b"Next answer.", since=mark)
            term.read_until(b"you> ", since=mark)
            term.type("/exit")
            code = term.finish()
        finally:
            term.close()
    assert code == 0, term.seen[-2000:]
    assert "stopped (tools still running were stopped too)" in stopped
    assert "every tool call in it was answered" not in stopped
    # the model was told the call was stopped, and the session went on in the same loop
    assert len(srv.requests) == 2
