"""The model table, default models, limits, and finding providers through the plugin hook."""

from __future__ import annotations

import pytest
from wire.samples import sample_request

from silica.blocks import ImageBlock
from silica.config import ImageOverrides, Settings
from silica.hookspecs import hookimpl
from silica.images.limits import ANTHROPIC, OLLAMA, OPENAI
from silica.plugins import build_plugin_manager
from silica.providers.base import Reply, RequestToolResult, tool_arguments
from silica.providers.models import (
    DEFAULT_MODELS,
    has_vision,
    model_info,
    stop_reason,
    without_images,
)
from silica.providers.registry import get_provider


@pytest.mark.parametrize(("provider", "model", "vision"), [
    ("anthropic", "claude-sonnet-4-5", True),
    ("anthropic", "claude-3-opus-20240229", True),
    ("anthropic", "claude-3-5-haiku-20241022", False),
    ("anthropic", "claude-haiku-4-5", True),
    ("anthropic", "claude-opus-4-1-20250805", True),
    ("anthropic", "claude-2.1", False),
    ("anthropic", "some-future-claude", True),
    ("openai", "gpt-4o-mini", True),
    ("openai", "gpt-4.1", True),
    ("openai", "gpt-5", True),
    ("openai", "o3", True),
    ("openai", "o4-mini", True),
    ("openai", "o3-mini", False),
    ("openai", "chatgpt-4o-latest", True),
    ("openai", "gpt-3.5-turbo", False),
    ("openai", "gpt-4", False),
    ("openai", "gpt-4-0613", False),
    ("openai", "gpt-4-turbo", True),
    ("openai", "local-model-on-vllm", True),
    ("ollama", "llava:13b", True),
    ("ollama", "bakllava", True),
    ("ollama", "llama3.2-vision:11b", True),
    ("ollama", "qwen2.5vl:7b", True),
    ("ollama", "minicpm-v", True),
    ("ollama", "moondream", True),
    ("ollama", "gemma3:12b", True),
    ("ollama", "gemma3:1b", False),
    ("ollama", "llama4:scout", True),
    ("ollama", "mistral-small3.1:24b", True),
    ("ollama", "mistral-small:22b", False),
    ("ollama", "llama3", False),
    ("ollama", "qwen3:8b", False),
    ("ollama", "hf.co/someone/SmolVLM-GGUF:Q8_0", True),
])
def test_vision_table(provider, model, vision):
    assert has_vision(provider, model) is vision


def test_the_vision_setting_wins_over_the_table():
    assert model_info("ollama", "llama3", Settings(vision=True)).vision is True
    assert model_info("openai", "gpt-4.1", Settings(vision=False)).vision is False


def test_limits_are_the_preset_with_config_overrides():
    assert model_info("anthropic", "claude-sonnet-4-5", Settings()).limits == ANTHROPIC
    assert model_info("ollama", "llava", Settings()).limits == OLLAMA
    settings = Settings(images=ImageOverrides(target_long_side=800))
    limits = model_info("openai", "gpt-4.1", settings).limits
    assert limits == OPENAI.replace(target_long_side=800)


def test_every_provider_has_a_default_model_and_uses_it():
    for name in ("anthropic", "openai", "ollama"):
        provider = get_provider(name, Settings(provider=name))
        assert provider.name == name
        assert provider.model == DEFAULT_MODELS[name]
        assert provider.model_info(provider.model).vision is True
    assert get_provider("openai", Settings(model="gpt-5")).model == "gpt-5"


def test_without_images_leaves_only_placeholders():
    request = sample_request("x")
    stripped = without_images(request)
    assert len(images_in(request)) == 2 and images_in(stripped) == []
    assert stripped.messages[0].content[1].text == "[Image: 4x3, image/png]"
    assert stripped.messages[2].content[0].content[1].text == \
        "[Image: captured 5x2, 5x2, image/png]"  # the tool's words about its image
    assert request.messages[0].content[1].type == "image"  # the original is untouched


def images_in(request) -> list[ImageBlock]:
    blocks = [b for m in request.messages for b in m.content]
    blocks += [b for r in blocks if isinstance(r, RequestToolResult) for b in r.content]
    return [b for b in blocks if isinstance(b, ImageBlock)]


@pytest.mark.parametrize(("raw", "calls", "normal"), [
    ("end_turn", False, "end_turn"), ("stop", False, "end_turn"), ("stop", True, "tool_use"),
    ("tool_calls", True, "tool_use"), ("length", False, "max_tokens"),
    ("content_filter", False, "content_filter"), (None, False, "end_turn"),
])
def test_stop_reasons_use_one_vocabulary(raw, calls, normal):
    assert stop_reason(raw, calls) == normal


@pytest.mark.parametrize(("raw", "arguments"), [
    ('{"a": 1}', {"a": 1}), ("", {}), ('{"a": ', {}), ("[1, 2]", {}), ("null", {}),
])
def test_tool_arguments_that_are_not_an_object_become_empty(raw, arguments):
    assert tool_arguments(raw) == arguments


class EchoProvider:
    name = "echo"

    def __init__(self, settings):
        self.settings = settings

    def model_info(self, model):
        return model_info("ollama", model, self.settings)

    async def complete(self, request, on_text=None):
        return Reply(text="echo")


class EchoPlugin:
    @hookimpl
    def silica_providers(self, register):
        register("echo", EchoProvider)


def test_a_plugin_adds_a_provider():
    pm = build_plugin_manager()
    pm.register(EchoPlugin())
    provider = get_provider("Echo", Settings(), pm=pm)
    assert isinstance(provider, EchoProvider)
    assert get_provider("ollama", Settings(), pm=pm).name == "ollama"
