"""The Ollama provider (httpx2 on /api/chat) against a local server speaking Ollama's NDJSON."""

from __future__ import annotations

import asyncio

import pytest
from wire import ollama_server, text, tool_call
from wire.samples import TOOL_IMAGE, USER_IMAGE, b64decode, holds_image, sample_request

from silica.config import Settings
from silica.providers.ollama import OllamaProvider, base_url


def complete(request, settings=None, on_text=None):
    provider = OllamaProvider(settings or Settings(provider="ollama"))
    return asyncio.run(provider.complete(request, on_text))


def test_images_are_bare_base64_on_user_and_tool_messages(monkeypatch):
    with ollama_server([text("A red square and a blue bar.")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("llama3.2-vision"))
    body = srv.requests[0]
    assert body["stream"] is True and body["options"] == {"num_predict": 256}
    assert body["tools"][0]["function"]["name"] == "screenshot"
    assert body["tools"][0]["function"]["parameters"]["required"] == ["url"]
    system, user, assistant, tool = body["messages"]
    assert system == {"role": "system", "content": "You are a careful test assistant."}
    assert user["content"] == "What is on the page?"
    assert [b64decode(i) for i in user["images"]] == [USER_IMAGE.data]  # no data: prefix
    assert assistant == {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"function": {"name": "screenshot", "arguments": {"url": "http://x.test"}}}]}
    assert tool["role"] == "tool" and tool["tool_name"] == "screenshot"
    assert tool["content"] == "captured 5x2"
    assert [b64decode(i) for i in tool["images"]] == [TOOL_IMAGE.data]


def test_streamed_lines_make_the_reply_and_calls_get_ids(monkeypatch):
    pieces: list[str] = []
    script = [text("Looking now.", usage=(21, 4)) + tool_call("screenshot", {"url": "u"})
              + tool_call("screenshot", {"url": "v"})]
    with ollama_server(script) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("llama3.2-vision"), on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == "Looking now."
    # the request already held one call (call_1), so these are the 2nd and 3rd of the session
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_1", "screenshot", {"url": "u"}), ("call_2", "screenshot", {"url": "v"})]
    assert reply.stop_reason == "tool_use"
    assert (reply.input_tokens, reply.output_tokens) == (21, 4)


def test_a_model_without_vision_gets_no_image(monkeypatch):
    with ollama_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("llama3"))
    body = srv.requests[0]
    assert reply.text == "ok" and reply.stop_reason == "end_turn"
    assert not holds_image(body)
    assert all("images" not in m for m in body["messages"])
    assert body["messages"][1]["content"] == "What is on the page?\n[Image: 4x3, image/png]"
    assert body["messages"][3]["content"] == "captured 5x2\n[Image: captured 5x2, 5x2, image/png]"


def test_vision_can_be_switched_on_for_an_unknown_model(monkeypatch):
    with ollama_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("my-finetune"), Settings(vision=True))
    assert holds_image(srv.requests[0])


@pytest.mark.parametrize(("host", "url"), [
    ("", "http://127.0.0.1:11434"),
    ("0.0.0.0", "http://0.0.0.0:11434"),
    ("gpu-box:8080", "http://gpu-box:8080"),
    ("http://gpu-box", "http://gpu-box:80"),
    ("https://ollama.example/", "https://ollama.example:443"),
    ("http://127.0.0.1:11434/proxy/", "http://127.0.0.1:11434/proxy"),
    ("[::1]:11434", "http://[::1]:11434"),
])
def test_ollama_host_is_read_like_ollama_reads_it(host, url):
    assert base_url({"OLLAMA_HOST": host}) == url
