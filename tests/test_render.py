"""build_request: a conversation of refs becomes a request the provider will accept.

Images age (full size, then low resolution, then a line of text), the many-images rule is
applied to the request as built, and nothing in the store can make a bad image reach it.
Most tests here age images every turn (``step_turns=1``); aging in steps, and what it does
for prompt caching, is tested in test_cache_aging.py.
"""

from __future__ import annotations

import base64
import functools
import io
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw

from silica.agent.conversation import Conversation, ToolCall, ToolResultBlock
from silica.agent.render import FitCache, build_request, lowres_limits
from silica.blocks import ImageBlock, TextBlock
from silica.config import AgingSettings
from silica.images.limits import ANTHROPIC, OLLAMA, OPENAI, ImageLimits
from silica.images.store import ImageStore
from silica.providers.base import ModelInfo, Request, RequestToolResult

VISION = ModelInfo(vision=True, limits=ANTHROPIC)
EVERY_TURN = AgingSettings(lowres_turns=3, step_turns=1)


@functools.lru_cache(maxsize=64)
def png(width: int, height: int, shade: int = 0) -> bytes:
    """A gradient with a few marks: compresses like a real picture, not like a flat fill."""
    ramp = Image.linear_gradient("L").resize((width, height))
    img = Image.merge("RGB", (ramp, ramp.transpose(Image.Transpose.FLIP_LEFT_RIGHT),
                              Image.new("L", (width, height), shade % 256)))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


@functools.lru_cache(maxsize=4)
def screenshot_png(width: int = 1920, height: int = 1080) -> bytes:
    """Lines of coloured text on a dark window: detail that PNG keeps at a high cost."""
    rng = random.Random(1)
    img = Image.new("RGB", (width, height), (30, 31, 38))
    draw = ImageDraw.Draw(img)
    for y in range(0, height, 18):
        x = rng.randrange(40)
        while x < width:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_()=") for _ in range(6))
            draw.text((x, y), word, fill=(rng.randrange(100, 256), rng.randrange(100, 256), 200))
            x += 50
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def image(width: int, height: int, shade: int = 0) -> ImageBlock:
    return ImageBlock(media_type="image/png", data=png(width, height, shade), width=width,
                      height=height)


@pytest.fixture
def store(tmp_path) -> ImageStore:
    return ImageStore(tmp_path / "images", "s1")


def tool_turn(conversation: Conversation, store: ImageStore, blocks: list[ImageBlock],
              text: str = "take a screenshot") -> None:
    """One turn: the person asks, the model calls a tool, the tool answers with images."""
    n = len(conversation.messages)
    conversation.add("user", [TextBlock(text=text)], new_turn=True)
    conversation.add("assistant", [ToolCall(id=f"c{n}", name="screenshot")])
    content = store.put_message(blocks, alt=f"screenshot {n}")
    conversation.add("user", [ToolResultBlock(call_id=f"c{n}", name="screenshot",
                                              content=content)])


def build(conversation, store, info=VISION, aging=None, cache=None) -> Request:
    return build_request(conversation, store, model="m", info=info,
                         aging=aging or EVERY_TURN, tools=[],
                         cache=FitCache() if cache is None else cache)


def request_images(request: Request) -> list[ImageBlock | TextBlock]:
    """Every image and image notice, in order, from messages and tool results."""
    found = []
    for message in request.messages:
        for block in message.content:
            inner = block.content if isinstance(block, RequestToolResult) else [block]
            found += [b for b in inner if isinstance(b, ImageBlock)
                      or (isinstance(b, TextBlock) and b.text.startswith("["))]
    return found


def assert_sendable(block: ImageBlock, limits: ImageLimits, many: bool) -> None:
    assert isinstance(block, ImageBlock), block
    with Image.open(io.BytesIO(block.data)) as img:
        img.load()
        assert img.size == (block.width, block.height)
    assert block.media_type in limits.formats
    assert max(block.width, block.height) <= limits.side_limit(many)
    assert len(base64.b64encode(block.data)) <= limits.max_base64_bytes


def test_an_image_ages_full_then_low_resolution_then_text(store):
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(1920, 1080)])
    seen = []
    for turn in range(1, 6):
        if turn > 1:
            conversation.add("user", [TextBlock(text=f"and now {turn}")], new_turn=True)
        assert conversation.turn == turn
        [shown] = request_images(build(conversation, store))
        seen.append(shown)
    full, *lowres, gone = seen
    assert isinstance(full, ImageBlock) and (full.width, full.height) == (1429, 804)  # 1.15 MP
    for block in lowres:
        assert isinstance(block, ImageBlock) and max(block.width, block.height) <= 512
    assert gone == TextBlock(text="[Earlier image: screenshot 0, 1920x1080]")


def test_a_low_resolution_screenshot_is_cheap_and_a_small_image_is_kept(store):
    conversation = Conversation(id="s1")
    shot = ImageBlock(media_type="image/png", data=screenshot_png(), width=1920, height=1080)
    tool_turn(conversation, store, [shot, image(200, 100)])
    full, _ = request_images(build(conversation, store))
    assert full.media_type == "image/png"  # full size keeps the tool's PNG
    conversation.add("user", [TextBlock(text="next")], new_turn=True)
    lossless = AgingSettings(lowres_turns=3, step_turns=1, lowres_lossy=False)
    screenshot, small = request_images(build(conversation, store, aging=lossless))
    assert screenshot.media_type == "image/jpeg" and screenshot.width == 512  # PNG: too big
    assert len(base64.b64encode(screenshot.data)) <= 64 * 1024
    assert small.data == png(200, 100)  # under the budget: sent byte for byte
    lossy, _ = request_images(build(conversation, store))  # lowres_lossy, the default
    assert lossy.width == 512 and len(base64.b64encode(lossy.data)) <= 64 * 1024


def test_aging_settings_are_followed(store):
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(1200, 600)])
    tool_turn(conversation, store, [image(1200, 600, shade=9)])
    aging = AgingSettings(full_turns=2, lowres_turns=0, step_turns=1)
    assert all(isinstance(b, ImageBlock) and b.width == 1200
               for b in request_images(build(conversation, store, aging=aging)))
    aging = AgingSettings(full_turns=1, lowres_turns=1, lowres_px=100, step_turns=1)
    old, new = request_images(build(conversation, store, aging=aging))
    assert (old.width, old.height) == (100, 50) and new.width == 1200


def test_a_model_without_vision_gets_text(store):
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(300, 200)])
    request = build(conversation, store, info=ModelInfo(vision=False, limits=ANTHROPIC))
    assert request_images(request) == [
        TextBlock(text="[Image: screenshot 0, 300x200, image/png]")]


def test_structure_is_kept(store):
    conversation = Conversation(id="s1", system="be brief")
    tool_turn(conversation, store, [image(300, 200)])
    conversation.add("assistant", [TextBlock(text="done")])
    request = build_request(conversation, store, model="claude", info=VISION,
                            aging=AgingSettings(), tools=[{"name": "screenshot"}],
                            max_tokens=100, cache=FitCache())
    assert (request.model, request.system, request.max_tokens) == ("claude", "be brief", 100)
    assert [m.role for m in request.messages] == ["user", "assistant", "user", "assistant"]
    assert request.messages[1].content == [ToolCall(id="c0", name="screenshot")]
    [result] = request.messages[2].content
    assert isinstance(result, RequestToolResult) and result.call_id == "c0"
    assert isinstance(result.content[0], ImageBlock)
    assert request.messages[3].content == [TextBlock(text="done")]


def test_an_image_in_an_assistant_message_is_text(store):
    conversation = Conversation(id="s1")
    conversation.add("user", [TextBlock(text="hi")], new_turn=True)
    ref = store.put(image(64, 64))
    conversation.add("assistant", [ref])
    assert build(conversation, store).messages[1].content == [
        TextBlock(text="[Image: 64x64, image/png]")]


def test_more_than_twenty_images_are_all_fitted_to_2000px(store):
    limits = ANTHROPIC.replace(target_long_side=None, target_megapixels=None)
    info = ModelInfo(vision=True, limits=limits)
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(2400, 300, shade=i) for i in range(20)])
    twenty = request_images(build(conversation, store, info=info))
    assert len(twenty) == 20 and all(b.width == 2400 for b in twenty)
    conversation.messages[-1].content[0].content.append(store.put(image(2400, 300, shade=99)))
    many = request_images(build(conversation, store, info=info))
    assert len(many) == 21
    for b in many:
        assert_sendable(b, limits, many=True)
        assert max(b.width, b.height) <= 2000


def test_twenty_one_images_with_the_anthropic_preset_fit(store):
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(2100, 900, shade=i) for i in range(11)])
    tool_turn(conversation, store, [image(2100, 900, shade=20 + i) for i in range(10)])
    shown = request_images(build(conversation, store,
                                 aging=AgingSettings(full_turns=2, step_turns=1)))
    assert len(shown) == 21
    for b in shown:
        assert_sendable(b, ANTHROPIC, many=True)


def test_past_max_images_per_request_the_oldest_become_text(store):
    info = ModelInfo(vision=True, limits=ANTHROPIC.replace(max_images_per_request=3))
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(100, 80, shade=i) for i in range(2)])
    tool_turn(conversation, store, [image(100, 80, shade=10 + i) for i in range(3)])
    shown = request_images(build(conversation, store, info=info,
                                 aging=AgingSettings(full_turns=5, step_turns=1)))
    assert [type(b) for b in shown] == [TextBlock, TextBlock, ImageBlock, ImageBlock, ImageBlock]
    assert shown[0].text == "[Earlier image: screenshot 0, 100x80]"


def test_a_missing_or_changed_file_becomes_a_notice(store):
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(100, 80), image(100, 80, shade=5)])
    refs = [b.ref for b in conversation.messages[-1].content[0].content]
    store.path(refs[0]).unlink()
    store.path(refs[1]).write_bytes(b"\x89PNG not really")
    first, second = request_images(build(conversation, store))
    assert first.text.startswith("[image dropped: screenshot 0, 100x80:")
    assert "missing" in first.text
    assert second.text.startswith("[image dropped:") and "changed" in second.text


def test_an_image_that_fails_its_check_becomes_a_notice(store):
    info = ModelInfo(vision=True, limits=ANTHROPIC.replace(max_base64_bytes=16))
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(200, 200)])
    [notice] = request_images(build(conversation, store, info=info))
    assert isinstance(notice, TextBlock) and notice.text.startswith("[image dropped:")


def test_rebuilding_reuses_fitted_images(store):
    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(1920, 1080, shade=i) for i in range(3)])
    cache = FitCache()
    first = request_images(build(conversation, store, cache=cache))
    assert (cache.hits, cache.misses, len(cache)) == (0, 3, 3)
    again = request_images(build(conversation, store, cache=cache))
    assert cache.hits == 3
    assert all(a is b for a, b in zip(first, again, strict=True))


def test_the_cache_is_bounded():
    cache = FitCache(max_bytes=250, max_entries=3)
    blocks = [ImageBlock(media_type="image/png", data=bytes(100), width=1, height=1)
              for _ in range(4)]
    for i, b in enumerate(blocks):
        cache.put(i, b)
    assert len(cache) == 2 and cache.bytes == 200
    assert cache.get(0) is None and cache.get(3) is blocks[3]


def test_lowres_limits_keep_the_hard_limits():
    low = lowres_limits(OPENAI, 512)
    assert low.target_long_side == 512 and low.max_side == OPENAI.max_side
    assert low.max_base64_bytes == 64 * 1024
    assert lowres_limits(OPENAI.replace(target_long_side=300), 512).target_long_side == 300


# -- every request, whatever the conversation, holds only sendable images ------------------

LIMITS = [
    ANTHROPIC,
    OPENAI,
    OLLAMA,
    ANTHROPIC.replace(target_long_side=None, target_megapixels=None, max_side=300,
                      max_side_many=120, many_threshold=3, max_images_per_request=5),
]
SIZES = [(1, 1), (40, 30), (300, 20), (20, 700), (640, 480), (900, 900)]


@st.composite
def conversations(draw):
    turns = draw(st.lists(st.lists(st.sampled_from(SIZES), max_size=4), min_size=1,
                          max_size=5))
    idle = draw(st.integers(0, 4))  # turns with no images after the last
    return turns, idle


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(conversations(), st.sampled_from(LIMITS), st.integers(1, 3), st.integers(0, 3),
       st.sampled_from([64, 128, 512]), st.booleans(), st.integers(1, 5),
       st.sampled_from([1, 50_000, 3_000_000]))
def test_every_built_request_holds_only_sendable_images(tmp_path, drawn, limits, full, lowres,
                                                          px, vision, step, budget):
    turns, idle = drawn
    store = ImageStore(tmp_path / "images", "h")
    conversation = Conversation(id="h")
    for t, sizes in enumerate(turns):
        tool_turn(conversation, store, [image(w, h, shade=t * 7 + i)
                                        for i, (w, h) in enumerate(sizes)])
    for _ in range(idle):
        conversation.add("user", [TextBlock(text="more")], new_turn=True)
    info = ModelInfo(vision=vision, limits=limits)
    request = build(conversation, store, info=info,
                    aging=AgingSettings(full_turns=full, lowres_turns=lowres, lowres_px=px,
                                        step_turns=step, step_bytes=budget))
    shown = request_images(request)
    assert len(shown) == sum(len(s) for s in turns)
    sent = [b for b in shown if isinstance(b, ImageBlock)]
    if not vision:
        assert not sent
    if limits.max_images_per_request is not None:
        assert len(sent) <= limits.max_images_per_request
    many = limits.is_many(len(sent))
    for b in sent:
        assert_sendable(b, limits, many)


def test_a_stored_image_is_fitted_through_the_prepare_image_hook(store):
    from silica.hookspecs import hookimpl
    from silica.plugins import get_plugin_manager

    seen = []

    class Fitter:
        @hookimpl(tryfirst=True)
        def silica_prepare_image(self, payload, limits):
            seen.append(limits.side_limit())
            return TextBlock(text=f"[fitted by a plugin: {payload.source}]")

    conversation = Conversation(id="s1")
    tool_turn(conversation, store, [image(64, 48, shade=i) for i in range(11)])
    tool_turn(conversation, store, [image(64, 48, shade=i) for i in range(11, 22)])
    pm = get_plugin_manager()
    pm.register(Fitter())
    try:
        shown = request_images(build(conversation, store))
    finally:
        pm.unregister(name=pm.get_name(next(p for p in pm.get_plugins()
                                            if isinstance(p, Fitter))))
    assert shown == [TextBlock(text="[fitted by a plugin: store]")] * 22
    assert ANTHROPIC.side_limit(many=True) in seen  # over 20 images: the stricter side
