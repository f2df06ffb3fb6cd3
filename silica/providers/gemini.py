"""Gemini through the official ``google-genai`` SDK, streamed (``streamGenerateContent``, SSE).

Images are inline data parts (``inline_data``: mime type and bytes). A user's images are parts
of the user's content; a tool's images go with its ``function_response``: inside it, as the
response's ``parts``, for Gemini 3 and later models (multimodal function responses); as
``inline_data`` parts right after the turn's function responses, introduced by a text part
naming the call each image came from, for older models (Gemini 1.x and 2.x, Gemma), which
take images there only. A tool result's text is the response's ``output`` (``error`` when it
failed).

Gemini may give a function call no id: silica then names it ``gemini_call_<n>`` (counting
the calls already in the conversation, so the name is stable) and sends no id back, since
Gemini matches the responses of one turn to its calls by name and order. A call's thought
signature is sent back with it for as long as the provider lives; a call whose signature is
lost (a resumed session) gets Gemini's documented placeholder, as Gemini 3 requires one.

System instruction, tools and contents are built the same way every time from the same
conversation, so consecutive requests share a long prefix for Gemini's implicit cache (Gemini
puts the system instruction and tools ahead of the contents whatever the order of the JSON).

Failures are one ``ProviderError`` each: a 400 naming an image is an image problem
(``silica.providers.errors.refused``: a model without vision is then found out by
``silica.providers.vision``), a prompt blocked by the safety filters, an answer stopped by
them (finish reason ``SAFETY`` and the like) or an answer with nothing in it say so, and an
error event inside the stream ends it from below, so every part of the SDK's stream closes.
``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``) and ``GEMINI_BASE_URL`` (the API's address, for a
proxy or a local server) are read here and handed to the SDK, which is imported on the first
request; its client is made once per process and keeps one connection pool per event loop.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, cast

from silica.blocks import ImageBlock, TextBlock, ToolCall
from silica.extras import require
from silica.providers.base import (
    ProviderError,
    Reply,
    Request,
    RequestMessage,
    RequestToolResult,
    text_marking_images,
    tool_arguments,
)
from silica.providers.clients import shared, tls
from silica.providers.errors import (
    Endpoint,
    ReplyBounds,
    ReplyTooLarge,
    api_message,
    bounded_hooks,
    connection_error,
    http_error,
    refused,
    response_error,
    stream_error,
    too_deep,
    too_large,
    within_deadline,
)
from silica.providers.models import BundledProvider, stop_reason

if TYPE_CHECKING:

    from google import genai
    from google.genai import types as genai_types

KEY_VAR = "GEMINI_API_KEY"
ALT_KEY_VAR = "GOOGLE_API_KEY"  # the SDK's other name for the same key
URL_VAR = "GEMINI_BASE_URL"
API = "Gemini generateContent"
API_VERSION = "v1beta"  # function responses with parts, function call ids
CALL_PREFIX = "gemini_call_"  # ids silica made up for calls Gemini gave none
# Gemini's documented stand-in for a function call whose thought signature is unknown
SKIP_SIGNATURE = base64.urlsafe_b64decode("skip_thought_signature_validator")
_KEPT_SIGNATURES = 1024
_RETRY_STATUSES = [408, 429, 500, 502, 503, 504]

# Gemini 1.x / 2.x, Gemma and tuned models: tool images as sibling parts, no signatures needed
_BEFORE_3 = re.compile(r"gemini-[12][.-]|gemini-(pro|ultra)(-vision)?($|-\d)|gemma|learnlm"
                       r"|tunedmodels/")


def _gemini3(model: str) -> bool:
    """Whether ``model`` is Gemini 3 or later (unknown names are taken to be)."""
    return not _BEFORE_3.search(model.strip().lower())


# -- the request ------------------------------------------------------------------------


def _image(image: ImageBlock) -> dict[str, Any]:
    return {"inline_data": {"mime_type": image.media_type, "data": image.data}}


def _own_id(call_id: str) -> bool:
    return call_id.startswith(CALL_PREFIX)


def _function_response(result: RequestToolResult, nested: bool,
                       first: int = 1) -> dict[str, Any]:
    """The ``function_response`` part of ``result``: its text as ``output`` (``error`` when
    the tool failed) with each image marked ``[image N]`` where it was (numbered from
    ``first``), its images as ``parts`` when ``nested``, else a line saying they follow."""
    text = text_marking_images(result.content, first=1 if nested else first)
    images = [b for b in result.content if isinstance(b, ImageBlock)]
    if images and not nested:
        note = f"[{len(images)} image(s) follow after the tool results]"
        text = f"{text}\n{note}" if text else note
    key = "error" if result.is_error else "output"
    out: dict[str, Any] = {"name": result.name,
                           "response": {key: text or ("the tool failed" if result.is_error
                                                      else "")}}
    if not _own_id(result.call_id):
        out["id"] = result.call_id
    if images and nested:
        out["parts"] = [_image(i) for i in images]
    return {"function_response": out}


def _user(message: RequestMessage, nested: bool) -> dict[str, Any]:
    results = [b for b in message.content if isinstance(b, RequestToolResult)]
    parts, first = [], 1
    for r in results:  # unnested, images are numbered across the results, as they follow
        parts.append(_function_response(r, nested, first))
        first += sum(isinstance(b, ImageBlock) for b in r.content)
    if not nested:  # older models: the tools' images follow the responses
        images = [(r, b) for r in results for b in r.content if isinstance(b, ImageBlock)]
        if images:
            names = "; ".join(f"image {i} is from {r.name} (call {r.call_id})"
                              for i, (r, _) in enumerate(images, 1))
            parts.append({"text": f"Images returned by the tool calls above: {names}."})
            parts.extend(_image(b) for _, b in images)
    for block in message.content:
        if isinstance(block, TextBlock) and block.text:
            parts.append({"text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image(block))
    return {"role": "user", "parts": parts or [{"text": "(empty)"}]}


def _model_turn(message: RequestMessage, signatures: dict[str, bytes],
                placeholder: bool) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": b.text} for b in message.content
                                   if isinstance(b, TextBlock) and b.text]
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    for i, call in enumerate(calls):
        function: dict[str, Any] = {"name": call.name, "args": call.arguments}
        if not _own_id(call.id):
            function["id"] = call.id
        part: dict[str, Any] = {"function_call": function}
        signature = signatures.get(call.id) or (SKIP_SIGNATURE if placeholder and i == 0
                                                else None)
        if signature:
            part["thought_signature"] = signature
        parts.append(part)
    return {"role": "model", "parts": parts or [{"text": "(empty)"}]}


def to_gemini(request: Request,
              signatures: dict[str, bytes] | None = None) -> tuple[list[dict], dict[str, Any]]:
    """The ``contents`` and ``config`` of ``generate_content_stream`` for ``request``, as the
    SDK's dicts. ``signatures``: thought signatures by call id, sent back with the calls."""
    newer = _gemini3(request.model)
    contents = [_model_turn(m, signatures or {}, newer) if m.role == "assistant"
                else _user(m, newer) for m in request.messages]
    config: dict[str, Any] = {"max_output_tokens": request.max_tokens,
                              "automatic_function_calling": {"disable": True}}
    if request.system:
        config["system_instruction"] = request.system
    if request.tools:
        config["tools"] = [{"function_declarations": [
            {"name": t["name"], "description": t.get("description", ""),
             "parameters_json_schema": t.get("input_schema") or
             {"type": "object", "properties": {}}}
            for t in request.tools]}]
    return contents, config


# -- errors -----------------------------------------------------------------------------

# Gemini's words for an inline image whose bytes it could not decode, which name no image
_BAD_IMAGE_DATA = re.compile(r"inline_?data\.data.{0,60}base64", re.I)
_BAD_KEY = re.compile(r"api key not valid|api_key_invalid", re.I)


def _status_error(ep: Endpoint, status: int, detail: str) -> ProviderError:
    """``http_error``, which knows the image problems' wordings (Gemini's too), and two of
    Gemini's own: a bad key answered with a 400, an image's bytes not decodable."""
    if status == 400 and _BAD_KEY.search(detail):
        return ProviderError(f"Gemini refused the API key (HTTP 400): {detail}; check that "
                             f"{KEY_VAR} holds a valid key (https://aistudio.google.com/apikey).")
    if status == 400 and _BAD_IMAGE_DATA.search(detail):
        return refused(ep, "invalid", detail)
    return http_error(ep, status, detail)


_SAFETY = {"SAFETY", "PROHIBITED_CONTENT", "SPII", "BLOCKLIST", "IMAGE_SAFETY",
           "IMAGE_PROHIBITED_CONTENT", "MODEL_ARMOR", "JAILBREAK"}
_WHY = {
    "RECITATION": "the answer too closely recited existing material",
    "IMAGE_RECITATION": "the answer too closely recited existing material",
    "MALFORMED_FUNCTION_CALL": "the model wrote a tool call Gemini could not parse",
    "UNEXPECTED_TOOL_CALL": "the model called a tool it was not offered",
    "MISSING_THOUGHT_SIGNATURE": "a tool call in the history lacks its thought signature "
                                 "(start a new session)",
    "LANGUAGE": "the answer was in a language the model does not support",
}


def _blocked(ep: Endpoint, reason: str, message: str) -> ProviderError:
    said = f" ({message})" if message else ""
    return ProviderError(
        f"Gemini refused the request to {ep.model!r}: its safety filters blocked the prompt "
        f"(block reason {reason}){said}; nothing was generated. Rephrase the message; if a "
        "tool's output or image set it off, it stays in the history, which is re-sent every "
        "turn, so start a new session.")


def _stopped(ep: Endpoint, finish: str, shown: bool, max_tokens: int) -> ProviderError:
    after = " after part of it had been shown" if shown else ""
    if finish in _SAFETY:
        why = f"its safety filters blocked the answer (finish reason {finish})"
        fix = "Rephrase the message, or ask for something else."
    elif finish == "MAX_TOKENS":
        why = f"it used the whole output budget ({max_tokens} tokens) before answering"
        fix = "Raise max_tokens in config.toml (a thinking model spends part of it thinking)."
    elif finish in ("STOP", ""):
        why = "the answer held no text and no tool call"
        fix = "Try again, or rephrase the message."
    else:
        why = f"{_WHY.get(finish, 'it stopped early')} (finish reason {finish})"
        fix = "Try again, or rephrase the message."
    return ProviderError(f"Gemini gave no usable answer from {ep.model!r}{after}: {why}. {fix}")


# -- the stream -------------------------------------------------------------------------


class _ErrorEvent(Exception):
    """An error object where a streamed chunk should be (Gemini overloaded mid-answer)."""


class _Unreadable(Exception):
    """A streamed event whose data is not JSON."""


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def _check_event(event: bytes) -> None:
    data = b"\n".join(line[5:].lstrip() for line in event.splitlines()
                      if line.startswith(b"data:"))
    if not data:
        return
    try:
        value = json.loads(data)
    except ValueError:
        raise _Unreadable(f"an event that is not JSON: {data[:80]!r}") from None
    if isinstance(value, dict) and "error" in value:
        raise _ErrorEvent(api_message(value))


async def _screen(response: Any) -> None:
    """A response hook: each server-sent event is checked before the SDK reads it, so an
    error event or an unreadable one ends the stream from below and every generator of the
    SDK's stream finishes (one that raised above them would leave the rest suspended, to be
    closed noisily when the event loop ends)."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return
    original = response.aiter_bytes

    async def aiter_bytes(chunk_size: int | None = None) -> AsyncIterator[bytes]:
        pending = b""
        async with contextlib.aclosing(original(chunk_size)) as pieces:
            async for piece in pieces:
                *events, pending = _EVENT_END.split(pending + piece)
                for event in events:
                    _check_event(event)
                yield piece
        _check_event(pending)

    response.aiter_bytes = aiter_bytes


# -- the client -------------------------------------------------------------------------


def _hooks(bounds: ReplyBounds) -> dict[str, list[Any]]:
    hooks = bounded_hooks(bounds)  # the bounds first: a huge event is refused unbuffered
    hooks["response"].append(_screen)
    return hooks


def _client(api_key: str, base_url: str | None, max_line: int,
            max_reply: int) -> genai.Client:
    """The process's SDK client for this key, address and bounds (``shared``)."""

    def make() -> genai.Client:
        import httpx2
        from google import genai
        from google.genai import types

        bounds = ReplyBounds()
        bounds.max_line, bounds.max_reply = max_line, max_reply
        options = types.HttpOptions(
            base_url=base_url, api_version=API_VERSION,
            # both clients given: the SDK builds none of its own (nor an aiohttp session);
            # "ssl": the context it would otherwise load again for websockets silica never
            # opens
            httpx_async_client=httpx2.AsyncClient(event_hooks=_hooks(bounds), timeout=None,
                                                  follow_redirects=True, verify=tls()),
            httpx_client=httpx2.Client(verify=tls(), timeout=None, follow_redirects=True),
            async_client_args={"ssl": tls()})
        return genai.Client(api_key=api_key, vertexai=False, http_options=options)

    return shared(("gemini", api_key, base_url, max_line, max_reply), make)


def base_url() -> str | None:
    """``GEMINI_BASE_URL`` without a trailing ``/v1beta`` (the SDK adds the version), or
    ``None`` for the SDK's default address."""
    url = os.environ.get(URL_VAR, "").strip().rstrip("/")
    return re.sub(r"/v1beta$", "", url) or None


class GeminiProvider(BundledProvider, ReplyBounds):
    """Gemini models. ``max_retries`` (default 2) retries HTTP 408, 429, 5xx and failed
    connections, ``retry_delay`` seconds apart at first, doubling (the SDK's retries);
    ``timeout`` (seconds; None: none) applies to each attempt; ``deadline``, ``max_line``
    and ``max_reply`` bound the whole reply (``ReplyBounds``)."""

    name = "gemini"
    sdk = ("google.genai",)

    def __init__(self, settings) -> None:
        require("gemini")  # the google-genai SDK is the 'gemini' extra
        super().__init__(settings)
        self.retry_delay = 1.0
        self.signatures: OrderedDict[str, bytes] = OrderedDict()  # by call id

    def client(self) -> genai.Client:
        """The process's SDK client; ``ProviderError`` when no key is configured."""
        key = (os.environ.get(KEY_VAR) or os.environ.get(ALT_KEY_VAR) or "").strip()
        if not key:
            raise ProviderError(
                f"no Gemini API key: set {KEY_VAR} (create a key at "
                f"https://aistudio.google.com/apikey; for a proxy at {URL_VAR} that needs "
                "none, any value will do).")
        return _client(key, base_url(), self.max_line, self.max_reply)

    def _config(self, config: dict[str, Any]) -> dict[str, Any]:
        from google.genai import types

        retry = types.HttpRetryOptions(
            attempts=self.max_retries + 1, initial_delay=self.retry_delay,
            jitter=self.retry_delay, max_delay=60.0, http_status_codes=_RETRY_STATUSES)
        timeout = int(self.timeout * 1000) if self.timeout else None
        return {**config, "http_options": types.HttpOptions(retry_options=retry,
                                                            timeout=timeout)}

    async def complete(self, request: Request,
                       on_text: Callable[[str], None] | None = None) -> Reply:
        request = self.for_model(request)
        contents, config = to_gemini(request, self.signatures)
        client = self.client()  # no key: said before the SDK is imported
        import httpx2
        from google.genai import errors

        ep = Endpoint("Gemini", API, base_url() or "https://generativelanguage.googleapis.com",
                      request.model, KEY_VAR, URL_VAR, self.max_retries)
        answer = _Answer(on_text)
        try:
            async with within_deadline(ep, self.deadline):
                # plain dicts of the SDK's shapes (``to_gemini``): it validates them itself
                stream = await client.aio.models.generate_content_stream(
                    model=request.model,
                    contents=cast("list[genai_types.ContentDict]", contents),
                    config=cast("genai_types.GenerateContentConfigDict",
                                self._config(config)))
                async for chunk in stream:
                    answer.add(chunk)
        except _ErrorEvent as exc:
            raise stream_error(ep, str(exc)) from None
        except _Unreadable as exc:
            raise response_error(ep, str(exc)) from None
        except errors.APIError as exc:
            detail = exc.message or api_message(exc.details) or str(exc)
            if answer.started:
                raise stream_error(ep, detail) from exc
            raise _status_error(ep, exc.code, detail) from exc
        except (httpx2.ConnectError, httpx2.TimeoutException) as exc:  # retried by the SDK
            raise connection_error(ep, exc, mid_stream=answer.started) from exc
        except httpx2.TransportError as exc:  # not retried: one attempt
            raise connection_error(ep if answer.started else _one_attempt(ep), exc,
                                   mid_stream=answer.started) from exc
        except ReplyTooLarge as exc:
            raise too_large(ep, exc) from None
        except RecursionError:  # the SDK's json.loads of an event nested too deeply
            raise too_deep(ep) from None
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            raise response_error(ep, f"{type(exc).__name__}: {exc}") from exc
        return answer.reply(ep, request, self._remember)

    def _remember(self, call_id: str, signature: bytes) -> None:
        self.signatures[call_id] = signature
        while len(self.signatures) > _KEPT_SIGNATURES:
            self.signatures.popitem(last=False)


def _one_attempt(ep: Endpoint) -> Endpoint:
    return Endpoint(ep.label, ep.api, ep.base_url, ep.model, ep.key_var, ep.url_var, 0)


def _value(enum: Any) -> str:
    return str(getattr(enum, "value", enum) or "")


class _Answer:
    """What a stream of ``GenerateContentResponse`` chunks adds up to."""

    def __init__(self, on_text: Callable[[str], None] | None) -> None:
        self.on_text = on_text
        self.started = False
        self.text: list[str] = []
        self.calls: list[tuple[Any, bytes | None]] = []  # (FunctionCall, thought signature)
        self.candidates = 0
        self.finish = ""
        self.block: tuple[str, str] | None = None  # (block reason, its message)
        self.usage: Any = None

    def add(self, chunk: Any) -> None:
        self.started = True
        self.usage = chunk.usage_metadata or self.usage
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason:
            self.block = (_value(feedback.block_reason), feedback.block_reason_message or "")
        for candidate in (chunk.candidates or [])[:1]:
            self.candidates += 1
            self.finish = _value(candidate.finish_reason) or self.finish
            content = candidate.content
            for part in (content.parts if content is not None else None) or []:
                if part.thought:  # the model's thinking, when a server sends it
                    continue
                if part.text:
                    self.text.append(part.text)
                    if self.on_text is not None:
                        self.on_text(part.text)
                if part.function_call is not None:
                    self.calls.append((part.function_call, part.thought_signature))

    def reply(self, ep: Endpoint, request: Request,
              remember: Callable[[str, bytes], None]) -> Reply:
        first = sum(isinstance(b, ToolCall) for m in request.messages for b in m.content)
        calls = []
        for i, (call, signature) in enumerate(self.calls):
            call_id = call.id or f"{CALL_PREFIX}{first + i}"
            calls.append(ToolCall(id=call_id, name=call.name or "",
                                  arguments=tool_arguments(call.args)))
            if signature:
                remember(call_id, signature)
        text = "".join(self.text)
        if self.block is not None and not (text or calls):
            raise _blocked(ep, *self.block)
        if not self.candidates:
            raise ProviderError(
                f"Gemini sent no answer for {ep.model!r} (no candidates and no reason "
                "given); try again.")
        if not self.finish:
            raise ProviderError(
                f"Gemini at {ep.base_url} ended its reply to {ep.model!r} before it was "
                "complete (no finish reason: the stream was cut short); try again.")
        if self.finish in _SAFETY or self.finish in _WHY or not (text or calls):
            raise _stopped(ep, self.finish, bool(text), request.max_tokens)
        usage = self.usage
        output = (getattr(usage, "candidates_token_count", None) or 0) + \
            (getattr(usage, "thoughts_token_count", None) or 0)
        return Reply(text=text, tool_calls=calls,
                     stop_reason=stop_reason(self.finish.lower() or None, bool(calls)),
                     input_tokens=getattr(usage, "prompt_token_count", None),
                     output_tokens=output if usage is not None else None,
                     cache_read_tokens=getattr(usage, "cached_content_token_count", None))
