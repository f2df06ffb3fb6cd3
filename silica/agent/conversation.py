"""Conversation state: what was said, by whom, in which turn. Images are held as refs.

A *turn* starts with each user message the person types (tool results do not start one).
The conversation is what gets saved as a session; it never holds base64 or image bytes.

``answer_every_call`` keeps a history valid for every provider: each ``ToolCall`` answered by a
``ToolResultBlock`` in the user messages right after it, and no result without its call.
``ToolCall`` itself lives in ``silica.blocks`` (providers use it too) and is re-exported here.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from silica.blocks import ImageRefBlock, TextBlock, ToolCall

__all__ = ["ContentBlock", "Conversation", "Message", "ToolCall", "ToolResultBlock",
           "answer_every_call"]

NO_RESULT = ("[no result was recorded for this tool call (silica stopped before it was "
             "answered); it was not run again]")
"""The error result ``answer_every_call`` gives a call that has none."""


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
    at: float = 0.0  # when it was added (Unix time; 0: unknown), for aging (agent.render)
    # a model's reply only: what its request cost ({input_tokens, output_tokens,
    # cache_read_tokens, cache_write_tokens}) and why it stopped; None when not known
    usage: dict[str, int] | None = None
    stop_reason: str | None = None


def _now() -> datetime:
    return datetime.now(UTC)


class Conversation(BaseModel):
    """A whole session: its id names its image folder and its saved JSON file."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    created: datetime = Field(default_factory=_now)
    updated: datetime = Field(default_factory=_now)
    provider: str = ""
    model: str = ""
    agent: str = ""  # the profile (``[agents.NAME]``) the session runs as; "": none
    system: str = ""
    messages: list[Message] = Field(default_factory=list)

    @property
    def turn(self) -> int:
        """The current turn number (0 before the first user message)."""
        return self.messages[-1].turn if self.messages else 0

    def add(self, role: Literal["user", "assistant"], content: list, *,
            new_turn: bool = False, usage: dict[str, int] | None = None,
            stop_reason: str | None = None) -> Message:
        """Append a message; ``new_turn`` starts the next turn (a person's message);
        ``usage`` and ``stop_reason``: what a model's reply cost and why it stopped."""
        message = Message(role=role, content=content,
                          turn=self.turn + 1 if new_turn or not self.messages else self.turn,
                          at=time.time(), usage=usage, stop_reason=stop_reason)
        self.messages.append(message)
        self.updated = _now()
        return message


def answer_every_call(conversation: Conversation) -> int:
    """Make the history one every provider accepts, in place; returns how many blocks changed.

    Each ``ToolCall`` gets a ``ToolResultBlock`` in the user messages that follow its
    assistant message (before the next assistant message): a call without one is answered
    with an error result (``NO_RESULT``), put first in the next user message or in a new one.
    A result whose call is not right before it (a hand-edited or cut file) becomes text. A
    valid history is left as it is, so calling it again changes nothing.
    """
    out: list[Message] = []
    changed = 0
    calls: list[ToolCall] = []  # of the latest assistant message
    answered: set[str] = set()
    asked_at = -1  # index in ``out`` of the latest assistant message

    def close() -> None:
        nonlocal changed
        missing: list[ContentBlock] = [
            ToolResultBlock(call_id=c.id, name=c.name, is_error=True,
                            content=[TextBlock(text=NO_RESULT)])
            for c in calls if c.id not in answered]
        if not missing:
            return
        changed += len(missing)
        if asked_at + 1 < len(out):  # tool results must open the user side
            after = out[asked_at + 1]
            out[asked_at + 1] = after.model_copy(update={"content": [*missing, *after.content]})
        else:
            out.insert(asked_at + 1, Message(role="user", content=missing,
                                             turn=out[asked_at].turn))

    for message in conversation.messages:
        if message.role == "assistant":
            close()
            calls = [b for b in message.content if isinstance(b, ToolCall)]
            answered = set()
            asked_at = len(out)
            out.append(message)
            continue
        ids = {c.id for c in calls}
        content: list = []
        touched = False
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                if block.call_id in ids and block.call_id not in answered:
                    answered.add(block.call_id)
                else:  # an orphan would make the provider refuse every later request
                    changed += 1
                    touched = True
                    words = " ".join(b.text for b in block.content if isinstance(b, TextBlock))
                    block = TextBlock(text=f"[a result of {block.name} whose call is not in "
                                           f"this history] {words}".rstrip())
            content.append(block)
        out.append(message.model_copy(update={"content": content}) if touched else message)
    close()
    if changed:
        conversation.messages = out
    return changed
