"""Showing a ToolResult in the terminal: text as printed, images as a line of facts each,
drawn inline too where the terminal speaks the kitty graphics protocol."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from silica.blocks import ImageBlock, TextBlock, ToolResult
from silica.cli.output import err, out
from silica.paths import silica_home

_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


def save_image(image: ImageBlock, folder: Path | None) -> Path | None:
    """Save ``image`` under a name made from its content; ``None`` if it cannot be written."""
    folder = folder or silica_home() / "images" / "cli"
    name = hashlib.sha256(image.data).hexdigest()[:16] + "." + _EXT.get(image.media_type, "bin")
    path = folder / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_bytes(image.data)
    except OSError as exc:
        err.print(f"warning: cannot save the image to {path}: {exc.strerror or exc}",
                  markup=False)
        return None
    return path


def describe_image(image: ImageBlock, saved: Path | None) -> str:
    from silica.images.tokens import estimate_tokens

    w, h = image.width or 0, image.height or 0
    size = f"{w}x{h} px" if w and h else "size unknown"
    tokens = ", ".join(f"{estimate_tokens(w, h, p):,} {p}" for p in ("anthropic", "openai"))
    where = f", saved to {saved}" if saved else ""
    return (f"[image: {image.media_type}, {size}, {len(image.data):,} bytes, "
            f"~tokens: {tokens}{where}]")


def show_result(result: ToolResult, saved: list[Path | None], inline: bool | None = None) -> None:
    """Print ``result``: each image is drawn inline when ``inline`` (default: when
    ``kitty_supported`` says the terminal can), and always described in one line."""
    from silica.cli.terminal import kitty_image, kitty_supported

    console = err if result.is_error else out
    if inline is None:
        inline = kitty_supported(os.environ, _isatty(console.file))
    images = iter(saved)
    for block in result.blocks:
        if isinstance(block, TextBlock):
            console.print(block.text, markup=False, highlight=False)
        elif isinstance(block, ImageBlock):
            if inline:
                try:
                    drawn = kitty_image(block.data)
                except Exception:  # an image that cannot be drawn is still described
                    drawn = ""
                if drawn:
                    # Past rich, which would escape the sequence; flushed first to keep order.
                    console.file.flush()
                    console.file.write(drawn + "\n")
                    console.file.flush()
            console.print(describe_image(block, next(images, None)), markup=False)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
