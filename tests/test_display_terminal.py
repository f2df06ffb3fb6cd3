"""Images drawn in a real pseudo-terminal by ``silica tools run`` and ``silica exec``: every
byte silica wrote is read back with silica's own kitty, iTerm2 and sixel extractors (or the
half-block colours parsed) and compared with the image shown, fitted to the terminal; a
pipe gets no escape at all; a terminal that is silent, answers garbage, or answers that it
speaks kitty graphics or sixel gets what it can show."""

from __future__ import annotations

import re
import subprocess
import sys

from display_check import blocks_image, close_to, decoded, fitted, image_tool, picture
from pty_terminal import clean_env, run
from test_resident import env, status, warm_resident  # noqa: F401  (env: a fixture)

from silica.display.encode import Cells
from silica.display.query import KITTY_QUERY, QUERY
from silica.results.iterm2 import extract_iterm2
from silica.results.kitty import extract_kitty
from silica.results.sixel import extract_sixel

PY = sys.executable
CELLS = Cells(80, 24, 10, 20)  # the pty's size as Terminal sets it by default


def tools_run(project, shots, environ, **options) -> tuple[int, bytes]:
    return run([PY, "-m", "silica", "tools", "run", "pic", "--save-images", str(shots)],
               environ, project, **options)


def saved(shots):
    [path] = sorted(shots.glob("*.png"))
    return path


def described_after_drawing(seen: bytes, first_byte: bytes) -> None:
    """The image's line of text comes after the image itself."""
    assert seen.index(first_byte) < seen.index(b"[image: image/png"), seen[-400:]


def test_kitty_by_the_environment_round_trips(user_tools, project, tmp_path):
    image_tool(user_tools)
    shots = tmp_path / "shots"
    code, seen = tools_run(project, shots, clean_env(TERM="xterm-kitty"))
    assert code == 0, seen[-2000:]
    assert KITTY_QUERY not in seen  # the environment said: nothing asked
    [drawn] = extract_kitty(seen).images
    size, source = fitted(saved(shots), CELLS)
    image = decoded(drawn.data)
    assert image.size == (size.width_px, size.height_px)
    close_to(image, source)
    described_after_drawing(seen, b"\x1b_G")


def test_iterm2_by_the_environment_round_trips(user_tools, project, tmp_path):
    image_tool(user_tools)
    shots = tmp_path / "shots"
    code, seen = tools_run(project, shots,
                           clean_env(TERM="xterm-256color", TERM_PROGRAM="iTerm.app"))
    assert code == 0, seen[-2000:]
    [drawn] = extract_iterm2(seen).images
    size, source = fitted(saved(shots), CELLS)
    image = decoded(drawn.data)
    assert image.size == (size.width_px, size.height_px)
    assert f"width={size.columns};height={size.rows}".encode() in seen
    close_to(image, source)
    described_after_drawing(seen, b"\x1b]1337;File=")


def test_sixel_by_the_setting_round_trips_through_exec(home, project, tmp_path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[display]\nimages = "sixel"\n')
    emit = tmp_path / "emit.py"
    emit.write_text("import base64, sys, json\n"
                    f"print(json.dumps({{'base64': {_b64(picture())!r}}}))\n")
    shots = tmp_path / "shots"
    code, seen = run([PY, "-m", "silica", "exec", "--save-images", str(shots), "--", PY,
                      str(emit)], clean_env(TERM="xterm-256color"), project)
    assert code == 0, seen[-2000:]
    assert KITTY_QUERY not in seen  # the setting said
    [drawn] = extract_sixel(seen).images
    size, source = fitted(saved(shots), CELLS)
    image = decoded(drawn.data)
    assert image.width == size.width_px and abs(image.height - size.height_px) < 6
    close_to(image.crop((0, 0, size.width_px, min(image.height, size.height_px))),
             source, tolerance=14)  # 256 colours at most
    described_after_drawing(seen, b"\x1bP")


def test_blocks_when_the_terminal_answers_without_a_protocol(user_tools, project, tmp_path):
    image_tool(user_tools)
    shots = tmp_path / "shots"
    code, seen = tools_run(project, shots, clean_env(TERM="xterm-256color"),
                           answer=b"\x1b[?62;22c")  # DA1: no sixel
    assert code == 0, seen[-2000:]
    assert seen.count(QUERY) == 1
    size, source = fitted(saved(shots), CELLS)
    image = blocks_image(seen.decode("utf-8", "replace"))
    assert image.size == (size.columns, 2 * size.rows)
    close_to(image, source, tolerance=14)
    described_after_drawing(seen, "▀".encode())


def test_a_pipe_gets_no_escape_whatever_is_asked(home, user_tools, project, tmp_path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[display]\nimages = "kitty"\n')
    image_tool(user_tools)
    environ = clean_env(TERM="xterm-kitty", KITTY_WINDOW_ID="1", SILICA_INLINE_IMAGES="1")
    done = subprocess.run([PY, "-m", "silica", "tools", "run", "pic", "--images"],
                          capture_output=True, cwd=project, env=environ, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert b"[image: image/png, 1200x800 px" in done.stdout
    assert b"\x1b" not in done.stdout
    assert b"SILICA_INLINE_IMAGES is replaced by [display] images" in done.stderr


def test_a_silent_terminal_is_asked_once_then_gets_the_fallback(user_tools, project,
                                                                 tmp_path):
    image_tool(user_tools, images=(picture(300, 200), picture(200, 300)))
    shots = tmp_path / "shots"
    code, seen = tools_run(project, shots, clean_env(TERM="xterm-256color"))
    assert code == 0, seen[-2000:]
    assert seen.count(QUERY) == 1  # two images, one question
    assert seen.count(b"[image: image/png") == 2
    text = seen.decode("utf-8", "replace")
    assert text.count("▀") > 100 and "\x1b_Ga=T" not in text and "\x1bPq" not in text


def test_garbage_answers_are_ignored(user_tools, project, tmp_path):
    image_tool(user_tools)
    garbage = (b"\x1b_Gi=31;ENOTSUPPORTED\x1b\\\x1b[?;;;c\x1b[6;0;0t\x1b[6;99999999;1t"
               b"\x1bP>|\xff\xfe\x1b\\\x1b[?62;4" + bytes(range(256)) * 3)
    code, seen = tools_run(project, tmp_path / "shots", clean_env(TERM="xterm-256color"),
                           answer=garbage)
    assert code == 0, seen[-2000:]
    text = seen.decode("utf-8", "replace")
    assert "▀" in text and "\x1bPq" not in text and "\x1b_Ga=T" not in text


def test_a_terminal_answering_kitty_graphics_gets_kitty(user_tools, project, tmp_path):
    image_tool(user_tools)
    shots = tmp_path / "shots"
    code, seen = tools_run(project, shots, clean_env(TERM="xterm-256color"),
                           answer=b"\x1b_Gi=31;OK\x1b\\\x1b[?62;22c")
    assert code == 0, seen[-2000:]
    [drawn] = extract_kitty(seen).images
    size, _ = fitted(saved(shots), CELLS)
    assert decoded(drawn.data).size == (size.width_px, size.height_px)


def test_a_terminal_answering_da1_with_sixel_gets_sixel_at_its_cell_size(
        user_tools, project, tmp_path):
    image_tool(user_tools)
    shots = tmp_path / "shots"
    # no pixel size from the kernel: the cell size comes from the answer to CSI 16 t
    code, seen = tools_run(project, shots, clean_env(TERM="xterm-256color"), pixels=None,
                           answer=b"\x1b[6;16;8t\x1b[?63;1;2;4;6;9;15;22c")
    assert code == 0, seen[-2000:]
    [drawn] = extract_sixel(seen).images
    size, _ = fitted(saved(shots), Cells(80, 24, 8, 16))
    image = decoded(drawn.data)
    assert image.width == size.width_px and abs(image.height - size.height_px) < 6


def test_term_dumb_gets_text_only(user_tools, project, tmp_path):
    image_tool(user_tools)
    code, seen = tools_run(project, tmp_path / "shots", clean_env(TERM="dumb"),
                           answer=b"\x1b_Gi=31;OK\x1b\\\x1b[?62;4c")
    assert code == 0, seen[-2000:]
    assert b"\x1b" not in seen
    assert b"[image: image/png, 1200x800 px" in seen


def test_a_huge_image_is_scaled_to_the_terminals_columns(user_tools, project, tmp_path):
    image_tool(user_tools, images=(picture(1500, 6000),))
    shots = tmp_path / "shots"
    cells = Cells(40, 100, 10, 20)
    code, seen = tools_run(project, shots, clean_env(TERM="xterm-kitty"), columns=40,
                           rows=100)
    assert code == 0, seen[-2000:]
    [drawn] = extract_kitty(seen).images
    size, _ = fitted(saved(shots), cells)
    image = decoded(drawn.data)
    assert image.size == (size.width_px, size.height_px)
    assert image.width <= 400 and size.rows <= 98


def test_no_images_draws_nothing_on_a_kitty_terminal(user_tools, project, tmp_path):
    image_tool(user_tools)
    code, seen = run([PY, "-m", "silica", "tools", "run", "pic", "--no-images"],
                     clean_env(TERM="xterm-kitty"), project)
    assert code == 0, seen[-2000:]
    assert not re.search(rb"\x1b[_P\]]", seen)
    assert b"[image: image/png, 1200x800 px" in seen


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def test_each_run_through_the_resident_asks_its_own_terminal(
        home, user_tools, project, tmp_path, env):  # noqa: F811  (env: the fixture)
    """A run the resident forks has no controlling terminal and the resident's caches: it
    still asks the terminal on its stdout, once, and draws what that one answers."""
    image_tool(user_tools)
    before = warm_resident(home, env, project)
    environ = {**env, **clean_env(TERM="xterm-256color"), "SILICA_RESIDENT": "1"}
    argv = [PY, "-m", "silica", "tools", "run", "pic"]
    for answer, marker in ((b"\x1b[?63;4c", b"\x1bPq"), (b"\x1b[?63;22c", "▀".encode())):
        code, seen = run(argv, environ, project, answer=answer)
        assert code == 0, seen[-2000:]
        assert seen.count(QUERY) == 1 and marker in seen
    after = status(home)
    assert after and after["pid"] == before["pid"] and after["served"] == before["served"] + 2
