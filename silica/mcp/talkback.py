"""A built-in tool called through ``silica mcp serve`` talking back to the client.

    talk = TalkBack()
    talk.attach(toolbox)                 # toolbox.elicit / .log / .sample go through it
    with talk.calling(ctx):              # around one tools/call (ctx: the SDK's request)
        ...                              # a built-in's context.elicit(...) asks that client

``ToolContext.elicit`` becomes ``elicitation/create``, ``ToolContext.log`` a
``notifications/message``, ``ToolContext.sample`` a ``sampling/createMessage``,
``ToolContext.roots`` a ``roots/list``, each sent to
the client whose ``tools/call`` is running the tool, tied to that request. Which call a
built-in runs for is a context variable set around the call: calls running at once never
cross. A client that did not declare the capability is not asked: elicitation is declined,
sampling is an error the tool reports, a log message is dropped below the level the client
set (``logging/setLevel``; ``silica.mcp.serve_log``).

A 2026-07-28 connection has no channel back to the client while a call runs: there a
built-in's questions become an ``input_required`` result (``Rounds``). The call is stopped
at its first unanswered question (and any asked at the same moment), the result names them
under their keys (an ``Elicitation``'s ``id``, ``sample``'s ``key``, else ``elicitation-N``
or ``sampling-N`` in the order asked) and carries the answers gathered so far as
``requestState`` (sealed by the SDK: a state the client changed is refused). The client
retries the call with the answers; the tool runs again from the start and its questions are
answered from them, in order, until it finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import mcp.types as types
from mcp.server.context import ServerRequestContext

from silica.elicitation import Answer, Elicitation
from silica.errors import SilicaError
from silica.mcp.serve_log import log_level
from silica.tools.toolbox import Toolbox

log = logging.getLogger("silica.mcp")

T = TypeVar("T")

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""MCP's (syslog's) levels, least severe first."""

_call: contextvars.ContextVar[ServerRequestContext | None] = contextvars.ContextVar(
    "silica_mcp_call", default=None)
_rounds: contextvars.ContextVar[Rounds | None] = contextvars.ContextVar(
    "silica_mcp_rounds", default=None)
_attached: contextvars.ContextVar[list[types.ContentBlock] | None] = contextvars.ContextVar(
    "silica_mcp_attached", default=None)
_CONTENT: Any = None  # the TypeAdapter of MCP's content blocks, made on first use
_ATTACHABLE = (types.AudioContent, types.EmbeddedResource, types.ResourceLink)


class Rounds:
    """One round of a call on a connection without a channel back: the answers the client
    gave (``requestState`` plus ``inputResponses``) and the questions still open."""

    def __init__(self, state: Any, responses: Any) -> None:
        try:
            kept = json.loads(state) if isinstance(state, str) and state else {}
        except ValueError:
            kept = {}
        self.answers: dict[str, Any] = dict(kept) if isinstance(kept, dict) else {}
        if isinstance(responses, dict):
            self.answers.update(responses)
        self.needed: dict[str, dict[str, Any]] = {}
        self.asked = asyncio.Event()
        # what a built-in needed of the client that the request did not declare: the whole
        # request then fails with -32021, as the 2026-07-28 protocol wants (``refusal``)
        self.missing: list[types.ClientCapabilities] = []
        self._counts: dict[str, int] = {}

    def refusal(self) -> Exception | None:
        """The protocol error ending this request when a built-in needed a capability the
        client did not declare (``MissingRequiredClientCapabilityError``), else ``None``."""
        if not self.missing:
            return None
        from mcp.shared.exceptions import MCPError

        needed = types.ClientCapabilities.model_validate(
            {k: v for caps in self.missing
             for k, v in caps.model_dump(by_alias=True, exclude_none=True).items()})
        named = ", ".join(sorted(needed.model_dump(exclude_none=True)))
        return MCPError(code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                        message=f"the tool needs the client's {named} capability, which this "
                                "request does not declare",
                        data=types.MissingRequiredClientCapabilityErrorData(
                            required_capabilities=needed).model_dump(
                                by_alias=True, mode="json", exclude_none=True))

    def key(self, kind: str, given: str = "") -> str:
        self._counts[kind] = self._counts.get(kind, 0) + 1
        return given or f"{kind}-{self._counts[kind]}"

    async def ask(self, key: str, method: str, params: dict[str, Any],
                  parse: Callable[[Any], T]) -> T:
        """The client's answer to ``key`` (``parse``d), or (none yet, or not an answer) this
        call stops here: the question is recorded and the caller, seeing ``asked``, ends
        the round."""
        if key in self.answers:
            try:
                return parse(self.answers[key])
            except ValueError:  # not an answer of that kind: asked again
                del self.answers[key]
        self.needed[key] = {"method": method, "params": params}
        self.asked.set()
        await asyncio.Event().wait()  # never set: the round ends by cancelling the call
        raise AssertionError("unreachable")

    def result(self) -> types.InputRequiredResult:
        """What the client gets: the open questions, the answers so far as state."""
        return types.InputRequiredResult.model_validate(
            {"inputRequests": self.needed,
             "requestState": json.dumps({k: v for k, v in self.answers.items()
                                         if k not in self.needed})})


class TalkBack:
    """The ``Asker``, logger and sampler of a served ``Toolbox``; see the module docstring.

    A log message is sent at or above the least level the client wants
    (``silica.mcp.serve_log.log_level``: its ``logging/setLevel``, or a 2026-07-28
    request's ``_meta``); a client that said nothing hears every level."""

    def attach(self, toolbox: Toolbox) -> None:
        toolbox.elicit, toolbox.log, toolbox.sample = self.elicit, self.log, self.sample
        toolbox.attach, toolbox.roots = self.attach_content, self.roots

    def attach_content(self, content: dict[str, Any]) -> None:
        """A built-in's ``context.attach``: kept for the result of the call it runs for."""
        global _CONTENT
        if _CONTENT is None:
            from pydantic import TypeAdapter

            _CONTENT = TypeAdapter(types.ContentBlock)
        try:
            block = _CONTENT.validate_python(content)
        except Exception as exc:
            raise ValueError(f"not MCP content: {exc}") from None
        if not isinstance(block, _ATTACHABLE):
            raise ValueError("only audio, resource and resource_link content is attached; "
                             "return text and images as blocks")
        attached = _attached.get()
        if attached is not None:
            attached.append(block)

    @contextlib.contextmanager
    def calling(self, ctx: ServerRequestContext, rounds: Rounds | None = None,
                ) -> Iterator[list[types.ContentBlock]]:
        """Within: built-ins talk to the client of ``ctx`` (tasks started here inherit it);
        with ``rounds``, their questions are answered from it or end the round. Gives the
        list their ``attach``ed content goes to."""
        attached: list[types.ContentBlock] = []
        tokens = _call.set(ctx), _rounds.set(rounds), _attached.set(attached)
        try:
            yield attached
        finally:
            _call.reset(tokens[0])
            _rounds.reset(tokens[1])
            _attached.reset(tokens[2])

    async def elicit(self, request: Elicitation) -> Answer:
        ctx = _call.get()
        if ctx is None or not _declared(ctx, types.ClientCapabilities(
                elicitation=types.ElicitationCapability())):
            return Answer("decline", reason="the client cannot be asked for values "
                          "(it does not declare elicitation)")
        rounds = _rounds.get()
        try:
            if rounds is not None:
                key = rounds.key("elicitation", request.id)
                reply = await rounds.ask(key, "elicitation/create", {
                    "message": request.message, "requestedSchema": request.schema},
                    types.ElicitResult.model_validate)
            else:
                reply = await ctx.session.elicit_form(
                    request.message, cast(Any, request.schema),
                    related_request_id=ctx.request_id)
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
        least = log_level(ctx) or LEVELS[0]
        if LEVELS.index(level) < LEVELS.index(least):
            return
        try:
            await ctx.session.send_log_message(cast(types.LoggingLevel, level), data,
                                               logger="silica",
                                               related_request_id=ctx.request_id)
        except Exception as exc:  # the client went away: the call goes on
            log.debug("a log message was not sent: %s", exc)

    async def sample(self, prompt: str, max_tokens: int, *, key: str = "") -> str:
        ctx = _call.get()
        if ctx is None or not _declared(ctx, types.ClientCapabilities(
                sampling=types.SamplingCapability())):
            _needed(types.ClientCapabilities(sampling=types.SamplingCapability()))
            raise SilicaError("the client cannot be asked for a model's reply "
                              "(it does not declare sampling)")
        message = types.SamplingMessage(role="user",
                                        content=types.TextContent(type="text", text=prompt))
        rounds = _rounds.get()
        try:
            if rounds is not None:
                reply = await rounds.ask(rounds.key("sampling", key), "sampling/createMessage", {
                    "messages": [message.model_dump(mode="json", by_alias=True,
                                                    exclude_none=True)],
                    "maxTokens": max_tokens}, types.CreateMessageResult.model_validate)
            else:
                reply = await ctx.session.create_message([message], max_tokens=max_tokens,
                                                         related_request_id=ctx.request_id)
        except Exception as exc:
            raise SilicaError(f"the client's model did not reply: {exc}") from exc
        parts = reply.content if isinstance(reply.content, list) else [reply.content]
        return "".join(p.text for p in parts if isinstance(p, types.TextContent))

    async def roots(self, *, key: str = "") -> list[str]:
        ctx = _call.get()
        if ctx is None or not _declared(ctx, types.ClientCapabilities(
                roots=types.RootsCapability())):
            _needed(types.ClientCapabilities(roots=types.RootsCapability()))
            raise SilicaError("the client cannot be asked for its roots "
                              "(it does not declare roots)")
        rounds = _rounds.get()
        try:
            if rounds is not None:
                listed = await rounds.ask(rounds.key("roots", key), "roots/list", {},
                                          types.ListRootsResult.model_validate)
            else:
                listed = await ctx.session.list_roots()
        except Exception as exc:
            raise SilicaError(f"the client did not list its roots: {exc}") from exc
        return [str(root.uri) for root in listed.roots]


def _needed(capability: types.ClientCapabilities) -> None:
    """Record, on a 2026-07-28 request, a capability a built-in needed and the client did not
    declare (a handshake-era client hears of it in the tool's error result alone)."""
    rounds = _rounds.get()
    if rounds is not None:
        rounds.missing.append(capability)


def _declared(ctx: ServerRequestContext, capability: types.ClientCapabilities) -> bool:
    try:
        return bool(ctx.session.check_client_capability(capability))
    except Exception:  # a session that cannot say has not declared it
        return False
