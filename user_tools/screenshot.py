# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3", "mss>=9", "pillow>=10"]
# ///
"""Take a screenshot, so the model can see what is on the screen.

Captures one monitor (by default monitor 1, the primary one; monitor 0 is every monitor
together) or a region of it, optionally scaled down so its long side is at most
``max_dimension`` pixels, and returns it as a PNG image::

    {"width": 1280, "height": 800, "media_type": "image/png", "base64": "...",
     "captured": {"x": 0, "y": 0, "width": 1280, "height": 800}, "estimated_tokens": 1366}

``width``/``height`` are the returned image's; ``captured`` is the area of the screen it shows,
in screen pixels relative to the monitor's top-left corner (divide by the scale to click).

A screenshot costs the model about ``width * height / 750`` tokens (after scaling). One that
would cost more than ``max_tokens`` is refused (exit code 2) with a message naming a
``max_dimension`` and a region size that would fit. With ``output`` the PNG is written to that
file instead (relative paths are relative to ``SILICA_WORKDIR``, the directory silica was
started in) and only ``{"path", "width", "height", "bytes"}`` is printed; nothing reaches the
model, so ``max_tokens`` is not applied.

Needs a display: on Linux an X server named by ``DISPLAY`` (a headless machine can run
``Xvfb :99 -screen 0 1280x800x24`` and set ``DISPLAY=:99``). Without one it says so on stderr
and exits with code 1.

Metadata:
    category: example
    tags: image, screen, desktop
    long_running: false
    timeout: 30
    display: true
"""

import base64
import io
import json
import math
import os
import sys
from pathlib import Path
from typing import NoReturn

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()

TOKEN_DIVISOR = 750  # Anthropic's estimate: tokens ~= width * height / 750


def fail(message: str, code: int) -> NoReturn:
    print(f"screenshot: {message}", file=sys.stderr)
    sys.exit(code)


def scaled_size(width: int, height: int, max_dimension: int | None) -> tuple[int, int]:
    """The size after scaling the long side down to ``max_dimension`` (never up)."""
    long_side = max(width, height)
    if not max_dimension or long_side <= max_dimension:
        return width, height
    scale = max_dimension / long_side
    return max(1, round(width * scale)), max(1, round(height * scale))


def estimate_tokens(width: int, height: int) -> int:
    return math.ceil(width * height / TOKEN_DIVISOR)


def largest_fitting_dimension(width: int, height: int, max_tokens: int) -> int:
    """The largest ``max_dimension`` whose result costs at most ``max_tokens`` (0 if none)."""
    lo, hi = 0, max(width, height)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(*scaled_size(width, height, mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


def fitting_region(width: int, height: int, max_tokens: int) -> tuple[int, int]:
    """A region of the capture's shape, at full resolution, that costs at most ``max_tokens``."""
    ratio = math.sqrt(max_tokens * TOKEN_DIVISOR / (width * height))
    w, h = max(1, math.floor(width * ratio)), max(1, math.floor(height * ratio))
    while estimate_tokens(w, h) > max_tokens and (w > 1 or h > 1):
        w, h = max(1, w - 1), max(1, h - 1)
    return w, h


def too_big_message(cap_w: int, cap_h: int, out_w: int, out_h: int, max_tokens: int) -> str:
    tokens = estimate_tokens(out_w, out_h)
    msg = (f"refused: a {out_w}x{out_h} screenshot would cost about {tokens} tokens, over "
           f"max_tokens={max_tokens}.")
    dim = largest_fitting_dimension(cap_w, cap_h, max_tokens)
    if dim:
        fit_w, fit_h = scaled_size(cap_w, cap_h, dim)
        msg += (f" Pass max_dimension={dim} (or less) to get {fit_w}x{fit_h}, about "
                f"{estimate_tokens(fit_w, fit_h)} tokens; or")
    else:
        msg += " Or"
    reg_w, reg_h = fitting_region(cap_w, cap_h, max_tokens)
    msg += (f" capture a region at full resolution no larger than width={reg_w}, "
            f"height={reg_h} (x and y say where), or raise max_tokens.")
    return msg


def resolve_output(output: str) -> Path:
    path = Path(output).expanduser()
    if not path.is_absolute():
        path = Path(os.environ.get("SILICA_WORKDIR") or os.getcwd()) / path
    return path


def grab(monitor: int, x: int | None, y: int | None, width: int | None,
         height: int | None):
    """Capture and return ``(PIL image, captured region relative to the monitor)``."""
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
        fail("no display available: DISPLAY is not set. screenshot needs an X server; on a "
             "headless machine start one, e.g. 'Xvfb :99 -screen 0 1280x800x24 &' and set "
             "DISPLAY=:99", 1)
    import mss
    import mss.exception
    from PIL import Image

    open_screen = getattr(mss, "MSS", None) or mss.mss  # mss 10.2 renamed mss.mss to MSS
    try:
        with open_screen() as sct:
            monitors = sct.monitors
            if not 0 <= monitor < len(monitors):
                fail(f"there is no monitor {monitor}: monitors 1..{len(monitors) - 1} exist "
                     "(0 is all of them together)", 2)
            mon = monitors[monitor]
            rx, ry = x or 0, y or 0
            rw = mon["width"] - rx if width is None else width
            rh = mon["height"] - ry if height is None else height
            if rx < 0 or ry < 0 or rw <= 0 or rh <= 0 \
                    or rx + rw > mon["width"] or ry + rh > mon["height"]:
                fail(f"the region x={rx}, y={ry}, width={rw}, height={rh} is not inside "
                     f"monitor {monitor}, which is {mon['width']}x{mon['height']}", 2)
            shot = sct.grab({"left": mon["left"] + rx, "top": mon["top"] + ry,
                             "width": rw, "height": rh})
            img = Image.frombytes("RGB", shot.size, shot.bgra, "raw", "BGRX")
    except mss.exception.ScreenShotError as exc:
        fail(f"could not capture the screen (no display available?): {exc}", 1)
    return img, {"x": rx, "y": ry, "width": rw, "height": rh}


@app.default
def screenshot(
    x: int | None = None,
    y: int | None = None,
    width: int | None = None,
    height: int | None = None,
    monitor: int = 1,
    max_dimension: int | None = None,
    max_tokens: int = 1600,
    output: str | None = None,
):
    """Take a screenshot of the screen or of a region of it and return it as a PNG image.

    Refuses a capture that would cost more than max_tokens (about width*height/750 after
    scaling) and says which max_dimension or region would fit.

    Args:
        x: Left edge of the region, in pixels from the monitor's left edge (default 0).
        y: Top edge of the region, in pixels from the monitor's top edge (default 0).
        width: Width of the region (default: to the monitor's right edge).
        height: Height of the region (default: to the monitor's bottom edge).
        monitor: Which monitor: 1 is the primary one, 0 all monitors together.
        max_dimension: Scale the image down so its longer side is at most this many pixels.
        max_tokens: Refuse a screenshot that would cost the model more tokens than this.
        output: Save the PNG to this file (relative to the working directory) and return only
            its path and size instead of the image.
    """
    if max_dimension is not None and max_dimension < 1:
        fail("max_dimension must be at least 1", 2)
    img, captured = grab(monitor, x, y, width, height)
    out_w, out_h = scaled_size(img.width, img.height, max_dimension)
    if output is None and estimate_tokens(out_w, out_h) > max_tokens:
        fail(too_big_message(img.width, img.height, out_w, out_h, max_tokens), 2)
    if (out_w, out_h) != img.size:
        from PIL import Image

        img = img.resize((out_w, out_h), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    png = buf.getvalue()
    if output is not None:
        path = resolve_output(output)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
        except OSError as exc:
            fail(f"could not write {path}: {exc}", 1)
        print(json.dumps({"path": str(path), "width": out_w, "height": out_h,
                          "bytes": len(png)}))
        return
    print(json.dumps({
        "width": out_w,
        "height": out_h,
        "media_type": "image/png",
        "base64": base64.b64encode(png).decode("ascii"),
        "captured": captured,
        "estimated_tokens": estimate_tokens(out_w, out_h),
    }))


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema(screenshot)))
    else:
        app()
