"""How ``silica chat`` and ``ask`` show a conversation on the terminal in few words: the
one-line summary of a tool's result (``summary``) and the replay of a resumed session's
earlier turns (``replay``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.text import Text

from silica.cli.output import err, plain
from silica.words import counted

_FIRST_WORDS = re.compile(r"\S")
_MEANINGFUL = re.compile(r"[^\W_]")  # a letter or digit: a line worth showing
_SHOWN = 160  # characters of a result's line shown after its tool call
REPLAYED = 10  # the latest turns a resumed chat shows


def summary(blocks) -> str:
    """What the stderr line after a tool call says of its result (``blocks``), never a lone brace or
    nothing: a short JSON text whole on one line, a longer one by its size ("1 image, 1.2 kB
    of JSON"); otherwise the first line of the text shown to the person that has a letter
    or digit in it (text for the model only is skipped), at most ``_SHOWN`` characters;
    with no such line, what the result holds ("1 image", "no output"). Cheap for any size
    of output: no text is parsed, and nothing past the line shown is read."""
    from silica.blocks import TextBlock, for_user

    texts = [b.text for b in blocks if isinstance(b, TextBlock) and for_user(b)]
    images = sum(getattr(b, "type", "") in ("image", "image_ref") for b in blocks)
    first = next((t for t in texts if _FIRST_WORDS.search(t)), "")
    start = _FIRST_WORDS.search(first)
    if start and first[start.start()] in "{[":
        size = sum(len(t) for t in texts)
        if size <= _SHOWN and len(texts) == 1:
            return _counted(images, " ".join(first.split()))
        return _counted(images, f"{_size(size)} of JSON")
    for text in texts:
        line = _meaningful_line(text)
        if line:
            return line
    return _counted(images, "" if images else "no output")


def _meaningful_line(text: str) -> str:
    """The first line of ``text`` with a letter or digit, stripped, at most ``_SHOWN``
    characters (undecodable runs compacted); "" if there is none."""
    from silica.agent.results import compact_undecodable

    found = _MEANINGFUL.search(text)
    if found is None:
        return ""
    begin = max(text.rfind("\n", 0, found.start()) + 1, found.start() - _SHOWN)
    line = text[begin:found.start() + 4 * _SHOWN].split("\n", 1)[0]
    return compact_undecodable(line.strip())[:_SHOWN]


def _counted(images: int, rest: str) -> str:
    parts = [counted(images, "image")] if images else []
    return ", ".join([*parts, rest] if rest else parts)


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} bytes"
    return f"{n / 1000:.1f} kB" if n < 1_000_000 else f"{n / 1_000_000:.1f} MB"


def call_line(call: Any) -> str:
    """A tool call in one line: its name and its arguments as JSON, cut at 200 characters."""
    args = json.dumps(call.arguments, ensure_ascii=False)
    return f"{call.name} {args if len(args) <= 200 else args[:197] + '...'}"


def replay(conversation: Any, turns: int | None = REPLAYED, *, console: Console = err,
           style: str = "dim", image: Callable[[Any], None] | None = None) -> None:
    """Show the latest ``turns`` turns of ``conversation`` (None: all) on ``console``, in
    ``style``, as chat showed them: the person's lines, the model's text, each tool call and
    its result on one line. ``image``, when given, shows each image (an ``ImageRefBlock``:
    the person's and those of results, after their line); without it a person's image is
    the line ``[an image]``."""
    from silica.blocks import TextBlock, ToolCall, for_user
    from silica.security.text import safe_text

    messages = conversation.messages
    numbers = sorted({m.turn for m in messages})
    shown = set(numbers if turns is None else numbers[-turns:])
    if len(numbers) > len(shown):
        console.print(f"… {counted(len(numbers) - len(shown), 'earlier turn')}", style=style,
                      markup=False)
    dim = f"{style} " if style else ""
    for message in messages:
        if message.turn not in shown:
            continue
        for block in message.content:
            if isinstance(block, TextBlock) and for_user(block):
                words = safe_text(block.text.strip())
                if message.role == "user":
                    console.print(Text.assemble(("you> ", style), (words, style)))
                elif words:
                    console.print(Text(words, style=style))
            elif isinstance(block, ToolCall):
                console.print(Text.assemble(("→ ", f"{dim}cyan"),
                                            plain(call_line(block), style)))
            elif getattr(block, "type", "") == "tool_result":
                colour = f"{dim}red" if block.is_error else f"{dim}green"
                console.print(Text.assemble(("  ← ", colour), plain(
                    f"{block.name}: {summary(block.content)}", style)))
                if image is not None:
                    for part in block.content:
                        if getattr(part, "type", "") == "image_ref" and for_user(part):
                            image(part)
            elif message.role == "user" and getattr(block, "type", "") == "image_ref":
                if image is not None:
                    image(block)
                else:
                    console.print(Text("  [an image]", style=style))
