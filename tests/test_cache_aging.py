"""Aging in steps keeps the request prefix stable, so a provider's prompt cache can reuse it;
the providers' cache figures reach the person (``chat``) and programs (``ask --json``).

The screenshots are real, detailed PNGs drawn with Pillow; requests go through the real
agent and SDKs to local servers speaking each wire protocol, and the assertions read the
request bodies exactly as those servers received them.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from wire import anthropic_server, ollama_server, openai_server, text

from silica.agent.conversation import Conversation
from silica.agent.loop import Agent
from silica.agent.render import FitCache, aging_clock, build_request
from silica.agent.sessions import load_session, save_session
from silica.blocks import ImageBlock, TextBlock
from silica.cli.agent import usage_line
from silica.config import AgingSettings, Settings
from silica.images.limits import ANTHROPIC
from silica.images.store import ImageStore
from silica.providers.base import ModelInfo, Request, RequestToolResult, Usage

VISION = ModelInfo(vision=True, limits=ANTHROPIC)
EVERY_THIRD = AgingSettings(lowres_turns=3, step_turns=3)  # steps at turns 3, 6, 9...
CACHE = {"type": "ephemeral"}


@functools.lru_cache(maxsize=16)
def screen(seed: int, size: tuple[int, int] = (1200, 750)) -> bytes:
    """A detailed PNG screenshot (about 400 kB of base64): rows of coloured words on a dark
    window, different for every ``seed``."""
    rng = random.Random(seed)
    img = Image.new("RGB", size, (30, 31, 38))
    draw = ImageDraw.Draw(img)
    for y in range(4, size[1], 28):
        x = rng.randrange(30)
        while x < size[0]:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_()=.") for _ in range(7))
            draw.text((x, y), word, fill=(rng.randrange(90, 256), rng.randrange(90, 256),
                                          rng.randrange(90, 256)))
            x += 52
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def screenshot(seed: int) -> ImageBlock:
    with Image.open(io.BytesIO(screen(seed))) as img:
        width, height = img.size
    return ImageBlock(media_type="image/png", data=screen(seed), width=width, height=height)


def person_turn(conversation: Conversation, store: ImageStore, seed: int) -> None:
    """The person sends a screenshot and a question; the model answers."""
    content = store.put_message([TextBlock(text=f"what changed? ({seed})"), screenshot(seed)],
                                alt=f"screen {seed}")
    conversation.add("user", content, new_turn=True)
    conversation.add("assistant", [TextBlock(text=f"The words moved ({seed}).")])


def images_of(request: Request) -> list[ImageBlock | TextBlock]:
    """Each image of the request, or the text standing in for it, in order."""
    found = []
    for message in request.messages:
        for block in message.content:
            inner = block.content if isinstance(block, RequestToolResult) else [block]
            found += [b for b in inner if isinstance(b, ImageBlock)
                      or (isinstance(b, TextBlock) and b.text.startswith("["))]
    return found


def build(conversation, store, aging, cache=None) -> Request:
    return build_request(conversation, store, model="m", info=VISION, aging=aging, tools=[],
                         cache=cache if cache is not None else FitCache())


@pytest.fixture
def store(tmp_path) -> ImageStore:
    return ImageStore(tmp_path / "images", "s1")


# -- aging in steps -------------------------------------------------------------------------


def test_an_image_keeps_its_bytes_until_a_step_and_is_smaller_after(store):
    conversation = Conversation(id="s1")
    cache = FitCache()
    seen = []  # the first screenshot, as each turn's request holds it
    full_counts = []
    for turn in range(1, 8):
        person_turn(conversation, store, seed=turn)
        shown = images_of(build(conversation, store, EVERY_THIRD, cache))
        seen.append(shown[0])
        full_counts.append(sum(isinstance(b, ImageBlock) and b.width == 1200 for b in shown))
    first = screen(1)
    assert [b.data for b in seen[:2]] == [first, first]  # turns 1-2: as sent, byte for byte
    low = seen[2]
    assert isinstance(low, ImageBlock) and low.width == 512 and len(low.data) < len(first) / 4
    assert seen[3].data == seen[4].data == low.data  # turns 3-5: the same low-resolution bytes
    assert seen[5] == seen[6] == TextBlock(text="[Earlier image: screen 1, 1200x750]")
    # new images stay at full size until the next step, then only the newest is
    assert full_counts == [1, 2, 1, 2, 3, 1, 2]


def test_with_the_defaults_an_image_is_whole_until_a_step_low_until_the_next(store):
    conversation = Conversation(id="s1")
    cache = FitCache()
    life: dict[int, list[str]] = {4: [], 5: []}  # the screenshots of turns 4 and 5
    for turn in range(1, 17):
        person_turn(conversation, store, seed=turn)
        shown = images_of(build(conversation, store, AgingSettings(), cache))
        for seed in life:
            if seed <= turn:
                block = shown[seed - 1]
                life[seed].append("text" if isinstance(block, TextBlock) else
                                  "whole" if block.width == 1200 else "low")
    # steps at turns 4, 8, 12 and 16
    assert life[4] == ["whole"] * 4 + ["low"] * 4 + ["text"] * 5
    assert life[5] == ["whole"] * 3 + ["low"] * 4 + ["text"] * 5


def test_with_step_turns_1_images_age_every_turn(store):
    conversation = Conversation(id="s1")
    for turn in range(1, 4):
        person_turn(conversation, store, seed=turn)
    shown = images_of(build(conversation, store, AgingSettings(step_turns=1)))
    assert [b.width for b in shown] == [512, 512, 1200]


def test_a_request_past_the_byte_budget_steps_at_once(store):
    one = len(base64.b64encode(screen(1)))
    aging = AgingSettings(lowres_turns=3, step_turns=100, step_bytes=int(2.5 * one))
    conversation = Conversation(id="s1")
    widths = []
    for turn in range(1, 6):
        person_turn(conversation, store, seed=turn)
        widths.append([getattr(b, "width", "text")
                       for b in images_of(build(conversation, store, aging))])
    assert widths[:2] == [[1200], [1200, 1200]]  # under the budget: nothing changes
    assert widths[2] == [512, 512, 1200]  # three would pass it: a step at turn 3
    assert widths[3] == [512, 512, 1200, 1200]  # then steady again, until...
    assert widths[4] == ["text", 512, 512, 512, 1200]  # ...the budget is passed again
    assert aging_clock(conversation, VISION, aging) == 5


def test_a_step_is_replayed_the_same_from_a_saved_session(store, home):
    conversation = Conversation(id="s1")
    for turn in range(1, 6):
        person_turn(conversation, store, seed=turn)
    live = build(conversation, store, EVERY_THIRD, FitCache())
    save_session(conversation, home)
    resumed = build(load_session("s1", home), store, EVERY_THIRD, FitCache())  # cold cache
    assert resumed == live  # same tiers, and every image re-encoded to the same bytes
    # the step at turn 3: the first two at low resolution, the third and later ones whole
    assert [b.width for b in images_of(live)] == [512, 512, 1200, 1200, 1200]


def idle(conversation: Conversation, seconds: float) -> None:
    """As if everything so far had happened ``seconds`` earlier."""
    for message in conversation.messages:
        message.at -= seconds


def test_a_turn_after_the_cache_expired_is_a_step(store):
    rare = AgingSettings(lowres_turns=10, step_turns=10)  # no turn-count step here
    conversation = Conversation(id="s1")
    for turn in range(1, 3):
        person_turn(conversation, store, seed=turn)
    idle(conversation, 301)  # Anthropic's cache lasts 5 minutes idle
    person_turn(conversation, store, seed=3)
    assert aging_clock(conversation, VISION, rare) == 3
    assert [b.width for b in images_of(build(conversation, store, rare))] == [512, 512, 1200]
    person_turn(conversation, store, seed=4)  # straight after: no step
    assert aging_clock(conversation, VISION, rare) == 3


def test_an_idle_turn_within_the_cache_lifetime_or_with_it_off_is_no_step(store):
    conversation = Conversation(id="s1")
    person_turn(conversation, store, seed=1)
    idle(conversation, 299)
    person_turn(conversation, store, seed=2)
    assert aging_clock(conversation, VISION, EVERY_THIRD) == 0
    idle(conversation, 3600)
    person_turn(conversation, store, seed=3)
    never = AgingSettings(lowres_turns=3, step_turns=3, cache_seconds=0)
    assert aging_clock(conversation, VISION, never) == 3  # the turn count alone
    assert aging_clock(conversation, VISION, EVERY_THIRD) == 3
    assert aging_clock(conversation, VISION, AgingSettings(cache_seconds=0)) == 0


def test_an_idle_step_is_replayed_from_a_saved_session(store, home):
    conversation = Conversation(id="s1")
    person_turn(conversation, store, seed=1)
    idle(conversation, 600)
    person_turn(conversation, store, seed=2)
    live = build(conversation, store, AgingSettings(), FitCache())
    save_session(conversation, home)
    resumed = load_session("s1", home)
    assert aging_clock(resumed, VISION, AgingSettings()) == 2
    assert build(resumed, store, AgingSettings(), FitCache()) == live
    assert [b.width for b in images_of(live)] == [512, 1200]


# -- through the SDKs, on the wire ----------------------------------------------------------


def chat(monkeypatch, srv, tmp_path: Path, turns: int, **settings) -> None:
    """``turns`` turns through the agent, each with a new screenshot file attached."""
    srv.use(monkeypatch)
    agent = Agent.start(Settings(**settings))
    for turn in range(1, turns + 1):
        path = tmp_path / f"screen-{turn}.png"
        path.write_bytes(screen(turn))
        asyncio.run(agent.send(f"turn {turn}: what changed?", [path]))


def shared(a: bytes, b: bytes) -> float:
    """The bytes ``a`` and ``b`` share from the start, as a fraction of ``a``."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # the longest common prefix, by halving (slices compare at C speed)
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid - 1)
    return lo / len(a)


def anthropic_images(body: dict) -> list[str]:
    return [b["source"]["data"] for m in body["messages"] for b in m["content"]
            if b["type"] == "image"]


def breakpoints(body: dict) -> list[tuple]:
    found = [("tools", i) for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    found += [("system", i) for i, b in enumerate(body.get("system", []))
              if "cache_control" in b]
    found += [("messages", i, j) for i, m in enumerate(body["messages"])
              for j, b in enumerate(m["content"]) if "cache_control" in b]
    return found


def test_anthropic_requests_share_their_prefix_between_steps(monkeypatch, tmp_path):
    with anthropic_server([text(f"answer {n}") for n in range(1, 7)]) as srv:
        chat(monkeypatch, srv, tmp_path, 6, provider="anthropic", aging=EVERY_THIRD)
    raws, bodies = [r.raw for r in srv.received], srv.requests
    prefix = [shared(a, b) for a, b in zip(raws, raws[1:], strict=False)]
    # requests 2, 4 and 5 hold the one before them, byte for byte, up to its last image;
    # requests 3 and 6 are steps: the oldest image changes, so little is shared
    assert all(prefix[i] > 0.95 for i in (0, 2, 3)), prefix
    assert all(prefix[i] < 0.2 for i in (1, 4)), prefix
    images = [anthropic_images(b) for b in bodies]
    assert images[1][0] == images[0][0]  # unchanged until the step...
    assert len(images[2][0]) < len(images[1][0]) / 4  # ...smaller after it
    assert images[3][:3] == images[4][:3] == images[2]
    for body in bodies:
        marks = breakpoints(body)
        assert len(marks) <= 4
        assert marks[:2] == [("tools", len(body["tools"]) - 1), ("system", 0)]
        last = body["messages"][-1]
        assert marks[-1] == ("messages", len(body["messages"]) - 1, len(last["content"]) - 1)
        assert last["content"][-1]["cache_control"] == CACHE


def test_after_an_idle_pause_the_agent_sends_old_screenshots_small(monkeypatch, tmp_path):
    with anthropic_server([text(f"answer {n}") for n in range(1, 4)]) as srv:
        srv.use(monkeypatch)
        agent = Agent.start(Settings(provider="anthropic"))  # the default aging
        for turn in range(1, 4):  # no turn-count step (turn 4) in these
            if turn == 2:
                idle(agent.conversation, 6 * 60)  # the person came back after 6 minutes
            path = tmp_path / f"screen-{turn}.png"
            path.write_bytes(screen(turn))
            asyncio.run(agent.send(f"turn {turn}: what changed?", [path]))
    raws = [r.raw for r in srv.received]
    first, second, third = (anthropic_images(b) for b in srv.requests)
    whole = [len(base64.b64encode(screen(n))) for n in (1, 2, 3)]
    assert [len(i) for i in first] == whole[:1]
    assert len(second[0]) < whole[0] / 4  # the cache had expired: aged at once
    assert len(second[1]) == whole[1]  # the new one whole
    assert third[:2] == second  # and the turn after repeats them...
    assert shared(raws[1], raws[2]) > 0.95  # ...so the cache written after the pause is read


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_openai_and_ollama_requests_grow_from_the_one_before(monkeypatch, tmp_path, kind):
    server, model = {"openai": (openai_server, "gpt-4.1"),
                     "ollama": (ollama_server, "llama3.2-vision")}[kind]
    with server([text("one"), text("two")]) as srv:
        chat(monkeypatch, srv, tmp_path, 2, provider=kind, model=model)
    first, second = srv.requests
    assert second["messages"][:len(first["messages"])] == first["messages"]
    assert shared(srv.received[0].raw, srv.received[1].raw) > 0.9


# -- usage, per turn --------------------------------------------------------------------------


def silica(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, input=stdin, timeout=300)


USAGE = {"input_tokens": 10_230, "output_tokens": 5, "cache_read_tokens": 9_000,
         "cache_write_tokens": 1_200}


def test_ask_json_reports_the_turns_usage_with_the_cache():
    with anthropic_server([text("It is a chart.", usage=(30, 5), cache=(9000, 1200))]) as srv:
        done = silica("ask", "what is it?", "--json", env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["answer"] == "It is a chart." and result["stop_reason"] == "end_turn"
    assert result["usage"] == USAGE
    assert result["session"] and f"silica chat --resume {result['session']}" in done.stderr


def test_ask_json_reads_openais_cached_tokens():
    with openai_server([text("Bars.", usage=(30, 5), cache=(9000, 0))]) as srv:
        done = silica("ask", "what is it?", "--json", "--provider", "openai", "--model",
                      "gpt-4.1", env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["usage"] == {
        "input_tokens": 9030, "output_tokens": 5, "cache_read_tokens": 9000,
        "cache_write_tokens": 0}


def test_ask_json_when_the_turn_fails_says_so_with_null():
    with anthropic_server([]) as srv:  # every request gets a 500
        done = silica("ask", "hi", "--json", env={**os.environ, **srv.env,
                                                  "SILICA_MAX_TURNS": "1"})
    assert done.returncode == 1
    assert json.loads(done.stdout) == {"answer": None, "session": None, "stop_reason": None,
                                       "usage": dict.fromkeys(USAGE, 0)}
    assert "error:" in done.stderr


def test_chat_shows_each_turns_usage_after_the_answer():
    script = [text("First.", usage=(30, 5), cache=(9000, 1200)), text("Second.", usage=(12, 7))]
    with anthropic_server(script) as srv:
        done = silica("chat", env={**os.environ, **srv.env}, stdin="one\ntwo\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert "First." in done.stdout and "Second." in done.stdout
    lines = done.stderr.splitlines()
    assert "in 10,230 (cache read 9,000, write 1,200) · out 5" in lines
    assert "in 12 · out 7" in lines
    assert "· out" not in done.stdout  # the answer's stream stays clean


def test_the_usage_line_names_only_what_was_reported():
    assert usage_line(Usage()) == ""
    assert usage_line(Usage(input_tokens=1500, output_tokens=20, cache_write_tokens=1400)) \
        == "in 1,500 (cache write 1,400) · out 20"
    assert usage_line(Usage(input_tokens=3, output_tokens=2, cache_read_tokens=1)) \
        == "in 3 (cache read 1) · out 2"
