"""The reference tools in ``user_tools/``: real files, run by the real ``uv``, through the
Toolbox, with real Pillow images and (for ``screenshot``) a real Xvfb X server."""

from __future__ import annotations

import io
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from PIL import Image

from silica.config import load_settings
from silica.tools.toolbox import Toolbox
from silica.tools.uvbin import find_uv

REPO = Path(__file__).resolve().parent.parent
TOOLS = ("screenshot", "read_image", "kitty_chart", "image_grid")
SCREEN = (1280, 800)
PI = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]  # a PNG of 2+ kitty chunks


def install(folder: Path, *names: str) -> Toolbox:
    for name in names:
        shutil.copy(REPO / "user_tools" / f"{name}.py", folder / f"{name}.py")
    return Toolbox(settings=load_settings())


def save_image(path: Path, size: tuple[int, int], color="red", mode="RGB", fmt="PNG") -> Path:
    Image.new(mode, size, color).save(path, format=fmt)
    return path


def opened(block) -> Image.Image:
    img = Image.open(io.BytesIO(block.data))
    img.load()
    return img


def json_text(result) -> dict:
    """The JSON a tool printed, without its image data (as silica keeps it as text)."""
    return json.loads(result.text)


# -- specs ----------------------------------------------------------------------------------

def test_specs_are_ok_with_the_documented_parameters(user_tools):
    box = install(user_tools, *TOOLS)
    tools = box.discover().runnable()
    expected = {
        "screenshot": ({"x", "y", "width", "height", "monitor", "max_dimension", "max_tokens",
                        "output"}, []),
        "read_image": ({"path", "max_dimension"}, ["path"]),
        "kitty_chart": ({"values", "kind", "title"}, ["values"]),
        "image_grid": ({"paths", "max_dimension", "sheet"}, ["paths"]),
    }
    for name, (props, required) in expected.items():
        tool = tools[name]
        assert tool.ok, (name, tool.status, tool.reason)
        schema = tool.spec.for_model()["input_schema"]
        assert set(schema["properties"]) == props, name
        assert schema["required"] == required, name
        assert all(p["description"] for p in schema["properties"].values()), name
    shot = tools["screenshot"].spec.for_model()["input_schema"]["properties"]
    assert shot["max_tokens"]["default"] == 1600 and shot["monitor"]["default"] == 1
    grid = tools["image_grid"].spec.for_model()["input_schema"]["properties"]
    assert grid["paths"]["type"] == "array" and grid["max_dimension"]["default"] == 512
    assert grid["sheet"] == {"type": "boolean", "default": False,
                             "description": grid["sheet"]["description"]}
    kitty = tools["kitty_chart"].spec.for_model()["input_schema"]["properties"]
    assert kitty["kind"]["enum"] == ["bar", "sparkline"]


# -- read_image -----------------------------------------------------------------------------

def test_read_image_returns_the_file_from_the_working_directory(user_tools, project):
    pic = save_image(project / "pic.png", (300, 200), "blue")
    result = install(user_tools, "read_image").call("read_image", {"path": "pic.png"})
    assert not result.is_error, result.text
    [block] = result.images
    assert (block.media_type, block.width, block.height) == ("image/png", 300, 200)
    assert block.data == pic.read_bytes()  # unscaled PNG: passed through byte for byte
    info = json_text(result)
    assert info["path"] == str(project / "pic.png") and info["format"] == "PNG"
    assert "base64" not in result.text


def test_read_image_scales_to_max_dimension_and_keeps_jpeg(user_tools, project):
    save_image(project / "photo.jpg", (800, 400), "green", fmt="JPEG")
    save_image(project / "alpha.png", (100, 400), (0, 0, 255, 128), mode="RGBA")
    box = install(user_tools, "read_image")
    result = box.call("read_image", {"path": "photo.jpg", "max_dimension": 200})
    assert not result.is_error, result.text
    [block] = result.images
    assert (block.media_type, block.width, block.height) == ("image/jpeg", 200, 100)
    info = json_text(result)
    assert (info["original_width"], info["original_height"]) == (800, 400)
    result = box.call("read_image", {"path": str(project / "alpha.png"), "max_dimension": 40})
    [block] = result.images
    assert (block.media_type, block.width, block.height) == ("image/png", 10, 40)
    assert opened(block).mode == "RGBA"


def test_read_image_missing_or_not_an_image_is_an_error(user_tools, project):
    (project / "notes.txt").write_text("not a picture")
    box = install(user_tools, "read_image")
    missing = box.call("read_image", {"path": "nope.png"})
    assert missing.is_error and not missing.images
    assert f"no such file: {project / 'nope.png'}" in missing.text
    text = box.call("read_image", {"path": "notes.txt"})
    assert text.is_error and "is not an image Pillow can read" in text.text


# -- kitty_chart ----------------------------------------------------------------------------

def test_kitty_chart_arrives_as_one_image_with_its_text(user_tools):
    box = install(user_tools, "kitty_chart")
    result = box.call("kitty_chart", {"values": PI, "title": "digits of pi"})
    assert not result.is_error, result.text
    [block] = result.images
    assert (block.source, block.media_type) == ("kitty", "image/png")
    assert (block.width, block.height) == (640, 400)
    lines = result.text.strip().splitlines()
    assert lines[0] == "bar chart of 20 values, min 1, max 9:"
    assert lines[-1].startswith("lowest 1 at index 1, highest 9 at index 5")
    assert "\x1b" not in result.text and "a=T" not in result.text and "dropped" not in result.text
    spark = box.call("kitty_chart", {"values": [2, -1, 7], "kind": "sparkline"})
    [block] = spark.images
    assert (block.width, block.height) == (480, 96)


def run_script(folder: Path, name: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([find_uv(), "run", "--quiet", "--script", str(folder / f"{name}.py"),
                           *args], capture_output=True, cwd=folder, env=env, timeout=120)


def test_kitty_chart_chunks_and_falls_back_to_json(user_tools):
    install(user_tools, "kitty_chart").discover()  # writes the helper beside the tool
    env = {**os.environ, "AGENT_GRAPHICS": "kitty,iterm2,sixel"}
    done = run_script(user_tools, "kitty_chart", *(f"--values={v}" for v in PI),
                      "--title=digits of pi", env=env)
    assert done.returncode == 0, done.stderr
    chunks = re.findall(rb"\x1b_G([^;]*);([^\x1b]*)\x1b\\", done.stdout)
    assert len(chunks) > 1
    assert chunks[0][0] == b"a=T,f=100,q=2,m=1"
    assert [k for k, _ in chunks[1:-1]] == [b"m=1"] * (len(chunks) - 2)
    assert chunks[-1][0] == b"m=0"
    assert all(len(data) <= 4096 for _, data in chunks)
    assert all(len(data) == 4096 for _, data in chunks[:-1])

    env.pop("AGENT_GRAPHICS")
    done = run_script(user_tools, "kitty_chart", "--values=3", "--values=1", env=env)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout
    doc = json.loads(done.stdout)
    assert doc["media_type"] == "image/png" and doc["summary"].startswith("bar chart of 2")


# -- image_grid -----------------------------------------------------------------------------

@pytest.fixture
def three_images(project):
    save_image(project / "wide.png", (400, 100), "red")
    save_image(project / "tall.jpg", (100, 300), "green", fmt="JPEG")
    (project / "sub").mkdir()
    save_image(project / "sub" / "clear.png", (50, 50), (0, 0, 255, 0), mode="RGBA")
    return ["wide.png", "tall.jpg", "sub/clear.png"]


def test_image_grid_returns_each_image_in_order_and_lists_bad_paths(user_tools, project,
                                                                    three_images):
    box = install(user_tools, "image_grid")
    paths = [three_images[0], "missing.png", *three_images[1:]]
    result = box.call("image_grid", {"paths": paths, "max_dimension": 200})
    assert not result.is_error, result.text
    sizes = [(b.media_type, b.width, b.height) for b in result.images]
    assert sizes == [("image/png", 200, 50), ("image/jpeg", 67, 200), ("image/png", 50, 50)]
    assert opened(result.images[0]).getpixel((10, 10))[:3] == (255, 0, 0)
    info = json_text(result)
    assert info["count"] == info["read"] == len(result.images) == 3
    assert [i["name"] for i in info["images"]] == ["wide.png", "tall.jpg", "clear.png"]
    assert info["skipped"] == [{"path": "missing.png",
                                "reason": f"no such file: {project / 'missing.png'}"}]


def test_image_grid_contact_sheet_comes_first(user_tools, three_images):
    box = install(user_tools, "image_grid")
    result = box.call("image_grid", {"paths": three_images, "max_dimension": 128,
                                     "sheet": True})
    assert not result.is_error, result.text
    assert len(result.images) == 4
    sheet, *rest = result.images
    assert sheet.width > 128 * 2 and sheet.height > 128 * 2  # a 2x2 grid of 128 px cells
    assert [(b.width, b.height) for b in rest] == [(128, 32), (43, 128), (50, 50)]
    info = json_text(result)
    assert info["images"][0]["name"] == "contact-sheet"
    assert info["count"] == len(result.images) == 4 and info["read"] == 3


def test_image_grid_fails_only_when_nothing_could_be_read(user_tools, project):
    (project / "notes.txt").write_text("text")
    result = install(user_tools, "image_grid").call("image_grid",
                                                    {"paths": ["notes.txt", "gone.png"]})
    assert result.is_error and not result.images
    assert "none of the images could be read" in result.text
    assert "notes.txt" in result.text and "gone.png" in result.text


# -- screenshot -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def xvfb(tmp_path_factory):
    """A real X server (white root window) on a free display; yields its DISPLAY."""
    exe = shutil.which("Xvfb")
    if exe is None:
        pytest.fail("Xvfb is not installed; the screenshot tests need a real X server: "
                    "apt-get install xvfb")
    log = tmp_path_factory.mktemp("xvfb") / "xvfb.log"
    read_fd, write_fd = os.pipe()
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [exe, "-displayfd", str(write_fd), "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24",
             "-wr", "-nolisten", "tcp"],
            pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=err)
    os.close(write_fd)
    number = b""
    deadline = time.monotonic() + 20
    try:
        while not number.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([read_fd], [], [], 0.2)
            if ready:
                chunk = os.read(read_fd, 64)
                if not chunk:
                    break
                number += chunk
    finally:
        os.close(read_fd)
    if not number.strip().isdigit():
        proc.kill()
        proc.wait()
        pytest.fail(f"Xvfb did not start: {log.read_text(errors='replace')[-2000:]}")
    yield f":{number.decode().strip()}"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def screen(xvfb, user_tools, monkeypatch) -> Toolbox:
    monkeypatch.setenv("DISPLAY", xvfb)
    (user_tools.parent / "config.toml").write_text('[tools]\ndisplay_grant = ["screenshot"]\n')
    return install(user_tools, "screenshot")


def test_screenshot_without_the_display_grant_sees_no_display(xvfb, user_tools, monkeypatch):
    """The sandbox hides the X server's socket from a tool not granted the display."""
    monkeypatch.setenv("DISPLAY", xvfb)
    result = install(user_tools, "screenshot").call("screenshot", {})
    assert result.is_error and not result.images
    assert "display" in result.text.lower()


def test_screenshot_captures_the_whole_screen(screen):
    result = screen.call("screenshot", {})
    assert not result.is_error, result.text
    [block] = result.images
    assert (block.media_type, block.width, block.height) == ("image/png", *SCREEN)
    assert opened(block).convert("RGB").getpixel((640, 400)) == (255, 255, 255)  # -wr root
    info = json_text(result)
    assert info["captured"] == {"x": 0, "y": 0, "width": 1280, "height": 800}
    assert info["estimated_tokens"] == 1366


def test_screenshot_scales_and_captures_regions(screen):
    scaled = screen.call("screenshot", {"max_dimension": 640})
    [block] = scaled.images
    assert (block.width, block.height) == (640, 400)
    region = screen.call("screenshot", {"x": 100, "y": 50, "width": 300, "height": 200})
    assert not region.is_error, region.text
    [block] = region.images
    assert (block.width, block.height) == (300, 200)
    assert json_text(region)["captured"] == {"x": 100, "y": 50, "width": 300, "height": 200}
    outside = screen.call("screenshot", {"x": 1200, "width": 200})
    assert outside.is_error and "not inside monitor 1, which is 1280x800" in outside.text


def test_screenshot_over_the_token_limit_is_refused_with_a_hint_that_fits(screen):
    result = screen.call("screenshot", {"max_tokens": 500})
    assert result.is_error and not result.images
    assert "exited with code 2" in result.text
    assert "about 1366 tokens, over max_tokens=500" in result.text
    assert " Or " not in result.text and "tokens; or capture a region" in result.text
    dim = int(re.search(r"max_dimension=(\d+)", result.text).group(1))
    w, h = map(int, re.search(r"width=(\d+), height=(\d+)", result.text).groups())
    assert w * h / 750 <= 500
    fits = screen.call("screenshot", {"max_tokens": 500, "max_dimension": dim})
    assert not fits.is_error, fits.text
    [block] = fits.images
    assert max(block.width, block.height) == dim and block.width * block.height / 750 <= 500
    region = screen.call("screenshot", {"max_tokens": 500, "width": w, "height": h})
    assert not region.is_error, region.text


def test_screenshot_output_writes_a_png_file(screen, project):
    result = screen.call("screenshot", {"output": "shots/screen.png", "max_dimension": 320})
    assert not result.is_error, result.text
    assert not result.images
    saved = project / "shots" / "screen.png"
    info = json_text(result)
    assert info == {"path": str(saved), "width": 320, "height": 200,
                    "bytes": saved.stat().st_size}
    with Image.open(saved) as img:
        assert (img.format, img.size) == ("PNG", (320, 200))


def test_screenshot_without_a_display_says_so(user_tools, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    result = install(user_tools, "screenshot").call("screenshot", {})
    assert result.is_error and not result.images
    assert "exited with code 1" in result.text
    assert "no display available: DISPLAY is not set" in result.text
