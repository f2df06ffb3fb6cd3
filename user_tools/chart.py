# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3", "pillow>=10"]
# ///
"""Draw a chart of numbers as a PNG image, so the model can look at the data.

Metadata:
    category: example
    tags: image, chart
    long_running: false
"""

import base64
import io
import json
import sys
from pathlib import Path
from typing import Literal

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()

WIDTH, HEIGHT, MARGIN = 640, 400, 48


def draw(values: list[float], kind: str, title: str) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (WIDTH, HEIGHT), "white")
    pen = ImageDraw.Draw(img)
    lo, hi = min(0.0, min(values)), max(0.0, max(values))
    span = (hi - lo) or 1.0
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def y_of(v: float) -> float:
        return MARGIN + plot_h * (hi - v) / span

    pen.line([(MARGIN, y_of(0)), (WIDTH - MARGIN, y_of(0))], fill="black", width=1)
    pen.line([(MARGIN, MARGIN), (MARGIN, HEIGHT - MARGIN)], fill="black", width=1)
    step = plot_w / len(values)
    points = []
    for i, v in enumerate(values):
        x0 = MARGIN + i * step
        if kind == "bar":
            top, bottom = sorted((y_of(v), y_of(0)))
            pen.rectangle([x0 + step * 0.15, top, x0 + step * 0.85, bottom], fill="#3b6fb6")
        points.append((x0 + step / 2, y_of(v)))
        pen.text((x0 + step / 2 - 8, HEIGHT - MARGIN + 8), f"{v:g}", fill="black")
    if kind == "line":
        pen.line(points, fill="#3b6fb6", width=3)
        for x, y in points:
            pen.ellipse([x - 4, y - 4, x + 4, y + 4], fill="#d2452b")
    pen.text((MARGIN, 16), title, fill="black")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@app.default
def chart(
    values: list[float],
    kind: Literal["bar", "line"] = "bar",
    title: str = "",
):
    """Draw a bar or line chart of a series of numbers and return it as a PNG image.

    Args:
        values: The numbers to plot, in order.
        kind: Bars or a line.
        title: A title drawn above the chart.
    """
    if not values:
        print("chart needs at least one value", file=sys.stderr)
        sys.exit(2)
    png = draw(values, kind, title)
    print(json.dumps({
        "summary": f"{kind} chart of {len(values)} values, min {min(values):g}, "
                   f"max {max(values):g}",
        "media_type": "image/png",
        "base64": base64.b64encode(png).decode("ascii"),
    }))


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema(chart)))
    else:
        app()
