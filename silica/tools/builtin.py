"""Built-in tools: tools that run inside silica, registered through ``silica_builtin_tools``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from silica.blocks import ToolResult
from silica.config import Settings


@dataclass(frozen=True)
class ToolContext:
    """What a built-in tool may know about the call: where the user works, the settings."""

    workdir: Path
    settings: Settings = field(default_factory=Settings)


@dataclass(frozen=True)
class BuiltinTool:
    """A tool implemented in Python. ``run`` must not raise for bad input: it returns an
    error ``ToolResult`` that says what was wrong."""

    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]
