"""What each provider accepts as an image, as plain data (no Pillow here).

An ``ImageLimits`` is the contract ``prepare_image`` fits an image to. Use a preset
(``ANTHROPIC``, ``OPENAI``, ``OLLAMA``) or ``for_provider(name)``, and override any field with
``dataclasses.replace`` or the ``replace`` method, which also re-validates::

    from silica.images.limits import ANTHROPIC
    full_res = ANTHROPIC.replace(target_long_side=None, target_megapixels=None)

Sizes are in pixels, ``max_base64_bytes`` is measured on the base64 text (what the API
counts), megapixels are decimal (1 MP = 1,000,000 px).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

PNG = "image/png"
JPEG = "image/jpeg"
GIF = "image/gif"
WEBP = "image/webp"

MB = 1024 * 1024

# Decompression-bomb guard: an image declaring more pixels than this is refused before any
# pixel is decoded. 100 MP covers an 8000x8000 image (the largest any provider accepts) with
# room to spare, plus 100 MP camera photos, while capping the decode at ~400 MB of RGBA.
# Pillow refuses anything over 2 * Image.MAX_IMAGE_PIXELS (~179 MP) on its own, whatever
# this is set to.
DEFAULT_MAX_PIXELS = 100_000_000

# Decoding budget of one image, in bytes: what decoding and fitting it may take at its peak,
# estimated from the header before any pixel is decoded (``silica.images.budget``). 192 MiB
# lets a 7680x4320 RGBA PNG screenshot through (estimated at ~157 MiB fitted for Anthropic,
# ~172 MiB for OpenAI), while a process that prepares one image peaks at ~36 MB (Python,
# Pillow) plus at most this, ~240 MB: well under 300 MB.
DEFAULT_MAX_DECODED_BYTES = 192 * MB

# Images one tool result may hold: the rest are dropped unchecked. 20 is Anthropic's
# threshold past which a request's images are held to 2000 px a side.
DEFAULT_MAX_IMAGES_PER_RESULT = 20

# Decoding budget of all the images of one tool result together (the same measure as
# ``max_decoded_bytes``, summed): twenty 1920x1080 screenshots, or five 8K ones, fit; it
# bounds the work one result costs to a few seconds.
DEFAULT_MAX_RESULT_DECODED_BYTES = 1024 * MB


@dataclass(frozen=True)
class ImageLimits:
    """Limits one provider puts on a single image, plus how far silica scales down by default.

    A caller may rely on: every ``ImageBlock`` that ``prepare_image`` returns for these limits
    has a media type in ``formats``, sides no longer than ``max_side`` (``max_side_many`` when
    prepared with ``many=True``) and a base64 form no longer than ``max_base64_bytes``.

    ``max_images_per_request`` and ``many_threshold`` are not enforced per image: whoever
    builds a request counts its images, passes ``many=self.is_many(count)`` to
    ``prepare_image`` and stops at ``max_images_per_request``. ``max_images_per_result`` and
    ``max_result_decoded_bytes`` are enforced by ``silica.results.pipeline.build_result``.
    """

    formats: frozenset[str]
    """Media types the provider accepts as-is; anything else is converted to PNG."""
    max_base64_bytes: int
    """Largest allowed size of one image's base64 text."""
    max_side: int
    """Hard limit on width and height; larger images are scaled down."""
    max_side_many: int
    """Hard per-side limit once a request holds more than ``many_threshold`` images."""
    many_threshold: int | None
    """Image count above which ``max_side_many`` applies (``None``: never)."""
    max_pixels: int = DEFAULT_MAX_PIXELS
    """Declared width*height above which an image is refused undecoded (bomb guard)."""
    max_decoded_bytes: int = DEFAULT_MAX_DECODED_BYTES
    """Most bytes one image may take to decode and fit, estimated from its header: the
    pixels of every frame decoded, the decoder's own buffers and the conversion's (bomb
    guard). An image over it is refused undecoded."""
    max_images_per_result: int = DEFAULT_MAX_IMAGES_PER_RESULT
    """Most images one tool result may hold; those past it are dropped unchecked."""
    max_result_decoded_bytes: int = DEFAULT_MAX_RESULT_DECODED_BYTES
    """Most bytes, by the measure of ``max_decoded_bytes``, all the images of one tool
    result may take together; an image that would pass it is dropped undecoded."""
    target_long_side: int | None = None
    """Default downscale of the long side (the provider would scale down anyway)."""
    target_megapixels: float | None = None
    """Default downscale of the area, in decimal megapixels."""
    target_short_side: int | None = None
    """Default downscale of the short side (OpenAI's 768 px step)."""
    max_images_per_request: int | None = None
    """How many images one request may hold (``None``: unknown)."""
    allow_animated_gif: bool = True
    """Whether an animated GIF may be sent whole; otherwise its first frame is sent."""
    lossy: bool = False
    """Whether fitting may pick a form that changes pixels (JPEG, 256 colours) when it is
    smaller (``[images] lossy``); without it, only when nothing else fits the byte limit."""

    def __post_init__(self) -> None:
        if not self.formats:
            raise ValueError("ImageLimits.formats must name at least one media type")
        for name in (
            "max_base64_bytes",
            "max_side",
            "max_side_many",
            "max_pixels",
            "max_decoded_bytes",
            "max_images_per_result",
            "max_result_decoded_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"ImageLimits.{name} must be positive")
        for name in (
            "target_long_side",
            "target_megapixels",
            "target_short_side",
            "many_threshold",
            "max_images_per_request",
        ):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"ImageLimits.{name} must be positive or None")

    def replace(self, **changes: object) -> ImageLimits:
        """A copy with ``changes`` applied (``dataclasses.replace``), validated again."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def is_many(self, image_count: int) -> bool:
        """Whether a request with ``image_count`` images falls under ``max_side_many``."""
        return self.many_threshold is not None and image_count > self.many_threshold

    def side_limit(self, many: bool = False) -> int:
        """The hard per-side limit that applies (``max_side_many`` when ``many``)."""
        return min(self.max_side, self.max_side_many) if many else self.max_side


ANTHROPIC = ImageLimits(
    formats=frozenset({PNG, JPEG, GIF, WEBP}),
    max_base64_bytes=5 * MB,  # the API counts the base64 string: 5,242,880 bytes
    max_side=8000,
    max_side_many=2000,  # once a request holds more than 20 images
    many_threshold=20,
    target_long_side=1568,  # the API scales longer images down anyway
    target_megapixels=1.15,  # Anthropic's recommended ceiling (~1,530 tokens)
    max_images_per_request=100,
    allow_animated_gif=True,
)
"""Claude (Messages API)."""

OPENAI = ImageLimits(
    formats=frozenset({PNG, JPEG, GIF, WEBP}),
    max_base64_bytes=20_000_000,  # "20 MB" per image; decimal and measured on base64: safe
    max_side=8000,  # undocumented; conservative, the targets below apply first anyway
    max_side_many=8000,
    many_threshold=None,
    target_long_side=2048,  # high detail: fit within 2048x2048...
    target_short_side=768,  # ...then the shortest side to 768
    max_images_per_request=500,
    allow_animated_gif=False,  # only non-animated GIF is accepted
)
"""OpenAI chat completions / responses, ``detail: high``."""

OLLAMA = ImageLimits(
    formats=frozenset({PNG, JPEG}),  # conservative: everything else becomes PNG
    max_base64_bytes=20_000_000,
    max_side=8000,
    max_side_many=8000,
    many_threshold=None,
    target_long_side=1568,  # local vision models resize far below this themselves
    target_megapixels=1.15,
    max_images_per_request=None,
    allow_animated_gif=False,
)
"""Ollama (local models): PNG and JPEG only."""

GEMINI = ImageLimits(
    formats=frozenset({PNG, JPEG, WEBP}),  # and HEIC/HEIF; GIF is not accepted
    max_base64_bytes=7_000_000,  # "7 MB" per inline image: measured on base64, safe
    max_side=8000,  # undocumented; conservative, the targets below apply first anyway
    max_side_many=8000,
    many_threshold=None,
    target_long_side=1536,  # two of the 768 px tiles Gemini cuts an image into
    target_megapixels=1.15,
    max_images_per_request=3000,
    allow_animated_gif=False,
)
"""Gemini (``generateContent`` inline data)."""

_PRESETS: dict[str, ImageLimits] = {
    "anthropic": ANTHROPIC,
    "claude": ANTHROPIC,
    "openai": OPENAI,
    "openai-responses": OPENAI,
    "gpt": OPENAI,
    "gemini": GEMINI,
    "ollama": OLLAMA,
}


def for_provider(name: str) -> ImageLimits:
    """The preset for provider ``name`` (case-insensitive: anthropic/claude, openai, ollama).

    Raises ``ValueError`` for a name with no preset; the message lists the known names.
    """
    key = (name or "").strip().lower()
    try:
        return _PRESETS[key]
    except KeyError:
        known = ", ".join(sorted(_PRESETS))
        raise ValueError(f"no image limits for provider {name!r}; known: {known}") from None
