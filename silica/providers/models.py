"""What silica knows about models: default models, which ones see images, their limits.

``model_info(provider, model, settings)`` is what every built-in provider's ``model_info``
returns: vision from the table below (unless ``settings.vision`` says otherwise) and the
provider's image limits with ``settings.images`` applied. ``without_images(request)`` is the
last guard before a request leaves for a model without vision: every image becomes a short
text line, so no image is ever sent to a model that cannot read it.

The table matches on the model name, case-insensitively; an unknown name falls back to the
provider's default (Anthropic and OpenAI: vision, Ollama: none). docs/providers.md shows it.
"""

from __future__ import annotations

import re
from typing import Any

from silica.blocks import ImageBlock, TextBlock
from silica.config import Settings
from silica.images.limits import for_provider
from silica.providers.base import ModelInfo, Request, RequestMessage, RequestToolResult

DEFAULT_MODELS: dict[str, str] = {
    "anthropic": "claude-sonnet-5-5",
    "openai": "gpt-4.1",
    "ollama": "llama3.2-vision",
}
"""The model each built-in provider uses when ``settings.model`` is not set."""

# (pattern, vision) pairs tried in order with re.search on the lower-cased name; first match
# wins. Exceptions come before the families they carve out of.
_ANTHROPIC: list[tuple[str, bool]] = [
    (r"claude-3-5-haiku|claude-3\.5-haiku", False),  # text only
    (r"claude-(instant|2)", False),
    (r"claude-3", True),
    (r"claude-(\w+-)?[4-9]", True),  # claude-sonnet-4-5, claude-opus-4-1, claude-4-...
]
_OPENAI: list[tuple[str, bool]] = [
    (r"^(gpt-3\.5|gpt-35|babbage|davinci|text-|gpt-oss)", False),
    (r"^gpt-4(-0314|-0613|-32k.*)?$", False),  # the original text-only GPT-4
    (r"^gpt-4-(0125|1106)-preview", False),
    (r"^(o1-mini|o1-preview|o3-mini)", False),
    (r"^(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-4-turbo|gpt-4-vision|gpt-[5-9]|chatgpt-4o)", True),
    (r"^(o1|o3|o4)", True),
]
_OLLAMA: list[tuple[str, bool]] = [
    (r"^gemma3:(270m|1b)", False),  # the smallest gemma3 models are text only
    (r"llava|bakllava|vision|vl|minicpm-v|moondream|gemma3|llama4", True),
    (r"mistral-small3\.[1-9]", True),
]
_TABLES: dict[str, tuple[list[tuple[str, bool]], bool]] = {
    "anthropic": (_ANTHROPIC, True),
    "openai": (_OPENAI, True),
    "ollama": (_OLLAMA, False),
}


def default_model(provider: str, settings: Settings) -> str:
    """``settings.model``, or the provider's default model."""
    return settings.model or DEFAULT_MODELS[provider]


def has_vision(provider: str, model: str) -> bool:
    """Whether ``model`` of ``provider`` reads images, by the model table alone."""
    table, unknown = _TABLES[provider]
    name = model.strip().lower()
    if provider == "ollama":
        name = name.rsplit("/", 1)[-1]  # "library/llava:7b", "hf.co/org/x-vl:q4" -> last part
    for pattern, vision in table:
        if re.search(pattern, name):
            return vision
    return unknown


def model_info(provider: str, model: str, settings: Settings) -> ModelInfo:
    """Vision (``settings.vision`` wins over the table) and the provider's image limits."""
    vision = has_vision(provider, model) if settings.vision is None else settings.vision
    return ModelInfo(vision=vision, limits=settings.images.apply(for_provider(provider)))


def image_placeholder(image: ImageBlock) -> TextBlock:
    """The text a model without vision sees instead of ``image``."""
    size = f"{image.width}x{image.height}" if image.width and image.height else "unknown size"
    return TextBlock(text=f"[Image: {size}, {image.media_type}]")


def without_images(request: Request) -> Request:
    """``request`` with every image (tool results included) replaced by its placeholder."""

    def swap(blocks: list) -> list:
        out = []
        for block in blocks:
            if isinstance(block, ImageBlock):
                out.append(image_placeholder(block))
            elif isinstance(block, RequestToolResult):
                out.append(block.model_copy(update={"content": swap(block.content)}))
            else:
                out.append(block)
        return out

    messages = [RequestMessage(role=m.role, content=swap(m.content)) for m in request.messages]
    return request.model_copy(update={"messages": messages})


_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use",
                 "length": "max_tokens"}


def stop_reason(raw: str | None, has_tool_calls: bool) -> str:
    """A provider's stop reason in Anthropic's words (``end_turn``, ``tool_use``,
    ``max_tokens``); any other reason is kept as the provider gave it."""
    reason = _STOP_REASONS.get(raw or "", raw or "")
    if has_tool_calls and reason in ("end_turn", ""):
        return "tool_use"  # Ollama says "stop" even when the model called tools
    return reason or "end_turn"


class BundledProvider:
    """What silica's own providers share: settings, the default model, ``model_info``,
    retry and timeout knobs, and the rule that a model without vision never gets an image.

    Subclasses set ``name`` (and ``default_timeout``) and implement ``complete``, starting
    from ``self.for_model(request)``.
    """

    name: str = ""
    default_timeout: float | None = None  # None: the SDK's own

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model = default_model(self.name, settings)
        self.max_retries = 2
        self.timeout = self.default_timeout

    def model_info(self, model: str) -> ModelInfo:
        return model_info(self.name, model, self.settings)

    def for_model(self, request: Request) -> Request:
        """``request`` as it may be sent: images become text for a model without vision."""
        return request if self.model_info(request.model).vision else without_images(request)

    def sdk_options(self) -> dict[str, Any]:
        """Retry and timeout options for an SDK client."""
        options: dict[str, Any] = {"max_retries": self.max_retries}
        if self.timeout is not None:
            options["timeout"] = self.timeout
        return options
