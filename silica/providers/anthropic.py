"""Anthropic Messages API through the ``anthropic`` SDK, streamed.

Images go where Claude reads them best: in user messages as ``image`` blocks, and from tools
*inside* the ``tool_result`` content, next to the tool's text. ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_BASE_URL`` are read by the SDK.

Prompt caching: every request carries ``cache_control`` breakpoints (at most
``MAX_BREAKPOINTS``, the API's limit) on the last tool, on the system prompt and on the last
block of all: the API writes the whole request to its cache, and the next request, which
only adds the reply and a new user message, reads it back (the API looks for earlier cached
prefixes about 20 blocks back from a breakpoint). When a request adds more blocks than that
(a reply with many tool calls), the last block of the previous request (the end of the
stable history) gets a breakpoint too. Each ``cache_control`` is the last key of its block,
so moving a breakpoint changes no byte before it: a request repeats the previous one byte
for byte up to the end of that one's last block (``silica.agent.render`` keeps old images
unchanged between aging steps for this).

With ``[anthropic] files_api = true`` and a request that names its session
(``Request.session_id``), each image is uploaded once per session and requests name it by
file id (``silica.providers.anthropic_files``: fallbacks, and a file the API lost).

A ``Reply``'s ``input_tokens`` counts every prompt token: the API's ``input_tokens`` (not
cached) plus ``cache_read_input_tokens`` plus ``cache_creation_input_tokens``, which are also
given on their own as ``cache_read_tokens`` and ``cache_write_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from silica.blocks import ImageBlock, TextBlock, ToolCall
from silica.config import Settings
from silica.providers.anthropic_files import FILES_BETA, SessionFiles, digest, file_image
from silica.providers.base import (
    ProviderError,
    Reply,
    Request,
    RequestMessage,
    RequestToolResult,
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
    too_deep,
    too_large,
    within_deadline,
)
from silica.providers.models import BundledProvider, stop_reason

if TYPE_CHECKING:  # the SDK is imported by the first request (or ahead: ``warm``)
    import anthropic

KEY_VAR = "ANTHROPIC_API_KEY"
URL_VAR = "ANTHROPIC_BASE_URL"
CACHE_CONTROL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # cache_control blocks the API accepts in one request
LOOKBACK_BLOCKS = 16  # the API looks about 20 blocks back for a cached prefix: a margin


Files = Mapping[str, str]
"""sha256 of an image's bytes -> the file id it was uploaded as (``anthropic_files``)."""


def _content(block: Any, files: Files | None = None) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return block.to_anthropic() if block.text else None  # the API refuses empty text
    if isinstance(block, ImageBlock):
        file_id = files.get(digest(block.data)) if files else None
        return file_image(file_id) if file_id else block.to_anthropic()
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name,
                "input": block.arguments}
    if isinstance(block, RequestToolResult):
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.call_id,
                               "is_error": block.is_error}
        inner = [c for c in (_content(b, files) for b in block.content) if c is not None]
        if inner:  # a tool that printed nothing sends no content (empty text is refused)
            out["content"] = inner
        return out
    raise TypeError(f"cannot send a {type(block).__name__} to Anthropic")


def _message(message: RequestMessage, files: Files | None = None) -> dict[str, Any]:
    # tool_result blocks must open a user message; keep everything else in order after them
    blocks = sorted(message.content, key=lambda b: not isinstance(b, RequestToolResult))
    content = [c for c in (_content(b, files) for b in blocks) if c is not None]
    return {"role": message.role, "content": content or [{"type": "text", "text": "(empty)"}]}


def _cached(block: dict[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": CACHE_CONTROL}  # last: the block's bytes come first


def _mark_history(messages: list[dict[str, Any]], left: int) -> None:
    """A breakpoint on the last block of all and, when that is more than
    ``LOOKBACK_BLOCKS`` blocks past the end of the previous request (the last user message
    before the newest reply), on that end too; ``left`` at most."""
    ends = [len(messages) - 1] if messages else []
    roles = [m["role"] for m in messages[-3:]]
    if roles == ["user", "assistant", "user"]:
        added = len(messages[-2]["content"]) + len(messages[-1]["content"])
        if added > LOOKBACK_BLOCKS:
            ends.insert(0, len(messages) - 3)
    for i in ends[-left:] if left > 0 else []:
        content = messages[i]["content"]
        messages[i] = {**messages[i], "content": [*content[:-1], _cached(content[-1])]}


def to_anthropic(request: Request, files: Files | None = None) -> dict[str, Any]:
    """The keyword arguments of ``client.messages.stream`` for ``request``, with prompt
    caching breakpoints (see the module docstring); an image whose sha256 is in ``files``
    is named by its file id (the request then needs the ``FILES_BETA`` header)."""
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": [_message(m, files) for m in request.messages],
    }
    if request.system:
        params["system"] = [_cached({"type": "text", "text": request.system})]
    if request.tools:
        tools = [{"name": t["name"], "description": t.get("description", ""),
                  "input_schema": t.get("input_schema") or {"type": "object"}}
                 for t in request.tools]
        params["tools"] = [*tools[:-1], _cached(tools[-1])]
    used = bool(request.system) + bool(request.tools)
    _mark_history(params["messages"], MAX_BREAKPOINTS - used)
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
    fresh = getattr(usage, "input_tokens", None)
    read = getattr(usage, "cache_read_input_tokens", None)
    wrote = getattr(usage, "cache_creation_input_tokens", None)
    counted = [n for n in (fresh, read, wrote) if isinstance(n, int)]
    return Reply(text="".join(texts), tool_calls=calls,
                 stop_reason=stop_reason(message.stop_reason, bool(calls)),
                 input_tokens=sum(counted) if counted else None,
                 output_tokens=getattr(usage, "output_tokens", None),
                 cache_read_tokens=read, cache_write_tokens=wrote)


class AnthropicProvider(BundledProvider, ReplyBounds):
    """Claude models. ``max_retries`` (the SDK's, default 2) and ``timeout`` (seconds; None:
    the SDK's) apply to each call; ``deadline``, ``max_line`` and ``max_reply`` bound the
    whole reply (``ReplyBounds``), uploads included. ``home`` is the silica home whose
    cache remembers each session's uploads (None: ``$SILICA_HOME``)."""

    name = "anthropic"
    sdk = ("anthropic",)
    home: Path | None = None

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._files: dict[tuple[str, str], SessionFiles] = {}  # by session and address

    def client(self) -> anthropic.AsyncAnthropic:
        """The process's SDK client for this environment and these knobs (one per provider:
        ``silica.providers.clients``); ``ProviderError`` when no credentials are
        configured."""
        import anthropic

        def make() -> anthropic.AsyncAnthropic:
            # the SDK's own HTTP client and defaults, with every body read within the bounds
            http = anthropic.DefaultAsyncHttpxClient(event_hooks=bounded_hooks(self),
                                                     verify=tls())
            return anthropic.AsyncAnthropic(**self.sdk_options(), http_client=http)

        client = shared((self.name, environment("ANTHROPIC_"), tuple(self.sdk_options().items()),
                         self.max_line, self.max_reply), make)
        if not (client.api_key or client.auth_token or getattr(client, "credentials", None)):
            raise ProviderError(f"no Anthropic API key: set {KEY_VAR} (create a key at "
                                "https://console.anthropic.com/settings/keys).")
        return client

    def session_files(self, request: Request, base_url: str) -> SessionFiles | None:
        """The uploads of ``request``'s session at ``base_url``, when ``[anthropic]
        files_api`` is on and the request names its session; else None (images inline)."""
        if not (self.settings.anthropic.files_api and request.session_id):
            return None
        key = (request.session_id, base_url)
        if key not in self._files:
            try:
                self._files[key] = SessionFiles(request.session_id, base_url, self.home)
            except ValueError:  # not a session id: nowhere to remember uploads
                return None
        return self._files[key]

    async def complete(self, request: Request,
                       on_text: Callable[[str], None] | None = None) -> Reply:
        import anthropic
        import httpx2

        request = self.for_model(request)
        client = self.client()
        ep = Endpoint("Anthropic", "Anthropic Messages", str(client.base_url).rstrip("/"),
                      request.model, KEY_VAR, URL_VAR, self.max_retries)
        files = self.session_files(request, ep.base_url)
        started = False
        try:
            async with within_deadline(ep, self.deadline):
                for again in (False, True):  # a second time only for a file the API lost
                    sources = await files.sources(client, request) if files else {}
                    beta: dict[str, Any] = \
                        {"extra_headers": {"anthropic-beta": FILES_BETA}} if sources else {}
                    try:
                        async with client.messages.stream(**to_anthropic(request, sources),
                                                          **beta) as stream:
                            started = True
                            async for piece in stream.text_stream:
                                if on_text is not None and piece:
                                    on_text(piece)
                            message = await stream.get_final_message()
                        break
                    except anthropic.APIStatusError as exc:
                        detail = api_message(exc.body) or exc.message
                        lost = files.lost(exc.status_code, detail, sources) if files else []
                        if not lost or started or files is None:
                            raise
                        files.forget(lost)  # uploaded again by the next sources()
                        if again:
                            raise files.lost_again(exc.status_code, detail) from exc
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
