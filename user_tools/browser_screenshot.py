# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3", "playwright>=1.40", "pillow>=10"]
# ///
"""Open a web page in a headless browser and take a screenshot of it, so the model can see it.

Loads ``url`` (http, https or file) in a local Chromium driven by Playwright, with a viewport
of ``width`` x ``height`` CSS pixels, and returns a PNG of the viewport, of the whole page
(``full_page``) or of the first element matching a CSS ``selector``, scaled down so its long
side is at most ``max_dimension`` pixels::

    {"url": "https://example.org/", "title": "Example Domain", "width": 1280, "height": 800,
     "media_type": "image/png", "base64": "..."}

``url`` is the page's address after any redirects; ``width``/``height`` are the returned
image's.

The browser is ``$SILICA_CHROMIUM`` when set, else the first of ``chromium``,
``chromium-browser``, ``google-chrome`` on PATH; Playwright's own browser download is not
used. Without one it says how to install one and exits with code 2 (as for a bad argument).
A page that cannot be reached, does not load within ``timeout`` seconds, or has no element
matching ``selector`` in that time exits with code 1 and the reason.

Metadata:
    category: example
    tags: image, browser, web, screenshot
    long_running: false
    timeout: 120
    network: *
"""

import base64
import contextlib
import io
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Literal, NoReturn
from urllib.parse import urlsplit

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
import _silica_toolspec  # noqa: E402, F401 - answers --toolspec although url is required

app = cyclopts.App()

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
SCHEMES = ("http", "https", "file")


def fail(message: str, code: int) -> NoReturn:
    print(f"browser_screenshot: {message}", file=sys.stderr)
    sys.exit(code)


def scaled_size(width: int, height: int, max_dimension: int | None) -> tuple[int, int]:
    """The size after scaling the long side down to ``max_dimension`` (never up)."""
    long_side = max(width, height)
    if not max_dimension or long_side <= max_dimension:
        return width, height
    scale = max_dimension / long_side
    return max(1, round(width * scale)), max(1, round(height * scale))


def find_browser() -> str:
    """The Chromium to drive: ``$SILICA_CHROMIUM``, else the first known name on PATH."""
    override = os.environ.get("SILICA_CHROMIUM")
    if override:
        found = shutil.which(override)  # a name on PATH or a path to an executable file
        if found is None:
            fail(f"SILICA_CHROMIUM={override!r} is not an executable file: point it at a "
                 "Chromium or Chrome binary, or unset it to look for one on PATH", 2)
        return found
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    fail("no browser found: none of " + ", ".join(BROWSER_NAMES) + " is on PATH. Install "
         "Chromium (on Debian or Ubuntu: 'apt-get install chromium') or set SILICA_CHROMIUM "
         "to the path of a Chromium or Chrome binary", 2)


def check_url(url: str) -> None:
    scheme = urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        fail(f"unsupported URL {url!r}: only http://, https:// and file:// URLs are "
             "allowed", 2)


def reason(exc: Exception) -> str:
    """Playwright's message without its call log or the browser's command line (noise)."""
    text = str(exc).split("Call log:")[0]
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith(("<launch", "- <"))]
    text = " ".join(" ".join(lines).split()).removesuffix(" Browser logs:")
    return text if len(text) <= 2000 else text[:2000] + "..."


LAUNCH_TIMEOUT_MS = 60_000


def capture(exe: str, url: str, full_page: bool, selector: str | None, width: int,
            height: int, wait_for: str, timeout: float) -> tuple[bytes, str, str]:
    """Load the page and return ``(PNG, final URL, title)``; exits 1 when it cannot."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    ms = timeout * 1000
    with sync_playwright() as pw:
        try:
            # --no-sandbox: Chromium's sandbox cannot start as root or in most containers.
            # the page's timeout is for the page: a busy machine may take longer to start
            # the browser itself, which is bounded by the tool's own timeout instead
            browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"],
                                         timeout=max(ms, LAUNCH_TIMEOUT_MS))
        except PlaywrightError as exc:
            fail(f"could not start the browser {exe}: {reason(exc)}", 1)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            try:
                page.goto(url, wait_until=wait_for, timeout=ms)
            except PlaywrightTimeout:
                fail(f"{url} did not finish loading ({wait_for}) within {timeout:g} s", 1)
            except PlaywrightError as exc:
                fail(f"could not load {url}: {reason(exc)}", 1)
            if selector:
                element = page.locator(selector).first
                try:
                    element.wait_for(state="visible", timeout=ms)
                except PlaywrightTimeout:
                    fail(f"no visible element matches the selector {selector!r} on {page.url} "
                         f"within {timeout:g} s", 1)
                except PlaywrightError as exc:
                    fail(f"bad selector {selector!r}: {reason(exc)}", 2)
                png = element.screenshot(type="png", timeout=ms)
            else:
                png = page.screenshot(type="png", full_page=full_page, timeout=ms)
            return png, page.url, page.title()
        except PlaywrightTimeout as exc:
            fail(f"timed out after {timeout:g} s: {reason(exc)}", 1)
        except PlaywrightError as exc:
            fail(reason(exc), 1)
        finally:
            with contextlib.suppress(PlaywrightError):  # a crashed browser must not hide why
                browser.close()


@app.default
def browser_screenshot(
    url: str,
    full_page: bool = False,
    selector: str | None = None,
    width: int = 1280,
    height: int = 800,
    max_dimension: int = 1568,
    wait_for: Literal["load", "domcontentloaded", "networkidle"] = "load",
    timeout: float = 30,
):
    """Open a web page in a headless browser and return a screenshot of it as a PNG image.

    Shows the viewport by default, the whole scrollable page with full_page, or one element
    with selector. Only http, https and file URLs.

    Args:
        url: The page to open: an http://, https:// or file:// URL.
        full_page: Capture the whole scrollable page instead of only the viewport.
        selector: A CSS selector: capture only the first element it matches (full_page is
            then ignored).
        width: Width of the browser viewport in CSS pixels.
        height: Height of the browser viewport in CSS pixels.
        max_dimension: Scale the image down so its longer side is at most this many pixels.
        wait_for: When the page counts as loaded: "load", "domcontentloaded" or
            "networkidle" (no network traffic for half a second).
        timeout: Seconds to wait for the page to load (and for the selector to match); the
            whole call is stopped after 120 s whatever this says.
    """
    check_url(url)
    if width < 1 or height < 1:
        fail("width and height must be at least 1", 2)
    if max_dimension < 1:
        fail("max_dimension must be at least 1", 2)
    if timeout <= 0:
        fail("timeout must be more than 0 seconds", 2)
    exe = find_browser()
    png, final_url, title = capture(exe, url, full_page, selector, width, height, wait_for,
                                    timeout)

    from PIL import Image

    img = Image.open(io.BytesIO(png))
    out_w, out_h = scaled_size(img.width, img.height, max_dimension)
    if (out_w, out_h) != img.size:
        img = img.convert("RGBA" if "A" in img.getbands() else "RGB")
        img = img.resize((out_w, out_h), Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=True)
        png = buf.getvalue()
    print(json.dumps({
        "url": final_url,
        "title": title,
        "width": out_w,
        "height": out_h,
        "media_type": "image/png",
        "base64": base64.b64encode(png).decode("ascii"),
    }))


if __name__ == "__main__":
    app()
