"""The reference tool ``browser_screenshot``: the real file, run by the real ``uv`` through the
Toolbox, driving the real Chromium on PATH (CI installs it) against pages served here."""

from __future__ import annotations

import io
import json
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image

from silica.config import Settings, ToolSettings
from silica.tools.toolbox import Toolbox

REPO = Path(__file__).resolve().parent.parent
BOX = (0, 128, 255)  # the box's colour, unlike anything a browser draws by itself
BOX_AT = (100, 50, 200, 120)  # left, top, width, height in CSS pixels
PAGE = f"""<!doctype html>
<html><head><title>Box page</title></head>
<body style="margin:0; background:#fff">
<div id="box" style="position:absolute; left:{BOX_AT[0]}px; top:{BOX_AT[1]}px;
  width:{BOX_AT[2]}px; height:{BOX_AT[3]}px; background:rgb{BOX}"></div>
</body></html>"""
TALL = """<!doctype html>
<html><head><title>Tall page</title></head>
<body style="margin:0; background:#fff"><div style="height:3000px"></div></body></html>"""


class Handler(SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow.html":
            time.sleep(4)  # longer than the test's 1 s timeout; bounded so the server stops
        super().do_GET()

    def log_message(self, *args) -> None:
        pass  # keep pytest's output clean


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 serving the test pages; yields its base URL."""
    root = tmp_path_factory.mktemp("site")
    (root / "index.html").write_text(PAGE)
    (root / "tall.html").write_text(TALL)
    (root / "slow.html").write_text(PAGE)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture
def box(user_tools) -> Toolbox:
    if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        pytest.fail("no Chromium on PATH; the browser_screenshot tests need a real browser: "
                    "apt-get install chromium")
    shutil.copy(REPO / "user_tools" / "browser_screenshot.py",
                user_tools / "browser_screenshot.py")
    # It asks for the whole network (a browser loads what a page links to), granted here
    # as a user would; confined otherwise (its own /tmp, no secrets, the workspace).
    settings = Settings(tools=ToolSettings(network_grant={"browser_screenshot": ["*"]}))
    return Toolbox(settings=settings)


def opened(block) -> Image.Image:
    img = Image.open(io.BytesIO(block.data))
    img.load()
    return img.convert("RGB")


def near(pixel: tuple[int, ...], colour: tuple[int, int, int], slack: int = 8) -> bool:
    return all(abs(a - b) <= slack for a, b in zip(pixel, colour, strict=True))


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_spec_and_viewport_shot_show_the_box_where_it_is(box, site):
    tools = box.discover().runnable()  # the --toolspec run, with url required
    tool = tools["browser_screenshot"]
    assert tool.ok, (tool.status, tool.reason)
    schema = tool.spec.for_model()["input_schema"]
    assert schema["required"] == ["url"]
    assert set(schema["properties"]) == {"url", "full_page", "selector", "width", "height",
                                         "max_dimension", "wait_for", "timeout"}
    props = schema["properties"]
    assert props["wait_for"]["enum"] == ["load", "domcontentloaded", "networkidle"]
    assert (props["width"]["default"], props["height"]["default"]) == (1280, 800)
    assert props["max_dimension"]["default"] == 1568 and props["full_page"]["default"] is False
    assert all(p["description"] for p in props.values())

    result = box.call("browser_screenshot", {"url": f"{site}/index.html"})
    assert not result.is_error, result.text
    [block] = result.images
    assert (block.media_type, block.width, block.height) == ("image/png", 1280, 800)
    img = opened(block)
    left, top, w, h = BOX_AT
    assert near(img.getpixel((left + w // 2, top + h // 2)), BOX)
    assert near(img.getpixel((left + 2, top + 2)), BOX)
    assert near(img.getpixel((left + w - 3, top + h - 3)), BOX)
    assert near(img.getpixel((left - 3, top + h // 2)), (255, 255, 255))  # just outside
    assert near(img.getpixel((left + w + 2, top + h // 2)), (255, 255, 255))
    assert near(img.getpixel((640, 600)), (255, 255, 255))
    info = json.loads(result.text)
    assert info == {"url": f"{site}/index.html", "title": "Box page", "width": 1280,
                    "height": 800}  # silica keeps the JSON without its image fields


def test_selector_crops_to_the_element_and_a_missing_one_is_an_error(box, site, monkeypatch):
    # Named by SILICA_CHROMIUM, as a user without chromium on PATH would.
    monkeypatch.setenv("SILICA_CHROMIUM", shutil.which("chromium") or "google-chrome")
    result = box.call("browser_screenshot", {"url": f"{site}/index.html", "selector": "#box"})
    assert not result.is_error, result.text
    [block] = result.images
    assert (block.width, block.height) == BOX_AT[2:]
    img = opened(block)
    corners = [(0, 0), (BOX_AT[2] - 1, 0), (0, BOX_AT[3] - 1), (BOX_AT[2] - 1, BOX_AT[3] - 1)]
    assert all(near(img.getpixel(xy), BOX) for xy in corners)

    missing = box.call("browser_screenshot", {"url": f"{site}/index.html",
                                              "selector": "#nothing-here", "timeout": 1})
    assert missing.is_error and not missing.images
    assert "exited with code 1" in missing.text
    assert "no visible element matches the selector '#nothing-here'" in missing.text
    assert "within 1 s" in missing.text


def test_full_page_is_taller_and_max_dimension_scales_down(box, site):
    full = box.call("browser_screenshot", {"url": f"{site}/tall.html", "full_page": True})
    assert not full.is_error, full.text
    [block] = full.images
    # 1280x3000 CSS pixels, long side scaled to the default 1568.
    assert (block.width, block.height) == (round(1280 * 1568 / 3000), 1568)
    assert json.loads(full.text)["title"] == "Tall page"

    small = box.call("browser_screenshot", {"url": f"{site}/index.html", "width": 800,
                                            "height": 600, "max_dimension": 400})
    assert not small.is_error, small.text
    [block] = small.images
    assert (block.width, block.height) == (400, 300)
    img = opened(block)
    assert near(img.getpixel((100, 55)), BOX, slack=16)  # the box's centre, halved


def test_unreachable_slow_and_unsupported_urls_are_errors(box, site):
    gone = box.call("browser_screenshot", {"url": f"http://127.0.0.1:{closed_port()}/"})
    assert gone.is_error and not gone.images
    assert "exited with code 1" in gone.text
    assert "could not load" in gone.text and "ERR_CONNECTION_REFUSED" in gone.text

    slow = box.call("browser_screenshot", {"url": f"{site}/slow.html", "timeout": 1})
    assert slow.is_error and not slow.images
    assert "exited with code 1" in slow.text
    assert f"{site}/slow.html did not finish loading (load) within 1 s" in slow.text

    ftp = box.call("browser_screenshot", {"url": "ftp://127.0.0.1/file"})
    assert ftp.is_error and "exited with code 2" in ftp.text
    assert "only http://, https:// and file:// URLs" in ftp.text


def test_without_a_browser_it_says_how_to_install_one(box, tmp_path, monkeypatch):
    # PATH holds only a Python for uv to run the script with: no browser on it.
    bare = tmp_path / "bin"
    bare.mkdir()
    python = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    (bare / "python3").symlink_to(python)
    (bare / python.name).symlink_to(python)
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.delenv("SILICA_CHROMIUM", raising=False)
    result = box.call("browser_screenshot", {"url": "http://127.0.0.1/"})
    assert result.is_error and not result.images
    assert "exited with code 2" in result.text
    assert "no browser found" in result.text
    assert "apt-get install chromium" in result.text and "SILICA_CHROMIUM" in result.text

    monkeypatch.setenv("SILICA_CHROMIUM", str(tmp_path / "no-such-chrome"))
    wrong = box.call("browser_screenshot", {"url": "http://127.0.0.1/"})
    assert wrong.is_error and "exited with code 2" in wrong.text
    assert "is not an executable file" in wrong.text
