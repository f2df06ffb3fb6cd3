"""What the kitty and iTerm2 extractor tests share: escape pieces, images, fixtures, checks."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

from hypothesis import HealthCheck, settings
from PIL import Image

FIXTURES = Path(__file__).parent / "data" / "escapes"
ESC, BEL, ST = "\x1b", "\x07", "\x1b\\"
MARKER = re.compile(r"\[(?:kitty|iterm2|image not)[^\[\]]*\]")
PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def png(width: int = 3, height: int = 2, mode: str = "RGB") -> bytes:
    """A small PNG whose every pixel differs, so a wrong byte shows."""
    image = Image.new(mode, (width, height))
    for x in range(width):
        for y in range(height):
            image.putpixel((x, y), (x * 40, y * 60, 7, 200)[: len(mode)])
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def tmux(inner: str) -> str:
    """tmux passthrough: the sequence wrapped, every ESC inside doubled."""
    return f"{ESC}Ptmux;{inner.replace(ESC, ESC + ESC)}{ST}"


def fixture(name: str) -> str:
    """A recorded emitter's output, decoded as the pipeline decodes stdout."""
    return (FIXTURES / name).read_bytes().decode("utf-8", errors="replace")


def without_markers(text: str) -> str:
    return MARKER.sub("", text)


def is_subsequence(small: str, big: str) -> bool:
    rest = iter(big)
    return all(char in rest for char in small)
