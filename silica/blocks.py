"""Content blocks: what a tool call produces and every provider consumes.

A ``ToolResult`` is a list of text and image blocks plus ``is_error``. Image bytes are held
raw; base64 is made only when a wire format needs it (``to_anthropic``). A ``ToolCall`` is the
model asking for a tool: providers make it from a reply, the agent keeps it in the
conversation, so it lives here, below both.

A block's ``audience`` says who it is for (MCP's ``annotations.audience``): ``None`` for
both, ``("user",)`` for the person only (shown, never sent to a model), ``("assistant",)``
for the model only (sent, never shown). ``for_model`` and ``for_user`` decide; a block saved
without the field is for both, and the field is written only when set.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Audience = tuple[Literal["user", "assistant"], ...]
"""Who a block is for; see the module docstring."""


def _audience_field() -> Any:
    # Left out of dumps when unset, so sessions without audiences are saved as before.
    return Field(default=None, exclude_if=lambda value: value is None)


def for_model(block: Any) -> bool:
    """Whether ``block`` goes to the model: it has no audience, or one with ``assistant``."""
    audience = getattr(block, "audience", None)
    return audience is None or "assistant" in audience


def for_user(block: Any) -> bool:
    """Whether ``block`` is shown to the person: no audience, or one with ``user``."""
    audience = getattr(block, "audience", None)
    return audience is None or "user" in audience


class TextBlock(BaseModel):
    """Plain text for the model."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    text: str
    audience: Audience | None = _audience_field()

    def to_anthropic(self) -> dict:
        return {"type": "text", "text": self.text}

    def __repr_args__(self):
        # Short, whatever the text's length: asyncio and logging take reprs of results
        # (Python 3.11's signal.getsignal does, of asyncio.run's task), and a whole tool
        # output's repr would copy it several times over.
        for name, value in super().__repr_args__():
            if name == "text" and len(value) > _REPR_CHARS:
                value = f"{value[:_REPR_CHARS]}... ({len(value):,} characters)"
            yield name, value


_REPR_CHARS = 200


class ImageBlock(BaseModel):
    """An image that has been checked and is safe to send: ``data`` holds its raw bytes."""

    model_config = ConfigDict(frozen=True)

    type: Literal["image"] = "image"
    media_type: str
    data: bytes = Field(repr=False)
    width: int | None = None
    height: int | None = None
    source: str = ""  # which processor found it ("json", "kitty", ...)
    audience: Audience | None = _audience_field()
    # Bytes the image had as the tool emitted it, when fitting sent other bytes (None: as it
    # came); written only when set, like ``audience``.
    original_bytes: int | None = Field(default=None, ge=0, exclude_if=lambda value: value is None)
    # Words about the image (its file name, the tool's caption), for the text sent in its
    # place to a model without vision; never sent with the image. Written only when set.
    alt: str = Field(default="", exclude_if=lambda value: not value)

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    def to_anthropic(self) -> dict:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": self.media_type, "data": self.base64},
        }


class ImageRef(BaseModel):
    """An image kept in an ``ImageStore``: what a conversation holds instead of bytes.

    ``id`` is the sha256 of the bytes (hex), so the same image is stored once per session.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(pattern=r"^[0-9a-f]{64}$")
    media_type: str
    bytes: int = Field(ge=0)
    width: int = Field(ge=1)
    height: int = Field(ge=1)


class ImageRefBlock(BaseModel):
    """An image in a conversation, by reference; ``alt`` says where it came from."""

    model_config = ConfigDict(frozen=True)

    type: Literal["image_ref"] = "image_ref"
    ref: ImageRef
    alt: str = ""
    audience: Audience | None = _audience_field()


Block = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolCall(BaseModel):
    """The model asks for a tool: ``arguments`` is its JSON input."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResult(BaseModel):
    """The outcome of one tool call, as the model will see it."""

    blocks: list[Block] = Field(default_factory=list)
    is_error: bool = False

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(blocks=[TextBlock(text=message)], is_error=True)

    @property
    def text(self) -> str:
        """All text blocks joined by newlines."""
        return "\n".join(b.text for b in self.blocks if isinstance(b, TextBlock))

    @property
    def images(self) -> list[ImageBlock]:
        return [b for b in self.blocks if isinstance(b, ImageBlock)]

    def to_anthropic(self) -> dict:
        """``{"is_error", "content"}`` with blocks in the Anthropic ``tool_result`` form: what
        a model gets, so blocks for the person only (``for_model`` false) are left out."""
        return {"is_error": self.is_error,
                "content": [b.to_anthropic() for b in self.blocks if for_model(b)]}
