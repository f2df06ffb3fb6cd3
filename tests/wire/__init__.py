"""Local servers that speak the providers' wire protocols, for tests through the real SDKs.

Each server runs on 127.0.0.1 (a free port) in a thread for the length of a ``with`` block,
replays a script of replies in order, one per request, and records every request::

    from wire import anthropic_server, openai_server, ollama_server
    from wire import text, tool_call, error, drop, garbage

    def test_two_turns(monkeypatch):
        with anthropic_server([
            text("Let me look.") + tool_call("screenshot", {"url": "x"}),
            text("It is a cat."),
        ]) as srv:
            srv.use(monkeypatch)        # sets ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY
            ...                         # run the agent / provider
        body = srv.requests[1]          # the 2nd request's JSON, as sent by the SDK
        assert srv.received[1].headers["x-api-key"] == "test-anthropic-key"

Servers (each yields a ``WireServer``):

* ``anthropic_server(script, api_key=...)``: ``POST /v1/messages``; JSON, or SSE with the
  real event sequence when the request has ``"stream": true``. ``env``: ANTHROPIC_BASE_URL,
  ANTHROPIC_API_KEY.
* ``openai_server(script, api_key=...)``: ``POST /v1/chat/completions``; JSON, or SSE chunks
  (tool calls as indexed deltas, a usage chunk when ``stream_options.include_usage``) ending
  ``data: [DONE]``. ``base_url`` ends in ``/v1``. ``env``: OPENAI_BASE_URL, OPENAI_API_KEY.
* ``ollama_server(script)``: ``POST /api/chat``; NDJSON lines (the default), or one JSON
  object with ``"stream": false``. No tool call ids unless scripted. ``env``: OLLAMA_HOST.

``WireServer``: ``base_url``; ``requests`` (parsed JSON bodies); ``received`` (``Received``:
method, path, lower-cased headers, body); ``env`` and ``use(monkeypatch)``; ``add(*replies)``
to extend the script. A request beyond the script gets HTTP 500 "the script has no reply
left" with ``x-should-retry: false`` (the SDKs do not retry it); an unknown path gets 404.

Replies (join with ``+``; each is a frozen ``Reply``):

* ``text(s, chunks=None, stop_reason=None, usage=(12, 7), cache=(0, 0))``: text, streamed
  in word pieces; ``cache``: prompt tokens read from / written to the cache (Anthropic's
  ``cache_read_input_tokens`` / ``cache_creation_input_tokens``, OpenAI's
  ``prompt_tokens_details.cached_tokens`` within ``prompt_tokens``).
* ``tool_call(name, arguments=None, id=None, raw_arguments=None)``: a tool call; ids default
  to ``toolu_wire_<n>_<i>`` / ``call_wire_<n>_<i>``; ``raw_arguments`` sends that text as the
  arguments (invalid JSON, say).
* ``error(status, message, retry_after=0.001, headers=None, mid_stream=False)``: the API's
  own error body with that status. ``retry_after`` is sent as ``retry-after-ms``, so SDK
  retries are instant. ``mid_stream=True``: a streamed reply starts (HTTP 200), then the
  error arrives as a stream event (Anthropic ``event: error``, an OpenAI ``data: {"error"}``
  chunk, an Ollama ``{"error"}`` line).
* ``drop(mid_stream=True)``: cut the connection after the first streamed piece; with
  ``mid_stream=False``, before any response (the SDKs retry that as a connection error).
* ``garbage()``: HTTP 200 whose body, or first stream event, is not JSON.
* ``raw(*chunks, repeat=1)``: HTTP 200 streamed (the protocol's stream content type) whose
  body is exactly those bytes, ``repeat`` times over (not copied: 64 MiB costs nothing).
* ``trickle(reply, delay)``: ``reply`` with its streamed chunks sent ``delay`` seconds apart.
"""

from .anthropic_wire import anthropic_server
from .ollama_wire import ollama_server
from .openai_wire import openai_server
from .script import (
    Received,
    Reply,
    ScriptedCall,
    drop,
    error,
    garbage,
    raw,
    text,
    tool_call,
    trickle,
)
from .server import WireServer

__all__ = [
    "Received", "Reply", "ScriptedCall", "WireServer", "anthropic_server", "drop", "error",
    "garbage", "ollama_server", "openai_server", "raw", "text", "tool_call", "trickle",
]
