"""What silica knows about models: default models, which ones see images, their limits.

``model_info(provider, model, settings)`` is what every built-in provider's ``model_info``
returns: vision from the table below (unless ``settings.vision`` says otherwise) and the
provider's image limits with ``settings.images`` applied. ``without_images(request)`` is the
last guard before a request leaves for a model without vision: every image becomes a short
text line, its stand-in, so no image is ever sent to a model that cannot read it. A stand-in
carries the tool's own words about the image and its size: ``[Image: chart of 5 values,
640x400, image/png]``.

The table matches on the model name, case-insensitively; an unknown name falls back to the
provider's default (Anthropic, OpenAI and Gemini: vision, Ollama: none). docs/providers.md
shows it. A model that turns out to take no images is found when it first refuses one, and
remembered (``silica.providers.vision``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from silica.blocks import ImageBlock, TextBlock
from silica.config import Settings
from silica.images.limits import for_provider
from silica.providers.base import ModelInfo, Request, RequestMessage, RequestToolResult

DEFAULT_MODELS: dict[str, str] = {
    "anthropic": "claude-sonnet-5-5",
    "openai": "gpt-4.1",
    "openai-responses": "gpt-4.1",
    "gemini": "gemini-3.8-flash",
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
    (r"llava|bakllava|vision|vl|minicpm-v|moondream|gemma3|llama4|pixtral", True),
    (r"mistral-small3\.[1-9]", True),
]
# Open models behind OpenAI- or Anthropic-compatible addresses (local servers, hosted APIs and
# gateways); names may carry an organisation ("deepseek-ai/", "Qwen/"), so none is anchored.
_OPEN_MODELS: list[tuple[str, bool]] = [
    (r"deepseek[\w.-]*?(vl|ocr)", True),  # DeepSeek-VL, VL2, OCR
    (r"deepseek", False),  # deepseek-chat, deepseek-reasoner, V3, R1: text only
    (r"qwen[\w.-]*?vl|qvq", True),  # qwen-vl-max, Qwen2.5-VL-7B-Instruct, qwen3-vl
    (r"pixtral", True),
    (r"llama-?4(?!\d)", True),  # Llama-4-Scout, llama-4-maverick
    (r"gemma-?3-?(1b|270m)", False),  # the smallest Gemma 3 models are text only
    (r"gemma-?3(?!\d)", True),
]
_GEMINI: list[tuple[str, bool]] = [  # "models/" and "tunedModels/" prefixes included
    (r"tunedmodels/", False),  # tuned models take text only
    (r"gemini-1\.0-pro(?!-vision)|gemini-pro$|gemini-pro-\d", False),  # Gemini 1.0 Pro
    (r"embedding|-tts|transcribe|^(models/)?(aqa|lyria|imagen|veo)", False),
    (r"gemma-3-1b|gemma-3n|gemma-2|gemma-\d+b", False),  # text-only Gemma on the API
    (r"gemini|gemma-[3-9]|learnlm", True),
]
_TABLES: dict[str, tuple[list[tuple[str, bool]], bool]] = {
    "anthropic": (_OPEN_MODELS + _ANTHROPIC, True),
    "openai": (_OPEN_MODELS + _OPENAI, True),
    "openai-responses": (_OPEN_MODELS + _OPENAI, True),  # the same models, another API
    "gemini": (_GEMINI, True),
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


STAND_IN_WORDS = 100
"""Characters of words about an image its stand-in holds at most."""

_ABOUT_FIELDS = re.compile(
    r'"(?:caption|alt|alt_text|description|title)"\s*:\s*"((?:[^"\\\n]|\\.){1,1000})"', re.I)
_SCANNED = 20_000  # characters of a tool's text searched for words about its images


def image_placeholder(image: ImageBlock, about: str = "") -> TextBlock:
    """The text a model without vision gets instead of ``image``: ``[Image: <about>,
    <W>x<H>, <media type>]`` (``[Image: chart of 5 values, 640x400, image/png]``, the
    form the request builder gives an image it knows not to send), where ``about`` is words
    about the image, ``image.alt`` when not given, and left out when neither says anything."""
    words = " ".join((about or image.alt).split())
    if len(words) > STAND_IN_WORDS:
        words = words[:STAND_IN_WORDS - 1].rstrip() + "…"
    size = f"{image.width}x{image.height}" if image.width and image.height else "unknown size"
    return TextBlock(text=f"[Image: {words + ', ' if words else ''}{size}, {image.media_type}]")


def image_words(text: str) -> list[str]:
    """What a tool's text says about its images, for their stand-ins: every ``caption``,
    ``alt``, ``alt_text``, ``description`` or ``title`` field in it (JSON the tool printed),
    in order; else its first line of prose; else nothing."""
    text = text[:_SCANNED]
    fields = [_json_string(m.group(1)) for m in _ABOUT_FIELDS.finditer(text)]
    fields = [f for f in fields if f.strip()]
    if fields:
        return fields
    for line in text.splitlines():
        line = line.strip()
        # JSON the tool printed, or silica's own notes ("[image dropped: ...]"), say nothing
        if line and line[0] not in '{}[]"' and any(c.isalnum() for c in line):
            return [line]
    return []


def _json_string(raw: str) -> str:
    try:
        return str(json.loads(f'"{raw}"'))
    except ValueError:
        return raw


def without_images(request: Request) -> Request:
    """``request`` with every image (tool results included) replaced by its stand-in
    (``image_placeholder``). The words about an image in a tool result are the tool's own
    (``image_words`` of the result's text: the n-th image takes the n-th, the last when
    there are fewer), else the image's ``alt``, else the tool's name; a person's image has
    its ``alt`` (its file name)."""

    def swap(blocks: list, words: list[str], name: str) -> list:
        out: list[Any] = []
        n = 0
        for block in blocks:
            if isinstance(block, ImageBlock):
                about = words[min(n, len(words) - 1)] if words else block.alt or name
                out.append(image_placeholder(block, about))
                n += 1
            elif isinstance(block, RequestToolResult):
                text = "\n".join(b.text for b in block.content if isinstance(b, TextBlock))
                content = swap(block.content, image_words(text), block.name)
                out.append(block.model_copy(update={"content": content}))
            else:
                out.append(block)
        return out

    messages = [RequestMessage(role=m.role, content=swap(m.content, [], ""))
                for m in request.messages]
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
    sdk: tuple[str, ...] = ()  # what the first request imports (see ``warm``)

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

    def warm(self) -> None:
        """Import ``sdk`` and build the TLS context: what the first request needs, done
        ahead, in a thread, by ``silica.providers.clients.warm_up``. Never raises."""
        from silica.providers.clients import import_sdk

        import_sdk(*self.sdk)

    def sdk_options(self) -> dict[str, Any]:
        """Retry and timeout options for an SDK client."""
        options: dict[str, Any] = {"max_retries": self.max_retries}
        if self.timeout is not None:
            options["timeout"] = self.timeout
        return options
