"""The Anthropic provider through the real ``anthropic`` SDK, against a local Messages API."""

from __future__ import annotations

import asyncio

import pytest
from wire import anthropic_server, text, tool_call
from wire.samples import (
    SCREENSHOT_TOOL,
    TOOL_IMAGE,
    USER_IMAGE,
    b64decode,
    holds_image,
    sample_request,
    text_request,
)

from silica.blocks import TextBlock, ToolCall
from silica.config import Settings
from silica.providers.anthropic import AnthropicProvider
from silica.providers.base import ProviderError, RequestMessage, RequestToolResult

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


@pytest.fixture(autouse=True)
def no_real_credentials(monkeypatch, tmp_path):
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                "ANTHROPIC_PROFILE", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no profile files from the real home


def complete(request, settings=None, on_text=None):
    provider = AnthropicProvider(settings or Settings())
    return asyncio.run(provider.complete(request, on_text))


def test_images_go_inside_the_tool_result(monkeypatch):
    with anthropic_server([text("A red square and a blue bar.")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("claude-sonnet-5-5"))
    body = srv.requests[0]
    headers = srv.received[0].headers
    assert "test-anthropic-key" in headers.get("x-api-key", "") + headers.get("authorization", "")
    assert body["stream"] is True and body["model"] == "claude-sonnet-5-5"
    assert body["system"] == [{"type": "text", "text": "You are a careful test assistant.",
                               "cache_control": {"type": "ephemeral"}}]
    assert body["tools"] == [{**SCREENSHOT_TOOL, "cache_control": {"type": "ephemeral"}}]
    user, assistant, results = body["messages"]
    assert user["content"][0] == {"type": "text", "text": "What is on the page?"}
    image = user["content"][1]
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/png"
    assert b64decode(image["source"]["data"]) == USER_IMAGE.data
    assert assistant["content"][1] == {"type": "tool_use", "id": "call_1", "name": "screenshot",
                                       "input": {"url": "http://x.test"}}
    (result,) = results["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "call_1"
    assert result["cache_control"] == {"type": "ephemeral"}  # the end of the request
    assert result["is_error"] is False
    assert result["content"][0] == {"type": "text", "text": "captured 5x2"}
    assert result["content"][1]["type"] == "image"
    assert b64decode(result["content"][1]["source"]["data"]) == TOOL_IMAGE.data


def test_streamed_text_and_tool_calls_make_the_reply(monkeypatch):
    pieces: list[str] = []
    script = [text("Let me take a screenshot.", usage=(40, 9))
              + tool_call("screenshot", {"url": "http://y.test"}, id="toolu_7")]
    with anthropic_server(script) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("claude-sonnet-5-5"), on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == "Let me take a screenshot."
    assert reply.text == "Let me take a screenshot."
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("toolu_7", "screenshot", {"url": "http://y.test"})]
    assert reply.stop_reason == "tool_use"
    assert (reply.input_tokens, reply.output_tokens) == (40, 9)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (0, 0)


def test_cache_reads_and_writes_are_counted_in_the_input(monkeypatch):
    script = [text("Seen it.", usage=(30, 5), cache=(9000, 1200))]
    with anthropic_server(script) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("claude-sonnet-5-5"))
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (9000, 1200)
    assert reply.input_tokens == 30 + 9000 + 1200  # every prompt token, as Usage counts
    assert reply.usage.model_dump() == {"input_tokens": 10230, "output_tokens": 5,
                                        "cache_read_tokens": 9000, "cache_write_tokens": 1200}


def test_breakpoints_mark_tools_system_and_the_end_of_the_request(monkeypatch):
    with anthropic_server([text("ok"), text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("claude-sonnet-5-5"))
        complete(text_request("claude-sonnet-5-5"))  # no system, no tools: one breakpoint
    full, bare = srv.requests
    assert marks(full) == ["tools[0]", "system[0]", "messages[2][0]"]
    assert marks(bare) == ["messages[0][0]"] and "system" not in bare
    last = full["messages"][2]["content"][0]
    assert list(last)[-1] == "cache_control"  # after the content: the bytes before it stay


def test_a_reply_with_many_tool_calls_also_marks_the_previous_end(monkeypatch):
    calls = [ToolCall(id=f"c{i}", name="screenshot", arguments={"url": f"http://{i}.test"})
             for i in range(12)]
    request = sample_request("claude-sonnet-5-5").model_copy(update={"messages": [
        *sample_request("x").messages,
        RequestMessage(role="assistant", content=calls),
        RequestMessage(role="user", content=[
            RequestToolResult(call_id=c.id, name=c.name, content=[TextBlock(text="done")])
            for c in calls]),
    ]})
    with anthropic_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(request)
    [body] = srv.requests
    # 24 blocks since the previous request ended: past the API's look-back
    assert marks(body) == ["tools[0]", "system[0]", "messages[2][0]", "messages[4][11]"]


def marks(body) -> list[str]:
    """Where ``cache_control`` is, in order: ``tools[i]``, ``system[i]``, ``messages[i][j]``."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += [f"system[{i}]" for i, b in enumerate(system) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        found += [f"messages[{i}][{j}]" for j, b in enumerate(message["content"])
                  if "cache_control" in b]
    assert len(found) <= 4  # the API's limit
    return found


def test_a_model_without_vision_gets_no_image(monkeypatch):
    with anthropic_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("claude-3-5-haiku-latest"))
    body = srv.requests[0]
    assert reply.stop_reason == "end_turn"
    assert not holds_image(body)
    assert body["messages"][0]["content"][1] == {"type": "text", "text": "[Image: 4x3, image/png]"}
    tool_content = body["messages"][2]["content"][0]["content"]
    assert tool_content[1] == {"type": "text", "text": "[Image: captured 5x2, 5x2, image/png]"}


def test_the_vision_setting_overrides_the_table(monkeypatch):
    with anthropic_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("claude-sonnet-5-5"), Settings(vision=False))
    assert not holds_image(srv.requests[0])


def test_a_missing_key_says_which_variable_to_set():
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY"):
        complete(sample_request("claude-sonnet-5-5"))
