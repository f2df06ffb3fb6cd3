"""Turn a conversation (images held as refs) into a provider-neutral ``Request``.

``build_request`` is called before every model call. It resolves each ``ImageRefBlock`` by
*aging*: with ``age = clock - message.turn``,

- ``age < aging.full_turns`` (an image newer than the clock too): the image at full size
  (fitted to ``info.limits``);
- ``age < aging.full_turns + aging.lowres_turns``: at low resolution (long side at most
  ``aging.lowres_px``; in a lossy form, JPEG or 256 colours, where smaller, unless
  ``aging.lowres_lossy`` is false);
- older: the text ``[Earlier image: <alt>, <W>x<H>]``.

Aging moves in *steps* so that consecutive requests share a long identical prefix, which a
provider's prompt cache can reuse. The ``clock`` is the turn of the latest step: a step is
due at every turn that is a multiple of ``aging.step_turns``, and at any other turn whose
request would hold more than ``aging.step_bytes`` of image base64 with the clock as it was
(estimated: an image's stored size at full size, at most the low-resolution budget at low
resolution). Between steps no image changes: each keeps the same bytes, request after
request, and only new images (at full size) are added. With ``step_turns = 1`` images age
every turn. A turn that starts more than ``aging.cache_seconds`` after the turn before it
ended is a step as well (``idle_turns``): the provider's prompt cache has expired by then,
so a step costs nothing the cache still held, and the requests after it are smaller. The
clock is worked out from the conversation alone (``aging_clock``, with each message's time,
``Message.at``), so a resumed session ages exactly as it would have.

A model without vision gets ``[Image: <alt>, <W>x<H>, <media type>]`` for every image, and
so does an image in an assistant message (providers take images from the user side only).

Blocks for the person only (``audience`` ``("user",)``, see ``silica.blocks.for_model``) are
left out here, the one place a conversation becomes what a model gets: they are neither sent
nor counted. A tool result left with nothing says so in one text block (``USER_ONLY``).

The many-images rule applies to the request as built: the images that will be sent are
counted; past ``info.limits.max_images_per_request`` the oldest become ``[Earlier image: ...]``
text, and if ``info.limits.is_many(count)`` every image is fitted with ``many=True``.

What callers may rely on: ``build_request`` never raises for an image. Every ``ImageBlock``
in the request came out of ``prepare_image`` for the limits that apply to it, so it decodes
and fits ``info.limits``; an image missing from the store, changed on disk, or failing its
check becomes a ``[image dropped: ...]`` notice. No base64 is made here.

Fitted images are cached in memory (``FIT_CACHE``, a bounded LRU keyed by store folder, image
id, limits, ``many`` and lossiness), so rebuilding the request each turn does not re-read or
re-encode an image. Each request keeps only its own session's fits that it sends: a fit an
aging step replaced (an image now at low resolution, or text) is let go, so a long session
holds the fits of one request, not of every image it has seen. A cached fit is used without
reading the file again. Fitting is deterministic (the same stored image and limits give the
same bytes), so an image re-fitted after the cache let it go, or in another process, is sent
byte for byte as before.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Any

from silica.agent.conversation import Conversation, Message, ToolResultBlock
from silica.blocks import ImageBlock, ImageRef, ImageRefBlock, TextBlock, for_model
from silica.config import AgingSettings
from silica.images.limits import ImageLimits
from silica.images.payload import ImagePayload
from silica.images.store import ImageStore, StoreError
from silica.providers.base import ModelInfo, Request, RequestMessage, RequestToolResult

FULL, LOWRES, EARLIER = "full", "lowres", "earlier"

_MB = 1024 * 1024

USER_ONLY = "[this result was shown to the user only]"
"""What the model gets for a tool result whose every block is for the person only."""


class FitCache:
    """A bounded, thread-safe LRU of fitted images (``ImageBlock`` or notice ``TextBlock``).

    Holds at most ``max_entries`` results and about ``max_bytes`` of image data; the least
    recently used go first. ``hits`` and ``misses`` count lookups since the last ``clear``.
    """

    def __init__(self, max_bytes: int = 256 * _MB, max_entries: int = 1024):
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._items: OrderedDict[Hashable, ImageBlock | TextBlock] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """Image bytes held."""
        return self._bytes

    def get(self, key: Hashable) -> ImageBlock | TextBlock | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: Hashable, block: ImageBlock | TextBlock) -> None:
        size = _weight(block)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= _weight(old)
            self._items[key] = block
            self._bytes += size
            while self._items and (self._bytes > self.max_bytes
                                   or len(self._items) > self.max_entries):
                _, dropped = self._items.popitem(last=False)
                self._bytes -= _weight(dropped)

    def retain(self, folder: str, keys: set[Hashable]) -> None:
        """Drop the fits of store ``folder`` (a key's first item) other than ``keys``."""
        with self._lock:
            for key in [k for k in self._items if isinstance(k, tuple) and k[0] == folder
                        and k not in keys]:
                self._bytes -= _weight(self._items.pop(key))

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
            self.hits = self.misses = 0


FIT_CACHE = FitCache()
"""The cache ``build_request`` uses unless given another."""


LOWRES_BASE64_PER_PIXEL = 0.25
LOWRES_MIN_BASE64 = 16 * 1024
"""Byte budget of a low-resolution image: ``LOWRES_BASE64_PER_PIXEL`` base64 bytes per pixel
of a ``lowres_px`` square (64 KiB at 512 px), and at least ``LOWRES_MIN_BASE64``. A
screenshot over it is sent as JPEG (``prepare_image`` tries JPEG qualities before smaller
sizes, and keeps PNG for transparent images); an image under it is sent as it is. With
``aging.lowres_lossy`` (the default) the smallest form is used even under the budget."""


def lowres_limits(limits: ImageLimits, lowres_px: int) -> ImageLimits:
    """``limits`` for a low-resolution image: the long-side target lowered to ``lowres_px``
    and the byte limit to the low-resolution budget (other limits kept)."""
    current = limits.target_long_side
    budget = max(LOWRES_MIN_BASE64, int(LOWRES_BASE64_PER_PIXEL * lowres_px * lowres_px))
    return limits.replace(target_long_side=min(lowres_px, current or lowres_px),
                          max_base64_bytes=min(limits.max_base64_bytes, budget))


def build_request(
    conversation: Conversation,
    store: ImageStore,
    *,
    model: str,
    info: ModelInfo,
    aging: AgingSettings,
    tools: list[dict[str, Any]],
    system: str = "",
    max_tokens: int = 4096,
    cache: FitCache | None = None,
) -> Request:
    """The request for the next model call: text as it is, ``ToolCall`` blocks kept,
    ``ToolResultBlock`` as ``RequestToolResult``, images resolved by aging (see the module
    docstring). ``system`` defaults to ``conversation.system``. Never raises for an image."""
    cache = FIT_CACHE if cache is None else cache
    tiers = _plan(conversation, info, aging) if info.vision else []
    sent = sum(tier != EARLIER for tier in tiers)
    many = info.limits.is_many(sent)
    limits = {FULL: info.limits, LOWRES: lowres_limits(info.limits, aging.lowres_px)}
    lossy = aging.lowres_lossy
    next_tier = iter(tiers)
    used: set[Hashable] = set()  # the cache keys of this request's images

    def image(block: ImageRefBlock, message: Message) -> ImageBlock | TextBlock:
        ref = block.ref
        if not info.vision or message.role != "user":
            return TextBlock(text=f"[Image: {_label(block)}, {ref.media_type}]")
        tier = next(next_tier)
        if tier == EARLIER:
            return TextBlock(text=f"[Earlier image: {_label(block)}]")
        return _fitted(store, block, limits[tier], many, tier == LOWRES and lossy, cache, used)

    def resolve(block: Any, message: Message) -> Any:
        if isinstance(block, ImageRefBlock):
            return image(block, message)
        if isinstance(block, ToolResultBlock):
            content = [resolve(b, message) for b in block.content if for_model(b)]
            if block.content and not content:  # every call must still be answered
                content = [TextBlock(text=USER_ONLY)]
            return RequestToolResult(
                call_id=block.call_id, name=block.name, is_error=block.is_error,
                content=content)
        return block  # TextBlock, ToolCall

    messages = [
        RequestMessage(role=m.role, content=[resolve(b, m) for b in m.content if for_model(b)])
        for m in conversation.messages
    ]
    cache.retain(str(store.folder), used)  # aged fits are never sent again: let them go
    return Request(model=model, system=system or conversation.system, tools=tools,
                   messages=messages, max_tokens=max_tokens, session_id=conversation.id)


def aging_clock(conversation: Conversation, info: ModelInfo, aging: AgingSettings) -> int:
    """The turn of the latest aging step (0: none yet), replayed from turn 1 (see the module
    docstring): a step at each multiple of ``aging.step_turns``, at any turn whose images
    would pass ``aging.step_bytes`` of base64 with the clock as it was, and at any turn in
    ``idle_turns``."""
    images = sorted((message.turn, _base64_len(block.ref.bytes))
                    for message, block in _user_images(conversation))
    turns = [turn for turn, _ in images]
    low_cap = lowres_limits(info.limits, aging.lowres_px).max_base64_bytes
    kept = aging.full_turns + aging.lowres_turns  # turns an image is sent as an image

    def weight(clock: int, end: int) -> int:  # of images[:end] with the clock at ``clock``
        first = bisect.bisect_left(turns, clock - kept + 1)  # older ones are text
        return sum(full if _tier(clock - turn, aging) == FULL else min(full, low_cap)
                   for turn, full in images[first:end])

    idle = idle_turns(conversation, aging.cache_seconds)
    clock = total = seen = 0
    for now in range(1, conversation.turn + 1):
        while seen < len(images) and turns[seen] <= now:  # new since the clock: full size
            total += images[seen][1]
            seen += 1
        if now % aging.step_turns == 0 or total > aging.step_bytes or now in idle:
            clock = now
            total = weight(clock, seen)
    return clock


def idle_turns(conversation: Conversation, cache_seconds: float) -> set[int]:
    """The turns whose first message was added more than ``cache_seconds`` after the last
    message of the turn before (a provider's prompt cache has expired by then); none when
    ``cache_seconds`` is 0 or a time is unknown (``Message.at`` 0, an older session)."""
    if cache_seconds <= 0:
        return set()
    pairs = zip(conversation.messages, conversation.messages[1:], strict=False)
    return {message.turn for before, message in pairs
            if message.turn != before.turn and before.at > 0
            and message.at - before.at > cache_seconds}


def _tier(age: int, aging: AgingSettings) -> str:
    if age < aging.full_turns:  # a negative age: newer than the latest step
        return FULL
    if age < aging.full_turns + aging.lowres_turns:
        return LOWRES
    return EARLIER


def _base64_len(size: int) -> int:
    return 4 * ((size + 2) // 3)


def _plan(conversation: Conversation, info: ModelInfo, aging: AgingSettings) -> list[str]:
    """The tier of each image a user message holds, in the order ``build_request`` meets
    them, with the oldest past ``max_images_per_request`` turned to ``EARLIER``."""
    clock = aging_clock(conversation, info, aging)
    tiers = [_tier(clock - message.turn, aging) for message, _ in _user_images(conversation)]
    cap = info.limits.max_images_per_request
    excess = sum(t != EARLIER for t in tiers) - cap if cap is not None else 0
    for i, tier in enumerate(tiers):
        if excess <= 0:
            break
        if tier != EARLIER:
            tiers[i] = EARLIER
            excess -= 1
    return tiers


def _user_images(conversation: Conversation) -> Iterator[tuple[Message, ImageRefBlock]]:
    for message in conversation.messages:
        if message.role != "user":
            continue
        for block in message.content:
            if isinstance(block, ImageRefBlock) and for_model(block):
                yield message, block
            elif isinstance(block, ToolResultBlock):
                for inner in block.content:
                    if isinstance(inner, ImageRefBlock) and for_model(inner):
                        yield message, inner


def _fitted(store: ImageStore, block: ImageRefBlock, limits: ImageLimits, many: bool,
            lossy: bool, cache: FitCache, used: set[Hashable]) -> ImageBlock | TextBlock:
    ref = block.ref
    key = (str(store.folder), ref.id, limits, many, lossy, block.alt)
    used.add(key)
    found = cache.get(key)
    if found is not None:
        return found
    try:
        data = store.read(ref)
    except StoreError as exc:  # not cached: the file may be restored
        return TextBlock(text=f"[image dropped: {_label(block)}: {exc}]")
    fitted = _prepare(ImagePayload(data, ref.media_type, "store"), limits, many, lossy)
    if fitted.type == "image" and block.alt:  # the words travel with the image (stand-ins)
        fitted = fitted.model_copy(update={"alt": block.alt})
    cache.put(key, fitted)
    return fitted


def _prepare(payload: ImagePayload, limits: ImageLimits, many: bool,
             lossy: bool) -> ImageBlock | TextBlock:
    """``payload`` fitted by the ``silica_prepare_image`` hook, as a tool's image is, to
    ``limits`` with ``many`` (the side limit that applies) and ``lossy`` folded in, since
    the hook takes limits alone."""
    from silica.plugins import get_plugin_manager

    if many or (lossy and not limits.lossy):
        limits = limits.replace(max_side=limits.side_limit(many), lossy=limits.lossy or lossy)
    block = get_plugin_manager().hook.silica_prepare_image(payload=payload, limits=limits)
    if isinstance(block, ImageBlock | TextBlock):
        return block
    return TextBlock(text="[image dropped: no plugin prepared it]")


def _label(block: ImageRefBlock) -> str:
    ref: ImageRef = block.ref
    size = f"{ref.width}x{ref.height}"
    return f"{block.alt}, {size}" if block.alt else size


def _weight(block: ImageBlock | TextBlock) -> int:
    return len(block.data) if isinstance(block, ImageBlock) else len(block.text)
