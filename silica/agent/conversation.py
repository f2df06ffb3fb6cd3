"""Conversation state: what was said, by whom, in which turn. Images are held as refs.

A *turn* starts with each user message the person types (tool results do not start one).
The conversation is what gets saved as a session; it never holds base64 or image bytes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from silica.blocks import ImageRefBlock, TextBlock


class ToolCall(BaseModel):
    """The model asks for a tool: ``arguments`` is its JSON input."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(BaseModel):
    """The answer to one ``ToolCall``, sent back in the next user message."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: list[Annotated[TextBlock | ImageRefBlock, Field(discriminator="type")]]
    is_error: bool = False


ContentBlock = Annotated[TextBlock | ImageRefBlock | ToolCall | ToolResultBlock,
                         Field(discriminator="type")]


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]
    turn: int = Field(ge=0)


def _now() -> datetime:
    return datetime.now(UTC)


class Conversation(BaseModel):
    """A whole session: its id names its image folder and its saved JSON file."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    created: datetime = Field(default_factory=_now)
    updated: datetime = Field(default_factory=_now)
    provider: str = ""
    model: str = ""
    system: str = ""
    messages: list[Message] = Field(default_factory=list)

    @property
    def turn(self) -> int:
        """The current turn number (0 before the first user message)."""
        return self.messages[-1].turn if self.messages else 0

    def add(self, role: Literal["user", "assistant"], content: list, *,
            new_turn: bool = False) -> Message:
        """Append a message; ``new_turn`` starts the next turn (a person's message)."""
        message = Message(role=role, content=content,
                          turn=self.turn + 1 if new_turn or not self.messages else self.turn)
        self.messages.append(message)
        self.updated = _now()
        return message
