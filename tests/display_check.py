"""What the terminal-view tests share: a tool that shows an image, and the checks that read
back what silica drew (with silica's own extractors) and compare it with the image."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

from conftest import script_tool, simple_spec
from PIL import Image, ImageChops, ImageStat

from silica.display.encode import Cells, fit


def picture(width: int = 1200, height: int = 800) -> bytes:
    """A PNG of four flat quarters and a bar across: resampling changes only edges."""
    img = Image.new("RGB", (width, height), (230, 40, 40))
    img.paste((40, 160, 60), (width // 2, 0, width, height // 2))
    img.paste((30, 60, 200), (0, height // 2, width // 2, height))
    img.paste((240, 220, 60), (width // 2, height // 2, width, height))
    img.paste((20, 20, 20), (0, height * 2 // 5, width, height * 3 // 5))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def image_tool(folder: Path, name: str = "pic", images: tuple[bytes, ...] = ()) -> Path:
    """A tool that prints its images (default: one ``picture``) as JSON, no dependencies."""
    shown = [base64.b64encode(data).decode() for data in (images or (picture(),))]
    body = (f"import json\nprint(json.dumps({{'images': [{{'base64': b}} for b in "
            f"{json.dumps(shown)}]}}))\n")
    return script_tool(folder, f"{name}.py", simple_spec(name), body=body)


def fitted(shown: Path, cells: Cells):
    """What ``fit`` makes of the image saved at ``shown`` on ``cells``, and the image."""
    with Image.open(shown) as img:
        source = img.convert("RGB")
    return fit(source.width, source.height, cells), source


def close_to(drawn: Image.Image, source: Image.Image, tolerance: float = 10.0) -> float:
    """The mean difference per channel (0-255) of ``drawn`` and ``source`` resized to it;
    asserts it is within ``tolerance``."""
    expected = source.resize(drawn.size, Image.Resampling.BOX)
    diff = ImageChops.difference(drawn.convert("RGB"), expected)
    mean = sum(ImageStat.Stat(diff).mean) / 3
    assert mean <= tolerance, f"drawn image differs by {mean:.1f} on average"
    return mean


def decoded(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


_SGR = re.compile(r"\x1b\[([0-9;]*)m|([^\x1b])")


def blocks_image(text: str) -> Image.Image:
    """The picture in half-block cells in ``text``: each line holding one, read with its
    24-bit SGR colours (upper half the foreground of "▀", lower half the background)."""
    rows: list[list[tuple[tuple[int, int, int], tuple[int, int, int]]]] = []
    for line in text.replace("\r", "").split("\n"):
        if "▀" not in line and "▄" not in line:
            continue
        fg = bg = (0, 0, 0)
        cells = []
        for found in _SGR.finditer(line):
            if found.group(1) is not None:
                fg, bg = _apply(found.group(1), fg, bg)
            elif found.group(2) == "▀":
                cells.append((fg, bg))
            elif found.group(2) == "▄":
                cells.append((bg, fg))
            elif found.group(2) == "█":
                cells.append((fg, fg))
        rows.append(cells)
    width = max(len(r) for r in rows)
    img = Image.new("RGB", (width, 2 * len(rows)))
    for y, cells in enumerate(rows):
        for x, (upper, lower) in enumerate(cells):
            img.putpixel((x, 2 * y), upper)
            img.putpixel((x, 2 * y + 1), lower)
    return img


def _apply(params: str, fg, bg):
    values = [int(p) if p else 0 for p in params.split(";")]
    i = 0
    while i < len(values):
        code = values[i]
        if code == 0:
            fg = bg = (0, 0, 0)
        elif code in (38, 48) and i + 4 < len(values) and values[i + 1] == 2:
            colour = tuple(values[i + 2:i + 5])
            fg, bg = (colour, bg) if code == 38 else (fg, colour)
            i += 4
        i += 1
    return fg, bg
