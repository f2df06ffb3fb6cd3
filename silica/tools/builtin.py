"""Built-in tools: tools that run inside silica, registered through ``silica_builtin_tools``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from silica.blocks import ToolResult
from silica.config import Settings
from silica.elicitation import Asker


@dataclass(frozen=True)
class ToolContext:
    """What a built-in tool may know about the call: where the user works, the settings.

    ``approve``, when set, asks the person whether a command may run (the ``shell`` tool):
    True or False, or a pattern (str) meaning yes, and allowed from now on; ``None`` when
    nobody can be asked.

    ``elicit``, when set, asks the person for values (``silica.elicitation``): an MCP
    server's ``elicitation/create``, or a built-in's own question; ``None`` when nobody can
    be asked (the request is then declined)."""

    workdir: Path
    settings: Settings = field(default_factory=Settings)
    approve: Callable[[str], Awaitable[bool | str]] | None = None
    elicit: Asker | None = None


@dataclass(frozen=True)
class BuiltinTool:
    """A tool implemented in Python. ``run`` must not raise for bad input: it returns an
    error ``ToolResult`` that says what was wrong.

    ``origin`` is what ``silica tools list`` shows as its source (``builtin``, or
    ``mcp:<server>`` for a tool of an MCP server). A source that cannot offer its tools
    registers one row with ``error`` set: it is listed with status error and that reason,
    and is never offered to a model or run.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]
    origin: str = "builtin"
    error: str = ""
