"""Default result processors: images a tool draws with terminal graphics escape sequences.

They run before the JSON processor, so a tool may mix both: kitty, iTerm2, then sixel.
``AGENT_GRAPHICS`` (see ``tool_env``) tells tools which protocols are read.
"""

import importlib

from silica.hookspecs import hookimpl

KITTY_ORDER = 100
ITERM2_ORDER = 110
SIXEL_ORDER = 120
ESC = "\x1b"
DCS_8BIT = "\x90"  # a sixel may start with the 8-bit DCS, with no ESC anywhere


def _processor(module: str, function: str, starts: tuple[str, ...] = (ESC,)):
    def process(draft) -> None:
        if not any(s in draft.text for s in starts):  # the common case: nothing to scan
            return
        # imported on first use: listing tools never needs the extractors
        extract = getattr(importlib.import_module(module), function)
        found = extract(draft.text)
        draft.text = found.text
        draft.images.extend(found.images)
    return process


@hookimpl
def silica_result_processors(register) -> None:
    register("kitty-graphics", KITTY_ORDER, _processor("silica.results.kitty", "extract_kitty"))
    register("iterm2-images", ITERM2_ORDER,
             _processor("silica.results.iterm2", "extract_iterm2"))
    register("sixel-images", SIXEL_ORDER,
             _processor("silica.results.sixel", "extract_sixel", (ESC, DCS_8BIT)))
