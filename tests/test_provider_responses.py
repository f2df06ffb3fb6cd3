"""The OpenAI Responses API provider through the real ``openai`` SDK, against a local server
that speaks the Responses wire protocol (``wire.responses_wire``)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
import textwrap

import openai
import pytest
from conftest import script_tool, simple_spec
from PIL import Image
from wire import drop, error, garbage, openai_server, raw, text, tool_call
from wire.responses_wire import cut_mid_event, failed, responses_server
from wire.samples import TOOL_IMAGE, USER_IMAGE, holds_image, sample_request, text_request

from silica.blocks import ImageBlock, TextBlock
from silica.config import ConfigError, Settings, load_settings
from silica.providers.base import ProviderError, Request, RequestMessage, RequestToolResult
from silica.providers.openai_responses import OpenAIResponsesProvider
from silica.providers.registry import get_provider


@pytest.fixture(autouse=True)
def no_real_credentials(monkeypatch):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
                "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(var, raising=False)


def complete(request, settings=None, on_text=None, **attributes):
    provider = OpenAIResponsesProvider(settings or Settings(provider="openai-responses"))
    for name, value in attributes.items():
        setattr(provider, name, value)
    return asyncio.run(provider.complete(request, on_text))


def fails(script, monkeypatch, request=None, **attributes):
    with responses_server(script) as srv, pytest.raises(ProviderError) as info:
        srv.use(monkeypatch)
        complete(request or text_request("gpt-4.1"), **attributes)
    return str(info.value), srv


def picture(part: dict) -> Image.Image:
    """The image of an ``input_image`` part, decoded by Pillow from its data URL."""
    assert part["type"] == "input_image"
    head, _, data = part["image_url"].partition(",")
    assert head.startswith("data:image/") and head.endswith(";base64")
    img = Image.open(io.BytesIO(base64.b64decode(data, validate=True)))
    img.load()
    return img


def png_block(size: tuple[int, int], color=(30, 160, 90)) -> ImageBlock:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return ImageBlock(media_type="image/png", data=out.getvalue(), width=size[0],
                      height=size[1])


# -- the request ------------------------------------------------------------------------


def test_text_streams_and_usage_counts_cached_tokens(monkeypatch):
    pieces: list[str] = []
    with responses_server([text("A red square, I think.", usage=(30, 11),
                                cache=(1200, 0))]) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("gpt-4.1"), on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == reply.text == "A red square, I think."
    assert reply.stop_reason == "end_turn" and reply.tool_calls == []
    assert (reply.input_tokens, reply.output_tokens, reply.cache_read_tokens) == (1230, 11, 1200)
    assert reply.usage.cache_read_tokens == 1200
    body = srv.requests[0]
    assert srv.received[0].path == "/v1/responses"
    assert srv.received[0].headers["authorization"] == "Bearer test-openai-key"
    assert body["stream"] is True and body["store"] is False
    assert body["instructions"] == "You are a careful test assistant."
    assert body["max_output_tokens"] == 256
    assert body["tools"] == [{"type": "function", "name": "screenshot",
                              "description": "Take a screenshot of a web page.",
                              "parameters": {"type": "object",
                                             "properties": {"url": {"type": "string"}},
                                             "required": ["url"]},
                              "strict": False}]


def test_the_history_goes_as_items_with_images_inside_the_tool_output(monkeypatch):
    with responses_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("gpt-4.1"))
    user, said, call, output = srv.requests[0]["input"]
    assert user["role"] == "user"
    assert user["content"][0] == {"type": "input_text", "text": "What is on the page?"}
    assert user["content"][1]["detail"] == "high"
    assert picture(user["content"][1]).size == (USER_IMAGE.width, USER_IMAGE.height)
    assert said == {"role": "assistant", "content": "Let me look."}
    assert call == {"type": "function_call", "call_id": "call_1", "name": "screenshot",
                    "arguments": '{"url": "http://x.test"}'}
    assert output["type"] == "function_call_output" and output["call_id"] == "call_1"
    note, image = output["output"]
    assert note == {"type": "input_text", "text": "captured 5x2"}
    assert picture(image).size == (TOOL_IMAGE.width, TOOL_IMAGE.height)


def test_a_tool_call_round_trip_whose_result_carries_an_image(monkeypatch):
    question = RequestMessage(role="user", content=[TextBlock(text="Show me the chart.")])
    script = [text("Taking it.") + tool_call("screenshot", {"url": "http://c.test"},
                                             id="call_chart"),
              text("Five bars, the third is tallest.")]
    with responses_server(script) as srv:
        srv.use(monkeypatch)
        first = Request(model="gpt-4.1", system="Be brief.", tools=sample_request("x").tools,
                        messages=[question])
        asked = complete(first)
        [call] = asked.tool_calls
        assert (call.id, call.name, call.arguments) == ("call_chart", "screenshot",
                                                        {"url": "http://c.test"})
        assert asked.stop_reason == "tool_use" and asked.text == "Taking it."
        answered = RequestToolResult(call_id=call.id, name=call.name, content=[
            TextBlock(text="chart of 5 values"), png_block((640, 400))])
        second = first.model_copy(update={"messages": [
            question, RequestMessage(role="assistant", content=[TextBlock(text=asked.text),
                                                                call]),
            RequestMessage(role="user", content=[answered])]})
        reply = complete(second)
    assert reply.text == "Five bars, the third is tallest."
    one, two = srv.requests
    assert two["input"][:len(one["input"])] == one["input"]  # a shared prefix, for the cache
    assert (two["instructions"], two["tools"]) == (one["instructions"], one["tools"])
    items = two["input"]
    assert [i.get("type") for i in items[-2:]] == ["function_call", "function_call_output"]
    assert items[-2]["call_id"] == items[-1]["call_id"] == "call_chart"
    note, image = items[-1]["output"]
    assert note == {"type": "input_text", "text": "chart of 5 values"}
    assert picture(image).size == (640, 400) and image["detail"] == "high"
    assert not any(i.get("role") == "user" for i in items[1:])  # no extra image message


def test_the_image_detail_comes_from_config(monkeypatch, home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[openai]\nimage_detail = "low"\n')
    with responses_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("gpt-4.1"), load_settings())
    sent = json.dumps(srv.requests[0])
    assert sent.count('"detail": "low"') == 2 and '"detail": "high"' not in sent


def test_a_failed_tool_with_no_output_says_so(monkeypatch):
    request = sample_request("gpt-4.1")
    request.messages[2] = RequestMessage(role="user", content=[
        RequestToolResult(call_id="call_1", name="screenshot", content=[], is_error=True),
        TextBlock(text="and?")])
    with responses_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(request)
    *_, output, user = srv.requests[0]["input"]
    assert output == {"type": "function_call_output", "call_id": "call_1", "output": "Error"}
    assert user == {"role": "user", "content": [{"type": "input_text", "text": "and?"}]}


def test_a_model_without_vision_gets_text_in_place_of_images(monkeypatch):
    with responses_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        complete(sample_request("gpt-3.5-turbo"))
    body = srv.requests[0]
    assert not holds_image(body) and "input_image" not in json.dumps(body)
    assert body["input"][0]["content"][1] == {"type": "input_text",
                                              "text": "[Image: 4x3, image/png]"}
    assert body["input"][3]["output"] == "captured 5x2\n[Image: captured 5x2, 5x2, image/png]"


def test_a_reply_cut_by_the_token_limit_says_max_tokens(monkeypatch):
    with responses_server([text("It goes on and", stop_reason="max_tokens")]) as srv:
        srv.use(monkeypatch)
        reply = complete(text_request("gpt-4.1"))
    assert reply.text == "It goes on and" and reply.stop_reason == "max_tokens"


def test_invalid_argument_json_gives_empty_arguments(monkeypatch):
    with responses_server([tool_call("screenshot", raw_arguments='{"url": "http://a')]) as srv:
        srv.use(monkeypatch)
        reply = complete(sample_request("gpt-4.1"))
    (call,) = reply.tool_calls
    assert call.name == "screenshot" and call.arguments == {}


def test_the_wire_server_also_answers_json_to_the_sdk(monkeypatch):
    """The server's non-streamed form, read by the SDK itself (what a non-streaming
    client of the same server sees)."""
    with responses_server([text("Plain answer.", usage=(5, 3), cache=(64, 0))]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        response = client.responses.create(model="gpt-4.1", input="hi")
        client.close()
    assert response.output_text == "Plain answer." and response.status == "completed"
    assert response.usage.input_tokens == 69
    assert response.usage.input_tokens_details.cached_tokens == 64
    assert srv.requests[0]["input"] == "hi" and "stream" not in srv.requests[0]


# -- what goes wrong --------------------------------------------------------------------

IMAGE_400S = [
    ("Invalid content type. image_url is only supported by certain models.",
     "takes no images", "vision = false"),
    ("The model `o3-mini` does not support image inputs.", "takes no images",
     "vision = false"),
    ("Invalid 'input[3].output[1].image_url': string too long. Expected a string with "
     "maximum length 20971520, but got a string with length 28000000 instead.",
     "too large", "max_base64_bytes"),
    ("Too many images in request. Max is 500.", "too many images",
     "`max_images_per_request` to 500 or fewer"),
    ("You uploaded an unsupported image. Please make sure your image is below 20 MB in size "
     "and is of one the following formats: ['png', 'jpeg', 'gif', 'webp'].",
     "could not read an image", "start a new session"),
    ("The image data you provided does not represent a valid image. Please check your "
     "input and try again with one of the supported image formats: ['image/jpeg', "
     "'image/png', 'image/gif', 'image/webp'].", "could not read an image",
     "start a new session"),
]


@pytest.mark.parametrize(("wording", "what", "fix"), IMAGE_400S)
def test_each_image_400_gets_a_clear_error(monkeypatch, wording, what, fix):
    message, srv = fails([error(400, wording)], monkeypatch, sample_request("gpt-4.1"))
    assert what in message and fix in message and "HTTP 400" in message
    assert wording.rstrip(".") in message and "'gpt-4.1'" in message
    assert len(srv.requests) == 1  # never retried


def test_a_400_about_something_else_keeps_the_plain_message(monkeypatch):
    message, srv = fails([error(400, "Unsupported parameter: 'temperature'.")], monkeypatch)
    assert "rejected the request" in message and "'temperature'" in message
    assert len(srv.requests) == 1


def test_server_errors_are_retried_then_reported(monkeypatch):
    message, srv = fails([error(500, "internal trouble")] * 3, monkeypatch)
    assert len(srv.requests) == 3  # the first try and 2 retries, as the other providers
    assert "HTTP 500" in message and "internal trouble" in message and "3 attempts" in message


def test_a_server_error_then_an_answer(monkeypatch):
    with responses_server([error(500, "hiccup"), text("made it")]) as srv:
        srv.use(monkeypatch)
        reply = complete(text_request("gpt-4.1"))
    assert reply.text == "made it" and len(srv.requests) == 2


def test_a_connection_cut_in_the_middle_of_an_event(monkeypatch):
    pieces: list[str] = []
    message, srv = fails([drop()], monkeypatch, on_text=pieces.append)
    assert "dropped before the reply was complete" in message and srv.root in message
    assert pieces == ["This "]  # what came before the cut was shown, then nothing more
    assert len(srv.requests) == 1  # a reply that had started is not sent again


def test_a_stream_that_ends_in_the_middle_of_an_event(monkeypatch):
    message, srv = fails([cut_mid_event("one two three four")], monkeypatch)
    assert "before it was complete" in message and "response.completed" in message
    assert srv.root in message and len(srv.requests) == 1


def test_an_error_event_inside_a_started_reply(monkeypatch):
    message, srv = fails([error(500, "Overloaded", mid_stream=True)], monkeypatch)
    assert "broke off its reply" in message and "Overloaded" in message
    assert "try again" in message and len(srv.requests) == 1


def test_a_failed_response_event(monkeypatch):
    message, _ = fails([failed("The server had an error processing your request.")],
                       monkeypatch)
    assert "broke off its reply" in message and "processing your request" in message


def test_a_failed_response_that_names_an_image(monkeypatch):
    message, _ = fails([failed("Invalid image.", code="invalid_image")], monkeypatch)
    assert "could not read an image" in message and "in its reply" in message


def test_a_reply_that_is_not_json(monkeypatch):
    message, _ = fails([garbage()], monkeypatch)
    assert "cannot read" in message and "OpenAI Responses API" in message


def test_refused_credentials_name_the_key_variable(monkeypatch):
    message, srv = fails([error(401, "Incorrect API key provided")], monkeypatch)
    assert "HTTP 401" in message and "OPENAI_API_KEY" in message and len(srv.requests) == 1


def test_an_unknown_model_is_named(monkeypatch):
    message, _ = fails([error(404, "The model 'gpt-4.1' does not exist")], monkeypatch)
    assert "HTTP 404" in message and "'gpt-4.1'" in message


def test_rate_limited_once_then_answered(monkeypatch):
    with responses_server([error(429, "slow down"), text("made it")]) as srv:
        srv.use(monkeypatch)
        assert complete(text_request("gpt-4.1")).text == "made it"
    assert len(srv.requests) == 2


def test_retries_are_configurable(monkeypatch):
    _, srv = fails([error(503, "busy")] * 3, monkeypatch, max_retries=0)
    assert len(srv.requests) == 1


def test_a_connection_dropped_before_the_reply_is_retried(monkeypatch):
    with responses_server([drop(mid_stream=False), text("second try")]) as srv:
        srv.use(monkeypatch)
        assert complete(text_request("gpt-4.1")).text == "second try"
    assert len(srv.requests) == 2


def test_nothing_listening_names_the_address(monkeypatch, free_port):
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{free_port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with pytest.raises(ProviderError) as info:
        complete(text_request("gpt-4.1"), max_retries=0)
    assert "cannot reach" in str(info.value) and f"127.0.0.1:{free_port}" in str(info.value)


def test_an_event_past_the_bound_is_not_read_whole(monkeypatch):
    endless = raw(b'event: response.output_text.delta\ndata: {"delta": "', b"x" * 65536,
                  repeat=64)
    message, _ = fails([endless], monkeypatch, max_line=256 * 1024, max_retries=0)
    assert "an event longer than 262144 bytes" in message and "max_line" in message


def test_json_nested_too_deeply_is_an_error_not_a_crash(monkeypatch):
    deep = b"[" * 100_000 + b"]" * 100_000
    message, _ = fails([raw(b"event: response.created\ndata: " + deep + b"\n\n")], monkeypatch,
                       max_retries=0)
    assert "cannot read" in message and "nested too deeply" in message


def test_a_missing_key_says_which_variable_to_set():
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        complete(text_request("gpt-4.1"))


# -- choosing it ------------------------------------------------------------------------


def test_the_provider_is_chosen_by_name_or_by_openai_api(home):
    assert isinstance(get_provider("openai-responses", Settings()), OpenAIResponsesProvider)
    assert not isinstance(get_provider("openai", Settings()), OpenAIResponsesProvider)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('provider = "openai"\n[openai]\napi = "responses"\n')
    settings = load_settings()
    chosen = get_provider(settings.provider, settings)
    assert isinstance(chosen, OpenAIResponsesProvider) and chosen.model == "gpt-4.1"
    assert chosen.model_info("gpt-4.1").vision and not chosen.model_info("gpt-3.5-turbo").vision


@pytest.mark.parametrize("line", ['api = "assistants"', 'image_detail = "ultra"', "detail = 1"])
def test_a_bad_openai_section_names_the_key(home, line):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"[openai]\n{line}\n")
    with pytest.raises(ConfigError, match=r"openai\.(api|image_detail|detail)"):
        load_settings()


def test_the_sdk_is_imported_on_the_first_request_only():
    code = ("import sys\n"
            "from silica.config import Settings\n"
            "from silica.providers.registry import get_provider\n"
            "p = get_provider('openai-responses', Settings())\n"
            "p.model_info(p.model)\n"
            "print('openai' in sys.modules, 'httpx2' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


# -- the command line, end to end -------------------------------------------------------


@pytest.fixture
def picture_tool(user_tools):
    """A tool that returns a 1920x1080 PNG as base64 JSON."""
    out = io.BytesIO()
    Image.new("RGB", (1920, 1080), (200, 60, 60)).save(out, format="PNG")
    data = base64.b64encode(out.getvalue()).decode()
    body = textwrap.dedent(f"""
        import json
        print(json.dumps({{"caption": "a red frame", "media_type": "image/png",
                           "base64": {data!r}}}))
    """)
    script_tool(user_tools, "picture.py", simple_spec("picture", label="string"), body=body)


def silica(*args, env):
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_ask_through_the_responses_api_with_a_tool_image(picture_tool, home):
    script = [tool_call("picture", {"label": "cli"}), text("It is red.", cache=(900, 0)),
              tool_call("picture", {"label": "again"}), text("Red again.")]
    with responses_server(script) as srv:
        env = {**os.environ, **srv.env}
        done = silica("ask", "--provider", "openai-responses", "what colour?", env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "It is red."
        assert "→ picture" in done.stderr
        # the same API chosen in config: provider = "openai", [openai] api = "responses"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            'provider = "openai"\n[openai]\napi = "responses"\nimage_detail = "auto"\n')
        again = silica("ask", "and now?", env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "Red again."
    assert [r.path for r in srv.received] == ["/v1/responses"] * 4
    for n, detail in ((1, "high"), (3, "auto")):
        items = srv.requests[n]["input"]
        output = items[-1]
        assert output["type"] == "function_call_output"
        assert output["call_id"] == items[-2]["call_id"] == f"call_wire_{n}_0"
        [note] = [p for p in output["output"] if p["type"] == "input_text"]
        assert "a red frame" in note["text"]
        [image] = [p for p in output["output"] if p["type"] == "input_image"]
        assert image["detail"] == detail
        width, height = picture(image).size  # fitted to OpenAI's high-detail limits
        assert max(width, height) <= 2048 and min(width, height) <= 768
        assert abs(width / height - 1920 / 1080) < 0.01


def test_a_server_without_the_responses_route_is_named_as_such_with_the_other_provider(
        project):
    """A chat-completions-only server answers 404 for /v1/responses: that is not a missing
    model, and the message says which provider to use instead. Through ``silica ask``."""
    (project.parent / "home").mkdir(exist_ok=True)
    (project.parent / "home" / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    with openai_server([text("unused")]) as srv:
        done = subprocess.run([sys.executable, "-m", "silica", "ask", "--provider",
                               "openai-responses", "--model", "gpt-4.1", "hi"],
                              capture_output=True, text=True, cwd=project, timeout=180,
                              env={**os.environ, **srv.env, "COLUMNS": "200"})
    assert done.returncode == 1
    said = " ".join(done.stderr.split())
    assert "does not serve the OpenAI Responses API (HTTP 404" in said, said
    assert "--provider openai" in said and "has no model" not in said
    assert "Traceback" not in said
