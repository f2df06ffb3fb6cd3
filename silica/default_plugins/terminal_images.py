"""Default result processors: images a tool draws with terminal graphics escape sequences.

They run before the JSON processor, so a tool may mix both. ``AGENT_GRAPHICS`` (see
``tool_env``) tells tools which protocols are read.
"""

import importlib

from silica.hookspecs import hookimpl

KITTY_ORDER = 100
ITERM2_ORDER = 110
ESC = "\x1b"


def _processor(module: str, function: str):
    def process(draft) -> None:
        if ESC not in draft.text:  # the common case: plain output, nothing to scan
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
