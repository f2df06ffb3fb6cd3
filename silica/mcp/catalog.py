"""What ``silica mcp serve`` offers besides tools: resources, resource templates, prompts
and completion, each added by plugins through ``silica_mcp_resources`` and
``silica_mcp_prompts``.

    @hookimpl
    def silica_mcp_resources(register):
        register(Resource("notes://today", "today", read=lambda: "buy milk",
                          mime_type="text/plain"))
        register(ResourceTemplate("notes://day/{date}", "day", read=read_day))

    @hookimpl
    def silica_mcp_prompts(register):
        register(Prompt("review", render=lambda args: [Message(f"Review {args['path']}")],
                        arguments=(PromptArgument("path", required=True),)))

``Catalog`` collects the registrations (once, the first time a client asks), serves them in
a fixed order (by uri, then by name) a page at a time, and turns a plugin's mistakes into
that request's error: a read or render that raises, or returns more than
``MAX_CONTENT_BYTES``, fails that request only. A plugin says a resource changed with
``resource_changed(uri)`` (from any thread); clients subscribed to it are told.

Logging (``logging/setLevel``) is ``silica.mcp.serve_log``'s.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import weakref
from base64 import b64encode
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, unquote

import mcp.types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from silica.mcp.serve_log import connection as connection_of
from silica.plugins import call_each
from silica.security.text import safe_text

log = logging.getLogger("silica.mcp")

MAX_CONTENT_BYTES = 8 * 1024 * 1024  # a read or a rendered prompt larger than this is refused
PAGE_SIZE = 100  # entries per page of resources/list, resources/templates/list, prompts/list
MAX_COMPLETIONS = 100  # the most values completion/complete may send (the spec's bound)
RESOURCE_NOT_FOUND = -32002  # the handshake-era code; 2026-07-28 says INVALID_PARAMS

_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\x00-\x20\x7f]{0,2040}")
_VARIABLE = re.compile(r"\{([A-Za-z0-9_]+)\}")

Content = str | bytes  # what a read returns: text, or bytes sent as a base64 blob


# -- what plugins register ---------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """One resource at a fixed ``uri``. ``read()`` (sync, run in a thread, or async) returns
    its text (``str``) or its bytes."""

    uri: str
    name: str
    read: Callable[[], Content | Awaitable[Content]]
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None  # in bytes, when known before reading


@dataclass(frozen=True)
class ResourceTemplate:
    """Resources whose uri fits an RFC 6570 level-1 template (``notes://day/{date}``).

    ``read(variables)`` is given the variables decoded from the uri asked for;
    ``complete(variable, partial)``, if given, suggests values of one variable."""

    uri_template: str
    name: str
    read: Callable[[dict[str, str]], Content | Awaitable[Content]]
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    complete: Callable[[str, str], Sequence[str]] | None = None


@dataclass(frozen=True)
class PromptArgument:
    name: str
    description: str | None = None
    required: bool = False


@dataclass(frozen=True)
class Image:
    """An image in a prompt message: its bytes and media type."""

    data: bytes
    mime_type: str


@dataclass(frozen=True)
class Embedded:
    """A resource embedded in a prompt message: its uri and its text or bytes."""

    uri: str
    content: Content
    mime_type: str | None = None


@dataclass(frozen=True)
class Message:
    """One prompt message: text (a ``str``), an ``Image`` or an ``Embedded`` resource."""

    content: str | Image | Embedded
    role: Literal["user", "assistant"] = "user"


@dataclass(frozen=True)
class Prompt:
    """A prompt: ``render(arguments)`` (sync or async) returns its messages; the required
    arguments are checked before it is called. ``complete(argument, partial)``, if given,
    suggests values of one argument."""

    name: str
    render: Callable[[dict[str, str]], Sequence[Message] | Awaitable[Sequence[Message]]]
    title: str | None = None
    description: str | None = None
    arguments: tuple[PromptArgument, ...] = ()
    complete: Callable[[str, str], Sequence[str]] | None = None


# -- URI templates (RFC 6570 level 1) ----------------------------------------------------


def template_variables(template: str) -> list[str]:
    return _VARIABLE.findall(template)


def expand(template: str, variables: Mapping[str, str]) -> str:
    """Level-1 expansion: each ``{name}`` becomes its value, percent-encoded but for
    unreserved characters."""
    return _VARIABLE.sub(lambda m: quote(variables.get(m[1], ""), safe="-._~"), template)


def match(template: str, uri: str) -> dict[str, str] | None:
    """The variables that expand ``template`` to ``uri``, decoded, or ``None`` if it does
    not fit. A value never spans a ``/``, ``?`` or ``#``."""
    pattern, at = [], 0
    for found in _VARIABLE.finditer(template):
        pattern.append(re.escape(template[at:found.start()]))
        pattern.append(f"(?P<{found[1]}>[^/?#]*)")
        at = found.end()
    pattern.append(re.escape(template[at:]))
    try:
        fitted = re.fullmatch("".join(pattern), uri)
    except re.error:  # a variable named twice
        return None
    return None if fitted is None else {k: unquote(v) for k, v in fitted.groupdict().items()}


# -- serving -----------------------------------------------------------------------------


def _error(code: int, message: str, data: Any = None) -> MCPError:
    return MCPError(code, message, data)


def _page(entries: list[Any],
          params: types.PaginatedRequestParams | None) -> tuple[list, str | None]:
    cursor = params.cursor if params else None
    start = 0
    if cursor is not None:
        if not (cursor.isascii() and cursor.isdigit()) or int(cursor) > len(entries):
            raise _error(INVALID_PARAMS, f"invalid cursor {cursor[:40]!r}: pass back the "
                         "nextCursor of the previous page, or none for the first")
        start = int(cursor)
    end = start + PAGE_SIZE
    return entries[start:end], str(end) if end < len(entries) else None


def _size(content: Content) -> int:
    return len(content) if isinstance(content, bytes) else len(content.encode("utf-8", "replace"))


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """A plugin's function: awaited if async, else run in a thread (it may block)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await asyncio.to_thread(fn, *args)
    return await result if inspect.isawaitable(result) else result


def _valid(kind: str, name: str, uri: str) -> str | None:
    """Why a registration is refused, or ``None``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"{kind} name {name!r} must be 1-200 characters, none of them control characters"
    if not isinstance(uri, str) or not _URI.fullmatch(uri):
        return f"{kind} {name}: {uri!r} is not a uri (scheme:rest, no spaces or controls)"
    return None


class Catalog:
    """The resources, templates and prompts plugins registered, served to MCP clients.

    ``handlers()`` are the keyword arguments for the SDK's ``Server(...)``."""

    def __init__(self, pm: Any, settings: Any, events: Any = None) -> None:
        self.pm, self.settings, self.events = pm, settings, events
        self._loaded = False
        self._loading = asyncio.Lock()
        self.resources: dict[str, Resource] = {}
        self.templates: dict[str, ResourceTemplate] = {}
        self.prompts: dict[str, Prompt] = {}
        self._subscribers: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._loop: asyncio.AbstractEventLoop | None = None
        _catalogs.add(self)

    def handlers(self) -> dict[str, Any]:
        return {
            "on_list_resources": self.list_resources,
            "on_list_resource_templates": self.list_templates,
            "on_read_resource": self.read_resource,
            "on_subscribe_resource": self.subscribe,
            "on_unsubscribe_resource": self.unsubscribe,
            "on_list_prompts": self.list_prompts,
            "on_get_prompt": self.get_prompt,
            "on_completion": self.complete,
        }

    # -- collecting ---------------------------------------------------------------------

    async def load(self) -> None:
        """Ask the plugins, once, in a worker thread (a hook may block). Of two
        registrations of one uri or name the first pluggy calls wins; a registration that is
        not valid is skipped with a warning."""
        self._loop = asyncio.get_running_loop()  # where resource_changed() sends from
        async with self._loading:
            if not self._loaded:
                await asyncio.to_thread(self._collect)
                self._loaded = True

    def _collect(self) -> None:
        def add_resource(entry: Resource | ResourceTemplate) -> None:
            if isinstance(entry, ResourceTemplate):
                self._add("template", entry.name, entry.uri_template, entry, self.templates)
            elif isinstance(entry, Resource):
                self._add("resource", entry.name, entry.uri, entry, self.resources)
            else:
                log.warning("a plugin registered %s, not a Resource or ResourceTemplate: "
                            "skipped", safe_text(type(entry).__name__))

        def add_prompt(entry: Prompt) -> None:
            if isinstance(entry, Prompt):
                self._add("prompt", entry.name, "prompt:" + entry.name, entry, self.prompts,
                          key=entry.name)
            else:
                log.warning("a plugin registered %s, not a Prompt: skipped",
                            safe_text(type(entry).__name__))

        def report(plugin: str, exc: Exception) -> None:  # the others' entries are kept
            log.warning("plugin %s failed to register what silica serves over MCP: %s",
                        safe_text(plugin), safe_text(f"{type(exc).__name__}: {exc}"))

        for hook, add in ((self.pm.hook.silica_mcp_resources, add_resource),
                          (self.pm.hook.silica_mcp_prompts, add_prompt)):
            call_each(hook, report, register=add, settings=self.settings)

    def _add(self, kind: str, name: str, uri: str, entry: Any, into: dict[str, Any],
             key: str | None = None) -> None:
        why = _valid(kind, name, uri)
        if why is None and kind == "template":
            names = template_variables(uri)
            if len(set(names)) != len(names) or re.search(r"[{}]", _VARIABLE.sub("", uri)):
                why = f"template {name}: {uri!r} is not an RFC 6570 level-1 template"
        if why is not None:
            log.warning("%s: skipped", safe_text(why))
            return
        into.setdefault(key or uri, entry)

    # -- resources ----------------------------------------------------------------------

    async def list_resources(self, ctx: ServerRequestContext,
                             params: types.PaginatedRequestParams | None
                             ) -> types.ListResourcesResult:
        await self.load()
        page, cursor = _page(sorted(self.resources.values(), key=lambda r: r.uri), params)
        return types.ListResourcesResult(next_cursor=cursor, resources=[
            types.Resource(uri=r.uri, name=r.name, title=r.title, description=r.description,
                           mime_type=r.mime_type, size=r.size) for r in page])

    async def list_templates(self, ctx: ServerRequestContext,
                             params: types.PaginatedRequestParams | None
                             ) -> types.ListResourceTemplatesResult:
        await self.load()
        ordered = sorted(self.templates.values(), key=lambda t: t.uri_template)
        page, cursor = _page(ordered, params)
        return types.ListResourceTemplatesResult(next_cursor=cursor, resource_templates=[
            types.ResourceTemplate(uri_template=t.uri_template, name=t.name, title=t.title,
                                   description=t.description, mime_type=t.mime_type)
            for t in page])

    async def _find(self, uri: str) -> tuple[Resource | ResourceTemplate, dict[str, str]] | None:
        await self.load()
        if uri in self.resources:
            return self.resources[uri], {}
        for key in sorted(self.templates):
            variables = match(key, uri)
            if variables is not None:
                return self.templates[key], variables
        return None

    async def read_resource(self, ctx: ServerRequestContext,
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        found = await self._find(uri)
        if found is None:
            modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            raise _error(INVALID_PARAMS if modern else RESOURCE_NOT_FOUND,
                         "Resource not found", {"uri": uri})
        entry, variables = found
        args = (variables,) if isinstance(entry, ResourceTemplate) else ()
        content = await self._run(f"reading {uri}", entry.read, *args)
        if not isinstance(content, str | bytes):
            raise self._failed(f"reading {uri}", f"it returned {type(content).__name__}, "
                               "not text (str) or bytes")
        self._bound(uri, _size(content))
        if isinstance(content, bytes):
            return types.ReadResourceResult(contents=[types.BlobResourceContents(
                uri=uri, mime_type=entry.mime_type or "application/octet-stream",
                blob=b64encode(content).decode("ascii"))])
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type=entry.mime_type or "text/plain", text=content)])

    async def subscribe(self, ctx: ServerRequestContext,
                        params: types.SubscribeRequestParams) -> types.EmptyResult:
        await self.load()
        connection = connection_of(ctx)
        connection.state.setdefault("silica.subscriptions", set()).add(str(params.uri))
        self._subscribers.add(connection)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext,
                          params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        connection_of(ctx).state.get("silica.subscriptions", set()).discard(str(params.uri))
        return types.EmptyResult()

    async def changed(self, uri: str) -> None:
        """Tell every client subscribed to ``uri`` that it changed: handshake-era connections
        that sent ``resources/subscribe``, and 2026-era ``subscriptions/listen`` streams."""
        if self.events is not None:
            await self.events.publish(ResourceUpdated(uri=uri))
        for connection in list(self._subscribers):
            if uri in connection.state.get("silica.subscriptions", ()):
                try:
                    await connection.send_resource_updated(uri)
                except Exception as exc:  # that client is gone; the others are told
                    log.debug("resource update not sent: %s", exc)
                    self._subscribers.discard(connection)

    # -- prompts ------------------------------------------------------------------------

    async def list_prompts(self, ctx: ServerRequestContext,
                           params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        await self.load()
        page, cursor = _page([self.prompts[k] for k in sorted(self.prompts)], params)
        return types.ListPromptsResult(next_cursor=cursor, prompts=[
            types.Prompt(name=p.name, title=p.title, description=p.description, arguments=[
                types.PromptArgument(name=a.name, description=a.description,
                                     required=a.required) for a in p.arguments])
            for p in page])

    async def get_prompt(self, ctx: ServerRequestContext,
                         params: types.GetPromptRequestParams) -> types.GetPromptResult:
        await self.load()
        prompt = self.prompts.get(params.name)
        if prompt is None:
            raise _error(INVALID_PARAMS, f"no prompt named {params.name[:200]!r}: "
                         "prompts/list names the prompts served", {"name": params.name})
        arguments = dict(params.arguments or {})
        missing = [a.name for a in prompt.arguments if a.required and a.name not in arguments]
        if missing:
            raise _error(INVALID_PARAMS, f"prompt {prompt.name} needs the argument(s) "
                         f"{', '.join(missing)}", {"missing": missing})
        rendered = await self._run(f"rendering prompt {prompt.name}", prompt.render, arguments)
        try:
            messages = [_message(m) for m in rendered]
        except (TypeError, ValueError) as exc:
            raise self._failed(f"rendering prompt {prompt.name}", str(exc)) from None
        self._bound(f"prompt {prompt.name}", sum(_size(m.model_dump_json()) for m in messages))
        return types.GetPromptResult(description=prompt.description, messages=messages)

    # -- completion ---------------------------------------------------------------------

    async def complete(self, ctx: ServerRequestContext,
                       params: types.CompleteRequestParams) -> types.CompleteResult:
        await self.load()
        ref, name, partial = params.ref, params.argument.name, params.argument.value
        complete: Callable[[str, str], Sequence[str]] | None
        if isinstance(ref, types.PromptReference):
            prompt = self.prompts.get(ref.name)
            if prompt is None:
                raise _error(INVALID_PARAMS, f"no prompt named {ref.name[:200]!r}")
            complete, what = prompt.complete, f"completing {ref.name}"
        else:
            template = self.templates.get(ref.uri)
            if template is None:
                raise _error(INVALID_PARAMS, f"no resource template {ref.uri[:200]!r}")
            complete, what = template.complete, f"completing {ref.uri}"
        values = [] if complete is None else list(await self._run(what, complete, name, partial))
        if not all(isinstance(v, str) for v in values):
            raise self._failed(what, "it returned values that are not strings")
        return types.CompleteResult(completion=types.Completion(
            values=values[:MAX_COMPLETIONS], total=len(values),
            has_more=len(values) > MAX_COMPLETIONS))

    # -- a plugin's mistakes ------------------------------------------------------------

    async def _run(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await _call(fn, *args)
        except MCPError:
            raise
        except Exception as exc:  # the plugin's bug is this request's error only
            raise self._failed(what, f"{type(exc).__name__}: {exc}") from None

    def _failed(self, what: str, why: str) -> MCPError:
        log.warning("%s failed: %s", safe_text(what), safe_text(why))
        return _error(INTERNAL_ERROR, f"{what} failed: {why}"[:1000])

    def _bound(self, what: str, size: int) -> None:
        if size > MAX_CONTENT_BYTES:
            raise self._failed(f"serving {what}", f"it is {size} bytes, more than the "
                               f"{MAX_CONTENT_BYTES // 2**20} MiB silica serves")


def _message(message: Message) -> types.PromptMessage:
    content = message.content
    block: types.TextContent | types.ImageContent | types.EmbeddedResource
    if isinstance(content, str):
        block = types.TextContent(type="text", text=content)
    elif isinstance(content, Image):
        block = types.ImageContent(type="image", mime_type=content.mime_type,
                                   data=b64encode(content.data).decode("ascii"))
    elif isinstance(content, Embedded):
        inner: types.TextResourceContents | types.BlobResourceContents
        if isinstance(content.content, bytes):
            inner = types.BlobResourceContents(
                uri=content.uri, mime_type=content.mime_type or "application/octet-stream",
                blob=b64encode(content.content).decode("ascii"))
        else:
            inner = types.TextResourceContents(uri=content.uri, text=content.content,
                                               mime_type=content.mime_type or "text/plain")
        block = types.EmbeddedResource(type="resource", resource=inner)
    else:
        raise TypeError(f"a message holds {type(content).__name__}, not text, Image or Embedded")
    return types.PromptMessage(role=message.role, content=block)


# -- telling clients ---------------------------------------------------------------------

_catalogs: weakref.WeakSet[Catalog] = weakref.WeakSet()


def resource_changed(uri: str) -> None:
    """Say that the resource at ``uri`` changed (from any thread, while serving): every
    client subscribed to it gets ``notifications/resources/updated``."""
    for catalog in list(_catalogs):
        loop = catalog._loop
        if loop is None or loop.is_closed():
            continue
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.create_task(catalog.changed(uri))
        else:
            asyncio.run_coroutine_threadsafe(catalog.changed(uri), loop)
