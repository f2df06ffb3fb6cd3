"""Benchmark the agent's image handling: prompt caching, request size with aging, state, rebuild.

    python benchmarks/bench_agent.py [--turns 10] [--per-turn 3] [--repeat 5]
                                     [--chat-turns 12 30] [--strict] [--keep]

0. For each of ``--chat-turns`` (12 and 30), a chat of that many turns through the real agent
   (``Agent.send``), the real ``anthropic`` SDK and a local server speaking the Messages API
   (``tests/wire``). Each turn the person attaches a different detailed 1600x1000 screenshot
   (a crop of the desktop below) and the scripted model answers. The same chat runs again
   with aging off (``[aging] full_turns = 1000``). On the request bodies exactly as the
   server received them: the bytes each request shares from the start with the one before
   (what a prompt cache written by that one can give back), summed over the chat and
   divided by the bytes of those earlier requests (byte-weighted reuse; the per-request
   shares with their median, min and max beside it); the most byte-weighted reuse any aging
   policy could reach here with the last request within the target (``reuse_ceiling``);
   the last request's bytes against the last request of the unaged chat; the
   ``cache_control`` breakpoints of the last request (present, at most 4); and, report
   only, the same chat with other aging settings (``POLICIES``): each one's reuse, last
   request and cost in plain input bytes, counting the prefix a request shares with the one
   before as a cache read (0.1 a byte) and the rest as a cache write (1.25 a byte).
   The first chat again with ``[anthropic] files_api = true`` (the server speaks the Files API
   too): the image bytes sent over all its turns (the upload requests' bodies, plus any image
   still sent inline as base64) against the base64 of the same requests' images inline (each
   file a request names counted as the base64 of the bytes uploaded for it: that request
   with the Files API off); and, for scale, against every screenshot sent at full size in
   every request (no aging).

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

import asyncio
import base64
import json
import os
import shlex
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import PIL
from common import (
    REPO,
    Row,
    bench_parser,
    console,
    crop_png,
    med,
    ms,
    note,
    report,
    screenshot_png,
    spread,
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
REUSE_TARGET = 0.9
LAST_TARGET = 0.15
FILES_TARGET = 0.2
MAX_BREAKPOINTS = 4
CHAT_SIZE = (1600, 1000)
STATE_TARGET = 1 * MB
INFO = ModelInfo(vision=True, limits=ANTHROPIC)
NO_AGING = AgingSettings(full_turns=1000)
UNAGED = {"full_turns": 1000}
WRITE, READ = 1.25, 0.1  # Anthropic's price of a cache write and a cache read, per input byte
POLICIES = {"a step every turn": {"step_turns": 1, "lowres_turns": 1},
            "a step every 6 turns": {"step_turns": 6, "lowres_turns": 6}}
"""Other aging settings the chat runs with, for the cost of reuse (beside the default and
aging off)."""



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


# -- the cached chat -----------------------------------------------------------------------


def chat_screenshot(seed: int) -> bytes:
    """A detailed 1600x1000 PNG: the top-left of a desktop screenshot, pixel for pixel."""
    return crop_png(screenshot_png(seed), (0, 0, *CHAT_SIZE))


def shared_prefix(a: bytes, b: bytes) -> int:
    """How many bytes ``a`` and ``b`` share from the start (a binary search on slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def breakpoints(body: dict) -> list[str]:
    """Where a request body carries ``cache_control``: ``tools[i]``, ``system[i]``,
    ``messages[i][j]``."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools") or [])
             if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += [f"system[{i}]" for i, b in enumerate(system) if "cache_control" in b]
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, list):
            found += [f"messages[{i}][{j}]" for j, b in enumerate(content)
                      if isinstance(b, dict) and "cache_control" in b]
    return found


def chat_session(root: Path, turns: int, *, files_api: bool = False,
                 aging: dict[str, int] | None = None,
                 label: str = "chat") -> tuple[Any, list[int]]:
    """The chat through the agent and the SDK (``[anthropic] files_api`` and ``[aging]`` as
    given); the local server when it is over (what it ``received``, its ``files``) and the
    base64 bytes of each screenshot at full size."""
    sys.path.insert(0, str(REPO / "tests"))
    from wire import anthropic_server, text

    from silica.agent.loop import Agent
    from silica.config import Settings

    folder = root / f"{label}-files-{turns}" if files_api else root / f"{label}-{turns}"
    (folder / ".git").mkdir(parents=True)  # tool discovery stops here
    paths, full = [], []
    for turn in range(1, turns + 1):
        data = chat_screenshot(100 + turn)
        path = folder / f"screen-{turn:02d}.png"
        path.write_bytes(data)
        paths.append(path)
        fitted = prepare_image(ImagePayload(data, "image/png", path.name), ANTHROPIC)
        assert isinstance(fitted, ImageBlock), fitted
        full.append(len(base64.b64encode(fitted.data)))
    script = [text(f"Turn {t}: the chart changed and the terminal shows step {t}.")
              for t in range(1, turns + 1)]
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with anthropic_server(script) as srv:
            os.environ.update(srv.env)
            agent = Agent.start(Settings(provider="anthropic", aging=aging or {},
                                         anthropic={"files_api": files_api}))
            for turn, path in enumerate(paths, start=1):
                asyncio.run(agent.send(f"Here is the screen now (turn {turn}). What changed?",
                                       [path]))
    finally:
        os.chdir(cwd)
    return srv, full


def reuse_ceiling(unaged: list[int], full: list[int]) -> float:
    """The most byte-weighted reuse any aging policy can reach in this chat if its last
    request stays within ``LAST_TARGET`` of the unaged one and each screenshot is sent whole
    in its own turn. The last request holds at most ``LAST_TARGET * unaged[-1]`` bytes of
    whole screenshots; every other screenshot was shrunk at some step, and the request
    before that step held it whole, so its full bytes are not shared with the next request:
    at least ``sum(full) - LAST_TARGET * unaged[-1]`` bytes are lost, out of at most the
    unaged requests' bytes (``unaged``: the bodies of the same chat with aging off; ``full``:
    each screenshot's base64 at full size)."""
    lost = max(0.0, sum(full) - LAST_TARGET * unaged[-1])
    return 1 - lost / sum(unaged[:-1])


def cache_cost(raws: list[bytes]) -> tuple[float, float]:
    """Byte-weighted reuse of ``raws`` (request bodies in order) and what they cost in plain
    input bytes if each request reads from the cache the prefix it shares with the one before
    (``READ`` a byte) and writes the rest (``WRITE`` a byte)."""
    shared = [shared_prefix(a, b) for a, b in zip(raws, raws[1:], strict=False)]
    written = [len(raws[0])] + [len(b) - n for b, n in zip(raws[1:], shared, strict=True)]
    return (sum(shared) / sum(len(a) for a in raws[:-1]),
            WRITE * sum(written) + READ * sum(shared))


def bench_costs(root: Path, turns: int, default: list[bytes], unaged: list[bytes]) -> Row:
    """The chat's reuse, last request and cost with the default aging, other settings
    (``POLICIES``) and aging off: more reuse can cost more."""
    runs = {"default": default}
    for name, aging in POLICIES.items():
        srv, _ = chat_session(root, turns, aging=aging, label=name.replace(" ", "-"))
        runs[name] = [r.raw for r in srv.received]
    runs["aging off"] = unaged
    parts = []
    for name, raws in runs.items():
        reuse, cost = cache_cost(raws)
        parts.append(f"{name}: reuse {reuse:.3f}, last {len(raws[-1]) / len(unaged[-1]):.3f}×, "
                     f"cost {cost / MB:.2f} MB")
    base = cache_cost(default)[1]
    return Row(f"{turns}-turn chat: byte-weighted reuse, last request vs aging off, and cost "
               f"(cache writes {WRITE}, reads {READ} of a plain input byte) by aging setting",
               "; ".join(parts), f"default {base / cache_cost(unaged)[1]:.3f}× of aging off",
               "report only", "INFO")


def three(x: float) -> str:
    return f"{x:.3f}"


def bench_chat(root: Path, turns: int) -> list[Row]:
    srv, full = chat_session(root, turns)
    raws, bodies = [r.raw for r in srv.received], srv.requests
    unaged_srv, _ = chat_session(root, turns, aging=UNAGED, label="unaged")
    unaged = [len(r.raw) for r in unaged_srv.received]
    shared = [shared_prefix(a, b) for a, b in zip(raws, raws[1:], strict=False)]
    ratios = [s / len(a) for s, a in zip(shared, raws, strict=False)]
    weighted, _ = cache_cost(raws)
    ceiling = reuse_ceiling(unaged, full)
    last = len(raws[-1])
    marks = breakpoints(bodies[-1])
    shown = " ".join(f"{r:.3f}" for r in ratios)
    return [
        Row.judged(f"{turns}-turn chat, a 1600x1000 screenshot a turn (agent, SDK, wire "
                   "server): bytes each request shares from the start with the one before, "
                   "summed, over the bytes of those earlier requests (byte-weighted reuse)",
                   f"per request: {shown}; median {spread(ratios, three)}; "
                   f"{sum(shared) / MB:.2f} MB of {sum(len(a) for a in raws[:-1]) / MB:.2f} MB",
                   weighted, f"{weighted:.3f}", f"≥ {REUSE_TARGET:.2f}",
                   weighted >= REUSE_TARGET),
        Row(f"{turns}-turn chat: the most byte-weighted reuse any policy can reach with the "
            f"last request ≤ {LAST_TARGET:.2f}× the unaged one (see reuse_ceiling)",
            f"every screenshot shrunk before the end loses its full bytes once, out of "
            f"{sum(unaged[:-1]) / MB:.2f} MB of unaged requests", f"{ceiling:.3f}",
            "report only", "INFO", ceiling),
        Row.judged(f"the last of the {turns} requests vs the same chat's last request with "
                   "aging off (every screenshot at full size)",
                   f"{last / MB:.2f} MB vs {unaged[-1] / MB:.2f} MB", last / unaged[-1],
                   f"{last / unaged[-1]:.3f}×", f"≤ {LAST_TARGET:.2f}×",
                   last / unaged[-1] <= LAST_TARGET),
        Row.judged(f"cache_control breakpoints in the last of the {turns} requests",
                   ", ".join(marks) or "none", len(marks), f"{len(marks)}",
                   f"1 to {MAX_BREAKPOINTS}", 1 <= len(marks) <= MAX_BREAKPOINTS),
        bench_costs(root, turns, raws, [r.raw for r in unaged_srv.received]),
    ]


def image_sources(body: Any) -> Iterator[dict]:
    """The ``source`` of every image block in a request body."""
    if isinstance(body, dict):
        if body.get("type") == "image" and isinstance(body.get("source"), dict):
            yield body["source"]
        for value in body.values():
            yield from image_sources(value)
    elif isinstance(body, list):
        for value in body:
            yield from image_sources(value)


def bench_files(root: Path, turns: int) -> Row:
    srv, full = chat_session(root, turns, files_api=True)
    uploaded = {u.file_id: len(u.data) for u in srv.files.uploads}
    upload_bytes = sum(len(r.raw) for r in srv.received if r.path.split("?")[0] == "/v1/files")
    inline = as_base64 = 0
    for r in srv.received:
        if r.path.split("?")[0] != "/v1/messages":
            continue
        for source in image_sources(r.body):
            if source.get("type") == "file":
                as_base64 += 4 * ((uploaded[source["file_id"]] + 2) // 3)
            else:
                inline += len(source.get("data", ""))
                as_base64 += len(source.get("data", ""))
    sent = upload_bytes + inline
    # in the order the API caches a prompt (its JSON puts messages before system and tools,
    # which are a large part of a request that carries no image bytes)
    cached = [json.dumps([r.body.get(k) for k in ("tools", "system", "messages")]).encode()
              for r in srv.received if r.path.split("?")[0] == "/v1/messages"]
    prefix = statistics.median(shared_prefix(a, b) / len(a)
                               for a, b in zip(cached, cached[1:], strict=False))
    every_turn = sum(size * (turns - t) for t, size in enumerate(full))  # in requests t..n
    ratio = sent / as_base64 if as_base64 else float("inf")
    if not srv.files.uploads:
        return Row(f"Files API: image bytes sent over {turns} turns vs base64",
                   "no upload: the agent's requests name no session (Request.session_id)",
                   "-", f"≤ {FILES_TARGET:.2f}×", "FAIL")
    return Row.judged(
        f"Files API: image bytes sent over {turns} turns vs base64 (the same chat, files_api "
        "= true: uploads + any base64 left, vs those requests' images inline)",
        f"{len(srv.files.uploads)} uploads, {sent / MB:.2f} MB vs {as_base64 / MB:.2f} MB; "
        f"vs every screenshot at full size in every request ({every_turn / MB:.2f} MB): "
        f"{sent / every_turn:.3f}×; prefix (tools, system, messages) shared with the request "
        f"before: median {prefix:.3f}", ratio, f"{ratio:.3f}×", f"≤ {FILES_TARGET:.2f}×",
        ratio <= FILES_TARGET)


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
    parser.add_argument("--chat-turns", type=int, nargs="+", default=[12, 30],
                        help="turns of the cached chat (one screenshot each), one chat each")
    opts = parser.parse_args()
    command = "python benchmarks/bench_agent.py " + shlex.join(
        [f"--turns={opts.turns}", f"--per-turn={opts.per_turn}", f"--repeat={opts.repeat}",
         "--chat-turns", *map(str, opts.chat_turns)])

    started = time.perf_counter()
    rows: list[Row] = []
    with temporary_folder("silica-bench-agent-", opts.keep) as root:
        os.environ["SILICA_HOME"] = str(root / "home")
        console.print(f"silica agent benchmark: {opts.turns} turns x {opts.per_turn} "
                      f"screenshots, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
                      f"Pillow {PIL.__version__}", soft_wrap=True)
        for turns in opts.chat_turns:
            note(f"a {turns}-turn chat with a 1600x1000 screenshot a turn, through the agent, "
                 "the anthropic SDK and a local Messages API, with aging and without")
            rows += bench_chat(root, turns)
        note(f"the {opts.chat_turns[0]}-turn chat with the Anthropic Files API "
             "(files_api = true)")
        rows.append(bench_files(root, opts.chat_turns[0]))
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
