"""OpenAI chat completions through the ``openai`` SDK, streamed; any compatible server too.

Chat completions take images only in ``user`` messages: a ``tool`` message carries text. So
each tool result goes out as a ``tool`` message with its text (plus a line saying how many
images follow), and the images of all tool results of a turn follow in one ``user`` message
right after the last ``tool`` message, introduced by a line naming the call each image came
from. ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` are read by the SDK.

The API caches prompt prefixes by itself: a request keeps one order (system, tools, the
history as it was), so a new request starts with the bytes of the one before. A ``Reply``'s
``input_tokens`` is ``prompt_tokens`` (cached ones included) and ``cache_read_tokens`` is
``prompt_tokens_details.cached_tokens`` when the server gives it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from silica.blocks import ImageBlock, TextBlock, ToolCall
from silica.providers.base import (
    ProviderError,
    Reply,
    Request,
    RequestMessage,
    RequestToolResult,
    text_marking_images,
    tool_arguments,
)
from silica.providers.clients import environment, shared, tls
from silica.providers.errors import (
    Endpoint,
    ReplyBounds,
    ReplyTooLarge,
    api_message,
    bounded_hooks,
    connection_error,
    http_error,
    response_error,
    stream_error,
    too_deep,
    too_large,
    within_deadline,
)
from silica.providers.models import BundledProvider, stop_reason

if TYPE_CHECKING:  # the SDK is imported by the first request (or ahead: ``warm``)
    import openai

KEY_VAR = "OPENAI_API_KEY"
URL_VAR = "OPENAI_BASE_URL"

# Reasoning models refuse ``max_tokens``; older models and most compatible servers want it.
_COMPLETION_TOKENS = re.compile(r"^(o\d|gpt-5)")


def _image_part(image: ImageBlock) -> dict[str, Any]:
    url = f"data:{image.media_type};base64,{image.base64}"
    # "high": silica fits images to the high-detail limits (silica.images.limits.OPENAI)
    return {"type": "image_url", "image_url": {"url": url, "detail": "high"}}


def _user(blocks: list[Any]) -> dict[str, Any]:
    if not any(isinstance(b, ImageBlock) for b in blocks):
        return {"role": "user", "content": "\n".join(b.text for b in blocks)}
    parts = [{"type": "text", "text": b.text} if isinstance(b, TextBlock) else _image_part(b)
             for b in blocks if not isinstance(b, TextBlock) or b.text]
    return {"role": "user", "content": parts}


def _assistant(message: RequestMessage) -> dict[str, Any]:
    text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                             for c in calls]
    return out


def _tool_turn(results: list[RequestToolResult]) -> list[dict[str, Any]]:
    """One ``tool`` message per result, then one ``user`` message with all their images."""
    out: list[dict[str, Any]] = []
    images: list[tuple[RequestToolResult, ImageBlock]] = []
    for result in results:
        # each image marked where it was: the images themselves follow in a user message
        text = text_marking_images(result.content, first=len(images) + 1)
        mine = [b for b in result.content if isinstance(b, ImageBlock)]
        if result.is_error:
            text = f"Error: {text}" if text else "Error"
        if mine:
            note = f"[{len(mine)} image(s) follow in the next message]"
            text = f"{text}\n{note}" if text else note
        out.append({"role": "tool", "tool_call_id": result.call_id,
                    "content": text or "(no output)"})
        images.extend((result, image) for image in mine)
    if images:
        names = "; ".join(f"image {i} is from {r.name} (call {r.call_id})"
                          for i, (r, _) in enumerate(images, 1))
        intro = {"type": "text", "text": f"Images returned by the tool calls above: {names}."}
        out.append({"role": "user", "content": [intro] + [_image_part(i) for _, i in images]})
    return out


def to_openai(request: Request) -> dict[str, Any]:
    """The keyword arguments of ``client.chat.completions.create`` for ``request``."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role == "assistant":
            messages.append(_assistant(message))
            continue
        results = [b for b in message.content if isinstance(b, RequestToolResult)]
        rest = [b for b in message.content if not isinstance(b, RequestToolResult)]
        messages.extend(_tool_turn(results))
        if rest or not results:
            messages.append(_user(rest))
    key = "max_completion_tokens" if _COMPLETION_TOKENS.match(request.model) else "max_tokens"
    params: dict[str, Any] = {"model": request.model, "messages": messages,
                              key: request.max_tokens}
    if request.tools:
        params["tools"] = [{"type": "function",
                            "function": {"name": t["name"],
                                         "description": t.get("description", ""),
                                         "parameters": t.get("input_schema") or
                                         {"type": "object", "properties": {}}}}
                           for t in request.tools]
    return params


class OpenAIProvider(BundledProvider, ReplyBounds):
    """OpenAI (or compatible) chat completions. ``max_retries`` (the SDK's, default 2) and
    ``timeout`` (seconds; None: the SDK's) apply to each call; ``deadline``, ``max_line`` and
    ``max_reply`` bound the whole reply (``ReplyBounds``)."""

    name = "openai"
    sdk = ("openai",)

    def client(self) -> openai.AsyncOpenAI:
        """The process's SDK client for this environment and these knobs (one per provider:
        ``silica.providers.clients``); ``ProviderError`` when no key is configured."""
        return sdk_client(self)

    async def complete(self, request: Request,
                       on_text: Callable[[str], None] | None = None) -> Reply:
        import httpx2
        import openai

        request = self.for_model(request)
        params = to_openai(request)
        client = self.client()
        base_url = str(client.base_url).rstrip("/")
        label = "OpenAI" if "api.openai.com" in base_url else "OpenAI-compatible server"
        ep = Endpoint(label, "OpenAI chat completions", base_url, request.model, KEY_VAR,
                      URL_VAR, self.max_retries)
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        usage: Any = None
        started = False
        try:
            async with within_deadline(ep, self.deadline):
                stream = await client.chat.completions.create(
                    **params, stream=True, stream_options={"include_usage": True})
                async for chunk in stream:
                    started = True
                    usage = chunk.usage or usage
                    for choice in chunk.choices:
                        finish = choice.finish_reason or finish
                        delta = choice.delta
                        if delta.content:
                            text.append(delta.content)
                            if on_text is not None:
                                on_text(delta.content)
                        for call in delta.tool_calls or []:
                            slot = calls.setdefault(call.index,
                                                    {"id": "", "name": "", "arguments": ""})
                            slot["id"] = call.id or slot["id"]
                            if call.function is not None:
                                slot["name"] += call.function.name or ""
                                slot["arguments"] += call.function.arguments or ""
        except openai.APIStatusError as exc:
            raise http_error(ep, exc.status_code, api_message(exc.body) or exc.message) from exc
        except openai.APIConnectionError as exc:
            raise connection_error(ep, exc.__cause__ or exc, mid_stream=started) from exc
        except openai.APIResponseValidationError as exc:
            raise response_error(ep, f"{type(exc).__name__}: {exc}") from exc
        except openai.APIError as exc:  # an error event inside the stream
            raise stream_error(ep, api_message(exc.body) or exc.message) from exc
        except httpx2.TransportError as exc:
            raise connection_error(ep, exc, mid_stream=started) from exc
        except ReplyTooLarge as exc:
            raise too_large(ep, exc) from None
        except RecursionError:  # the SDK's json.loads of an event nested too deeply
            raise too_deep(ep) from None
        except (ValueError, KeyError, AttributeError) as exc:
            raise response_error(ep, f"{type(exc).__name__}: {exc}") from exc
        tool_calls = [ToolCall(id=slot["id"] or f"call_{i}", name=slot["name"],
                               arguments=tool_arguments(slot["arguments"]))
                      for i, slot in sorted(calls.items())]
        details = getattr(usage, "prompt_tokens_details", None)  # prompt_tokens counts all
        return Reply(text="".join(text), tool_calls=tool_calls,
                     stop_reason=stop_reason(finish, bool(tool_calls)),
                     input_tokens=getattr(usage, "prompt_tokens", None),
                     output_tokens=getattr(usage, "completion_tokens", None),
                     cache_read_tokens=getattr(details, "cached_tokens", None))


def sdk_client(provider: Any) -> openai.AsyncOpenAI:
    """The process's ``openai`` client for ``provider`` (chat completions or Responses):
    one per provider name, environment (``OPENAI_*``) and knobs, with the SDK's own HTTP
    client and defaults and every body read within the provider's bounds; ``ProviderError``
    when no key is configured."""
    import openai

    def make() -> openai.AsyncOpenAI:
        http = openai.DefaultAsyncHttpxClient(event_hooks=bounded_hooks(provider), verify=tls())
        return openai.AsyncOpenAI(**provider.sdk_options(), http_client=http)

    key = (provider.name, environment("OPENAI_"), tuple(provider.sdk_options().items()),
           provider.max_line, provider.max_reply)
    try:
        return shared(key, make)
    except openai.OpenAIError as exc:
        raise ProviderError(
            f"no OpenAI API key: set {KEY_VAR} (for a local compatible server that needs "
            f"no key, any value will do, with {URL_VAR} pointing at it).") from exc
