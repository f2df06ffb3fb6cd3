"""Default result processors: images a tool draws with terminal graphics escape sequences.

They run before the JSON processor, so a tool may mix both. ``AGENT_GRAPHICS`` (see
``tool_env``) tells tools which protocols are read.
"""

from silica.hookspecs import hookimpl
from silica.results.iterm2 import extract_iterm2
from silica.results.kitty import extract_kitty

KITTY_ORDER = 100
ITERM2_ORDER = 110
ESC = "\x1b"


def _processor(extract):
    def process(draft) -> None:
        if ESC not in draft.text:  # the common case: plain output, nothing to scan
            return
        found = extract(draft.text)
        draft.text = found.text
        draft.images.extend(found.images)
    return process


@hookimpl
def silica_result_processors(register) -> None:
    register("kitty-graphics", KITTY_ORDER, _processor(extract_kitty))
    register("iterm2-images", ITERM2_ORDER, _processor(extract_iterm2))
