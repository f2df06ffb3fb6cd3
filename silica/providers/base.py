"""What every provider implements, and what it is given.

A ``Request`` holds resolved blocks: images as ``ImageBlock`` (bytes already fitted to the
provider's limits and aged by the agent), never refs. A provider only formats and sends it;
it knows nothing of tools' subprocesses or of the image store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, Field

from silica.blocks import ImageBlock, TextBlock, ToolCall
from silica.errors import SilicaError
from silica.images.limits import ImageLimits
from silica.jsonsafe import deeper_than


class RequestToolResult(BaseModel):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]]
    is_error: bool = False


RequestBlock = Annotated[TextBlock | ImageBlock | ToolCall | RequestToolResult,
                         Field(discriminator="type")]


class RequestMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: list[RequestBlock]


class Request(BaseModel):
    """One model request, provider-neutral."""

    model: str
    system: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list)  # name, description, input_schema
    messages: list[RequestMessage]
    max_tokens: int = 4096
    # the conversation's id ("": none): what a provider may remember per session (the
    # Anthropic Files API's uploads); never sent
    session_id: str = ""


class Usage(BaseModel):
    """Tokens one request (or, added up, one turn) cost: ``input`` counts every prompt token
    including those read from or written to the provider's prompt cache."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


class Reply(BaseModel):
    """What the model answered: text, and the tools it wants called."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    @property
    def usage(self) -> Usage:
        """What the provider said this request cost (0 for what it did not say)."""
        return Usage(input_tokens=self.input_tokens or 0, output_tokens=self.output_tokens or 0,
                     cache_read_tokens=self.cache_read_tokens or 0,
                     cache_write_tokens=self.cache_write_tokens or 0)


@dataclass(frozen=True)
class ModelInfo:
    """What silica needs to know about a model before building a request."""

    vision: bool
    limits: ImageLimits


class ProviderError(SilicaError):
    """A provider call failed; the message says what happened and what to do."""


MAX_ARGUMENT_DEPTH = 100  # nesting a tool's input may have; deeper is a broken call


def text_marking_images(blocks: list[Any], first: int = 1) -> str:
    """The text of ``blocks`` in their order, one block a line, each image that has text
    after it standing as ``[image N]`` where it was (numbered from ``first``): for a wire
    format that carries a tool's images apart from its text, so the model still learns what
    came before and after each one. Images after the last text need no mark (they follow
    it anyway); without images, the text alone."""
    last_text = max((i for i, b in enumerate(blocks) if isinstance(b, TextBlock) and b.text),
                    default=-1)
    lines: list[str] = []
    number = first
    for i, block in enumerate(blocks):
        if isinstance(block, ImageBlock):
            if i < last_text:
                lines.append(f"[image {number}]")
            number += 1
        elif isinstance(block, TextBlock) and block.text:
            lines.append(block.text)
    return "\n".join(lines)


def tool_arguments(value: Any) -> dict[str, Any]:
    """A tool call's arguments from what the model sent: a JSON object, or the JSON text of
    one. ``{}`` when it is not an object, is not valid JSON, or is nested deeper than
    ``MAX_ARGUMENT_DEPTH`` (which would make later code recurse too deeply): the call still
    runs, and the tool tells the model which inputs are missing. Never raises."""
    if isinstance(value, str):
        try:
            value = json.loads(value or "{}")
        except (ValueError, RecursionError):  # RecursionError: nested past Python's limit
            return {}
    if not isinstance(value, dict) or deeper_than(value, MAX_ARGUMENT_DEPTH):
        return {}
    return value


class Provider(Protocol):
    name: str

    def model_info(self, model: str) -> ModelInfo:
        """Vision (from the model table, unless config says otherwise) and image limits."""
        ...

    async def complete(self, request: Request,
                       on_text: Callable[[str], None] | None = None) -> Reply:
        """Send ``request``; stream text to ``on_text`` as it arrives; raise
        ``ProviderError`` with a clear message on any failure."""
        ...
