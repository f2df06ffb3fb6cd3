# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3", "pillow>=10"]
# ///
"""Draw a bar chart or sparkline and print it with the kitty graphics protocol.

The example of a tool that draws the way it would in a kitty terminal: a line of text, the
PNG as kitty graphics escape sequences, another line of text. silica turns the escapes into
an image block and keeps the two lines as text.

The PNG is sent as one transfer in chunks of at most 4096 base64 characters::

    ESC _G a=T,f=100,q=2,m=1 ; <chunk 1> ESC \\      first chunk: transmit and show a PNG
    ESC _G m=1 ; <chunk 2> ESC \\                    more chunks follow
    ESC _G m=0 ; <last chunk> ESC \\                 the last one

(a PNG that fits in one chunk is sent as a single ``a=T,f=100,q=2,m=0`` chunk). ``q=2``
asks the terminal not to answer.

Only when ``AGENT_GRAPHICS`` (a comma-separated list that silica sets to ``kitty,iterm2``)
names ``kitty``; otherwise, e.g. when run by hand in an ordinary terminal, it prints the same
PNG as JSON: ``{"summary", "media_type": "image/png", "base64"}``.

Metadata:
    category: example
    tags: image, chart, kitty
    long_running: false
"""

import base64
import io
import json
import os
import sys
from pathlib import Path
from typing import Literal

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()

CHUNK = 4096
BAR_SIZE, SPARK_SIZE, MARGIN = (640, 400), (480, 96), 40


def y_scale(values: list[float], top: float, bottom: float, include_zero: bool):
    lo, hi = min(values), max(values)
    if include_zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    span = (hi - lo) or 1.0
    return lambda v: top + (bottom - top) * (hi - v) / span


def draw_bar(values: list[float], title: str):
    from PIL import Image, ImageDraw

    w, h = BAR_SIZE
    img = Image.new("RGB", (w, h), "white")
    pen = ImageDraw.Draw(img)
    y_of = y_scale(values, MARGIN, h - MARGIN, include_zero=True)
    pen.line([(MARGIN, y_of(0)), (w - MARGIN, y_of(0))], fill="black")
    pen.line([(MARGIN, MARGIN), (MARGIN, h - MARGIN)], fill="black")
    step = (w - 2 * MARGIN) / len(values)
    for i, v in enumerate(values):
        x0 = MARGIN + i * step
        top, bottom = sorted((y_of(v), y_of(0)))
        pen.rectangle([x0 + step * 0.15, top, x0 + step * 0.85, bottom], fill="#3b6fb6")
        pen.text((x0 + step / 2 - 8, h - MARGIN + 8), f"{v:g}", fill="black")
    pen.text((MARGIN, 12), title, fill="black")
    return img


def draw_sparkline(values: list[float], title: str):
    from PIL import Image, ImageDraw

    w, h = SPARK_SIZE
    pad = 8
    img = Image.new("RGB", (w, h), "white")
    pen = ImageDraw.Draw(img)
    top = pad + (14 if title else 0)
    y_of = y_scale(values, top, h - pad, include_zero=False)
    step = (w - 2 * pad) / max(1, len(values) - 1)
    points = [(pad + i * step, y_of(v)) for i, v in enumerate(values)]
    if len(points) > 1:
        pen.line(points, fill="#3b6fb6", width=2)
    lo_i, hi_i = values.index(min(values)), values.index(max(values))
    for i, color in ((lo_i, "#d2452b"), (hi_i, "#2b9d4a")):
        x, y = points[i]
        pen.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)
    if title:
        pen.text((pad, 2), title, fill="black")
    return img


def kitty_escapes(png: bytes) -> str:
    """The PNG as one chunked kitty graphics transfer."""
    b64 = base64.b64encode(png).decode("ascii")
    chunks = [b64[i:i + CHUNK] for i in range(0, len(b64), CHUNK)] or [""]
    out = []
    for i, chunk in enumerate(chunks):
        more = 0 if i == len(chunks) - 1 else 1
        keys = f"a=T,f=100,q=2,m={more}" if i == 0 else f"m={more}"
        out.append(f"\x1b_G{keys};{chunk}\x1b\\")
    return "".join(out)


def wants_kitty() -> bool:
    protocols = os.environ.get("AGENT_GRAPHICS", "")
    return "kitty" in {p.strip().lower() for p in protocols.split(",")}


@app.default
def kitty_chart(
    values: list[float],
    kind: Literal["bar", "sparkline"] = "bar",
    title: str = "",
):
    """Draw a bar chart or a sparkline of a series of numbers and show it as an image.

    Args:
        values: The numbers to plot, in order.
        kind: A bar chart (640x400) or a sparkline (480x96, lowest point red, highest green).
        title: A title drawn on the chart.
    """
    if not values:
        print("kitty_chart needs at least one value", file=sys.stderr)
        sys.exit(2)
    img = draw_bar(values, title) if kind == "bar" else draw_sparkline(values, title)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    png = buf.getvalue()
    lo, hi = min(values), max(values)
    summary = f"{kind} chart of {len(values)} values, min {lo:g}, max {hi:g}"
    if not wants_kitty():
        print(json.dumps({"summary": summary, "media_type": "image/png",
                          "base64": base64.b64encode(png).decode("ascii")}))
        return
    print(f"{summary}:")
    sys.stdout.write(kitty_escapes(png))
    print()
    print(f"lowest {lo:g} at index {values.index(lo)}, highest {hi:g} at index "
          f"{values.index(hi)} ({img.width}x{img.height} px, sent as kitty graphics)")


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema(kitty_chart)))
    else:
        app()
