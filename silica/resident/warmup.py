"""One streamed Messages request through the ``anthropic`` SDK, answered in process: what
the SDK builds on its first request (pydantic's request and stream models, its lazy
imports) is built once in the resident, before it forks, and not in every run.

No network, no thread: the SDK's own HTTP client on a mock transport that replays a short
text-and-tool-call stream, on an event loop that is closed afterwards."""

from __future__ import annotations

import asyncio
import json

_EVENTS = [
    ("message_start", {"type": "message_start", "message": {
        "id": "msg_warm", "type": "message", "role": "assistant", "model": "warm",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "text_delta", "text": "ok"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "toolu_warm", "name": "warm", "input": {}}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
        "type": "input_json_delta", "partial_json": "{\"a\": 1}"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 2}}),
    ("message_stop", {"type": "message_stop"}),
]


def warm_anthropic() -> None:
    import anthropic
    import httpx2

    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in _EVENTS)

    def reply(_request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               content=body.encode())

    async def stream() -> None:
        http = anthropic.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(reply))
        client = anthropic.AsyncAnthropic(api_key="warm-up", base_url="http://warm.invalid",
                                          http_client=http, max_retries=0)
        tools = [{"name": "warm", "description": "warm", "input_schema": {
            "type": "object", "properties": {"a": {"type": "integer"}}}}]
        messages = [{"role": "user", "content": [
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]
        async with client.messages.stream(model="warm", max_tokens=8, system="warm",
                                          messages=messages, tools=tools) as events:  # type: ignore[arg-type]
            async for _ in events:
                pass
            await events.get_final_message()
        await client.close()

    asyncio.run(stream())
