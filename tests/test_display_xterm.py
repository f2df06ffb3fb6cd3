"""A real terminal shows the chart: ``silica tools run`` in Debian's xterm, run as a VT340
with 256 colour registers under Xvfb, with ``[display] images = "auto"``. silica finds
sixel from xterm's own DA1 answer; a screenshot of the X display holds the chart, at the
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
from display_check import close_to, image_tool
from PIL import Image, ImageDraw
from pty_terminal import clean_env

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


def test_xterm_as_a_vt340_shows_the_chart(home, user_tools, project, tmp_path, display):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[display]\nimages = "auto"\n')
    image_tool(user_tools, "chart", (chart(),))
    shots, log, done = tmp_path / "shots", tmp_path / "typescript", tmp_path / "done"
    inner = (f"{sys.executable} -m silica tools run chart --save-images {shots}")
    line = f"script -q -e -c '{inner}' {log}; touch {done}; sleep 600"
    env = clean_env(DISPLAY=display)
    xterm = subprocess.Popen(
        ["xterm", "-ti", "vt340", "-xrm", "XTerm*decTerminalID: vt340",
         "-xrm", "XTerm*numColorRegisters: 256", "-xrm", "XTerm*sixelScrolling: true",
         "-geometry", "100x40+0+0", "-bg", "white", "-fg", "black", "-e", "sh", "-c", line],
        env=env, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        while not done.exists():
            assert xterm.poll() is None, "xterm ended"
            assert time.monotonic() < end, "silica did not finish in xterm"
            time.sleep(0.2)
        time.sleep(1)  # xterm paints what it was sent
        shot = screenshot(display)
    finally:
        xterm.kill()
        xterm.wait(timeout=30)
    shot.save(tmp_path / "screen.png")  # kept with the test's files, to look at on failure
    written = log.read_bytes()
    assert b"\x1b[c" in written  # xterm was asked (auto) ...
    [sixel] = extract_sixel(written).images  # ... and its DA1 answer chose sixel
    with Image.open(io.BytesIO(sixel.data)) as img:
        sent = img.convert("RGB")
    box = frame_box(shot)
    assert box is not None, "no chart on the screen"
    shown = shot.crop(box)
    assert abs(shown.width - sent.width) <= 2 and abs(shown.height - sent.height) <= 6, \
        (shown.size, sent.size)
    [saved] = sorted(shots.glob("*.png"))
    with Image.open(saved) as img:
        close_to(shown, img.convert("RGB"), tolerance=20)
    assert re.search(rb"\[image: image/png, 640x400 px", written)
