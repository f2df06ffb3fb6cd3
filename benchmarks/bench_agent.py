"""Benchmark the agent's image handling: request size with aging, conversation state, rebuild time.

    python benchmarks/bench_agent.py [--turns 10] [--per-turn 3] [--repeat 5] [--strict] [--keep]

A session of ``--turns`` turns; in each, the person asks, the model calls a screenshot tool,
and the tool returns ``--per-turn`` different 1920x1080 desktop-like PNGs (drawn with Pillow:
gradient wallpaper, windows with title bars, code, a terminal, a chart, a taskbar). Each PNG
goes the way a tool result goes: ``prepare_image`` (``ANTHROPIC``), then ``ImageStore.put``.

1. Bytes of the last turn's request with the default ``AgingSettings()`` against the same
   request with aging off (``AgingSettings(full_turns=1000)``). Request bytes are the length of
   ``json.dumps`` of the messages, each image in its Anthropic base64 form
   (``ImageBlock.to_anthropic()``), each text as ``{"type": "text", "text": ...}``.
2. The conversation state held in memory for 30 screenshots (refs): the size of
   ``conversation.model_dump_json()`` and the ``tracemalloc`` peak of building the
   conversation and dumping it (the images are put in the store before tracing starts).
3. Time to build the last request with an empty fit cache (cold) and again (warm).

Everything happens in a fresh temporary folder with its own ``SILICA_HOME``. Figures are
medians of ``--repeat`` runs. 1 MB = 1,000,000 bytes. The script reports; it is not a test:
it exits 0 even when a target is missed, unless ``--strict`` is given.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import tracemalloc

import PIL
from common import (
    Row,
    bench_parser,
    console,
    med,
    ms,
    note,
    report,
    screenshot_png,
    temporary_folder,
)

from silica.agent.conversation import Conversation, ToolCall, ToolResultBlock
from silica.agent.render import FitCache, build_request
from silica.blocks import ImageBlock, ImageRefBlock, TextBlock
from silica.config import AgingSettings
from silica.images.check import prepare_image
from silica.images.limits import ANTHROPIC
from silica.images.payload import ImagePayload
from silica.images.store import ImageStore
from silica.providers.base import ModelInfo, Request, RequestToolResult

MB = 1_000_000
AGING_TARGET = 0.15
STATE_TARGET = 1 * MB
INFO = ModelInfo(vision=True, limits=ANTHROPIC)
NO_AGING = AgingSettings(full_turns=1000)



# -- the session --------------------------------------------------------------------------


def fitted_screenshots(count: int) -> list[ImageBlock]:
    """``count`` screenshots as a tool result would hold them (after ``prepare_image``)."""
    blocks = []
    for seed in range(count):
        block = prepare_image(ImagePayload(screenshot_png(seed), "image/png", "json"), ANTHROPIC)
        assert isinstance(block, ImageBlock), block
        blocks.append(block)
    return blocks


def build_conversation(session: str, refs: list[list[ImageRefBlock]]) -> Conversation:
    """One turn per item of ``refs``: a question, a tool call, its images, an answer."""
    conversation = Conversation(id=session, provider="anthropic", model="claude-sonnet-4-5")
    for turn, images in enumerate(refs, start=1):
        conversation.add("user", [TextBlock(text=f"Step {turn}: take screenshots and tell me "
                                            "what changed on the dashboard.")], new_turn=True)
        calls = [ToolCall(id=f"call_{turn}_{i}", name="screenshot", arguments={"display": i})
                 for i in range(len(images))]
        conversation.add("assistant", [TextBlock(text="Taking screenshots."), *calls])
        conversation.add("user", [ToolResultBlock(call_id=c.id, name=c.name,
                                                  content=[TextBlock(text="1920x1080"), ref])
                                  for c, ref in zip(calls, images, strict=True)])
        conversation.add("assistant", [TextBlock(text=f"In step {turn} the chart moved and the "
                                                 "terminal printed new loss values.")])
    return conversation


def request_bytes(request: Request) -> int:
    """Length of the messages as JSON, images in their Anthropic base64 form."""

    def wire(block) -> dict:
        if isinstance(block, ImageBlock | TextBlock):
            return block.to_anthropic()
        if isinstance(block, RequestToolResult):
            return {"type": "tool_result", "tool_use_id": block.call_id,
                    "is_error": block.is_error, "content": [wire(b) for b in block.content]}
        return {"type": "tool_use", "id": block.id, "name": block.name,
                "input": block.arguments}

    messages = [{"role": m.role, "content": [wire(b) for b in m.content]}
                for m in request.messages]
    return len(json.dumps(messages))


def count_images(request: Request) -> int:
    n = 0
    for m in request.messages:
        for b in m.content:
            inner = b.content if isinstance(b, RequestToolResult) else [b]
            n += sum(isinstance(x, ImageBlock) for x in inner)
    return n


def build(conversation: Conversation, store: ImageStore, aging: AgingSettings,
          cache: FitCache) -> Request:
    return build_request(conversation, store, model="claude-sonnet-4-5", info=INFO, aging=aging,
                         tools=[], cache=cache)


# -- measures -----------------------------------------------------------------------------


def bench_aging(conversation: Conversation, store: ImageStore) -> Row:
    cache = FitCache()
    aged = build(conversation, store, AgingSettings(), cache)
    whole = build(conversation, store, NO_AGING, cache)
    a, w = request_bytes(aged), request_bytes(whole)
    return Row(f"last request of {conversation.turn} turns: default AgingSettings() vs aging "
               "off (full_turns=1000)",
               f"{a / MB:.2f} MB ({count_images(aged)} images) vs {w / MB:.2f} MB "
               f"({count_images(whole)} images)", f"{a / w:.3f}×", f"≤ {AGING_TARGET:.2f}×",
               "PASS" if a / w <= AGING_TARGET else "FAIL")


def bench_state(session: str, refs: list[list[ImageRefBlock]], repeat: int) -> Row:
    sizes, peaks = [], []
    for _ in range(repeat):
        tracemalloc.start()
        conversation = build_conversation(session, refs)
        dumped = conversation.model_dump_json()
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        sizes.append(len(dumped))
    n = sum(len(r) for r in refs)
    size, peak = med(sizes), med(peaks)
    worst = max(size, peak)
    return Row(f"conversation state with {n} screenshots as refs: model_dump_json() size and "
               "tracemalloc peak of building + dumping it",
               f"JSON {size / 1000:,.1f} kB, peak {peak / 1000:,.1f} kB",
               f"{worst / STATE_TARGET:.3f} of target", "both ≤ 1 MB",
               "PASS" if worst <= STATE_TARGET else "FAIL")


def bench_rebuild(conversation: Conversation, store: ImageStore, repeat: int) -> Row:
    cold, warm = [], []
    cache = FitCache()
    for _ in range(repeat):
        cache.clear()
        started = time.perf_counter()
        build(conversation, store, AgingSettings(), cache)
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        build(conversation, store, AgingSettings(), cache)
        warm.append(time.perf_counter() - started)
    c, w = med(cold), med(warm)
    return Row("build_request for the last turn: cold (empty fit cache) vs warm",
               f"{ms(c)} vs {ms(w)}", f"warm {c / w:,.0f}× faster", "report only", "INFO")


# -- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--turns", type=int, default=10, help="turns in the session")
    parser.add_argument("--per-turn", type=int, default=3, help="screenshots per turn")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    opts = parser.parse_args()
    command = "python benchmarks/bench_agent.py " + shlex.join(
        [f"--turns={opts.turns}", f"--per-turn={opts.per_turn}", f"--repeat={opts.repeat}"])

    started = time.perf_counter()
    rows: list[Row] = []
    with temporary_folder("silica-bench-agent-", opts.keep) as root:
        os.environ["SILICA_HOME"] = str(root / "home")
        console.print(f"silica agent benchmark: {opts.turns} turns x {opts.per_turn} "
                      f"screenshots, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
                      f"Pillow {PIL.__version__}", soft_wrap=True)
        total = opts.turns * opts.per_turn
        note(f"drawing and fitting {total} 1920x1080 screenshots")
        blocks = fitted_screenshots(total)
        avg = sum(len(b.data) for b in blocks) / total
        console.print(f"each screenshot as the tool result holds it: {blocks[0].width}x"
                      f"{blocks[0].height} {blocks[0].media_type}, {avg / 1000:,.0f} kB on "
                      "average")
        session = "bench-session"
        store = ImageStore(root / "home" / "images", session)
        refs = []
        for t in range(opts.turns):
            turn = blocks[t * opts.per_turn:(t + 1) * opts.per_turn]
            refs.append([store.put(b, alt=f"screenshot {t + 1}.{i + 1}")
                         for i, b in enumerate(turn)])
        conversation = build_conversation(session, refs)
        note("request bytes with and without aging")
        rows.append(bench_aging(conversation, store))
        note("conversation state in memory")
        rows.append(bench_state(session, refs, opts.repeat))
        note("rebuilding the request, cold and warm")
        rows.append(bench_rebuild(conversation, store, opts.repeat))

    return report(rows, title="silica agent benchmark", command=command, started=started,
                  strict=opts.strict)


if __name__ == "__main__":
    sys.exit(main())
