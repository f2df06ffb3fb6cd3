"""The plugin contract: every way to extend silica, on one page.

Hooks are grouped by the phase of a tool call they belong to: discovery, calling, results,
events. silica's own behaviour is written as default plugins against these same hooks
(see ``silica/default_plugins/``), registered exactly as third-party plugins are.

A plugin is a module or object with functions named like the hooks below, decorated with
``silica.hookimpl``; third-party plugins are found through the ``silica`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

    from silica.blocks import Block
    from silica.config import Settings
    from silica.images.limits import ImageLimits
    from silica.images.payload import ImagePayload
    from silica.mcp.catalog import Prompt, Resource, ResourceTemplate
    from silica.providers.base import Provider
    from silica.results.pipeline import ResultDraft
    from silica.tools.builtin import BuiltinTool
    from silica.tools.model import Tool, ToolFolder

hookspec = pluggy.HookspecMarker("silica")
hookimpl = pluggy.HookimplMarker("silica")


# -- discovery ---------------------------------------------------------------------------


@hookspec
def silica_tool_folders(cwd: Path, home: Path) -> list[ToolFolder] | None:
    """Return folders that hold tool files, seen from working directory ``cwd``.

    Called by discovery once per scan. ``home`` is the silica home (``$SILICA_HOME``).
    Each ``ToolFolder`` carries a ``precedence``: when two folders hold a tool of the same
    name, the lower precedence wins and the other is listed as shadowed. Folders that do
    not exist may be returned; discovery skips them. A folder with ``trusted=False`` is
    listed file by file as ``untrusted`` and nothing in it is read, run or written.
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations only


@hookspec
def silica_builtin_tools(register: Callable[[BuiltinTool], None], settings: Settings) -> None:
    """Register tools that run inside silica (no subprocess) with ``register(tool)``.

    Called once per discovery, off the event loop (it may block: the MCP source starts its
    servers here), with the ``settings`` of the Toolbox that discovers; a plugin that needs
    no settings may leave the argument out. Built-in tools are listed with their ``origin``
    (``builtin`` unless set) and lose a name clash to any user, project or pack tool; of two
    built-ins of one name, the one registered first in pluggy's call order wins, so a
    third-party plugin's replaces a default plugin's.
    """


# -- calling -----------------------------------------------------------------------------


@hookspec
def silica_tool_env(path: Path, env: dict[str, str]) -> None:
    """Adjust, in place, the environment the tool file at ``path`` will run with.

    Called before every call and every ``--toolspec`` / ``--authorize`` run, with a copy of
    silica's own environment from which secrets not granted to the tool are already taken
    (``silica.security.env``). Plugins add variables (``AGENT_GRAPHICS``) or remove more.
    Return nothing.
    """


# -- results -----------------------------------------------------------------------------


@hookspec
def silica_result_processors(register: Callable[[str, int, Callable[[ResultDraft], None]], None]):
    """Register result processors with ``register(name, order, process)``.

    Called once per plugin manager (again only if its plugins change), the first time a
    result is built; the processors are kept for every result after. Each
    ``process(draft)`` reads and rewrites ``draft.text`` (what the tool printed, as text)
    and appends ``ImagePayload`` objects to ``draft.images``. A processor may instead read
    and rewrite ``draft.output``, the same as bytes (decoding with ``draft.errors``): the
    output comes as the bytes the tool wrote and is decoded once, when a processor first
    reads ``text``, so processors that keep to bytes spare it (the escape-sequence ones do).
    Processors run in ascending ``order``:
    escape-sequence images (100s), then JSON image fields (200s); those of one order in the
    order pluggy calls their plugins. Whatever text is left becomes one text block. A name
    registered twice keeps the first registration pluggy calls (a later-registered or
    ``tryfirst`` plugin's), so a plugin replaces ``json-images`` by registering that name.
    ``draft.limits`` are the image limits the result is built for; a processor that decodes
    keeps within their ``max_decoded_bytes`` and ``max_result_decoded_bytes``.
    """


@hookspec(firstresult=True)
def silica_prepare_image(payload: ImagePayload, limits: ImageLimits) -> Block | None:
    """Turn an extracted image into the block a model will see.

    Called once per image a processor found, with the limits of the provider the result is
    for. Return an ``ImageBlock`` that fits ``limits``, or a ``TextBlock`` that says what
    was dropped and why. The first plugin that returns a block decides; the default plugin
    sniffs, decodes fully, converts and scales (``silica.images.check.prepare_image``).
    """


# -- providers ---------------------------------------------------------------------------


@hookspec
def silica_providers(register: Callable[[str, Callable[[Settings], Provider]], None]) -> None:
    """Register model providers with ``register(name, factory)``.

    ``factory(settings)`` returns a ``silica.providers.base.Provider``: it formats a
    provider-neutral ``Request`` for its API and says which models have vision and what image
    limits they have. Called when the agent picks its provider (``--provider`` / config).
    Of two registrations of one name (case-insensitive) the first pluggy calls wins: a
    third-party plugin (registered after the default plugins) or a ``tryfirst`` one
    replaces a built-in provider by registering its name.
    """


# -- serving over MCP --------------------------------------------------------------------


@hookspec
def silica_mcp_resources(register: Callable[[Resource | ResourceTemplate], None],
                         settings: Settings) -> None:
    """Register what ``silica mcp serve`` offers as resources, with ``register(entry)``.

    An entry is a ``silica.mcp.catalog.Resource`` (a fixed uri and a ``read()`` returning
    text or bytes) or a ``ResourceTemplate`` (an RFC 6570 level-1 ``{var}`` template, a
    ``read(variables)`` and optionally ``complete(variable, partial)``). Called once per
    server, the first time a client asks, off the event loop (it may block), with the
    server's ``settings``; a plugin that raises loses its own entries only. Reads may be sync
    (run in a thread) or async; one that raises, or returns more than
    ``MAX_CONTENT_BYTES``, is that request's error. Of two entries of one uri the first
    pluggy calls wins. Call ``silica.mcp.catalog.resource_changed(uri)`` when a resource
    changes: clients subscribed to it are told.
    """


@hookspec
def silica_mcp_prompts(register: Callable[[Prompt], None], settings: Settings) -> None:
    """Register what ``silica mcp serve`` offers as prompts, with ``register(prompt)``.

    A ``silica.mcp.catalog.Prompt`` has a name, arguments (``required`` ones are checked
    before rendering), ``render(arguments)`` returning ``Message`` objects of text,
    ``Image`` or ``Embedded`` resource content, and optionally ``complete(argument,
    partial)``. Called once per server, the first time a client asks, off the event loop;
    rendering that raises is that request's error. Of two prompts of one name the first
    pluggy calls wins.
    """


# -- events ------------------------------------------------------------------------------


@hookspec
def silica_session_deleted(session_id: str, home: Path, settings: Settings) -> None:
    """Clean up what a plugin keeps for session ``session_id`` outside its files.

    Called by ``silica.agent.sessions.delete_session`` before it removes the session's file
    and folders (so a plugin can still read what it left in ``session_folder``), with the
    silica ``home`` and the ``settings`` of that home. Work elsewhere (a remote service) is
    best effort: a plugin reports what it could not do as a warning and returns; a raising
    plugin is reported and the session is deleted all the same. The default plugins delete
    the images the session uploaded to the Anthropic Files API, and its images in the
    object store (``[storage] images``).
    """


@hookspec
def silica_tool_result(tool: Tool, arguments: dict, result) -> None:
    """Observe a finished tool call: ``result`` is the ``ToolResult`` (blocks, is_error).

    Called after every call made through a ``Toolbox``, whatever its outcome. Observers
    (the agent loop, a terminal view, a server) must not raise; a raising observer is
    reported and does not change the result.
    """
