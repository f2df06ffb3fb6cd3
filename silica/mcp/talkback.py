"""A built-in tool called through ``silica mcp serve`` talking back to the client.

    talk = TalkBack()
    talk.attach(toolbox)                 # toolbox.elicit / .log / .sample go through it
    with talk.calling(ctx):              # around one tools/call (ctx: the SDK's request)
        ...                              # a built-in's context.elicit(...) asks that client

``ToolContext.elicit`` becomes ``elicitation/create``, ``ToolContext.log`` a
``notifications/message``, ``ToolContext.sample`` a ``sampling/createMessage``, each sent to
the client whose ``tools/call`` is running the tool, tied to that request. Which call a
built-in runs for is a context variable set around the call: calls running at once never
cross. A client that did not declare the capability is not asked: elicitation is declined,
sampling is an error the tool reports, a log message is dropped below the level the client
set (``logging/setLevel``, kept in ``levels``).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import weakref
from collections.abc import Iterator
from typing import Any, cast

import mcp.types as types
from mcp.server.context import ServerRequestContext

from silica.elicitation import Answer, Elicitation
from silica.errors import SilicaError
from silica.tools.toolbox import Toolbox

log = logging.getLogger("silica.mcp")

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""MCP's (syslog's) levels, least severe first."""

_call: contextvars.ContextVar[ServerRequestContext | None] = contextvars.ContextVar(
    "silica_mcp_call", default=None)


class TalkBack:
    """The ``Asker``, logger and sampler of a served ``Toolbox``; see the module docstring.

    ``levels`` maps a connection's session to the least level it wants
    (``logging/setLevel``); a session not in it hears every level."""

    def __init__(self) -> None:
        self.levels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def attach(self, toolbox: Toolbox) -> None:
        toolbox.elicit, toolbox.log, toolbox.sample = self.elicit, self.log, self.sample

    @contextlib.contextmanager
    def calling(self, ctx: ServerRequestContext) -> Iterator[None]:
        """Within: built-ins talk to the client of ``ctx`` (tasks started here inherit it)."""
        token = _call.set(ctx)
        try:
            yield
        finally:
            _call.reset(token)

    async def elicit(self, request: Elicitation) -> Answer:
        ctx = _call.get()
        if ctx is None or not _declared(ctx, types.ClientCapabilities(
                elicitation=types.ElicitationCapability())):
            return Answer("decline", reason="the client cannot be asked for values "
                          "(it does not declare elicitation)")
        try:
            reply = await ctx.session.elicit_form(
                request.message, cast(Any, request.schema), related_request_id=ctx.request_id)
        except Exception as exc:  # no back channel, the client refused or went away
            log.debug("elicitation failed: %s", exc)
            return Answer("cancel", reason=f"the client did not answer: {exc}")
        if reply.action != "accept":
            return Answer(reply.action)
        content = dict(reply.content or {})
        from jsonschema import Draft202012Validator

        problem = next(iter(Draft202012Validator(request.schema).iter_errors(content)), None)
        if problem is not None:
            return Answer("decline", reason=f"the answer does not match the form: "
                          f"{problem.message}")
        return Answer("accept", content)

    async def log(self, level: str, data: Any) -> None:
        ctx = _call.get()
        if ctx is None or level not in LEVELS:
            return
        least = self.levels.get(ctx.session, LEVELS[0])
        if LEVELS.index(level) < LEVELS.index(least):
            return
        try:
            await ctx.session.send_log_message(cast(types.LoggingLevel, level), data,
                                               logger="silica",
                                               related_request_id=ctx.request_id)
        except Exception as exc:  # the client went away: the call goes on
            log.debug("a log message was not sent: %s", exc)

    async def sample(self, prompt: str, max_tokens: int) -> str:
        ctx = _call.get()
        if ctx is None or not _declared(ctx, types.ClientCapabilities(
                sampling=types.SamplingCapability())):
            raise SilicaError("the client cannot be asked for a model's reply "
                              "(it does not declare sampling)")
        message = types.SamplingMessage(role="user",
                                        content=types.TextContent(type="text", text=prompt))
        try:
            reply = await ctx.session.create_message([message], max_tokens=max_tokens,
                                                     related_request_id=ctx.request_id)
        except Exception as exc:
            raise SilicaError(f"the client's model did not reply: {exc}") from exc
        parts = reply.content if isinstance(reply.content, list) else [reply.content]
        return "".join(p.text for p in parts if isinstance(p, types.TextContent))


def _declared(ctx: ServerRequestContext, capability: types.ClientCapabilities) -> bool:
    try:
        return bool(ctx.session.check_client_capability(capability))
    except Exception:  # a session that cannot say has not declared it
        return False
