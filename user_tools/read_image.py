# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3", "pillow>=10"]
# ///
"""Read an image file from disk, so the model can look at it.

Prints::

    {"path": "/abs/photo.jpg", "format": "JPEG", "original_width": 4000,
     "original_height": 3000, "width": 1024, "height": 768, "media_type": "image/jpeg",
     "base64": "..."}

``format`` is the file's own format (as Pillow names it); ``width``/``height`` and
``media_type`` describe the image returned.

Which bytes come back:

* A PNG, JPEG, GIF or WebP file that needs no scaling (and no EXIF rotation) is returned
  byte for byte, in its own format (an animated GIF stays animated).
* Otherwise the image is decoded, turned upright by its EXIF orientation, scaled so its
  longer side is at most ``max_dimension`` (never enlarged), and encoded again: a JPEG stays
  JPEG (quality 90), everything else becomes PNG, which keeps transparency. Of an animation
  only the first frame is kept.

A relative ``path`` is relative to ``SILICA_WORKDIR`` (the directory silica was started in),
not to the tool's own folder. A missing file, a directory or a file that is not an image
Pillow can read is reported on stderr with exit code 1.

Metadata:
    category: example
    tags: image, file
    long_running: false
"""

import base64
import io
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()

PASS_THROUGH = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif",
                "WEBP": "image/webp"}
EXIF_ORIENTATION = 0x0112


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"read_image: {message}", file=sys.stderr)
    sys.exit(code)


def resolve(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(os.environ.get("SILICA_WORKDIR") or os.getcwd()) / p
    return p


def scaled_size(width: int, height: int, max_dimension: int | None) -> tuple[int, int]:
    long_side = max(width, height)
    if not max_dimension or long_side <= max_dimension:
        return width, height
    scale = max_dimension / long_side
    return max(1, round(width * scale)), max(1, round(height * scale))


@app.default
def read_image(path: str, max_dimension: int | None = None):
    """Read an image file and return it as an image, optionally scaled down.

    Args:
        path: The image file; a relative path is relative to the working directory.
        max_dimension: Scale the image down so its longer side is at most this many pixels.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    if max_dimension is not None and max_dimension < 1:
        fail("max_dimension must be at least 1", 2)
    file = resolve(path)
    if not file.exists():
        fail(f"no such file: {file}")
    if file.is_dir():
        fail(f"{file} is a directory, not an image file")
    try:
        data = file.read_bytes()
        with Image.open(io.BytesIO(data)) as img:
            fmt = img.format or "unknown"
            orig_w, orig_h = img.size
            rotated = img.getexif().get(EXIF_ORIENTATION, 1) not in (1, None)
            out_w, out_h = scaled_size(orig_w, orig_h, max_dimension)
            if fmt in PASS_THROUGH and not rotated and (out_w, out_h) == (orig_w, orig_h):
                img.load()  # a truncated file fails here rather than at the model
                media_type, out = PASS_THROUGH[fmt], data
            else:
                upright = ImageOps.exif_transpose(img)
                out_w, out_h = scaled_size(upright.width, upright.height, max_dimension)
                if fmt == "JPEG":
                    frame, save_as, media_type = upright.convert("RGB"), "JPEG", "image/jpeg"
                else:
                    frame, save_as, media_type = upright, "PNG", "image/png"
                    if frame.mode not in ("1", "L", "LA", "P", "RGB", "RGBA", "I;16"):
                        has_alpha = "A" in frame.getbands() or "transparency" in frame.info
                        frame = frame.convert("RGBA" if has_alpha else "RGB")
                if (out_w, out_h) != frame.size:
                    if frame.mode == "P":
                        frame = frame.convert("RGBA")
                    frame = frame.resize((out_w, out_h), Image.Resampling.LANCZOS)
                buf = io.BytesIO()
                frame.save(buf, format=save_as, **({"quality": 90} if save_as == "JPEG" else {}))
                out = buf.getvalue()
    except UnidentifiedImageError:
        fail(f"{file} is not an image Pillow can read")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        fail(f"could not read {file}: {exc}")
    print(json.dumps({
        "path": str(file),
        "format": fmt,
        "original_width": orig_w,
        "original_height": orig_h,
        "width": out_w,
        "height": out_h,
        "media_type": media_type,
        "base64": base64.b64encode(out).decode("ascii"),
    }))


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema(read_image)))
    else:
        app()
