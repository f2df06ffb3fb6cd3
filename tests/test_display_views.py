"""The agent's terminal views draw images in a real pseudo-terminal: the image a person
attaches and a tool's image in ``chat``, and both again in ``sessions show``, which replays
a saved session from its stored images; ``sessions show --json`` prints the session."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from display_check import close_to, decoded, image_tool, picture
from pty_terminal import Terminal, clean_env, run
from wire import anthropic_server, text, tool_call

from silica.display.encode import Cells, fit
from silica.results.kitty import extract_kitty

PY = sys.executable
CELLS = Cells(80, 24, 10, 20)


def chat_with_two_images(project, user_tools, tmp_path, env_extra) -> tuple[str, bytes]:
    """A chat in a kitty pty: the person attaches a 600x400 picture, the model calls a tool
    showing a 1200x800 one; the session id and every byte chat wrote."""
    image_tool(user_tools)
    attached = tmp_path / "mine.png"
    attached.write_bytes(picture(600, 400))
    with anthropic_server([tool_call("pic", {}), text("Two pictures. \x1b]0;pwned\x07")]) as srv:
        env = clean_env(**srv.env, **env_extra)
        term = Terminal([PY, "-m", "silica", "chat", "--image", str(attached)], env, project)
        try:
            term.read_until(b"you> ")
            term.type("look")
            term.read_until(b"Two pictures.")
            term.read_until(b"you> ", since=term.seen.index(b"Two pictures."))
            term.type("/exit")
            code = term.finish()
        finally:
            term.close()
    assert code == 0, term.seen[-2000:]
    session = re.search(rb"session (\S+) saved", term.seen).group(1).decode()
    return session, term.seen


def sizes(seen: bytes) -> list[tuple[int, int]]:
    return [decoded(image.data).size for image in extract_kitty(seen).images]


def expected(width: int, height: int) -> tuple[int, int]:
    size = fit(width, height, CELLS)
    return size.width_px, size.height_px


def test_chat_draws_the_persons_image_and_the_tools(sandbox_off, project, user_tools,
                                                    tmp_path):
    session, seen = chat_with_two_images(project, user_tools, tmp_path,
                                         {"TERM": "xterm-kitty"})
    assert sizes(seen) == [expected(600, 400), expected(1200, 800)]
    person, tool = extract_kitty(seen).images
    close_to(decoded(tool.data), decoded(picture()))
    # each described beneath, the person's before the request, the tool's after its call
    plain = re.sub(rb"\x1b\[[0-9;]*m", b"", seen)  # without silica's colours
    assert plain.count(b"[image: image/png") == 2
    assert plain.index(b"600x400 px") < plain.index(b"pic {}") < plain.index(b"1200x800 px")

    code, shown = run([PY, "-m", "silica", "sessions", "show", session],
                      clean_env(TERM="xterm-kitty"), project)
    assert code == 0, shown[-2000:]
    assert sizes(shown) == [expected(600, 400), expected(1200, 800)]
    assert b"\x1b]0;pwned" not in shown  # the model's words, made safe
    words = re.sub(rb"\x1b\[[0-9;]*m", b"", shown).decode("utf-8", "replace")
    for line in ("you> look", "→ pic {}", "← pic: 1 image", "Two pictures."):
        assert line in words, words[-2000:]
    assert words.index("you> look") < words.index("→ pic") < words.index("Two pictures.")

    done = subprocess.run([PY, "-m", "silica", "sessions", "show", session, "--json"],
                          capture_output=True, cwd=project, env=clean_env(TERM="xterm-kitty"),
                          timeout=120)
    assert done.returncode == 0, done.stderr
    saved = json.loads(done.stdout)
    assert saved["id"] == session
    kinds = [[block["type"] for block in m["content"]] for m in saved["messages"]]
    assert kinds == [["text", "image_ref"], ["tool_call"], ["tool_result"], ["text"]], kinds
    assert b"\x1b" not in done.stdout


def test_sessions_show_with_no_images_and_an_unknown_id(sandbox_off, project, user_tools,
                                                        tmp_path):
    session, _ = chat_with_two_images(project, user_tools, tmp_path, {"TERM": "dumb"})
    code, shown = run([PY, "-m", "silica", "sessions", "show", session, "--no-images"],
                      clean_env(TERM="xterm-kitty"), project)
    assert code == 0, shown[-2000:]
    assert extract_kitty(shown).images == []
    assert shown.count(b"[image: image/png") == 2
    done = subprocess.run([PY, "-m", "silica", "sessions", "show", "nope-123"],
                          capture_output=True, text=True, cwd=project, env=clean_env(),
                          timeout=120)
    assert done.returncode == 1
    assert "no session nope-123" in done.stderr and "Traceback" not in done.stderr
