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

import argparse
import io
import json
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import PIL
from PIL import Image, ImageDraw, ImageFont
from rich.console import Console
from rich.table import Table

from silica.agent.conversation import Conversation, ToolCall, ToolResultBlock
from silica.agent.render import FitCache, build_request
from silica.blocks import ImageBlock, ImageRefBlock, TextBlock
from silica.config import AgingSettings
from silica.images.check import prepare_image
from silica.images.limits import ANTHROPIC
from silica.images.payload import ImagePayload
from silica.images.store import ImageStore
from silica.providers.base import ModelInfo, Request, RequestToolResult

REPO = Path(__file__).resolve().parent.parent
MB = 1_000_000
AGING_TARGET = 0.15
STATE_TARGET = 1 * MB
INFO = ModelInfo(vision=True, limits=ANTHROPIC)
NO_AGING = AgingSettings(full_turns=1000)

console = Console(highlight=False)
if not console.is_terminal:  # piped or logged: do not squeeze the table into 80 columns
    console = Console(highlight=False, width=150)


def note(message: str) -> None:
    console.print(f"[dim]… {message}[/dim]")


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


@dataclass
class Row:
    measure: str
    figures: str
    ratio_text: str
    target: str
    verdict: str  # PASS, FAIL, INFO (report only)


# -- screenshots --------------------------------------------------------------------------

WORDS = ["def", "return", "self", "value", "import", "from", "class", "for", "in", "if", "else",
         "None", "True", "list", "dict", "result", "data", "image", "width", "height", "async",
         "await", "yield", "config", "path", "session", "store", "turn", "request"]
PALETTE = [(198, 120, 221), (97, 175, 239), (152, 195, 121), (229, 192, 123), (171, 178, 191),
           (224, 108, 117)]


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except Exception:  # no FreeType: the bitmap font
        return ImageFont.load_default()


def screenshot_png(seed: int) -> bytes:
    """A 1920x1080 desktop; ``seed`` moves the windows and changes every text and colour."""
    rng = random.Random(seed)
    w, h = 1920, 1080
    ramp = Image.linear_gradient("L").rotate(rng.choice([0, 90, 180, 270])).resize((w, h))
    tint = [rng.randrange(10, 60) for _ in range(3)]
    img = Image.merge("RGB", [ramp.point(lambda v, t=t, k=k: t + v // k)
                              for t, k in zip(tint, (5, 4, 2), strict=True)])
    d = ImageDraw.Draw(img)
    font, small, big = _font(14), _font(12), _font(26)

    def window(box: tuple[int, int, int, int], name: str, bg: tuple[int, int, int]) -> None:
        x0, y0, x1, y1 = box
        d.rectangle((x0 + 6, y0 + 6, x1 + 6, y1 + 6), fill=(10, 15, 30))  # shadow
        d.rectangle(box, fill=bg, outline=(90, 90, 100))
        d.rectangle((x0, y0, x1, y0 + 28), fill=(58, 60, 68))
        for i, c in enumerate([(237, 106, 94), (245, 191, 79), (98, 197, 84)]):
            d.ellipse((x0 + 10 + 20 * i, y0 + 8, x0 + 22 + 20 * i, y0 + 20), fill=c)
        d.text((x0 + 80, y0 + 7), name, fill=(220, 220, 225), font=small)

    ex, ey = rng.randrange(20, 200), rng.randrange(20, 120)  # editor
    window((ex, ey, ex + 1000, ey + 700), f"{rng.choice(WORDS)}.py - editor", (30, 31, 38))
    d.rectangle((ex + 1, ey + 29, ex + 200, ey + 699), fill=(37, 38, 46))
    for i in range(28):
        d.text((ex + 15, ey + 40 + i * 22), f"{'  ' * (i % 3)}{rng.choice(WORDS)}_{i}.py",
               fill=(170, 175, 190), font=small)
    for line in range(30):
        y = ey + 40 + line * 21
        d.text((ex + 210, y), f"{line + 1:>3}", fill=(90, 95, 110), font=font)
        x = ex + 250 + 28 * rng.randrange(4)
        for _ in range(rng.randrange(2, 9)):
            word = rng.choice(WORDS) + rng.choice(["", "(", ":", ",", " =", "."])
            d.text((x, y), word, fill=rng.choice(PALETTE), font=font)
            x += int(d.textlength(word + " ", font=font))
            if x > ex + 970:
                break
    tx, ty = rng.randrange(1100, 1200), rng.randrange(40, 120)  # terminal
    window((tx, ty, tx + 700, ty + 440), "zsh - 120x30", (12, 12, 14))
    for line in range(18):
        text = (f"$ python run.py --step {line}" if line % 4 == 0 else
                f"[{line:02d}] loss={rng.uniform(0.1, 2):.4f} acc={rng.uniform(50, 99):.2f}% "
                f"{rng.getrandbits(24):06x}")
        d.text((tx + 12, ty + 36 + line * 22), text, font=font,
               fill=(120, 220, 120) if line % 4 == 0 else (200, 200, 200))
    bx, by = rng.randrange(600, 760), rng.randrange(400, 460)  # browser with a chart
    window((bx, by, bx + 1100, by + 580), "Dashboard - Browser", (250, 250, 252))
    d.rounded_rectangle((bx + 20, by + 36, bx + 1080, by + 64), radius=12, fill=(235, 236, 240))
    d.text((bx + 40, by + 42), f"https://example.internal/{rng.choice(WORDS)}?range=7d",
           fill=(60, 60, 70), font=font)
    d.text((bx + 30, by + 80), f"Report {rng.randrange(1000)}", fill=(20, 20, 30), font=big)
    for line in range(12):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(6, 12)))
        d.text((bx + 30, by + 126 + line * 20), text, fill=(70, 70, 80), font=font)
    cx, cy = bx + 590, by + 120
    d.rectangle((cx, cy, cx + 480, cy + 440), fill=(244, 246, 250), outline=(200, 205, 215))
    colour = rng.choice(PALETTE)
    for i in range(12):
        bh = rng.randrange(40, 380)
        d.rectangle((cx + 15 + i * 38, cy + 430 - bh, cx + 40 + i * 38, cy + 430), fill=colour)
    d.rectangle((0, h - 44, w, h), fill=(28, 28, 34))  # taskbar
    for i in range(9):
        d.rounded_rectangle((16 + i * 52, h - 38, 56 + i * 52, h - 6), radius=8,
                            fill=(60 + 20 * i % 150, 90, 160 - 10 * i))
    d.text((w - 150, h - 30), f"{rng.randrange(24):02d}:{rng.randrange(60):02d}  09/05/2026",
           fill=(230, 230, 230), font=font)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


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

VERDICT_STYLE = {"PASS": "green", "FAIL": "red", "INFO": "cyan"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="turns in the session")
    parser.add_argument("--per-turn", type=int, default=3, help="screenshots per turn")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    opts = parser.parse_args()
    command = "python benchmarks/bench_agent.py " + shlex.join(
        [f"--turns={opts.turns}", f"--per-turn={opts.per_turn}", f"--repeat={opts.repeat}"])

    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="silica-bench-agent-"))
    os.environ["SILICA_HOME"] = str(root / "home")
    rows: list[Row] = []
    try:
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
    finally:
        if opts.keep:
            console.print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    table = Table(title="silica agent benchmark")
    for col in ("measure", "figures (median)", "ratio", "target", "result"):
        table.add_column(col, overflow="fold")
    for r in rows:
        style = VERDICT_STYLE[r.verdict]
        table.add_row(r.measure, r.figures, r.ratio_text, r.target,
                      f"[{style}]{r.verdict}[/{style}]")
    console.print(table)

    console.print("\nsummary:", markup=False)
    for r in rows:
        console.print(f"  {r.verdict}  {r.measure}: {r.figures} -> {r.ratio_text} "
                      f"(target {r.target})", markup=False, soft_wrap=True)
    checked = [r for r in rows if r.verdict in ("PASS", "FAIL")]
    failed = [r for r in checked if r.verdict == "FAIL"]
    console.print(f"{len(checked) - len(failed)}/{len(checked)} targets met; "
                  f"took {time.perf_counter() - started:.0f} s", markup=False)
    console.print(f"reproduce: cd {REPO} && . .venv/bin/activate && {command}", markup=False,
                  soft_wrap=True)
    return 1 if opts.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
