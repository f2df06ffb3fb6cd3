"""JSON from outside, measured without recursion: deep nesting crashes recursive code."""

from __future__ import annotations

from typing import Any


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` levels (no recursion;
    stops looking one level past ``limit``)."""
    level: list[Any] = [value]
    for _ in range(limit + 1):
        level = [child for v in level if isinstance(v, dict | list)
                 for child in (v.values() if isinstance(v, dict) else v)]
        if not level:
            return False
    return True
