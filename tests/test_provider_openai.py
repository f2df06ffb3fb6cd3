"""The OpenAI provider through the real ``openai`` SDK, against a local chat completions API."""

from __future__ import annotations

import asyncio

import pytest
from wire import openai_server, text, tool_call
from wire.samples import TOOL_IMAGE, USER_IMAGE, b64decode, holds_image, sample_request

from silica.config import Settings
from silica.providers.base import ProviderError
from silica.providers.openai import OpenAIProvider


@pytest.fixture(autouse=True)
def no_real_credentials(monkeypatch):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
                "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(var, raising=False)


def complete(request, settings=None, on_text=None):
    provider = OpenAIProvider(settings or Settings(provider="openai"))
    return asyncio.run(provider.complete(request, on_text))


def data_url_bytes(part: dict, media_type: str = "image/png") -> bytes:
    assert part["type"] == "image_url"
    prefix = f"data:{media_type};base64,"
    url = part["image_url"]["url"]
    assert url.startswith(prefix)
    return b64decode(url[len(prefix):])


def test_tool_images_follow_in_a_user_message(monkeypatch):
    with openai_server([text("A red square and a blue bar.")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("gpt-4.1"))
    body = srv.requests[0]
    assert srv.received[0].headers["authorization"] == "Bearer test-openai-key"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 256
    assert body["tools"] == [{"type": "function", "function": {
        "name": "screenshot", "description": "Take a screenshot of a web page.",
        "parameters": {"type": "object", "properties": {"url": {"type": "string"}},
                       "required": ["url"]}}}]
    system, user, assistant, tool, images = body["messages"]
    assert system == {"role": "system", "content": "You are a careful test assistant."}
    assert user["role"] == "user"
    assert user["content"][0] == {"type": "text", "text": "What is on the page?"}
    assert data_url_bytes(user["content"][1]) == USER_IMAGE.data
    assert assistant == {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "screenshot", "arguments": '{"url": "http://x.test"}'}}]}
    assert tool == {"role": "tool", "tool_call_id": "call_1",
                    "content": "captured 5x2\n[1 image(s) follow in the next message]"}
    assert images["role"] == "user"
    intro, image = images["content"]
    assert intro["type"] == "text" and "screenshot" in intro["text"] and "call_1" in intro["text"]
    assert data_url_bytes(image) == TOOL_IMAGE.data


def test_streamed_text_and_tool_call_deltas_make_the_reply(monkeypatch):
    pieces: list[str] = []
    script = [text("Two shots coming.", usage=(30, 11))
              + tool_call("screenshot", {"url": "http://a.test"}, id="call_a")
              + tool_call("screenshot", {"url": "http://b.test"}, id="call_b")]
    with openai_server(script) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("gpt-4.1"), on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == "Two shots coming."
    assert reply.text == "Two shots coming."
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_a", "screenshot", {"url": "http://a.test"}),
        ("call_b", "screenshot", {"url": "http://b.test"})]
    assert reply.stop_reason == "tool_use"
    assert (reply.input_tokens, reply.output_tokens) == (30, 11)


def test_invalid_argument_json_gives_empty_arguments(monkeypatch):
    with openai_server([tool_call("screenshot", raw_arguments='{"url": "http://a')]) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("gpt-4.1"))
    (call,) = reply.tool_calls
    assert call.name == "screenshot" and call.arguments == {}


def test_a_model_without_vision_gets_no_image(monkeypatch):
    with openai_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("gpt-3.5-turbo"))
    body = srv.requests[0]
    assert reply.text == "ok" and reply.stop_reason == "end_turn"
    assert not holds_image(body)
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]  # no images message
    assert body["messages"][1]["content"] == "What is on the page?\n[Image: 4x3, image/png]"
    assert body["messages"][3]["content"] == "captured 5x2\n[Image: captured 5x2, 5x2, image/png]"


def test_reasoning_models_get_max_completion_tokens(monkeypatch):
    with openai_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("o4-mini"))
    assert srv.requests[0]["max_completion_tokens"] == 256
    assert "max_tokens" not in srv.requests[0]


def test_a_missing_key_says_which_variable_to_set():
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        complete(sample_request("gpt-4.1"))
