# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3", "pillow>=10"]
# ///
"""Read several image files at once and return them all in one result.

Prints::

    {"count": 3, "read": 3,
     "images": [{"name": "a.png", "path": "/abs/a.png", "width": 512, "height": 384,
                 "media_type": "image/png", "base64": "..."}, ...],
     "skipped": [{"path": "missing.png", "reason": "no such file: /abs/missing.png"}]}

Each image is turned upright by its EXIF orientation and scaled so its longer side is at most
``max_dimension`` (never enlarged); a JPEG stays JPEG (quality 90), anything else becomes PNG
(transparency kept; of an animation the first frame). ``images`` keeps the order of
``paths``; ``count`` is how many images the result holds and ``read`` how many files were
read. With ``sheet`` a contact sheet (every image in a labelled grid, numbered in order)
comes first in ``images``, named ``contact-sheet``, and ``count`` is one more than ``read``.

Relative paths are relative to ``SILICA_WORKDIR`` (the directory silica was started in). A
path that cannot be read (missing, a directory, not an image) is listed in ``skipped`` with
the reason, and the others are still returned; only when none can be read does the tool fail
(exit code 1, the reasons on stderr).

Metadata:
    category: example
    tags: image, file, gallery
    long_running: false
"""

import base64
import io
import json
import math
import os
import sys
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()

SHEET_MAX_WIDTH, GAP, LABEL_H = 1568, 8, 18


def resolve(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(os.environ.get("SILICA_WORKDIR") or os.getcwd()) / p
    return p


def scaled_size(width: int, height: int, max_dimension: int) -> tuple[int, int]:
    long_side = max(width, height)
    if long_side <= max_dimension:
        return width, height
    scale = max_dimension / long_side
    return max(1, round(width * scale)), max(1, round(height * scale))


def load(file: Path, max_dimension: int):
    """``(scaled PIL image, source format)``; raises ValueError with a reason."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not file.exists():
        raise ValueError(f"no such file: {file}")
    if file.is_dir():
        raise ValueError(f"{file} is a directory, not an image file")
    try:
        with Image.open(file) as img:
            fmt = img.format or "unknown"
            img.load()
            upright = ImageOps.exif_transpose(img)
            has_alpha = "A" in upright.getbands() or "transparency" in upright.info
            frame = upright.convert("RGBA" if has_alpha else "RGB")
    except UnidentifiedImageError:
        raise ValueError(f"{file} is not an image Pillow can read") from None
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ValueError(f"could not read {file}: {exc}") from None
    size = scaled_size(frame.width, frame.height, max_dimension)
    if size != frame.size:
        frame = frame.resize(size, Image.Resampling.LANCZOS)
    return frame, fmt


def encode(img, fmt: str) -> tuple[bytes, str]:
    buf = io.BytesIO()
    if fmt == "JPEG" and img.mode == "RGB":
        img.save(buf, format="JPEG", quality=90)
        return buf.getvalue(), "image/jpeg"
    img.save(buf, format="PNG")
    return buf.getvalue(), "image/png"


def contact_sheet(images: list, names: list[str], max_dimension: int):
    """Every image in a grid of equal cells, each labelled with its number and name."""
    from PIL import Image, ImageDraw

    cols = math.ceil(math.sqrt(len(images)))
    rows = math.ceil(len(images) / cols)
    cell = max(16, min(max_dimension, (SHEET_MAX_WIDTH - GAP * (cols + 1)) // cols))
    sheet = Image.new("RGB", (GAP + cols * (cell + GAP), GAP + rows * (cell + LABEL_H + GAP)),
                      "white")
    pen = ImageDraw.Draw(sheet)
    for i, (img, name) in enumerate(zip(images, names, strict=True)):
        r, c = divmod(i, cols)
        x0, y0 = GAP + c * (cell + GAP), GAP + r * (cell + LABEL_H + GAP)
        thumb = img.copy()
        thumb.thumbnail((cell, cell))
        offset = (x0 + (cell - thumb.width) // 2, y0 + (cell - thumb.height) // 2)
        if thumb.mode == "RGBA":
            sheet.paste(thumb, offset, thumb)
        else:
            sheet.paste(thumb, offset)
        pen.rectangle([x0 - 1, y0 - 1, x0 + cell, y0 + cell], outline="#999999")
        pen.text((x0, y0 + cell + 3), f"{i + 1}. {name}"[: cell // 6], fill="black")
    return sheet


@app.default
def image_grid(paths: list[str], max_dimension: int = 512, sheet: bool = False):
    """Read several image files and return them all as images, each scaled down.

    Files that cannot be read are listed under "skipped" with the reason; the rest are
    still returned.

    Args:
        paths: The image files, in the order to return them; relative paths are relative to
            the working directory.
        max_dimension: Scale each image down so its longer side is at most this many pixels.
        sheet: Also return a contact sheet of all the images (numbered, in a grid) first.
    """
    if not paths:
        print("image_grid: give at least one path", file=sys.stderr)
        sys.exit(2)
    if max_dimension < 1:
        print("image_grid: max_dimension must be at least 1", file=sys.stderr)
        sys.exit(2)
    loaded, entries, skipped = [], [], []
    for path in paths:
        file = resolve(path)
        try:
            img, fmt = load(file, max_dimension)
        except ValueError as exc:
            skipped.append({"path": path, "reason": str(exc)})
            continue
        data, media_type = encode(img, fmt)
        loaded.append(img)
        entries.append({"name": file.name, "path": str(file), "width": img.width,
                        "height": img.height, "media_type": media_type,
                        "base64": base64.b64encode(data).decode("ascii")})
    if not entries:
        reasons = "; ".join(f"{s['path']}: {s['reason']}" for s in skipped)
        print(f"image_grid: none of the images could be read ({reasons})", file=sys.stderr)
        sys.exit(1)
    images = list(entries)
    if sheet:
        grid = contact_sheet(loaded, [e["name"] for e in entries], max_dimension)
        data, media_type = encode(grid, "PNG")
        images.insert(0, {"name": "contact-sheet", "width": grid.width,
                          "height": grid.height, "media_type": media_type,
                          "base64": base64.b64encode(data).decode("ascii")})
    print(json.dumps({"count": len(images), "read": len(entries), "images": images,
                      "skipped": skipped}))


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema(image_grid)))
    else:
        app()
