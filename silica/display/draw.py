"""Drawing an image on a terminal stream: the encoded sequences written past any console
(which would escape them), flushed before and after so they land in order with what was
printed around them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import IO

from silica.display.detect import Terminal, detect
from silica.display.encode import encode
from silica.display.sixel import SixelUnavailable
from silica.errors import SilicaError


def draw(stream: IO[str], terminal: Terminal, data: bytes, *,
         max_rows: int | None = None) -> bool:
    """Draw image ``data`` (bytes silica checked) on ``stream`` as ``terminal`` says, fitted
    to its cells, the cursor left at the start of the line below; whether it was drawn
    (not when the terminal draws nothing, or the image cannot be decoded). Sixel without
    libsixel is drawn in half blocks."""
    if terminal.protocol is None:
        return False
    try:
        try:
            text = encode(data, terminal.protocol, terminal.cells, tmux=terminal.tmux,
                          max_rows=max_rows)
        except SixelUnavailable:  # no libsixel here: the fallback still shows the image
            text = encode(data, "blocks", terminal.cells, max_rows=max_rows)
    except SilicaError:
        return False
    stream.flush()
    stream.write(text)
    stream.flush()
    return True


def draw_image(stream: IO[str], setting: str, data: bytes, *,
               environ: Mapping[str, str] = os.environ) -> bool:
    """``draw`` on the terminal ``detect`` finds for ``stream`` under ``setting``."""
    if setting == "off":
        return False
    return draw(stream, detect(setting, environ=environ, stream=stream), data)
