"""Real terminals show the chart: ``silica tools run`` with ``[display] images = "auto"``
in Debian's xterm, run as a VT340 with 256 colour registers under Xvfb (silica finds sixel
from xterm's own DA1 answer), and in kitty (found from its environment; kitty runs under
Xvfb on Mesa's software OpenGL). A screenshot of the X display holds the chart, at the
size silica fitted it to, its pixels close to the chart's."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from display_check import close_to, decoded, image_tool
from PIL import Image, ImageDraw
from pty_terminal import clean_env

from silica.results.kitty import extract_kitty
from silica.results.sixel import extract_sixel

pytestmark = pytest.mark.skipif(
    not (shutil.which("xterm") and shutil.which("Xvfb") and shutil.which("script")),
    reason="needs xterm, Xvfb and script (apt install xterm xvfb bsdutils)")
FRAME = (255, 0, 255)


def chart() -> bytes:
    """A bar chart in a magenta frame, by which it is found on the screen."""
    img = Image.new("RGB", (640, 400), "white")
    pen = ImageDraw.Draw(img)
    for i, value in enumerate([3, 1, 4, 1, 5, 9, 2, 6]):
        x = 50 + i * 70
        pen.rectangle([x, 360 - value * 35, x + 45, 360], fill=(59, 111, 182))
    pen.line([(40, 360), (610, 360)], fill="black", width=3)
    pen.rectangle([0, 0, 639, 399], outline=FRAME, width=8)
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def display():
    read, write = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1280x1024x24",
                               "-nolisten", "tcp"], pass_fds=(write,),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        number = b""
        while not number.endswith(b"\n"):
            piece = os.read(read, 16)
            assert piece, "Xvfb did not start"
            number += piece
        yield f":{number.decode().strip()}"
    finally:
        os.close(read)
        server.terminate()
        server.wait(timeout=30)


def screenshot(name: str) -> Image.Image:
    from PIL import ImageGrab

    return ImageGrab.grab(xdisplay=name).convert("RGB")


def frame_box(shot: Image.Image) -> tuple[int, int, int, int] | None:
    """The box of the magenta pixels on the screen."""
    from PIL import ImageChops

    r, g, b = shot.split()
    high_r = r.point(lambda v: 255 if v > 200 else 0)
    low_g = g.point(lambda v: 255 if v < 60 else 0)
    high_b = b.point(lambda v: 255 if v > 200 else 0)
    return ImageChops.multiply(ImageChops.multiply(high_r, low_g), high_b).getbbox()


def run_in(terminal: list[str], display: str, project, tmp_path) -> tuple[Image.Image, bytes]:
    """Run ``silica tools run chart`` in the ``terminal`` command (its argv up to the
    command to run) on ``display``, under ``script`` (which passes everything through and
    keeps a copy); a screenshot once it is done, and every byte silica wrote."""
    shots, log, done = tmp_path / "shots", tmp_path / "typescript", tmp_path / "done"
    inner = f"{sys.executable} -m silica tools run chart --save-images {shots}"
    line = f"script -q -e -c '{inner}' {log}; touch {done}; sleep 600"
    window = subprocess.Popen([*terminal, "sh", "-c", line], env=clean_env(DISPLAY=display),
                              cwd=project, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        while not done.exists():
            assert window.poll() is None, "the terminal ended"
            assert time.monotonic() < end, "silica did not finish in the terminal"
            time.sleep(0.2)
        time.sleep(1.5)  # the terminal paints what it was sent
        shot = screenshot(display)
    finally:
        window.kill()
        window.wait(timeout=30)
    shot.save(tmp_path / "screen.png")  # kept with the test's files, to look at on failure
    return shot, log.read_bytes()


def shows_the_chart(shot: Image.Image, sent: Image.Image, tmp_path,
                    slack: tuple[int, int] = (2, 6)) -> None:
    """The chart on the screen is ``sent``'s size (within ``slack`` pixels across and down),
    its pixels close to the chart shown."""
    box = frame_box(shot)
    assert box is not None, "no chart on the screen"
    shown = shot.crop(box)
    assert abs(shown.width - sent.width) <= slack[0], (shown.size, sent.size)
    assert abs(shown.height - sent.height) <= slack[1], (shown.size, sent.size)
    [saved] = sorted((tmp_path / "shots").glob("*.png"))
    with Image.open(saved) as img:
        close_to(shown, img.convert("RGB"), tolerance=20)


@pytest.fixture
def chart_tool(home, user_tools):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[display]\nimages = "auto"\n')
    image_tool(user_tools, "chart", (chart(),))


def test_xterm_as_a_vt340_shows_the_chart(chart_tool, project, tmp_path, display):
    shot, written = run_in(
        ["xterm", "-ti", "vt340", "-xrm", "XTerm*decTerminalID: vt340",
         "-xrm", "XTerm*numColorRegisters: 256", "-xrm", "XTerm*sixelScrolling: true",
         "-geometry", "100x40+0+0", "-bg", "white", "-fg", "black", "-e"],
        display, project, tmp_path)
    assert b"\x1b[c" in written  # xterm was asked (auto) ...
    [sixel] = extract_sixel(written).images  # ... and its DA1 answer chose sixel
    shows_the_chart(shot, decoded(sixel.data), tmp_path)
    assert re.search(rb"\[image: image/png, 640x400 px", written)


@pytest.mark.skipif(shutil.which("kitty") is None, reason="needs kitty (apt install kitty)")
def test_kitty_shows_the_chart(chart_tool, project, tmp_path, display, monkeypatch):
    monkeypatch.setenv("LIBGL_ALWAYS_SOFTWARE", "1")  # Xvfb has no GPU: Mesa's llvmpipe
    shot, written = run_in(
        ["kitty", "--config", "NONE", "-o", "initial_window_width=800",
         "-o", "initial_window_height=600", "-o", "background=#ffffff",
         "-o", "foreground=#000000"], display, project, tmp_path)
    assert b"\x1b[c" not in written  # kitty says who it is in its environment
    [drawn] = extract_kitty(written).images
    # kitty stretches an image to the whole cells it is given (c=, r=): up to a cell more
    shows_the_chart(shot, decoded(drawn.data), tmp_path, slack=(10, 20))
