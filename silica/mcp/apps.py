"""MCP Apps (extension ``io.modelcontextprotocol/ui``): what silica, as a host, reads of them.

    extensions()                    # what silica declares to every server it connects to
    ui = tool_ui(tool)              # a listed tool's _meta.ui: its ui:// resource, who sees it
    app = app_resource(uri, read)   # a resources/read answer, checked: HTML, within MAX_APP_BYTES
    shown = result_for_app(blocks, is_error)  # a result as the CallToolResult an app gets

A tool's ``_meta.ui`` (or the older flat ``_meta["ui/resourceUri"]``) names the ``ui://``
resource that shows its results and its ``visibility``: ``["model", "app"]`` by default;
a tool without ``"model"`` is never offered to a model, and one without ``"app"`` is never
called for an app. The resource must be ``text/html;profile=mcp-app`` (as ``text`` or a
base64 ``blob``) of at most ``MAX_APP_BYTES``; anything else is ``AppRefused``, with the
HTTP status a route answers it with. Rendering it is the daemon's business
(``silica.serve.apps``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from silica.blocks import TextBlock, for_user
from silica.errors import SilicaError

EXTENSION = "io.modelcontextprotocol/ui"
MIME = "text/html;profile=mcp-app"
MAX_APP_BYTES = 4 * 1024 * 1024  # an app's HTML; a bundled single-file app is far below
VISIBILITY = ("model", "app")
_CSP_KEYS = ("connectDomains", "resourceDomains", "frameDomains", "baseUriDomains")
_PERMISSIONS = ("camera", "microphone", "geolocation", "clipboardWrite")
_MAX_DOMAINS = 32  # per list: more is not a policy a person could review


class AppRefused(SilicaError):
    """An app that cannot be shown; ``status`` and ``code`` are what a route answers."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def extensions() -> list[Any]:
    """The SDK client extensions silica declares: MCP Apps, HTML views."""
    from mcp.client.extension import advertise

    return [advertise(EXTENSION, {"mimeTypes": [MIME]})]


@dataclass(frozen=True)
class ToolUi:
    """A tool's ``_meta.ui``: the ``ui://`` resource of its view (``""``: none) and who may
    see and call it."""

    resource_uri: str = ""
    visibility: tuple[str, ...] = VISIBILITY

    @property
    def for_model(self) -> bool:
        return "model" in self.visibility

    @property
    def for_app(self) -> bool:
        return "app" in self.visibility


def tool_ui(tool: Any) -> ToolUi:
    """What a listed tool (``mcp_types.Tool``, or anything with a ``meta`` mapping) says of
    its view; a tool that says nothing, or says it wrongly, has none and is seen by all."""
    meta = getattr(tool, "meta", None)
    if not isinstance(meta, Mapping):
        return ToolUi()
    ui = meta.get("ui")
    ui = ui if isinstance(ui, Mapping) else {}
    uri = ui.get("resourceUri", meta.get("ui/resourceUri"))
    uri = uri if isinstance(uri, str) and uri.startswith("ui://") else ""
    seen = ui.get("visibility")
    if isinstance(seen, list) and all(isinstance(v, str) for v in seen):
        visibility = tuple(v for v in VISIBILITY if v in seen)
    else:
        visibility = VISIBILITY
    return ToolUi(uri, visibility)


@dataclass(frozen=True)
class AppResource:
    """A checked app: its HTML and what its ``_meta.ui`` asks of the host."""

    uri: str
    html: str
    csp: dict[str, list[str]] = field(default_factory=dict)
    permissions: dict[str, dict] = field(default_factory=dict)
    prefers_border: bool | None = None

    def as_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "html": self.html, "csp": self.csp,
                "permissions": self.permissions, "prefersBorder": self.prefers_border}


def app_resource(uri: str, result: Any) -> AppResource:
    """The app in a ``resources/read`` answer for ``uri``; ``AppRefused`` when it is not
    one silica shows (not HTML of the MCP Apps type, too large, empty, not readable)."""
    contents = list(getattr(result, "contents", None) or [])
    item = next((c for c in contents if getattr(c, "uri", None) == uri),
                contents[0] if contents else None)
    if item is None:
        raise AppRefused(502, "app_missing", f"the server sent nothing for {uri[:200]}")
    kind = _mime(getattr(item, "mime_type", None) or "")
    if kind != MIME:
        shown = (getattr(item, "mime_type", None) or "no type")[:100]
        raise AppRefused(415, "app_not_html", f"{uri[:200]} is {shown!r}, not an MCP App "
                         f"({MIME}); silica shows the tool's text result instead")
    text = getattr(item, "text", None)
    if text is None:
        text = _blob_text(uri, getattr(item, "blob", None))
    if len(text) > MAX_APP_BYTES or len(text.encode("utf-8", "replace")) > MAX_APP_BYTES:
        raise AppRefused(413, "app_too_large", f"{uri[:200]} is over {MAX_APP_BYTES:,} "
                         "bytes; silica shows the tool's text result instead")
    if not text.strip():
        raise AppRefused(502, "app_empty", f"{uri[:200]} is empty")
    meta = getattr(item, "meta", None)
    ui = meta.get("ui") if isinstance(meta, Mapping) else None
    ui = ui if isinstance(ui, Mapping) else {}
    border = ui.get("prefersBorder")
    return AppResource(uri, text, csp_of(ui.get("csp")), _permissions(ui.get("permissions")),
                       border if isinstance(border, bool) else None)


def csp_of(declared: Any) -> dict[str, list[str]]:
    """The four domain lists of a ``_meta.ui.csp``, strings only, at most ``_MAX_DOMAINS``
    each (what the sandbox's CSP is later built from: ``silica.serve.app_csp``)."""
    if not isinstance(declared, Mapping):
        return {}
    out: dict[str, list[str]] = {}
    for key in _CSP_KEYS:
        values = declared.get(key)
        if isinstance(values, list):
            kept = [v for v in values if isinstance(v, str)][:_MAX_DOMAINS]
            if kept:
                out[key] = kept
    return out


def _permissions(declared: Any) -> dict[str, dict]:
    if not isinstance(declared, Mapping):
        return {}
    return {key: {} for key in _PERMISSIONS if isinstance(declared.get(key), Mapping)}


def _mime(value: str) -> str:
    """A media type with its parameters as silica compares them: lower case, no spaces."""
    return ";".join(part.strip().lower() for part in value.split(";") if part.strip())


def _blob_text(uri: str, blob: Any) -> str:
    if not isinstance(blob, str):
        raise AppRefused(502, "app_missing", f"{uri[:200]} holds neither text nor a blob")
    if len(blob) > MAX_APP_BYTES * 4 // 3 + 4:
        raise AppRefused(413, "app_too_large", f"{uri[:200]} is over {MAX_APP_BYTES:,} "
                         "bytes; silica shows the tool's text result instead")
    try:
        return base64.b64decode(blob, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise AppRefused(502, "app_unreadable", f"{uri[:200]} is not base64 UTF-8 "
                         "HTML") from None


def result_for_app(blocks: Sequence[Any], is_error: bool) -> dict[str, Any]:
    """A result's blocks as the ``CallToolResult`` an app is sent: its text for the person,
    and, when a text block holds a JSON object (an MCP server's ``structuredContent`` is
    kept as one, ``silica.mcp.content``), the last such object as ``structuredContent``."""
    texts = [b.text for b in blocks if isinstance(b, TextBlock) and for_user(b)]
    shown: dict[str, Any] = {"content": [{"type": "text", "text": t} for t in texts],
                             "isError": is_error}
    for text in reversed(texts):
        if text.lstrip().startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                shown["structuredContent"] = value
                break
    return shown
