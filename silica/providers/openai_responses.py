"""OpenAI's Responses API through the ``openai`` SDK, streamed.

Unlike chat completions, the Responses API takes a tool's images inside its answer: each
tool result is a ``function_call_output`` item whose ``output`` is a list of ``input_text``
and ``input_image`` parts (base64 data URLs with ``detail`` from ``[openai] image_detail``).
User images are ``input_image`` parts of the user's message. The system prompt goes as
``instructions`` and the tools in the order given, ahead of the history, so consecutive
requests of a session share a long prefix for the API's automatic prompt cache. silica sends
the whole history every time, so nothing is stored on the server (``store: false``).

A 400 that names an image (the model takes none, an image too large, too many, or one the
API cannot read) becomes a ``ProviderError`` saying what to change. A stream that ends before
``response.completed`` (or ``response.incomplete``) is an error, never a partial reply.
``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` are read by the SDK, imported on the first request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
    connection_error,
    http_error,
    image_refusal,
    refused,
    response_error,
    stream_error,
    too_deep,
    too_large,
    within_deadline,
)
from silica.providers.models import BundledProvider

if TYPE_CHECKING:
    import openai

KEY_VAR = "OPENAI_API_KEY"
URL_VAR = "OPENAI_BASE_URL"
API = "OpenAI Responses"

# -- the request ------------------------------------------------------------------------


def _image(image: ImageBlock, detail: str) -> dict[str, Any]:
    return {"type": "input_image", "image_url": f"data:{image.media_type};base64,{image.base64}",
            "detail": detail}


def _parts(blocks: list[Any], detail: str) -> list[dict[str, Any]]:
    return [{"type": "input_text", "text": b.text} if isinstance(b, TextBlock)
            else _image(b, detail)
            for b in blocks if not isinstance(b, TextBlock) or b.text]


def _assistant(message: RequestMessage) -> list[dict[str, Any]]:
    """The model's text as an assistant message, then one ``function_call`` per call."""
    items: list[dict[str, Any]] = []
    text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
    if text:
        items.append({"role": "assistant", "content": text})
    items.extend({"type": "function_call", "call_id": c.id, "name": c.name,
                  "arguments": json.dumps(c.arguments)}
                 for c in message.content if isinstance(c, ToolCall))
    return items


def _tool_output(result: RequestToolResult, detail: str) -> dict[str, Any]:
    """A tool result as ``function_call_output``: its text alone as a string, or its text
    and images as a list of parts in the tool's order."""
    output: str | list[dict[str, Any]]
    if any(isinstance(b, ImageBlock) for b in result.content):
        error = [TextBlock(text="Error:")] if result.is_error else []
        output = _parts(error + list(result.content), detail)
    else:
        text = "\n".join(b.text for b in result.content if isinstance(b, TextBlock) and b.text)
        if result.is_error:
            text = f"Error: {text}" if text else "Error"
        output = text or "(no output)"
    return {"type": "function_call_output", "call_id": result.call_id, "output": output}


def to_responses(request: Request, detail: str = "high") -> dict[str, Any]:
    """The keyword arguments of ``client.responses.create`` for ``request`` (``detail``:
    that of every image)."""
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "assistant":
            items.extend(_assistant(message))
            continue
        results = [b for b in message.content if isinstance(b, RequestToolResult)]
        rest = [b for b in message.content if not isinstance(b, RequestToolResult)]
        items.extend(_tool_output(r, detail) for r in results)
        if rest or not results:
            items.append({"role": "user",
                          "content": _parts(rest, detail) or [{"type": "input_text",
                                                               "text": ""}]})
    params: dict[str, Any] = {"model": request.model}
    if request.system:
        params["instructions"] = request.system
    if request.tools:
        params["tools"] = [{"type": "function", "name": t["name"],
                            "description": t.get("description", ""),
                            "parameters": t.get("input_schema") or
                            {"type": "object", "properties": {}},
                            "strict": False}  # tools' own schemas: not all fit strict mode
                           for t in request.tools]
    params["input"] = items
    params["max_output_tokens"] = request.max_tokens
    params["store"] = False
    return params


# -- errors that name an image (the patterns are shared: silica.providers.errors) ------


def _status_error(ep: Endpoint, status: int, detail: str) -> ProviderError:
    kind = image_refusal(detail) if status in (400, 422) else None
    return refused(ep, kind, detail, f"HTTP {status}") if kind else \
        http_error(ep, status, detail)


def _event_error(ep: Endpoint, detail: str) -> ProviderError:
    """An ``error`` event or ``response.failed`` inside a reply that had begun."""
    detail = detail.strip()[:500]
    kind = image_refusal(detail)
    return refused(ep, kind, detail, "in its reply") if kind else stream_error(ep, detail)


# -- the reply --------------------------------------------------------------------------


_STOPS = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}


class _Answer:
    """What a stream of Responses events adds up to."""

    def __init__(self, on_text: Callable[[str], None] | None) -> None:
        self.on_text = on_text
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}  # by output_index
        self.usage: Any = None
        self.ended: str | None = None  # "completed" or "incomplete"
        self.incomplete = ""

    def add(self, ep: Endpoint, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            self._say(event.delta)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.item
            if getattr(item, "type", None) == "function_call":
                slot = self._slot(event.output_index)
                slot["id"] = getattr(item, "call_id", None) or slot["id"]
                slot["name"] = getattr(item, "name", None) or slot["name"]
                if kind.endswith(".done") or getattr(item, "arguments", None):
                    slot["arguments"] = item.arguments or slot["arguments"]
        elif kind == "response.function_call_arguments.delta":
            self._slot(event.output_index)["arguments"] += event.delta or ""
        elif kind == "response.function_call_arguments.done":
            slot = self._slot(event.output_index)
            slot["arguments"] = event.arguments or slot["arguments"]
        elif kind in ("response.completed", "response.incomplete"):
            self.ended = kind.split(".", 1)[1]
            self.usage = getattr(event.response, "usage", None)
            details = getattr(event.response, "incomplete_details", None)
            self.incomplete = getattr(details, "reason", None) or ""
            if not self.text and not self.calls:  # a server that streamed no deltas
                self._from_output(getattr(event.response, "output", None) or [])
        elif kind == "response.failed":
            error = getattr(event.response, "error", None)
            raise _event_error(ep, getattr(error, "message", None) or "the response failed")
        elif kind == "error":
            raise _event_error(ep, getattr(event, "message", None) or
                               getattr(event, "code", None) or "an error event")

    def _from_output(self, output: list[Any]) -> None:
        for index, item in enumerate(output):
            kind = getattr(item, "type", None)
            if kind == "message":
                for part in getattr(item, "content", None) or []:
                    self._say(getattr(part, "text", None) or getattr(part, "refusal", None))
            elif kind == "function_call":
                self.calls[index] = {"id": item.call_id or "", "name": item.name or "",
                                     "arguments": item.arguments or ""}

    def _say(self, piece: str | None) -> None:
        if piece:
            self.text.append(piece)
            if self.on_text is not None:
                self.on_text(piece)

    def _slot(self, index: int) -> dict[str, str]:
        return self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})

    def reply(self) -> Reply:
        calls = [ToolCall(id=slot["id"] or f"call_{i}", name=slot["name"],
                          arguments=tool_arguments(slot["arguments"]))
                 for i, slot in sorted(self.calls.items())]
        if self.ended == "incomplete":
            stop = _STOPS.get(self.incomplete, self.incomplete or "incomplete")
        else:
            stop = "tool_use" if calls else "end_turn"
        usage = self.usage
        details = getattr(usage, "input_tokens_details", None)
        return Reply(text="".join(self.text), tool_calls=calls, stop_reason=stop,
                     input_tokens=getattr(usage, "input_tokens", None),
                     output_tokens=getattr(usage, "output_tokens", None),
                     cache_read_tokens=getattr(details, "cached_tokens", None),
                     cache_write_tokens=getattr(details, "cache_write_tokens", None))


class OpenAIResponsesProvider(BundledProvider, ReplyBounds):
    """OpenAI's Responses API (or a compatible server's). ``max_retries`` (the SDK's, default
    2) and ``timeout`` (seconds; None: the SDK's) apply to each call; ``deadline``,
    ``max_line`` and ``max_reply`` bound the whole reply (``ReplyBounds``)."""

    name = "openai-responses"
    sdk = ("openai",)

    def client(self) -> openai.AsyncOpenAI:
        """The process's SDK client for this environment and these knobs (one per provider:
        ``silica.providers.clients``); ``ProviderError`` when no key is configured. The SDK
        is imported here, on first use."""
        from silica.providers.openai import sdk_client

        return sdk_client(self)

    async def complete(self, request: Request,
                       on_text: Callable[[str], None] | None = None) -> Reply:
        import httpx2
        import openai

        request = self.for_model(request)
        params = to_responses(request, self.settings.openai.image_detail)
        client = self.client()
        base_url = str(client.base_url).rstrip("/")
        label = "OpenAI" if "api.openai.com" in base_url else "OpenAI-compatible server"
        ep = Endpoint(label, API, base_url, request.model, KEY_VAR, URL_VAR, self.max_retries,
                      missing_route_fix="a server that speaks only chat completions works "
                      "with --provider openai")
        answer = _Answer(on_text)
        started = False
        try:
            async with within_deadline(ep, self.deadline):
                stream = await client.responses.create(**params, stream=True)
                async with stream:  # closed even when an event ends the reply early
                    async for event in stream:
                        started = True
                        answer.add(ep, event)
        except openai.APIStatusError as exc:
            detail = api_message(exc.body) or exc.message
            raise _status_error(ep, exc.status_code, detail) from exc
        except openai.APIConnectionError as exc:
            raise connection_error(ep, exc.__cause__ or exc, mid_stream=started) from exc
        except openai.APIResponseValidationError as exc:
            raise response_error(ep, f"{type(exc).__name__}: {exc}") from exc
        except openai.APIError as exc:  # an error the SDK found inside the stream
            raise _event_error(ep, api_message(exc.body) or exc.message) from exc
        except httpx2.TransportError as exc:
            raise connection_error(ep, exc, mid_stream=started) from exc
        except ReplyTooLarge as exc:
            raise too_large(ep, exc) from None
        except RecursionError:  # the SDK's json.loads of an event nested too deeply
            raise too_deep(ep) from None
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            raise response_error(ep, f"{type(exc).__name__}: {exc}") from exc
        if answer.ended is None:
            raise ProviderError(
                f"{label} at {base_url} ended its reply to {request.model!r} before it was "
                "complete (no response.completed event: the stream was cut short); try "
                f"again. If it keeps happening, check that the address speaks the {API} API.")
        return answer.reply()
