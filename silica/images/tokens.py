"""How many input tokens an image of a given size costs: pure arithmetic, no Pillow.

Estimates follow each provider's published formula; real counts can differ by a few
tokens (the providers' own rounding is not published). Use them for budgets and display,
not billing.
"""

from __future__ import annotations

import math

# Anthropic scales an image down (keeping its aspect ratio) when its long side exceeds
# 1568 px or it would cost more than ~1,600 tokens, i.e. 1,600 * 750 = 1.2 MP; then
# tokens = width * height / 750.
ANTHROPIC_LONG_SIDE = 1568
ANTHROPIC_MAX_PIXELS = 1_200_000
ANTHROPIC_PIXELS_PER_TOKEN = 750

# OpenAI, detail "high": fit within 2048x2048, then shortest side down to 768, then
# 85 base tokens + 170 per 512x512 tile. Detail "low": 85 tokens flat.
OPENAI_FIT = 2048
OPENAI_SHORT_SIDE = 768
OPENAI_TILE = 512
OPENAI_BASE_TOKENS = 85
OPENAI_TILE_TOKENS = 170

_ANTHROPIC_LIKE = frozenset({"anthropic", "claude", "ollama"})
_OPENAI_LIKE = frozenset({"openai", "gpt"})


def _scaled(width: int, height: int, scale: float) -> tuple[int, int]:
    if scale >= 1:
        return width, height
    return max(1, math.floor(width * scale + 1e-9)), max(1, math.floor(height * scale + 1e-9))


def anthropic_size(width: int, height: int) -> tuple[int, int]:
    """The size Anthropic's API would scale an image of ``width`` x ``height`` down to."""
    scale = min(
        1.0,
        ANTHROPIC_LONG_SIDE / max(width, height),
        math.sqrt(ANTHROPIC_MAX_PIXELS / (width * height)),
    )
    return _scaled(width, height, scale)


def openai_size(width: int, height: int) -> tuple[int, int]:
    """The size OpenAI's high-detail pipeline would scale ``width`` x ``height`` down to."""
    width, height = _scaled(width, height, min(1.0, OPENAI_FIT / max(width, height)))
    return _scaled(width, height, min(1.0, OPENAI_SHORT_SIDE / min(width, height)))


def estimate_tokens(
    width: int, height: int, provider: str = "anthropic", *, detail: str = "high"
) -> int:
    """Estimated input tokens for one ``width`` x ``height`` image sent to ``provider``.

    ``provider``: ``anthropic`` (alias ``claude``), ``openai`` (alias ``gpt``) or ``ollama``
    (whose cost is unknown: estimated like Anthropic). ``detail`` matters only for OpenAI
    (``low``: 85 tokens flat; anything else: the high-detail tile formula). A non-positive
    side gives 0. Raises ``ValueError`` for an unknown provider.
    """
    key = (provider or "").strip().lower()
    if key not in _ANTHROPIC_LIKE and key not in _OPENAI_LIKE:
        raise ValueError(f"no token estimate for provider {provider!r}")
    if width <= 0 or height <= 0:
        return 0
    if key in _OPENAI_LIKE:
        if detail.strip().lower() == "low":
            return OPENAI_BASE_TOKENS
        w, h = openai_size(width, height)
        tiles = math.ceil(w / OPENAI_TILE) * math.ceil(h / OPENAI_TILE)
        return OPENAI_BASE_TOKENS + OPENAI_TILE_TOKENS * tiles
    w, h = anthropic_size(width, height)
    return math.ceil(w * h / ANTHROPIC_PIXELS_PER_TOKEN)
