"""Models that take no images are found out, not guessed: each provider's refusal of images
is retried once with text stand-ins and remembered in ``$SILICA_HOME/cache/models.json``;
the other image refusals are clear errors, never retried. Real SDKs against local servers
that speak each wire protocol, real files, real ``silica ask`` processes."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec
from hypothesis import given, settings
from hypothesis import strategies as st
from wire import anthropic_server, error, ollama_server, openai_server, raw, text, tool_call
from wire.openai_wire import render as openai_render
from wire.responses_wire import responses_server
from wire.samples import png, png_block
from wire.server import Wire, WireServer, serve

from silica.blocks import ImageBlock, TextBlock, ToolCall
from silica.config import Settings
from silica.hookspecs import hookimpl
from silica.plugins import build_plugin_manager
from silica.providers.base import (
    ProviderError,
    Reply,
    Request,
    RequestMessage,
    RequestToolResult,
)
from silica.providers.errors import IMAGE_PROBLEMS, image_refusal
from silica.providers.models import has_vision, image_words, without_images
from silica.providers.registry import get_provider
from silica.providers.vision import ModelCache, cache_path

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

CHART = png_block(640, 400, (10, 120, 200))
SHOT = png_block(32, 24, (200, 200, 0)).model_copy(update={"alt": "shot.png"})
CHART_STAND_IN = "[Image: chart of 5 values, 640x400, image/png]"
SHOT_STAND_IN = "[Image: shot.png, 32x24, image/png]"

# The words each API uses for "this model takes no images".
COMPATIBLE_NO_IMAGES = ("Failed to deserialize the JSON body into the target type: messages[3]: "
                        "unknown variant `image_url`, expected `text` at line 1 column 4242")
LOCAL_NO_IMAGES = "house/text-model-8b is not a multimodal model None"
OLLAMA_NO_IMAGES = ("Failed to create new sequence: failed to process inputs: this model is "
                    "missing data required for image input")


@pytest.fixture(autouse=True)
def no_real_credentials(monkeypatch, tmp_path):
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                "ANTHROPIC_PROFILE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID",
                "OPENAI_PROJECT_ID", "OLLAMA_HOST", "SILICA_VISION", "SILICA_PROVIDER",
                "SILICA_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


@contextmanager
def local_server(script):
    """An OpenAI-compatible server that words its errors as some local servers do: the
    message at the top level (``{"object": "error", "message": ...}``)."""

    def render(reply, body, n):
        if reply.status != 200:
            said = {"object": "error", "message": reply.message, "type": "BadRequestError",
                    "param": None, "code": reply.status}
            return Wire(reply.status, "application/json", [json.dumps(said).encode()])
        return openai_render(reply, body, n)

    with serve(WireServer(render, script, paths=("/v1/chat/completions",),
                          stream_type="text/event-stream")) as srv:
        srv.base_url = srv.root + "/v1"
        srv.env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "test-local-key"}
        yield srv


SERVERS = {"anthropic": anthropic_server, "openai": openai_server, "local": local_server,
           "ollama": ollama_server, "responses": responses_server}
PROVIDER = {"anthropic": "anthropic", "openai": "openai", "local": "openai", "ollama": "ollama",
            "responses": "openai-responses"}
# models the table takes for ones that see images, so images are sent
MODELS = {"anthropic": "claude-sonnet-5-5", "openai": "house-model-7b",
          "local": "house/text-model-8b", "ollama": "llava:7b", "responses": "house-model-7b"}


def chart_request(model: str) -> Request:
    """A person's message with a screenshot, a tool call, and its result: the tool's JSON
    (with a caption) and a chart."""
    return Request(model=model, max_tokens=256, messages=[
        RequestMessage(role="user", content=[TextBlock(text="plot 3,1,4,1,5 and look"), SHOT]),
        RequestMessage(role="assistant", content=[
            ToolCall(id="call_1", name="plot", arguments={"values": [3, 1, 4, 1, 5]})]),
        RequestMessage(role="user", content=[RequestToolResult(
            call_id="call_1", name="plot",
            content=[TextBlock(text='{\n  "caption": "chart of 5 values",\n  "bars": 5\n}'),
                     CHART])]),
    ])


def carries_image(body) -> bool:
    """Whether a request body holds an image in any provider's form."""
    dumped = json.dumps(body)
    return any(image.base64 in dumped for image in (CHART, SHOT)) or "data:image" in dumped \
        or '"type": "image"' in dumped or '"images"' in dumped


def provider_for(kind: str, settings: Settings | None = None, notices: list | None = None):
    name = PROVIDER[kind]
    provider = get_provider(name, settings or Settings(provider=name),
                            notice=None if notices is None else notices.append)
    if kind == "ollama":
        provider.retry_delay = 0.001
    return provider


def complete(provider, request, on_text=None) -> Reply:
    return asyncio.run(provider.complete(request, on_text))


def cached(home: Path) -> dict:
    return json.loads(cache_path(home).read_text())["text_only"]


# -- stand-ins --------------------------------------------------------------------------


def test_stand_ins_carry_the_tools_words_and_the_size():
    stripped = without_images(chart_request("m"))
    assert stripped.messages[0].content[1] == TextBlock(text=SHOT_STAND_IN)
    result = stripped.messages[2].content[0]
    assert result.content[1] == TextBlock(text=CHART_STAND_IN)
    assert result.content[0].text.startswith('{\n  "caption"')  # the tool's text kept


@pytest.mark.parametrize(("said", "words"), [
    ('{"caption": "chart of 5 values"}', ["chart of 5 values"]),
    ('{"alt": "a red \\"frame\\""}', ['a red "frame"']),
    ('{"images": [{"title": "before"}, {"description": "after"}]}', ["before", "after"]),
    ("Saved the plot.\nmore detail", ["Saved the plot."]),
    ('{\n  "bars": 5\n}', []),  # JSON without words about the image
    ("[image dropped: too large]\n", []),
    ("", []),
])
def test_the_words_about_an_image_are_the_tools_own(said, words):
    assert image_words(said) == words


def test_each_image_of_a_result_gets_its_own_words_and_a_silent_tool_its_name():
    blocks = [TextBlock(text='{"images": [{"caption": "left"}, {"caption": "right"}]}'),
              png_block(4, 3), png_block(5, 2)]
    request = Request(model="m", messages=[
        RequestMessage(role="user", content=[
            RequestToolResult(call_id="a", name="pair", content=blocks),
            RequestToolResult(call_id="b", name="camera", content=[png_block(8, 6)])])])
    pair, camera = without_images(request).messages[0].content
    assert [b.text for b in pair.content[1:]] == ["[Image: left, 4x3, image/png]",
                                                  "[Image: right, 5x2, image/png]"]
    assert camera.content == [TextBlock(text="[Image: camera, 8x6, image/png]")]


def test_long_words_are_cut_and_no_words_leave_the_size():
    long = TextBlock(text="x" * 500)
    request = Request(model="m", messages=[RequestMessage(role="user", content=[
        RequestToolResult(call_id="a", name="", content=[long, png_block(4, 3)]),
        png_block(2, 2)])])
    result, bare = without_images(request).messages[0].content
    assert result.content[1].text == f"[Image: {'x' * 99}…, 4x3, image/png]"
    assert bare.text == "[Image: 2x2, image/png]"


# -- the table --------------------------------------------------------------------------


@pytest.mark.parametrize(("provider", "model", "vision"), [
    ("openai", "deepseek-chat", False),
    ("openai", "deepseek-reasoner", False),
    ("openai", "deepseek-ai/DeepSeek-V3", False),
    ("openai", "deepseek-vl2", True),
    ("openai", "deepseek-ai/deepseek-vl2-small", True),
    ("openai-responses", "deepseek-chat", False),
    ("anthropic", "deepseek-chat", False),  # an Anthropic-compatible address
    ("openai", "Qwen/Qwen2.5-VL-7B-Instruct", True),
    ("openai", "qwen-vl-max", True),
    ("openai", "qwen3-vl-235b-a22b", True),
    ("openai", "pixtral-12b-2409", True),
    ("openai", "mistralai/Pixtral-Large-Instruct-2411", True),
    ("openai", "meta-llama/Llama-4-Scout-17B-16E-Instruct", True),
    ("openai", "llama-4-maverick", True),
    ("openai", "google/gemma-3-27b-it", True),
    ("openai", "gemma-3-1b-it", False),
    ("openai", "gpt-4.1", True),
    ("openai", "gpt-3.5-turbo", False),
    ("ollama", "pixtral:12b", True),
    ("ollama", "qwen2.5vl:7b", True),
    ("ollama", "gemma3:4b", True),
    ("ollama", "llama4:scout", True),
])
def test_the_table_knows_the_open_models(provider, model, vision):
    assert has_vision(provider, model) is vision


# -- a refusal of images: one retry with stand-ins, remembered -------------------------


def test_a_compatible_servers_refusal_is_retried_once_and_remembered(monkeypatch, home):
    notices: list[str] = []
    with openai_server([error(400, COMPATIBLE_NO_IMAGES), text("Five bars."),
                        text("Still five.")]) as srv:
        srv.use(monkeypatch)
        provider = provider_for("openai", notices=notices)
        assert provider.model_info("house-model-7b").vision is True  # unknown: assumed
        reply = complete(provider, chart_request("house-model-7b"))
        assert reply.text == "Five bars."
        assert len(srv.requests) == 2  # the refused request and one retry
        first, retry = srv.requests
        assert carries_image(first) and not carries_image(retry)
        sent = json.dumps(retry)
        assert CHART_STAND_IN in sent and SHOT_STAND_IN in sent
        # remembered, and told once
        assert list(cached(home)) == ["openai"]
        entry = cached(home)["openai"][srv.base_url]
        assert list(entry) == ["house-model-7b"] and entry["house-model-7b"]["recorded"]
        assert len(notices) == 1
        assert "'house-model-7b'" in notices[0] and "takes no images" in notices[0]
        assert str(cache_path(home)) in notices[0] and "vision = true" in notices[0]
        # the next request of this process sends no image, and nothing is said again
        assert provider.model_info("house-model-7b").vision is False
        assert complete(provider, chart_request("house-model-7b")).text == "Still five."
        assert len(srv.requests) == 3 and not carries_image(srv.requests[2])
        assert len(notices) == 1


@pytest.mark.parametrize(("kind", "status", "wording", "refused"), [
    ("anthropic", 400, "this model does not support image input", 1),
    ("anthropic", 400, "claude-sonnet-5-5 does not support image input.", 1),
    ("openai", 400, COMPATIBLE_NO_IMAGES, 1),
    ("openai", 400, "Invalid content type. image_url is only supported by certain models.", 1),
    ("local", 400, LOCAL_NO_IMAGES, 1),
    ("ollama", 400, '"llava:7b" does not support vision', 1),
    ("ollama", 500, OLLAMA_NO_IMAGES, 3),  # a server error: retried by the provider first
    ("responses", 400, "The model `house-model-7b` does not support image inputs.", 1),
], ids=["anthropic", "anthropic-own", "compatible", "openai", "local", "ollama-400",
        "ollama-500", "responses"])
def test_each_providers_refusal_of_images_is_retried_once(monkeypatch, home, kind, status,
                                                           wording, refused):
    notices: list[str] = []
    with SERVERS[kind]([error(status, wording)] * refused + [text("Five bars.")]) as srv:
        srv.use(monkeypatch)
        provider = provider_for(kind, notices=notices)
        reply = complete(provider, chart_request(MODELS[kind]))
    assert reply.text == "Five bars."
    assert len(srv.requests) == refused + 1
    assert all(carries_image(body) for body in srv.requests[:refused])
    retry = json.dumps(srv.requests[-1])
    assert not carries_image(srv.requests[-1])
    assert CHART_STAND_IN in retry and SHOT_STAND_IN in retry
    url = srv.base_url.rstrip("/")
    assert MODELS[kind] in cached(home)[PROVIDER[kind]][url]
    assert len(notices) == 1 and "takes no images" in notices[0]


def test_a_refusal_inside_an_ollama_stream_is_retried_too(monkeypatch, home):
    line = json.dumps({"error": OLLAMA_NO_IMAGES}).encode() + b"\n"
    with ollama_server([raw(line), text("Five bars.")]) as srv:
        srv.use(monkeypatch)
        reply = complete(provider_for("ollama", notices=[]), chart_request("llava:7b"))
    assert reply.text == "Five bars." and len(srv.requests) == 2
    assert carries_image(srv.requests[0]) and not carries_image(srv.requests[1])
    assert "llava:7b" in cached(home)["ollama"][srv.base_url]


def test_the_retry_is_made_once_whatever_it_meets(monkeypatch, home):
    with openai_server([error(400, COMPATIBLE_NO_IMAGES),
                        error(400, "Unsupported parameter: 'max_tokens'.")]) as srv:
        srv.use(monkeypatch)
        with pytest.raises(ProviderError, match="Unsupported parameter") as info:
            complete(provider_for("openai", notices=[]), chart_request("house-model-7b"))
    assert len(srv.requests) == 2
    assert getattr(info.value, "image_problem", None) is None
    assert "house-model-7b" in cached(home)["openai"][srv.base_url]  # remembered anyway


def test_a_refusal_after_the_reply_began_is_not_retried(monkeypatch, home):
    pieces: list[str] = []
    with ollama_server([error(500, OLLAMA_NO_IMAGES, mid_stream=True)]) as srv:
        srv.use(monkeypatch)
        with pytest.raises(ProviderError, match="takes no images") as info:
            complete(provider_for("ollama", notices=[]), chart_request("llava:7b"),
                     pieces.append)
    assert pieces == ["Half "] and len(srv.requests) == 1  # no answer given twice
    assert info.value.image_problem == "no_images"
    assert not cache_path(home).exists()


def test_a_request_without_images_is_not_retried(monkeypatch, home):
    request = Request(model="house-model-7b",
                      messages=[RequestMessage(role="user", content=[TextBlock(text="hi")])])
    with openai_server([error(400, COMPATIBLE_NO_IMAGES)]) as srv:
        srv.use(monkeypatch)
        with pytest.raises(ProviderError, match="takes no images"):
            complete(provider_for("openai", notices=[]), request)
    assert len(srv.requests) == 1 and not cache_path(home).exists()


def test_a_cache_that_cannot_be_written_still_keeps_this_process_from_sending_images(
        monkeypatch, home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "cache").write_text("a file where the cache folder should be")
    notices: list[str] = []
    with openai_server([error(400, COMPATIBLE_NO_IMAGES), text("Five bars."),
                        text("Again.")]) as srv:
        srv.use(monkeypatch)
        provider = provider_for("openai", notices=notices)
        assert complete(provider, chart_request("house-model-7b")).text == "Five bars."
        assert complete(provider, chart_request("house-model-7b")).text == "Again."
    assert [carries_image(b) for b in srv.requests] == [True, False, False]
    assert len(notices) == 1 and "takes no images" in notices[0]


def test_the_cannot_write_warning_says_why(monkeypatch, home, caplog):
    home.mkdir(parents=True, exist_ok=True)
    (home / "cache").write_text("not a folder")
    with openai_server([error(400, COMPATIBLE_NO_IMAGES), text("ok")]) as srv, \
            caplog.at_level(logging.WARNING, logger="silica.providers"):
        srv.use(monkeypatch)
        complete(provider_for("openai"), chart_request("house-model-7b"))
    said = [r.getMessage() for r in caplog.records if r.name == "silica.providers"]
    assert any("cannot write" in m and "models.json" in m for m in said)
    assert any("takes no images" in m for m in said)  # the default notice: a warning


# -- config wins ------------------------------------------------------------------------


def remember(home: Path, provider: str, url: str, model: str) -> None:
    path = cache_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "text_only": {provider: {url: {
        model: {"recorded": "2025-01-01T00:00:00Z"}}}}}))


def test_vision_true_in_config_wins_over_the_cache(monkeypatch, home):
    with openai_server([text("I see it."), text("Text only.")]) as srv:
        srv.use(monkeypatch)
        remember(home, "openai", srv.base_url, "house-model-7b")
        forced = provider_for("openai", Settings(provider="openai", vision=True))
        assert forced.model_info("house-model-7b").vision is True
        assert complete(forced, chart_request("house-model-7b")).text == "I see it."
        cached_only = provider_for("openai")
        assert cached_only.model_info("house-model-7b").vision is False
        assert complete(cached_only, chart_request("house-model-7b")).text == "Text only."
    assert [carries_image(b) for b in srv.requests] == [True, False]


def test_a_refusal_with_vision_true_is_a_clear_error_not_a_retry(monkeypatch, home):
    with openai_server([error(400, COMPATIBLE_NO_IMAGES)]) as srv:
        srv.use(monkeypatch)
        with pytest.raises(ProviderError) as info:
            complete(provider_for("openai", Settings(provider="openai", vision=True)),
                     chart_request("house-model-7b"))
    assert "takes no images" in str(info.value) and "vision = false" in str(info.value)
    assert len(srv.requests) == 1 and not cache_path(home).exists()


def test_the_cache_is_keyed_by_provider_address_and_model(monkeypatch, home):
    with openai_server([]) as srv:
        srv.use(monkeypatch)
        remember(home, "openai", srv.base_url, "house-model-7b")
        provider = provider_for("openai")
        assert provider.model_info("house-model-7b").vision is False
        assert provider.model_info("house-model-13b").vision is True  # another model
        responses = get_provider("openai-responses", Settings())  # another provider
        assert responses.model_info("house-model-7b").vision is True
        monkeypatch.setenv("OPENAI_BASE_URL", srv.root + "/other/v1")  # another address
        assert provider.model_info("house-model-7b").vision is True


# -- the other image refusals: clear errors, never retried ------------------------------

OTHER_REFUSALS = [
    ("anthropic", "messages.2.content.0.content.1.image.source.base64: image exceeds 5 MB "
     "maximum: 5316852 bytes > 5242880 bytes", "too large", "max_base64_bytes"),
    ("anthropic", "messages.2.content.0.content.1.image.source.base64.data: At least one of "
     "the image dimensions exceed max allowed size for many-image requests: 2000 pixels",
     "too large", "target_long_side"),
    ("anthropic", "too many images and documents: 120 + 0 > 100", "too many images",
     "`max_images_per_request` to 100 or fewer"),
    ("anthropic", "messages.0.content.1.image.source.base64.data: The image was specified "
     "using the image/png media type, but the image appears to be a image/jpeg image",
     "could not read an image", "start a new session"),
    ("openai", "Invalid 'messages[4].content[1].image_url.url': string too long. Expected a "
     "string with maximum length 20971520, but got a string with length 28000000 instead.",
     "too large", "max_base64_bytes"),
    ("openai", "Too many images in request. Max is 10.", "too many images",
     "`max_images_per_request` to 10 or fewer"),
    ("openai", "You uploaded an unsupported image. Please make sure your image is below 20 MB "
     "in size and is of one the following formats: ['png', 'jpeg', 'gif', 'webp'].",
     "could not read an image", "PNG or JPEG"),
    ("local", "The decoder prompt contains a(n) image item with length 4200, which exceeds "
     "the pre-allocated encoder cache size 3721. Please reduce the input size or increase "
     "the encoder cache size by setting --limit-mm-per-prompt at startup.", "too large",
     "target_long_side"),
    ("local", "At most 1 image(s) may be provided in one request.", "too many images",
     "`max_images_per_request` to 1 or fewer"),
    ("local", "You set image=2 (or defaulted to 1) in `--limit-mm-per-prompt`, but passed 3 "
     "image items in the same prompt.", "too many images", "max_images_per_request"),
    ("local", "cannot identify image file <_io.BytesIO object at 0x7f3a2c1b5e90>",
     "could not read an image", "start a new session"),
    ("ollama", "this model only supports one image while more than one image requested",
     "too many images", "max_images_per_request"),
    ("ollama", "illegal base64 data at input byte 4", "could not read an image",
     "start a new session"),
    ("ollama", "image: unknown format", "could not read an image", "PNG or JPEG"),
]


@pytest.mark.parametrize(("kind", "wording", "what", "fix"), OTHER_REFUSALS)
def test_the_other_image_refusals_are_clear_errors_never_retried(monkeypatch, home, kind,
                                                                  wording, what, fix):
    with SERVERS[kind]([error(400, wording), text("never sent")]) as srv:
        srv.use(monkeypatch)
        with pytest.raises(ProviderError) as info:
            complete(provider_for(kind, notices=[]), chart_request(MODELS[kind]))
    message = str(info.value)
    assert what in message and fix in message and "HTTP 400" in message
    assert repr(MODELS[kind]) in message and wording[:40] in message
    assert len(srv.requests) == 1  # not retried, with or without images
    assert not cache_path(home).exists()


def test_an_image_too_large_for_a_proxy_says_what_to_change(monkeypatch, home):
    with local_server([error(413, "Request Entity Too Large")]) as srv:
        srv.use(monkeypatch)
        with pytest.raises(ProviderError) as info:
            complete(provider_for("local", notices=[]), chart_request(MODELS["local"]))
    assert "HTTP 413" in str(info.value) and "[images]" in str(info.value)
    assert len(srv.requests) == 1


# -- a damaged cache file ---------------------------------------------------------------

DAMAGED = {
    "not JSON": b"{this is not json",
    "not UTF-8": b"\xff\xfe\x00garbage",
    "100k deep": b"[" * 100_000 + b"]" * 100_000,
    "deep inside": b'{"version": 1, "text_only": {"openai": ' + b"[" * 100_000 + b"]" * 100_000
                   + b"}}",
    "a list": b"[1, 2, 3]",
    "no version": b'{"text_only": {}}',
    "text_only a list": b'{"version": 1, "text_only": ["openai"]}',
    "an entry of another shape": b'{"version": 1, "text_only": {"openai": {"u": {"m": 5}}}}',
    "too large": b'{"version": 1, "text_only": {}, "pad": "' + b"x" * (2 * 1024 * 1024) + b'"}',
}


@pytest.mark.parametrize("damage", list(DAMAGED), ids=list(DAMAGED))
def test_a_damaged_cache_is_ignored_with_one_warning(monkeypatch, home, caplog, damage):
    path = cache_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(DAMAGED[damage])
    with openai_server([error(400, COMPATIBLE_NO_IMAGES), text("Five bars.")]) as srv, \
            caplog.at_level(logging.WARNING, logger="silica.providers"):
        srv.use(monkeypatch)
        provider = provider_for("openai", notices=[])
        assert provider.model_info("house-model-7b").vision is True
        assert provider.model_info("house-model-7b").vision is True
        warnings = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
        assert len(warnings) == 1 and str(path) in warnings[0]  # once per version of the file
        # the next model found replaces the file with a good one
        assert complete(provider, chart_request("house-model-7b")).text == "Five bars."
    assert list(cached(home)["openai"][srv.base_url]) == ["house-model-7b"]
    assert provider.model_info("house-model-7b").vision is False


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.binary(max_size=300), JSON.map(lambda v: json.dumps(v).encode()),
                 JSON.map(lambda v: json.dumps({"version": 1, "text_only": v}).encode())))
def test_any_cache_file_is_read_without_raising(data):
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "models.json"
        path.write_bytes(data)
        said: list[str] = []
        cache = ModelCache(path, said.append)
        assert cache.text_only("openai", "http://x/v1", "m") in (True, False)
        assert cache.text_only("openai", "http://x/v1", "m") in (True, False)
        assert len(said) <= 1  # a damaged file is warned about once
        cache.record("openai", "http://x/v1", "m")  # and replaced by a good one
        assert ModelCache(path, said.append).text_only("openai", "http://x/v1", "m")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3000))
def test_any_text_gives_words_and_a_kind_without_raising(said):
    words = image_words(said)
    assert all(isinstance(w, str) and w.strip() for w in words)
    assert image_refusal(said) in (None, *IMAGE_PROBLEMS)


# -- every caller gets it: plugins, and the command line -------------------------------


class RefusingProvider:
    """A plugin's provider whose API refuses images (``ProviderError.image_problem``)."""

    name = "refusing"
    base_url = "http://refusing.test/v1"

    def __init__(self, settings):
        self.settings = settings
        self.seen: list[Request] = []

    def model_info(self, model):
        from silica.providers.models import model_info
        return model_info("openai", model, self.settings)

    async def complete(self, request, on_text=None):
        self.seen.append(request)
        if any(isinstance(b, ImageBlock) for m in request.messages for r in m.content
               for b in getattr(r, "content", [r])):
            problem = ProviderError("refusing takes no images")
            problem.image_problem = "no_images"
            raise problem
        return Reply(text="words only")


class Slotted:
    __slots__ = ("settings",)
    name = "slotted"

    def __init__(self, settings):
        self.settings = settings

    def model_info(self, model):
        from silica.providers.models import model_info
        return model_info("openai", model, self.settings)

    async def complete(self, request, on_text=None):
        return Reply(text="slotted")


class Plugin:
    @hookimpl
    def silica_providers(self, register):
        register("refusing", RefusingProvider)
        register("slotted", Slotted)


def test_a_plugins_provider_gets_detection_too(home):
    pm = build_plugin_manager()
    pm.register(Plugin())
    provider = get_provider("refusing", Settings(), pm=pm, notice=[].append)
    assert isinstance(provider, RefusingProvider)  # the provider itself, not a stand-in
    assert complete(provider, chart_request("r-1")).text == "words only"
    assert len(provider.seen) == 2
    assert "r-1" in cached(home)["refusing"]["http://refusing.test/v1"]
    assert provider.model_info("r-1").vision is False
    slotted = get_provider("slotted", Settings(), pm=pm)
    assert slotted.name == "slotted" and slotted.settings is not None
    assert complete(slotted, chart_request("s")).text == "slotted"


@pytest.fixture
def chart_tool(user_tools):
    """A tool that prints a 640x400 chart as base64 JSON with a caption."""
    data = base64.b64encode(png(640, 400, (10, 120, 200))).decode()
    body = textwrap.dedent(f"""
        import json
        print(json.dumps({{"caption": "chart of 5 values", "media_type": "image/png",
                           "base64": {data!r}}}))
    """)
    script_tool(user_tools, "chart.py", simple_spec("chart"), body=body)


def silica(*args, env):
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_ask_finds_a_text_only_model_once_and_later_sessions_send_it_no_image(chart_tool,
                                                                               home):
    script = [tool_call("chart", {}), error(400, COMPATIBLE_NO_IMAGES), text("Five bars."),
              tool_call("chart", {}), text("Still five."),
              tool_call("chart", {}), text("I see it.")]
    with openai_server(script) as srv:
        env = {**os.environ, **srv.env}
        ask = ("ask", "--provider", "openai", "--model", "house-model-7b")
        first = silica(*ask, "what does the chart show?", env=env)
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == "Five bars."
        assert first.stderr.count("takes no images") == 1
        assert "house-model-7b" in first.stderr and "models.json" in first.stderr
        assert len(srv.requests) == 3
        assert carries_image(srv.requests[1]) and not carries_image(srv.requests[2])
        assert CHART_STAND_IN in json.dumps(srv.requests[2])
        # a new process, a new session: no image from its first request on
        second = silica(*ask, "and now?", env=env)
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip() == "Still five."
        assert "takes no images" not in second.stderr
        assert len(srv.requests) == 5 and not carries_image(srv.requests[4])
        assert "[Image: chart, 640x400" in json.dumps(srv.requests[4])
        # vision = true in config wins over what was found
        (home / "config.toml").write_text("vision = true\n")
        third = silica(*ask, "look again", env=env)
        assert third.returncode == 0, third.stderr
        assert third.stdout.strip() == "I see it."
        assert len(srv.requests) == 7 and carries_image(srv.requests[6])
    assert list(cached(home)["openai"][srv.base_url]) == ["house-model-7b"]


def test_ask_warns_of_a_damaged_cache_and_goes_on(home):
    path = cache_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"[" * 100_000)
    with openai_server([text("Hello.")]) as srv:
        done = silica("ask", "--provider", "openai", "--model", "house-model-7b", "hi",
                      env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello."
    assert done.stderr.count(f"ignoring {path}") == 1 and "Traceback" not in done.stderr
