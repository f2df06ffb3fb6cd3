"""Counted nouns in messages: ``counted(1, "tool")`` is "1 tool", ``counted(2, "tool")`` is
"2 tools". The one place a plural is made, so no message says "1 tools"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, the noun in the plural (``plural``, else ``noun`` + "s")
    unless ``count`` is 1."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
