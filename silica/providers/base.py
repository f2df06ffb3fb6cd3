"""What every provider implements, and what it is given.

A ``Request`` holds resolved blocks: images as ``ImageBlock`` (bytes already fitted to the
provider's limits and aged by the agent), never refs. A provider only formats and sends it;
it knows nothing of tools' subprocesses or of the image store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, Field

from silica.agent.conversation import ToolCall
from silica.blocks import ImageBlock, TextBlock
from silica.errors import SilicaError
from silica.images.limits import ImageLimits


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


class Reply(BaseModel):
    """What the model answered: text, and the tools it wants called."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What silica needs to know about a model before building a request."""

    vision: bool
    limits: ImageLimits


class ProviderError(SilicaError):
    """A provider call failed; the message says what happened and what to do."""


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
