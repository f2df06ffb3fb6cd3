"""What ``silica mcp serve`` says of a tool and of its result, beyond name and schema.

    tools = [served_tool(t) for t in sorted_tools]     # tools/list entries, by name
    result = served_result(tool, toolbox_result)       # tools/call, with structuredContent

A tool's ``Metadata:`` block (or a built-in's fields) gives ``title``, the annotations
(``read_only`` -> ``readOnlyHint``, ``destructive`` -> ``destructiveHint``, ``idempotent``
-> ``idempotentHint``, ``open_world`` -> ``openWorldHint``; only those said) and ``icons``;
its spec's ``output_schema`` is the ``outputSchema``. A tool with an output schema returns
its structured result as the JSON object its text holds (a tool file prints it on stdout):
that object is the result's ``structuredContent``, checked against the schema, and the
text and image content stay beside it. A result whose object is missing or does not match
is an error result saying so.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

from silica.blocks import ImageBlock, TextBlock, ToolResult
from silica.tools.model import Tool

MAX_REASONS = 3  # schema problems named in the error result


def served_tool(tool: Tool) -> types.Tool:
    """The ``tools/list`` entry of a runnable tool (its spec is valid)."""
    assert tool.spec is not None
    meta, spec = tool.metadata, tool.spec
    hints = {"read_only_hint": meta.read_only, "destructive_hint": meta.destructive,
             "idempotent_hint": meta.idempotent, "open_world_hint": meta.open_world}
    said = {k: v for k, v in hints.items() if v is not None}
    return types.Tool(
        name=spec.name, title=meta.title or None, description=spec.description,
        input_schema=spec.input_schema, output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(title=meta.title or None, **said) if said else None,
        icons=[types.Icon(src=meta.icon, mime_type=_icon_type(meta.icon))] if meta.icon
        else None)


def _icon_type(src: str) -> str | None:
    if src.startswith("data:"):
        return src[5:].split(";", 1)[0].split(",", 1)[0] or None
    suffixes = {".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg",
                ".jpeg": "image/jpeg", ".webp": "image/webp"}
    path = src.split("?", 1)[0].lower()
    return next((t for s, t in suffixes.items() if path.endswith(s)), None)


def call_result(result: ToolResult) -> types.CallToolResult:
    """A silica ``ToolResult`` as MCP content: text for text, image for image, in order; a
    block's ``audience`` becomes its ``annotations.audience``."""
    content: list[types.ContentBlock] = []
    for block in result.blocks:
        # the host decides what its model and its user see, as MCP intends
        annotations = types.Annotations(audience=list(block.audience)) if block.audience \
            else None
        if isinstance(block, ImageBlock):
            content.append(types.ImageContent(type="image", data=block.base64,
                                              mime_type=block.media_type,
                                              annotations=annotations))
        else:
            content.append(types.TextContent(type="text", text=block.text,
                                             annotations=annotations))
    return types.CallToolResult(content=content, is_error=result.is_error)


def served_result(tool: Tool | None, result: ToolResult) -> types.CallToolResult:
    """``call_result``, plus ``structuredContent`` when ``tool`` declares an output schema
    and the call succeeded: the JSON object of its text, checked against the schema."""
    schema = tool.spec.output_schema if tool is not None and tool.spec is not None else None
    if schema is None or result.is_error:
        return call_result(result)
    found = structured_object(result)
    name = tool.name if tool is not None else "the tool"
    if found is None:
        return call_result(ToolResult.error(
            f"{name} declares an output schema but its result holds no JSON object; "
            "it must print one JSON object matching the schema"))
    from jsonschema import Draft202012Validator

    problems = sorted(Draft202012Validator(schema).iter_errors(found), key=str)
    if problems:
        reasons = "; ".join(_problem(p) for p in problems[:MAX_REASONS])
        return call_result(ToolResult.error(
            f"the result of {name} does not match its output schema: {reasons}"))
    served = call_result(result)
    served.structured_content = found
    return served


def structured_object(result: ToolResult) -> dict[str, Any] | None:
    """The first text block of ``result`` that is, as a whole, a JSON object (the JSON a
    tool printed, its images already taken out); ``None`` if there is none."""
    for block in result.blocks:
        if not isinstance(block, TextBlock) or not block.text.lstrip().startswith("{"):
            continue
        try:
            found = json.loads(block.text)
        except (ValueError, RecursionError):
            continue
        if isinstance(found, dict):
            return found
    return None


def _problem(error: Any) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or 'the object'}: {error.message}"[:300]
