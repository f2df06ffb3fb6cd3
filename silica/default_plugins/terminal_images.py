"""Default result processors: images a tool draws with terminal graphics escape sequences.

They run before the JSON processor, so a tool may mix both: kitty, iTerm2, then sixel. They
read the output as bytes (``draft.output``) and leave bytes, so what is left after them is
decoded to text once. ``AGENT_GRAPHICS`` (see ``tool_env``) tells tools which protocols are
read. Each decodes within the budgets the result is built for (``draft.limits``: the
configured ``[images] max_decoded_bytes`` and ``max_result_decoded_bytes``).
"""

import importlib

from silica.hookspecs import hookimpl

KITTY_ORDER = 100
ITERM2_ORDER = 110
SIXEL_ORDER = 120
ESC = b"\x1b"
DCS_8BIT = b"\x90"  # a sixel may start with the 8-bit DCS (U+0090: C2 90), with no ESC at all


def _processor(module: str, function: str, starts: tuple[bytes, ...] = (ESC,)):
    def process(draft) -> None:
        data = draft.output
        if not any(s in data for s in starts):  # memchr: the common case, nothing to scan
            return
        # imported on first use: listing tools never needs the extractors
        cut = getattr(importlib.import_module(module), function)(data, draft.errors,
                                                                 draft.limits)
        if cut.data is not data:
            draft.output = cut.data
        draft.images.extend(cut.images)
    return process


@hookimpl
def silica_result_processors(register) -> None:
    register("kitty-graphics", KITTY_ORDER, _processor("silica.results.kitty", "cut_kitty"))
    register("iterm2-images", ITERM2_ORDER, _processor("silica.results.iterm2", "cut_iterm2"))
    register("sixel-images", SIXEL_ORDER,
             _processor("silica.results.sixel", "cut_sixel", (ESC, DCS_8BIT)))
