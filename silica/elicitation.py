"""Elicitation: a tool (an MCP server's, or a built-in) asking the person for a few values.

    answer = await context.elicit(Elicitation(source="files", message="Which folder?",
                                              schema={"type": "object", "properties": {...}}))
    if answer.action == "accept": use(answer.content)

The types live here, below tools and front ends, so that every layer speaks one shape:

- an MCP server's ``elicitation/create`` request becomes an ``Elicitation`` (checked and
  made safe by ``silica.mcp.elicit``) and is put to the ``Asker`` of the call that caused it;
- the ``Asker`` is the front end's: ``chat`` asks in the terminal, ``serve`` shows a form on
  the page, ``mcp serve`` forwards the request to its own host, ``ask`` declines (or, with
  ``--yes``, accepts the defaults). ``None``: nobody can be asked, the request is declined.

``Toolbox.elicit`` holds the front end's ``Asker`` as ``Toolbox.approve`` holds the shell
tool's approver; every built-in tool's ``ToolContext.elicit`` is that ``Asker``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["accept", "decline", "cancel"]


@dataclass(frozen=True)
class Elicitation:
    """One request for values, already checked: ``message`` is safe to show, ``schema`` a
    flat object schema whose properties are strings, numbers, integers, booleans or enums
    (with their titles, descriptions and defaults). ``source`` names who asks (an MCP
    server's configured name, or a built-in tool's name); ``id`` is unique in the process."""

    source: str
    message: str
    schema: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class Answer:
    """The person's answer: ``accept`` with ``content`` (valid against the schema),
    ``decline`` (no), or ``cancel`` (dismissed without a choice). ``reason`` says, for the
    log and the tool's result, why silica answered on the person's behalf (a timeout, no
    one to ask, too many requests)."""

    action: Action
    content: dict[str, Any] | None = None
    reason: str = field(default="", compare=False)


Asker = Callable[[Elicitation], Awaitable[Answer]]
"""Who is asked: an async callable given the request, returning the answer. It must not
raise for an ordinary refusal; it returns ``Answer("decline")`` or ``Answer("cancel")``."""
