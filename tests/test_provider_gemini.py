"""The Gemini provider through the real ``google-genai`` SDK, against a local Gemini API.

The server speaks ``streamGenerateContent`` (SSE) as the provider uses it, and
``generateContent`` (one JSON body); each test asserts what the SDK sent and what a user
gets back: the reply, or one ``ProviderError`` that says what to do.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import script_tool, simple_spec
from PIL import Image
from wire import drop, error, garbage, raw, text, tool_call, trickle
from wire.gemini_wire import gemini_server, no_candidates, prompt_blocked, signature
from wire.samples import SCREENSHOT_TOOL, TOOL_IMAGE, USER_IMAGE, holds_image, sample_request

from silica.blocks import TextBlock, ToolCall
from silica.config import ImageOverrides, Settings
from silica.images.limits import GEMINI
from silica.providers.base import ProviderError, Request, RequestMessage, RequestToolResult
from silica.providers.gemini import GeminiProvider
from silica.providers.models import DEFAULT_MODELS, has_vision, model_info
from silica.providers.registry import get_provider

MODEL = "gemini-3.8-flash"
OLDER = "gemini-2.5-flash"  # takes a tool's images next to the function response


@pytest.fixture(autouse=True)
def no_real_credentials(monkeypatch, tmp_path):
    for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI",
                "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
                "GOOGLE_GENAI_API_VERSION", "GOOGLE_GENAI_HTTP_CLIENT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def provider(settings: Settings | None = None, **attributes) -> GeminiProvider:
    made = get_provider("gemini", settings or Settings(provider="gemini"))
    made.retry_delay = 0.001  # the SDK's backoff, for fast retries
    for name, value in attributes.items():
        setattr(made, name, value)
    return made


def complete(request, monkeypatch, srv, on_text=None, settings=None, **attributes):
    srv.use(monkeypatch)
    return asyncio.run(provider(settings, **attributes).complete(request, on_text))


def fails(script, monkeypatch, request=None, **attributes) -> tuple[str, object]:
    with gemini_server(script) as srv, pytest.raises(ProviderError) as info:
        complete(request or ask("Hello"), monkeypatch, srv, **attributes)
    return str(info.value), srv


def ask(words: str, model: str = MODEL) -> Request:
    return Request(model=model, messages=[RequestMessage(role="user",
                                                         content=[TextBlock(text=words)])])


def pixels(b64: str) -> Image.Image:
    """An image as Gemini gets it (the SDK sends bytes as URL-safe base64), decoded."""
    image = Image.open(io.BytesIO(base64.urlsafe_b64decode(b64)))
    image.load()
    return image


def inline(part: dict) -> dict:
    """An ``inline_data`` part's ``{mime_type, data}`` (the SDK writes either key case)."""
    blob = part.get("inlineData") or part["inline_data"]
    return {"mime_type": blob.get("mimeType") or blob.get("mime_type"), "data": blob["data"]}


def response_of(part: dict) -> dict:
    return part.get("functionResponse") or part["function_response"]


# -- the model table ---------------------------------------------------------------------


@pytest.mark.parametrize(("model", "vision"), [
    ("gemini-3.8-flash", True), ("gemini-2.5-pro", True), ("models/gemini-2.0-flash", True),
    ("gemini-1.5-flash-8b", True), ("gemini-pro-vision", True), ("gemini-flash-latest", True),
    ("gemini-pro-latest", True), ("gemini-2.5-flash-image", True), ("gemma-3-27b-it", True),
    ("gemma-4-31b-it", True), ("some-future-gemini", True),
    ("gemini-pro", False), ("gemini-1.0-pro-001", False), ("gemini-2.5-flash-preview-tts", False),
    ("gemini-embedding-001", False), ("text-embedding-004", False), ("gemma-3-1b-it", False),
    ("gemma-3n-e4b-it", False), ("gemma-2-9b-it", False), ("tunedModels/my-text-model", False),
])
def test_the_table_knows_which_gemini_models_see_images(model, vision):
    assert has_vision("gemini", model) is vision


def test_gemini_has_a_default_model_and_its_own_image_limits():
    made = get_provider("gemini", Settings(provider="gemini"))
    assert made.model == DEFAULT_MODELS["gemini"] == MODEL
    info = made.model_info(made.model)
    assert info.vision is True and info.limits == GEMINI
    assert "image/gif" not in GEMINI.formats  # Gemini takes no GIF: it is converted
    overrides = Settings(images=ImageOverrides(target_long_side=800))
    assert model_info("gemini", MODEL, overrides).limits == GEMINI.replace(target_long_side=800)


# -- what reaches Gemini -----------------------------------------------------------------


def test_a_tools_image_goes_inside_its_function_response(monkeypatch):
    with gemini_server([text("A red square and a blue bar.")]) as srv:
        complete(sample_request(MODEL), monkeypatch, srv)
    (received,) = srv.received
    assert received.path == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    assert received.headers["x-goog-api-key"] == "test-gemini-key"
    body = received.body
    assert body["systemInstruction"]["parts"] == [{"text": "You are a careful test assistant."}]
    (declaration,) = body["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "screenshot"
    assert declaration["parameters_json_schema"] == SCREENSHOT_TOOL["input_schema"]
    assert body["generationConfig"]["maxOutputTokens"] == 256
    user, model, results = body["contents"]
    assert user["role"] == "user" and user["parts"][0] == {"text": "What is on the page?"}
    image = inline(user["parts"][1])
    assert image["mime_type"] == "image/png"
    assert pixels(image["data"]).getpixel((0, 0)) == (255, 0, 0)
    assert model["role"] == "model" and model["parts"][0] == {"text": "Let me look."}
    call = model["parts"][1]
    assert call["functionCall"] == {"id": "call_1", "name": "screenshot",
                                    "args": {"url": "http://x.test"}}
    # a call whose signature silica never saw gets Gemini's documented placeholder
    assert call["thoughtSignature"] == "skip_thought_signature_validator"
    (part,) = results["parts"]
    response = response_of(part)
    assert response["name"] == "screenshot" and response["id"] == "call_1"
    assert response["response"] == {"output": "captured 5x2"}
    (nested,) = response["parts"]
    tool_image = pixels(inline(nested)["data"])
    assert tool_image.size == (5, 2) and tool_image.getpixel((0, 0)) == (0, 0, 255)
    assert base64.urlsafe_b64decode(inline(nested)["data"]) == TOOL_IMAGE.data


def test_older_models_get_the_tools_images_after_the_function_responses(monkeypatch):
    with gemini_server([text("ok")]) as srv:
        complete(sample_request(OLDER), monkeypatch, srv)
    user, model, results = srv.requests[0]["contents"]
    assert "thoughtSignature" not in model["parts"][1]  # no placeholder before Gemini 3
    response, intro, image = results["parts"]
    response = response_of(response)
    assert "parts" not in response
    assert response["response"]["output"] == \
        "captured 5x2\n[1 image(s) follow after the tool results]"
    assert intro == {"text": "Images returned by the tool calls above: image 1 is from "
                             "screenshot (call call_1)."}
    assert pixels(inline(image)["data"]).size == (5, 2)
    assert base64.urlsafe_b64decode(inline(user["parts"][1])["data"]) == USER_IMAGE.data


def test_a_failed_tool_is_sent_as_its_error(monkeypatch):
    request = sample_request(MODEL)
    result = request.messages[2].content[0]
    request.messages[2].content[0] = result.model_copy(update={
        "is_error": True, "content": [TextBlock(text="no such page")]})
    with gemini_server([text("It failed.")]) as srv:
        complete(request, monkeypatch, srv)
    (part,) = srv.requests[0]["contents"][2]["parts"]
    assert response_of(part)["response"] == {"error": "no such page"}


@pytest.mark.parametrize("model", ["gemma-3-1b-it", "tunedModels/my-text-model"])
def test_a_model_without_vision_gets_no_image(monkeypatch, model):
    with gemini_server([text("ok")]) as srv:
        complete(sample_request(model), monkeypatch, srv)
    body = srv.requests[0]
    assert not holds_image(body) and "inline" not in json.dumps(body)
    assert body["contents"][0]["parts"][1] == {"text": "[Image: 4x3, image/png]"}


def test_the_vision_setting_overrides_the_table(monkeypatch):
    with gemini_server([text("ok")]) as srv:
        srv.use(monkeypatch)
        asyncio.run(provider(Settings(provider="gemini", vision=False))
                    .complete(sample_request(MODEL)))
    assert not holds_image(srv.requests[0])


# -- what comes back ---------------------------------------------------------------------


def test_text_is_streamed_and_usage_is_reported(monkeypatch):
    pieces: list[str] = []
    with gemini_server([text("The page shows a red square.", usage=(40, 9),
                             cache=(1200, 0))]) as srv:
        reply = complete(ask("What is it?"), monkeypatch, srv, on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == "The page shows a red square."
    assert reply.text == "The page shows a red square." and reply.tool_calls == []
    assert reply.stop_reason == "end_turn"
    # Gemini counts cached tokens in the prompt, as silica's usage does
    assert (reply.input_tokens, reply.output_tokens, reply.cache_read_tokens) == (1240, 9, 1200)
    assert reply.usage.cache_write_tokens == 0


def test_a_tool_round_trip_carries_the_image_back_with_the_response(monkeypatch):
    """Gemini gives the calls no ids: silica names them, remembers their thought
    signature, and maps the results back by name and order."""
    first = ask("Compare two pages.")
    with gemini_server([text("Let me look.") + tool_call("screenshot", {"url": "a"})
                        + tool_call("screenshot", {"url": "b"}),
                        text("Both are red.")]) as srv:
        srv.use(monkeypatch)
        gemini = provider()
        reply = asyncio.run(gemini.complete(first))
        assert reply.stop_reason == "tool_use" and reply.text == "Let me look."
        assert [(c.id, c.arguments) for c in reply.tool_calls] == [
            ("gemini_call_0", {"url": "a"}), ("gemini_call_1", {"url": "b"})]
        results = [RequestToolResult(call_id=c.id, name=c.name,
                                     content=[TextBlock(text=f"page {c.arguments['url']}"),
                                              image])
                   for c, image in zip(reply.tool_calls, (USER_IMAGE, TOOL_IMAGE),
                                       strict=True)]
        second = first.model_copy(update={"messages": [
            *first.messages,
            RequestMessage(role="assistant", content=[TextBlock(text=reply.text),
                                                      *reply.tool_calls]),
            RequestMessage(role="user", content=results)]})
        answer = asyncio.run(gemini.complete(second))  # a second event loop, one client
    assert answer.text == "Both are red."
    body = srv.requests[1]
    assert body["contents"][0] == srv.requests[0]["contents"][0]
    model, tools = body["contents"][1:]
    calls = [p for p in model["parts"] if "functionCall" in p]
    assert [c["functionCall"] for c in calls] == [
        {"name": "screenshot", "args": {"url": "a"}}, {"name": "screenshot", "args": {"url": "b"}}]
    assert calls[0]["thoughtSignature"] == signature(1)  # sent back as it came
    assert "thoughtSignature" not in calls[1]
    responses = [response_of(p) for p in tools["parts"]]
    assert [(r["name"], r["response"]["output"]) for r in responses] == [
        ("screenshot", "page a"), ("screenshot", "page b")]
    assert all("id" not in r for r in responses)  # silica's own names stay silica's
    colours = [pixels(inline(r["parts"][0])["data"]).getpixel((0, 0)) for r in responses]
    assert colours == [(255, 0, 0), (0, 0, 255)]


def test_ids_gemini_gives_are_kept_and_sent_back(monkeypatch):
    with gemini_server([tool_call("screenshot", {"url": "a"}, id="fc-7")]) as srv:
        reply = complete(ask("Look."), monkeypatch, srv)
    assert [c.id for c in reply.tool_calls] == ["fc-7"]
    request = sample_request(MODEL)
    request.messages[1].content[1] = ToolCall(id="fc-7", name="screenshot", arguments={})
    request.messages[2].content[0] = request.messages[2].content[0].model_copy(
        update={"call_id": "fc-7"})
    with gemini_server([text("ok")]) as srv:
        complete(request, monkeypatch, srv)
    contents = srv.requests[0]["contents"]
    assert contents[1]["parts"][1]["functionCall"]["id"] == "fc-7"
    assert response_of(contents[2]["parts"][0])["id"] == "fc-7"


def test_consecutive_requests_share_their_prefix(monkeypatch):
    """Implicit caching needs the same system instruction, tools and history, byte for
    byte, from one request to the next."""
    with gemini_server([tool_call("screenshot", {"url": "a"}), text("Done.")]) as srv:
        srv.use(monkeypatch)
        gemini = provider()
        first = sample_request(MODEL)
        reply = asyncio.run(gemini.complete(first))
        later = first.model_copy(update={"messages": [
            *first.messages,
            RequestMessage(role="assistant", content=reply.tool_calls),
            RequestMessage(role="user", content=[RequestToolResult(
                call_id=reply.tool_calls[0].id, name="screenshot",
                content=[TextBlock(text="again"), TOOL_IMAGE])])]})
        asyncio.run(gemini.complete(later))
    one, two = srv.requests
    for key in ("systemInstruction", "tools", "generationConfig"):
        assert one[key] == two[key]
    assert two["contents"][:3] == one["contents"]
    assert srv.received[1].raw.startswith(srv.received[0].raw[:srv.received[0].raw.index(
        b'"systemInstruction"') - len(b'], ')])


def test_a_reply_cut_off_by_max_tokens_keeps_its_text(monkeypatch):
    with gemini_server([text("The first half", stop_reason="MAX_TOKENS")]) as srv:
        reply = complete(ask("Write a lot."), monkeypatch, srv)
    assert reply.text == "The first half" and reply.stop_reason == "max_tokens"


def test_the_sdk_and_the_server_also_speak_generate_content(monkeypatch):
    """The non-streamed method, through the same client silica uses."""
    with gemini_server([text("Whole answer.") + tool_call("screenshot", {"url": "a"})]) as srv:
        srv.use(monkeypatch)
        client = provider().client()
        answer = asyncio.run(client.aio.models.generate_content(model=MODEL, contents="Hi"))
    assert srv.received[0].path == f"/v1beta/models/{MODEL}:generateContent"
    assert answer.text == "Whole answer."
    assert [c.name for c in answer.function_calls] == ["screenshot"]
    assert answer.usage_metadata.prompt_token_count == 12


# -- safety, and answers with nothing in them --------------------------------------------


def test_a_prompt_blocked_for_safety_says_so(monkeypatch):
    message, srv = fails([prompt_blocked("SAFETY", "flagged by the filters")], monkeypatch)
    assert "blocked the prompt" in message and "SAFETY" in message
    assert "flagged by the filters" in message and "start a new session" in message
    assert len(srv.requests) == 1


def test_an_answer_stopped_for_safety_says_so(monkeypatch):
    message, _ = fails([text("", stop_reason="SAFETY")], monkeypatch)
    assert "safety filters blocked the answer" in message and "SAFETY" in message


def test_an_answer_stopped_after_it_began_says_what_was_shown(monkeypatch):
    shown: list[str] = []
    with gemini_server([text("Here is the", stop_reason="RECITATION")]) as srv, \
            pytest.raises(ProviderError) as info:
        complete(ask("Quote it."), monkeypatch, srv, on_text=shown.append)
    assert "".join(shown) == "Here is the"
    assert "after part of it had been shown" in str(info.value)
    assert "RECITATION" in str(info.value)


@pytest.mark.parametrize(("script", "words"), [
    (no_candidates(), "no candidates"),
    (text(""), "no text and no tool call"),
    (text("", stop_reason="MAX_TOKENS"), "max_tokens"),
    (text("", stop_reason="MALFORMED_FUNCTION_CALL"), "could not parse"),
])
def test_an_empty_answer_is_an_error_that_says_why(monkeypatch, script, words):
    message, srv = fails([script], monkeypatch)
    assert words in message and MODEL in message
    assert len(srv.requests) == 1  # never retried


# -- Gemini's 400s that name an image, and other failures --------------------------------


@pytest.mark.parametrize(("said", "words"), [
    ("Image input modality is not enabled for models/gemma-3-4b-it", "takes no images"),
    ("Request payload size exceeds the limit: 20971520 bytes.", "too large"),
    ("The request contains too many images: 3001 images were provided, but the model "
     "supports a maximum of 3000 images.", "too many images"),
    ("Provided image is not valid.", "could not read an image"),
    ("Unable to process input image. Please retry or report in "
     "https://developers.generativeai.google/guide/troubleshooting", "could not read an image"),
    ("Invalid value at 'contents[0].parts[1].inline_data.data' (TYPE_BYTES), Base64 decoding "
     "failed for \"xyz\"", "could not read an image"),
])
def test_each_image_refusal_gets_its_own_advice(monkeypatch, said, words):
    # vision = true: silica does not go on to find out whether the model takes images
    message, srv = fails([error(400, said)], monkeypatch, sample_request(MODEL),
                         settings=Settings(provider="gemini", vision=True))
    assert words in message and said.rstrip(".") in message and "HTTP 400" in message
    assert len(srv.requests) == 1  # never retried
    advice = {"takes no images": "vision = false", "too large": "max_base64_bytes",
              "too many images": "`max_images_per_request` to 3000 or fewer",
              "could not read an image": "start a new session"}
    assert advice[words] in message


def test_a_model_that_takes_no_images_is_sent_stand_ins(monkeypatch, home):
    """Gemini's words for a model without vision: the request goes again, once, with text
    in place of each image, and the model is remembered as taking none."""
    model = "gemma-3-4b-it"
    refusal = error(400, f"Image input modality is not enabled for models/{model}")
    with gemini_server([refusal, text("A red page.")]) as srv:
        srv.use(monkeypatch)
        gemini = provider()
        assert gemini.model_info(model).vision is True  # the table's guess
        reply = asyncio.run(gemini.complete(sample_request(model)))
    assert reply.text == "A red page." and len(srv.requests) == 2
    assert holds_image(srv.requests[0]) and not holds_image(srv.requests[1])
    assert srv.requests[1]["contents"][0]["parts"][1]["text"].startswith("[Image: ")
    assert gemini.model_info(model).vision is False
    assert model in (home / "cache" / "models.json").read_text()


def test_a_bad_key_names_the_variable(monkeypatch):
    message, _ = fails([error(400, "API key not valid. Please pass a valid API key.")],
                       monkeypatch)
    assert "GEMINI_API_KEY" in message and "API key not valid" in message


def test_the_sdks_other_key_variable_works_too(monkeypatch):
    with gemini_server([text("ok")]) as srv:
        monkeypatch.setenv("GEMINI_BASE_URL", srv.base_url)
        monkeypatch.setenv("GOOGLE_API_KEY", "google-key")
        assert asyncio.run(provider().complete(ask("Hi"))).text == "ok"
    assert srv.received[0].headers["x-goog-api-key"] == "google-key"


def test_a_missing_key_names_the_variable(monkeypatch):
    with pytest.raises(ProviderError, match="GEMINI_API_KEY"):
        asyncio.run(provider().complete(ask("Hi")))


def test_server_errors_are_retried_then_reported(monkeypatch):
    message, srv = fails([error(500, "internal trouble")] * 3, monkeypatch)
    assert len(srv.requests) == 3  # the first try and 2 retries
    assert "HTTP 500" in message and "internal trouble" in message and "3 attempts" in message


def test_a_server_error_then_an_answer(monkeypatch):
    with gemini_server([error(503, "The model is overloaded."), error(429, "slow down"),
                        text("made it")]) as srv:
        reply = complete(ask("Hi"), monkeypatch, srv)
    assert reply.text == "made it" and len(srv.requests) == 3


def test_retries_are_configurable(monkeypatch):
    _, srv = fails([error(503, "busy")] * 3, monkeypatch, max_retries=0)
    assert len(srv.requests) == 1


@pytest.mark.parametrize(("script", "words"), [
    ([error(404, f"models/{MODEL} is not found for API version v1beta")], "HTTP 404"),
    ([error(503, "The model is overloaded.", mid_stream=True)], "broke off its reply"),
    ([drop()], "dropped"),
    ([garbage()], "cannot read"),
])
def test_other_failures_are_one_clear_error(monkeypatch, script, words):
    message, srv = fails(script, monkeypatch)
    assert words in message
    assert len(srv.requests) == 1


def test_a_reply_is_read_within_its_bounds(monkeypatch):
    message, _ = fails([raw(b"data: {\"candidates\": [" + b" " * 4096)], monkeypatch,
                       max_line=1024)
    assert "longer than 1024 bytes" in message and "max_line" in message
    message, srv = fails([trickle(text("one two three four five six"), 0.4)], monkeypatch,
                         deadline=0.5)
    assert "within 0.5 s" in message and len(srv.requests) == 1


def test_nothing_listening_names_the_address(monkeypatch, free_port):
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    monkeypatch.setenv("GEMINI_BASE_URL", f"http://127.0.0.1:{free_port}/v1beta/")
    with pytest.raises(ProviderError) as info:
        asyncio.run(provider(max_retries=0).complete(ask("Hi")))
    assert "cannot reach" in str(info.value) and f"127.0.0.1:{free_port}" in str(info.value)
    assert "GEMINI_BASE_URL" in str(info.value)


# -- one client, imported late -----------------------------------------------------------


def test_one_client_per_process(monkeypatch):
    with gemini_server() as srv:
        srv.use(monkeypatch)
        assert provider().client() is provider().client()


def test_the_sdk_is_imported_only_for_a_request():
    code = ("import sys\nfrom silica.config import Settings\n"
            "from silica.providers.registry import get_provider\n"
            "p = get_provider('gemini', Settings(provider='gemini'))\n"
            "p.model_info(p.model)\n"
            "print(sorted(m for m in sys.modules if m.startswith('google')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- the command line --------------------------------------------------------------------


@pytest.fixture
def picture_tool(user_tools):
    """A tool that prints a 1920x1080 PNG as base64 JSON."""
    out = io.BytesIO()
    Image.new("RGB", (1920, 1080), (200, 60, 60)).save(out, format="PNG")
    data = base64.b64encode(out.getvalue()).decode()
    body = textwrap.dedent(f"""
        import json
        print(json.dumps({{"caption": "a red page", "media_type": "image/png",
                          "base64": {data!r}}}))
    """)
    script_tool(user_tools, "picture.py", simple_spec("picture", label="string"), body=body)


def test_ask_with_a_tool_that_returns_an_image(picture_tool):
    with gemini_server([tool_call("picture", {"label": "cli"}), text("It is red.")]) as srv:
        env = {**os.environ, **srv.env}
        done = subprocess.run([sys.executable, "-m", "silica", "ask", "--provider", "gemini",
                               "what colour is the page?"], capture_output=True, text=True,
                              env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "It is red."
    assert "→ picture" in done.stderr
    first, second = srv.requests
    assert srv.received[0].path == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    assert "picture" in [d["name"] for d in first["tools"][0]["functionDeclarations"]]
    model, results = second["contents"][-2:]
    assert model["parts"][0]["functionCall"] == {"name": "picture", "args": {"label": "cli"}}
    assert model["parts"][0]["thoughtSignature"] == signature(1)
    (part,) = results["parts"]
    response = response_of(part)
    assert response["name"] == "picture" and "a red page" in response["response"]["output"]
    image = pixels(inline(response["parts"][0])["data"])
    assert image.format == "PNG" and max(image.size) <= 1536
    assert image.convert("RGB").getpixel((10, 10)) == (200, 60, 60)


@pytest.mark.parametrize("model", [MODEL, OLDER])
def test_each_image_is_marked_where_it_was_among_its_tool_s_text(model):
    from silica.providers.gemini import to_gemini

    def words_image_words(call: str) -> RequestToolResult:
        return RequestToolResult(call_id=call, name="shot", content=[
            TextBlock(text=f"{call} before"), TOOL_IMAGE, TextBlock(text=f"{call} after")])

    request = Request(model=model, messages=[
        RequestMessage(role="user", content=[TextBlock(text="look")]),
        RequestMessage(role="assistant", content=[ToolCall(id="a", name="shot", arguments={}),
                                                  ToolCall(id="b", name="shot", arguments={})]),
        RequestMessage(role="user", content=[words_image_words("a"), words_image_words("b")])])
    contents, _ = to_gemini(request)
    first, second = [response_of(p)["response"]["output"].splitlines()
                     for p in contents[2]["parts"][:2]]
    # nested (Gemini 3): each response holds its own image, 1; else they follow, numbered on
    second_number = 1 if model == MODEL else 2
    assert first[:3] == ["a before", "[image 1]", "a after"]
    assert second[:3] == ["b before", f"[image {second_number}]", "b after"]
