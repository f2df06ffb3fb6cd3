"""Ollama's native ``/api/chat`` over ``httpx2``, streamed as NDJSON.

Every message may carry ``images``: bare base64 strings (no ``data:`` prefix). Tool results go
out as ``tool`` messages with their text, their images and ``tool_name``. Ollama gives tool
calls no ids, so silica numbers them ``call_<n>`` through the conversation. The server is
``OLLAMA_HOST`` (``host``, ``host:port`` or a URL; default ``http://127.0.0.1:11434``).

Messages keep one order (system, the history as it was), so Ollama can reuse its cache of
the prompt's start. Its usage says nothing of that cache: a ``Reply`` has input tokens
(``prompt_eval_count``) and output tokens (``eval_count``) only.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from silica.blocks import ImageBlock, TextBlock, ToolCall
from silica.config import Settings
from silica.providers.base import (
    Reply,
    Request,
    RequestMessage,
    RequestToolResult,
    text_marking_images,
    tool_arguments,
)
from silica.providers.clients import tls
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

if TYPE_CHECKING:  # imported by the first request (or ahead: ``warm``)
    import httpx2

HOST_VAR = "OLLAMA_HOST"
DEFAULT_HOST = "http://127.0.0.1:11434"
RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx, as the SDKs do
MAX_RETRY_AFTER = 60.0


def base_url(environ: Mapping[str, str] | None = None) -> str:
    """The Ollama server from ``OLLAMA_HOST``, read the way Ollama reads it: no scheme means
    http, and no port means 11434 (80 / 443 when the scheme is given)."""
    host = (os.environ if environ is None else environ).get(HOST_VAR, "").strip()
    if not host:
        return DEFAULT_HOST
    scheme, sep, rest = host.partition("://")
    if not sep:
        scheme, rest, port = "http", host, "11434"
    else:
        port = "443" if scheme == "https" else "80"
    hostport, _, path = rest.partition("/")
    if ":" not in hostport.rsplit("]", 1)[-1]:  # no port given (IPv6 literals have colons)
        hostport = f"{hostport}:{port}"
    return f"{scheme}://{hostport}" + (f"/{path.rstrip('/')}" if path.strip("/") else "")


def _text(blocks: list[Any]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def _images(blocks: list[Any]) -> list[str]:
    return [b.base64 for b in blocks if isinstance(b, ImageBlock)]


def _with_images(message: dict[str, Any], blocks: list[Any]) -> dict[str, Any]:
    images = _images(blocks)
    if images:
        message["images"] = images
    return message


def _messages(message: RequestMessage) -> list[dict[str, Any]]:
    if message.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": _text(message.content)}
        calls = [b for b in message.content if isinstance(b, ToolCall)]
        if calls:
            out["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}}
                                 for c in calls]
        return [out]
    result: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, RequestToolResult):
            text = text_marking_images(block.content)  # its images go in "images"
            if block.is_error:
                text = f"Error: {text}" if text else "Error"
            result.append(_with_images({"role": "tool", "content": text,
                                        "tool_name": block.name}, block.content))
    rest = [b for b in message.content if not isinstance(b, RequestToolResult)]
    if rest or not result:
        result.append(_with_images({"role": "user", "content": _text(rest)}, rest))
    return result


def to_ollama(request: Request) -> dict[str, Any]:
    """The JSON body of ``POST /api/chat`` for ``request`` (streamed)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_messages(message))
    payload: dict[str, Any] = {"model": request.model, "messages": messages, "stream": True,
                               "options": {"num_predict": request.max_tokens}}
    if request.tools:
        payload["tools"] = [{"type": "function",
                             "function": {"name": t["name"],
                                          "description": t.get("description", ""),
                                          "parameters": t.get("input_schema") or
                                          {"type": "object", "properties": {}}}}
                            for t in request.tools]
    return payload


def _calls_so_far(request: Request) -> int:
    return sum(isinstance(b, ToolCall) for m in request.messages for b in m.content)


def _retry_delay(headers: httpx2.Headers | None, attempt: int, base: float) -> float:
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name, "") if headers is not None else "") * scale
        except ValueError:
            continue
        if 0 <= seconds <= MAX_RETRY_AFTER:
            return seconds
    return base * 2 ** attempt


class OllamaProvider(BundledProvider, ReplyBounds):
    """Local models through Ollama. ``max_retries`` (default 2) retries connection errors and
    HTTP 408/409/429/5xx with ``retry_delay`` seconds of exponential backoff (a server's
    ``Retry-After`` wins); ``timeout`` is seconds of silence allowed while a model loads;
    ``deadline``, ``max_line`` and ``max_reply`` bound the whole reply (``ReplyBounds``)."""

    name = "ollama"
    sdk = ("httpx2",)
    default_timeout = 600.0
    deadline = 7200.0  # a local model on a CPU can take an hour over a long answer

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.retry_delay = 0.5

    async def complete(self, request: Request,
                       on_text: Callable[[str], None] | None = None) -> Reply:
        request = self.for_model(request)
        payload = to_ollama(request)
        base = base_url()
        ep = Endpoint("Ollama", "Ollama", base, request.model, None, HOST_VAR,
                      self.max_retries,
                      missing_model_fix=f"run `ollama pull {request.model}` on the Ollama "
                                        "host, or choose a model it has",
                      unreachable_fix=" and that `ollama serve` is running")
        import httpx2

        timeout = httpx2.Timeout(self.timeout, connect=10.0)
        hooks = bounded_hooks(self)  # every body is read within max_line and max_reply
        async with httpx2.AsyncClient(timeout=timeout, event_hooks=hooks, verify=tls()) \
                as client, \
                within_deadline(ep, self.deadline):
            for attempt in range(self.max_retries + 1):
                last = attempt == self.max_retries
                try:
                    async with client.stream("POST", f"{base}/api/chat", json=payload) as resp:
                        if resp.status_code == 200:
                            return await _read(resp, ep, on_text, _calls_so_far(request))
                        try:
                            body = await resp.aread()
                        except ReplyTooLarge as exc:
                            raise too_large(ep, exc) from None
                        status = resp.status_code
                        if last or not (status in RETRY_STATUSES or status >= 500):
                            raise http_error(ep, status, api_message(body))
                        delay = _retry_delay(resp.headers, attempt, self.retry_delay)
                except httpx2.TransportError as exc:  # before any reply: retry like the SDKs
                    if last:
                        raise connection_error(ep, exc) from exc
                    delay = _retry_delay(None, attempt, self.retry_delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")


async def _read(response: httpx2.Response, ep: Endpoint,
                on_text: Callable[[str], None] | None, first_call: int) -> Reply:
    """Read the NDJSON stream of one reply."""
    import httpx2

    text: list[str] = []
    calls: list[ToolCall] = []
    final: dict[str, Any] | None = None
    try:
        async for line in response.aiter_lines():
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError:
                raise response_error(ep, f"a line that is not JSON: {line[:80]!r}") from None
            except RecursionError:
                raise too_deep(ep) from None
            if not isinstance(data, dict):
                raise response_error(ep, f"a line that is not a JSON object: {line[:80]!r}")
            if data.get("error"):
                raise stream_error(ep, api_message(data))
            message = data.get("message") or {}
            piece = message.get("content") or ""
            if piece:
                text.append(piece)
                if on_text is not None:
                    on_text(piece)
            for call in message.get("tool_calls") or []:
                calls.append(_tool_call(call, first_call + len(calls)))
            if data.get("done"):
                final = data
                break
    except httpx2.TransportError as exc:
        raise connection_error(ep, exc, mid_stream=True) from exc
    except ReplyTooLarge as exc:
        raise too_large(ep, exc) from None
    except (AttributeError, TypeError) as exc:
        raise response_error(ep, f"unexpected message shape: {exc}") from exc
    if final is None:
        raise connection_error(ep, EOFError('the stream ended before "done"'), mid_stream=True)
    return Reply(text="".join(text), tool_calls=calls,
                 stop_reason=stop_reason(final.get("done_reason"), bool(calls)),
                 input_tokens=final.get("prompt_eval_count"),
                 output_tokens=final.get("eval_count"))


def _tool_call(call: dict[str, Any], n: int) -> ToolCall:
    function = call.get("function") or {}
    # an object, or (from some models' templates) the JSON text of one
    arguments = tool_arguments(function.get("arguments"))
    return ToolCall(id=call.get("id") or f"call_{n}", name=function.get("name", ""),
                    arguments=arguments)
