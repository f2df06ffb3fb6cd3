"""Built-in tools: tools that run inside silica, registered through ``silica_builtin_tools``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from silica.blocks import ToolResult
from silica.config import Settings
from silica.elicitation import Asker

Logger = Callable[[str, Any], Awaitable[None]]
"""Sends ``data`` (any JSON value) at a level; never raises for a client that went away."""


class Sampler(Protocol):
    """Asks the caller's model ``prompt`` for at most ``max_tokens`` tokens; the reply's text.
    ``key`` names the question where the protocol names one (a 2026 input request)."""

    async def __call__(self, prompt: str, max_tokens: int, *, key: str = "") -> str: ...


class RootLister(Protocol):
    """The URIs of the caller's roots (the folders it works in). ``key`` as ``Sampler``'s."""

    async def __call__(self, *, key: str = "") -> list[str]: ...


@dataclass(frozen=True)
class ToolContext:
    """What a built-in tool may know about the call: where the user works, the settings.

    ``approve``, when set, asks the person whether a command may run (the ``shell`` tool):
    True or False, or a pattern (str) meaning yes, and allowed from now on; ``None`` when
    nobody can be asked.

    ``elicit``, when set, asks the person for values (``silica.elicitation``): an MCP
    server's ``elicitation/create``, or a built-in's own question; ``None`` when nobody can
    be asked (the request is then declined).

    The others talk back to whoever called the tool (``silica mcp serve``: its client);
    ``None`` where nobody listens:

    - ``log(level, data)`` sends a log message at a syslog level (``"debug"`` ...
      ``"emergency"``), dropped below the level the client asked for;
    - ``progress(done, total, message)`` reports progress, as a tool file's
      ``progress: done/total message`` stderr line does (it takes the same path);
    - ``sample(prompt, max_tokens)`` asks the client's model; its text reply, or
      ``SilicaError`` saying why there is none;
    - ``roots(key="")`` lists the client's roots (their URIs), or ``SilicaError``;
    - ``attach(content)`` adds MCP content silica's blocks do not model (``audio``,
      ``resource``, ``resource_link``: a dict as MCP writes it) to the result an MCP
      client gets; silica's own agent never sees it (``ValueError`` if it is not one)."""

    workdir: Path
    settings: Settings = field(default_factory=Settings)
    approve: Callable[[str], Awaitable[bool | str]] | None = None
    elicit: Asker | None = None
    log: Logger | None = None
    progress: Callable[[float, float | None, str | None], None] | None = None
    sample: Sampler | None = None
    attach: Callable[[dict[str, Any]], None] | None = None
    roots: RootLister | None = None


@dataclass(frozen=True)
class BuiltinTool:
    """A tool implemented in Python. ``run`` must not raise for bad input: it returns an
    error ``ToolResult`` that says what was wrong.

    ``origin`` is what ``silica tools list`` shows as its source (``builtin``, or
    ``mcp:<server>`` for a tool of an MCP server). A source that cannot offer its tools
    registers one row with ``error`` set: it is listed with status error and that reason,
    and is never offered to a model or run.

    What ``silica mcp serve`` tells its clients, as a tool file's ``Metadata:`` block and
    ``--toolspec`` say it (``docs/tools.md``): ``title``; ``read_only``, ``destructive``,
    ``idempotent``, ``open_world`` (``None``: not said); ``icon`` (an ``https:`` or
    ``data:image/`` URL); ``output_schema``, the JSON schema of the JSON object the tool's
    text result holds (then served as ``structuredContent``).

    An MCP tool's ``_meta.ui`` (``silica.mcp.apps``): ``visibility``, who may see and call
    it (a tool without ``"model"`` is never offered to a model nor run for one), and
    ``app_uri``, the ``ui://`` resource that shows its results in ``silica serve``'s page.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]
    origin: str = "builtin"
    error: str = ""
    title: str = ""
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None
    icon: str = ""
    output_schema: dict[str, Any] | None = None
    visibility: tuple[str, ...] = ("model", "app")
    app_uri: str = ""

    @property
    def for_model(self) -> bool:
        return "model" in self.visibility
