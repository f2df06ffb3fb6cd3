"""Anthropic Messages API through the ``anthropic`` SDK, streamed.

Images go where Claude reads them best: in user messages as ``image`` blocks, and from tools
*inside* the ``tool_result`` content, next to the tool's text. ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_BASE_URL`` are read by the SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx2

from silica.blocks import ImageBlock, TextBlock, ToolCall
from silica.providers.base import (
    ProviderError,
    Reply,
    Request,
    RequestMessage,
    RequestToolResult,
    tool_arguments,
)
from silica.providers.errors import (
    Endpoint,
    ReplyBounds,
    ReplyTooLarge,
    api_message,
    bounded_hooks,
    connection_error,
    http_error,
    response_error,
    too_deep,
    too_large,
    within_deadline,
)
from silica.providers.models import BundledProvider, stop_reason

KEY_VAR = "ANTHROPIC_API_KEY"
URL_VAR = "ANTHROPIC_BASE_URL"


def _content(block: Any) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return block.to_anthropic() if block.text else None  # the API refuses empty text
    if isinstance(block, ImageBlock):
        return block.to_anthropic()
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name,
                "input": block.arguments}
    if isinstance(block, RequestToolResult):
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.call_id,
                               "is_error": block.is_error}
        inner = [c for c in (_content(b) for b in block.content) if c is not None]
        if inner:  # a tool that printed nothing sends no content (empty text is refused)
            out["content"] = inner
        return out
    raise TypeError(f"cannot send a {type(block).__name__} to Anthropic")


def _message(message: RequestMessage) -> dict[str, Any]:
    # tool_result blocks must open a user message; keep everything else in order after them
    blocks = sorted(message.content, key=lambda b: not isinstance(b, RequestToolResult))
    content = [c for c in (_content(b) for b in blocks) if c is not None]
    return {"role": message.role, "content": content or [{"type": "text", "text": "(empty)"}]}


def to_anthropic(request: Request) -> dict[str, Any]:
    """The keyword arguments of ``client.messages.stream`` for ``request``."""
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": [_message(m) for m in request.messages],
    }
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = [{"name": t["name"], "description": t.get("description", ""),
                            "input_schema": t.get("input_schema") or {"type": "object"}}
                           for t in request.tools]
    return params


def to_reply(message: Any) -> Reply:
    """A ``Reply`` from the SDK's final ``Message``."""
    texts, calls = [], []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            calls.append(ToolCall(id=block.id, name=block.name,
                                  arguments=tool_arguments(block.input)))
    usage = message.usage
    return Reply(text="".join(texts), tool_calls=calls,
                 stop_reason=stop_reason(message.stop_reason, bool(calls)),
                 input_tokens=getattr(usage, "input_tokens", None),
                 output_tokens=getattr(usage, "output_tokens", None))


class AnthropicProvider(BundledProvider, ReplyBounds):
    """Claude models. ``max_retries`` (the SDK's, default 2) and ``timeout`` (seconds; None:
    the SDK's) apply to each call; ``deadline``, ``max_line`` and ``max_reply`` bound the
    whole reply (``ReplyBounds``)."""

    name = "anthropic"

    def client(self) -> anthropic.AsyncAnthropic:
        """A new SDK client; ``ProviderError`` when no credentials are configured."""
        # the SDK's own HTTP client and defaults, with every body read within the bounds
        http = anthropic.DefaultAsyncHttpxClient(event_hooks=bounded_hooks(self))
        client = anthropic.AsyncAnthropic(**self.sdk_options(), http_client=http)
        if not (client.api_key or client.auth_token or getattr(client, "credentials", None)):
            raise ProviderError(f"no Anthropic API key: set {KEY_VAR} (create a key at "
                                "https://console.anthropic.com/settings/keys).")
        return client

    async def complete(self, request: Request,
                       on_text: Callable[[str], None] | None = None) -> Reply:
        request = self.for_model(request)
        params = to_anthropic(request)
        client = self.client()
        ep = Endpoint("Anthropic", "Anthropic Messages", str(client.base_url).rstrip("/"),
                      request.model, KEY_VAR, URL_VAR, self.max_retries)
        started = False
        try:
            async with client, within_deadline(ep, self.deadline), \
                    client.messages.stream(**params) as stream:
                started = True
                async for piece in stream.text_stream:
                    if on_text is not None and piece:
                        on_text(piece)
                message = await stream.get_final_message()
        except anthropic.APIStatusError as exc:
            raise http_error(ep, exc.status_code, api_message(exc.body) or exc.message) from exc
        except anthropic.APIConnectionError as exc:
            raise connection_error(ep, exc.__cause__ or exc, mid_stream=started) from exc
        except httpx2.TransportError as exc:
            raise connection_error(ep, exc, mid_stream=started) from exc
        except ReplyTooLarge as exc:
            raise too_large(ep, exc) from None
        except RecursionError:  # the SDK's json.loads of an event nested too deeply
            raise too_deep(ep) from None
        except (anthropic.APIResponseValidationError, ValueError, KeyError) as exc:
            raise response_error(ep, f"{type(exc).__name__}: {exc}") from exc
        try:
            return to_reply(message)
        except (AttributeError, TypeError, ValueError) as exc:
            raise response_error(ep, f"unexpected message shape: {exc}") from exc
