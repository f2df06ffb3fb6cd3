"""Benchmark silica's image path: kitty extraction speed against npm, image fitting, tokens.

    python benchmarks/bench_images.py [--repeat 20] [--strict] [--keep]

1. silica's kitty extraction against ``extractKittyGraphics`` from the npm package
   ``kitty-graphics-agent`` (installed at run time with ``npm install --no-save`` into the
   temporary folder; nothing is installed anywhere else). Both sides get the same bytes: each
   input is written to a file once and each side reads it before its clock starts, each as
   its extractor takes it: silica the bytes (what a tool's output is), node a string decoded
   from them (the decoding is not timed). Only the extraction is timed, in process on each
   side: on silica's side, the ``kitty-graphics`` result processor exactly as
   ``build_result`` runs it on a tool's output bytes (``silica.results.kitty.cut_kitty``),
   which leaves the text as bytes; on node's side, a small script written to the temporary
   folder that answers one command a line (``NODE_SCRIPT``). The sides take turns, run by
   run, so that a machine shared with other work loads both alike. The npm extractor returns
   images as base64 text, so the node side also decodes each one to a ``Buffer``: base64 is
   decoded on both sides. Neither side's text decoding is in the ratio; both are printed:
   silica decodes what is left once the images are out (once, for every processor after
   it), node decodes its whole input before it can search it. Minor page faults a run are
   printed where either side takes 200 or more. Both results are checked against the images
   and text that went in. These rows are warm (each follows a warm-up run and the rows before
   it); the 1,000 small images are judged again with every run a fresh process on both
   sides (``FRESH_SILICA``, ``FRESH_NODE``), taking turns, extraction timed inside each and
   its minor page faults printed.
2. ``prepare_image`` (default ``ANTHROPIC`` limits) on a 1920x1080 screenshot-like PNG.
3. The tokens that screenshot costs as an image block, after ``extract_json_images`` and
   ``prepare_image``, against its base64 left as text.

Figures are medians of ``--repeat`` runs, after one untimed warm-up run (the fresh-process row:
min/median/max). 1 MB = 1,000,000
bytes. The script reports; it is not a test: it exits 0 even when a target is missed, unless
``--strict`` is given (then a missed target exits 1; a comparison that could not be made,
e.g. without network for npm, is NOT MEASURED and does not fail).
"""

from __future__ import annotations

import base64
import contextlib
import gc
import hashlib
import io
import json
import os
import random
import resource
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import PIL
from common import (
    Row,
    bench_parser,
    console,
    installed_env,
    interleaved,
    load_line,
    med,
    note,
    report,
    screenshot_png,
    spread,
    temporary_folder,
    write_bytecode,
)
from common import ms as _ms
from PIL import Image

from silica.blocks import ImageBlock
from silica.images.check import prepare_image
from silica.images.limits import ANTHROPIC
from silica.images.payload import ImagePayload
from silica.images.tokens import estimate_tokens
from silica.plugins import get_plugin_manager
from silica.results import escapes
from silica.results.json_images import extract_json_images
from silica.results.pipeline import ResultDraft, result_processors

NPM_PACKAGE = "kitty-graphics-agent"
MB = 1_000_000
CHUNK = 4096  # base64 characters per kitty chunk
TOKEN_TARGET = 1_850

ms = partial(_ms, sub_ms_digits=2)  # 0.12 ms, 3.4 ms, 12.34 s


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


# -- inputs -------------------------------------------------------------------------------

LEVELS = ["INFO"] * 12 + ["DEBUG"] * 6 + ["WARN"] * 2 + ["ERROR"]
MODULES = ["http.server", "db.pool", "worker.queue", "auth.session", "cache.redis",
           "scheduler", "storage.s3", "api.v2.items", "metrics", "mailer"]
PATHS = ["/api/v1/items", "/api/v1/users", "/healthz", "/api/v2/search", "/static/app.js",
         "/api/v1/orders", "/login", "/api/v1/items/export"]
USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "-"]
COLOURS = {"INFO": "32", "DEBUG": "2", "WARN": "33", "ERROR": "1;31"}


def log_line(rng: random.Random, n: int, ansi: bool) -> str:
    """One realistic service log line (with ANSI colours on the time, level and module)."""
    ts = f"2026-05-09T{7 + n // 3_600_000 % 12:02d}:{n // 60_000 % 60:02d}:" \
         f"{n // 1000 % 60:02d}.{n % 1000:03d}{rng.randrange(1000):03d}Z"
    level = rng.choice(LEVELS)
    module = rng.choice(MODULES)
    kind = rng.randrange(5)
    if kind == 0:
        msg = (f"{rng.choice(['GET', 'GET', 'POST', 'PUT', 'DELETE'])} "
               f"{rng.choice(PATHS)}/{rng.randrange(100000)} "
               f"{rng.choice([200, 200, 200, 201, 204, 304, 404, 500])} "
               f"{rng.uniform(0.2, 900):.1f}ms user={rng.choice(USERS)} "
               f"req={rng.getrandbits(32):08x}")
    elif kind == 1:
        msg = (f"query ok rows={rng.randrange(5000)} took={rng.uniform(0.1, 250):.2f}ms "
               f"pool={rng.randrange(1, 33)}/32 stmt=select_{rng.choice(MODULES).split('.')[0]}")
    elif kind == 2:
        msg = (f"job {rng.getrandbits(48):012x} {rng.choice(['started', 'finished', 'retrying'])}"
               f" attempt={rng.randrange(1, 6)} queue={rng.choice(['default', 'mail', 'bulk'])}")
    elif kind == 3:
        msg = (f"cache {rng.choice(['hit', 'hit', 'miss', 'evict'])} "
               f"key=item:{rng.randrange(10**6)}:v{rng.randrange(9)} "
               f"size={rng.randrange(64, 65536)}B ttl={rng.randrange(3600)}s")
    else:
        msg = (f"gc pause={rng.uniform(0.1, 40):.2f}ms heap={rng.uniform(80, 2048):.1f}MiB "
               f"goroutines={rng.randrange(10, 4000)} rss={rng.uniform(100, 4096):.0f}MiB")
    worker = f"[worker-{rng.randrange(16)}]"
    if ansi:
        c = COLOURS[level]
        return (f"\x1b[2m{ts}\x1b[0m \x1b[{c}m{level:<5}\x1b[0m {worker} "
                f"\x1b[36m{module}\x1b[0m: {msg}\n")
    return f"{ts} {level:<5} {worker} {module}: {msg}\n"


def log_text(size: int, seed: int, ansi: bool = False) -> str:
    """Whole log lines, about ``size`` characters of them."""
    rng = random.Random(seed)
    lines: list[str] = []
    total = n = 0
    while total < size:
        line = log_line(rng, n * 137, ansi)
        lines.append(line)
        total += len(line)
        n += 1
    return "".join(lines)


def noise_png(side: int, seed: int) -> bytes:
    """A PNG of random RGB pixels: incompressible, about 3 * side * side bytes."""
    pixels = random.Random(seed).randbytes(side * side * 3)
    buf = io.BytesIO()
    Image.frombytes("RGB", (side, side), pixels).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def kitty_sequences(png: bytes, chunk: int | None, repeat_keys: bool = False) -> str:
    """``png`` as kitty graphics: one sequence, or ``chunk``-character chunks (``m=1``...)."""
    b64 = base64.b64encode(png).decode("ascii")
    if chunk is None:
        return f"\x1b_Ga=T,f=100;{b64}\x1b\\"
    parts = []
    for at in range(0, len(b64), chunk):
        more = 1 if at + chunk < len(b64) else 0
        keys = "a=T,f=100," if at == 0 or repeat_keys else ""
        parts.append(f"\x1b_G{keys}m={more};{b64[at:at + chunk]}\x1b\\")
    return "".join(parts)


@dataclass
class Case:
    name: str
    label: str
    text: str
    expected_text: str
    expected_images: list[str]  # sha256 of each image, in order
    target: float | None = 1.0  # the least ratio silica / node; None: report only
    path: Path = field(default=Path())


def with_images(text: str, pngs: list[bytes], repeat_keys: bool) -> str:
    """``text`` cut at line ends into ``len(pngs) + 1`` pieces, an image between each two."""
    pieces: list[str] = []
    start = 0
    for i in range(1, len(pngs) + 1):
        cut = text.index("\n", len(text) * i // (len(pngs) + 1)) + 1
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    out = [pieces[0]]
    for png, piece in zip(pngs, pieces[1:], strict=True):
        out += [kitty_sequences(png, CHUNK, repeat_keys), piece]
    return "".join(out)


def make_cases(folder: Path) -> list[Case]:
    plain = log_text(10 * MB, seed=1)
    ansi = log_text(10 * MB, seed=1, ansi=True)
    small = [noise_png(578, seed=100 + i) for i in range(10)]
    small_sha = [sha(p) for p in small]
    big = noise_png(2582, seed=200)
    head, tail = "rendering plot.png (2582x2582)\n", "\ndone in 1.2s\n"
    images_text = log_text(10 * MB, seed=2)
    many = [noise_png(57, seed=1000 + i) for i in range(1000)]
    many_text = log_text(1 * MB, seed=3)
    cases = [
        Case("a_plain", "10 MB log text, no image", plain, plain, []),
        Case("a_ansi", "10 MB log text, ANSI colours on every line, no image", ansi, ansi, []),
        Case("b_chunked", f"10 MB log text + ten {len(small[0]) / MB:.2f} MB PNGs in "
             f"{CHUNK}-char chunks (keys on the first chunk)",
             with_images(images_text, small, False), images_text, small_sha, target=2.0),
        Case("b_repeated", "the same, keys a=T,f=100 repeated on every chunk",
             with_images(images_text, small, True), images_text, small_sha, target=None),
        Case("c_single", f"one {len(big) / MB:.1f} MB PNG, unchunked, one sequence",
             head + kitty_sequences(big, None) + tail, head + tail, [sha(big)]),
        Case("d_many", f"1,000 PNGs of {len(many[0]) / 1000:.1f} kB in {CHUNK}-char chunks "
             f"(keys on the first), between the lines of a {len(many_text) / MB:.0f} MB log",
             with_images(many_text, many, False), many_text, [sha(p) for p in many],
             target=None),  # warm, after the rows before it: the fresh-process row judges
    ]
    for case in cases:
        case.path = folder / f"{case.name}.txt"
        case.path.write_bytes(case.text.encode("ascii"))  # ASCII: 1 char = 1 byte
    return cases


# -- 1. extraction, silica vs node --------------------------------------------------------

NODE_SCRIPT = r"""
import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { createInterface } from 'node:readline'
import { extractKittyGraphics } from 'kitty-graphics-agent/parser'

const sha = (x) => createHash('sha256').update(x).digest('hex')
const seconds = (started) => Number(process.hrtime.bigint() - started) / 1e9
const say = (value) => process.stdout.write(JSON.stringify(value) + '\n')

// The extraction as timed: the package's extractor, then each image's base64 to bytes.
function extract(text) {
  const result = extractKittyGraphics(text)
  return [result, result.images.map((image) => Buffer.from(image.data, 'base64'))]
}

// One command a line, one JSON answer a line: "load PATH" (then one untimed run), "extract"
// (one timed run, after a gc, and the page faults it took), "decode" (the bytes to the
// string the extractor needs, timed for information), "result" (what the last run found).
let bytes, text, last
for await (const line of createInterface({ input: process.stdin })) {
  const [command, ...rest] = line.split(' ')
  if (command === 'load') {
    bytes = readFileSync(rest.join(' '))
    text = bytes.toString('utf8')
    last = extract(text)
    say({ chars: text.length })
  } else if (command === 'extract') {
    last = undefined
    globalThis.gc?.()
    const faults = process.resourceUsage().minorPageFault
    const started = process.hrtime.bigint()
    last = extract(text)
    const took = seconds(started)
    say({ seconds: took, faults: process.resourceUsage().minorPageFault - faults })
  } else if (command === 'decode') {
    const started = process.hrtime.bigint()
    bytes.toString('utf8')
    say({ seconds: seconds(started) })
  } else if (command === 'result') {
    const [result, buffers] = last
    say({ images: buffers.map(sha), text: sha(result.cleanedOutput) })
  }
}
"""


@dataclass
class Side:
    times: list[float] = field(default_factory=list)
    faults: list[int] = field(default_factory=list)  # minor page faults of each timed run
    decoding: list[float] = field(default_factory=list)  # bytes to text, not in the ratio
    images: list[str] = field(default_factory=list)
    text: str = ""


class Node:
    """The node side: one process that answers one command a line (see ``NODE_SCRIPT``)."""

    def __init__(self, folder: Path) -> None:
        script = folder / "bench_kitty.mjs"
        script.write_text(NODE_SCRIPT, encoding="utf-8")
        self.proc = subprocess.Popen(
            ["node", "--expose-gc", "--max-old-space-size=4096", str(script)], cwd=folder,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ask(self, line: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"node exited with {self.proc.wait()}:\n{err[-2000:]}")
        return json.loads(answer)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # it may have gone already
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Silica:
    """The silica side: the ``kitty-graphics`` result processor, as ``build_result`` runs it
    on a tool's output bytes."""

    def __init__(self) -> None:
        [self.process] = [p.process for p in result_processors(get_plugin_manager())
                          if p.name == "kitty-graphics"]
        self.output, self.last = b"", ResultDraft(output=b"")

    def run(self) -> ResultDraft:
        draft = ResultDraft(output=self.output)
        self.process(draft)
        return draft

    def load(self, path: Path) -> None:
        self.output = path.read_bytes()  # what a tool's output is: bytes
        self.last = self.run()  # warm-up, untimed

    def extract(self) -> tuple[float, int]:
        """One timed run, and the minor page faults it took."""
        del self.last
        gc.collect()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        self.last = self.run()
        took = time.perf_counter() - started
        return took, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults

    def decode(self) -> float:
        """What the next processor that reads text costs: the text left, decoded once."""
        started = time.perf_counter()
        str(self.last.output, "utf-8", self.last.errors)
        return time.perf_counter() - started


def measure(cases: list[Case], repeat: int, node: Node | None) -> tuple[dict[str, Side],
                                                                          dict[str, Side]]:
    """Both sides on each case, their runs taking turns: both see the same load."""
    silica, ours = Silica(), {}
    theirs: dict[str, Side] = {}
    for case in cases:
        note(f"{case.name}: {repeat} runs of each side, taking turns")
        s = ours[case.name] = Side()
        silica.load(case.path)
        if node is not None:
            n = theirs[case.name] = Side()
            chars = node.ask(f"load {case.path}")["chars"]
            assert chars == len(case.text), (case.name, chars)
        for _ in range(repeat):
            if node is not None:
                found = node.ask("extract")
                n.times.append(found["seconds"])
                n.faults.append(found["faults"])
            took, faults = silica.extract()
            s.times.append(took)
            s.faults.append(faults)
        for _ in range(repeat):
            if node is not None:
                n.decoding.append(node.ask("decode")["seconds"])
            s.decoding.append(silica.decode())
        s.images = [sha(p.data) for p in silica.last.images]
        s.text = sha(silica.last.text)
        if node is not None:
            found = node.ask("result")
            n.images, n.text = found["images"], found["text"]
    return ours, theirs


# The small-image case again, each run in a fresh process on both sides: argv is the input
# file; each side reads it, then times one extraction (no warm-up: the allocator is as a new
# process has it) and its minor page faults, then prints them with what it found.
FRESH_SILICA = """
import hashlib, json, resource, sys, time
from silica.plugins import get_plugin_manager
from silica.results.pipeline import ResultDraft, result_processors
[process] = [p.process for p in result_processors(get_plugin_manager())
             if p.name == "kitty-graphics"]
with open(sys.argv[1], "rb") as f:
    draft = ResultDraft(output=f.read())
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
started = time.perf_counter()
process(draft)
took = time.perf_counter() - started
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
sha = lambda x: hashlib.sha256(x).hexdigest()
print(json.dumps({"seconds": took, "faults": faults, "text": sha(draft.text.encode()),
                  "images": [sha(p.data) for p in draft.images]}))
"""

FRESH_NODE = r"""
import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { extractKittyGraphics } from 'kitty-graphics-agent/parser'
const sha = (x) => createHash('sha256').update(x).digest('hex')
const text = readFileSync(process.argv[2]).toString('utf8')
let faults = process.resourceUsage().minorPageFault
const started = process.hrtime.bigint()
const result = extractKittyGraphics(text)
const buffers = result.images.map((image) => Buffer.from(image.data, 'base64'))
const seconds = Number(process.hrtime.bigint() - started) / 1e9
faults = process.resourceUsage().minorPageFault - faults
process.stdout.write(JSON.stringify({ seconds, faults, text: sha(result.cleanedOutput),
                                      images: buffers.map(sha) }) + '\n')
"""


def measure_fresh(case: Case, folder: Path, repeat: int,
                  with_node: bool) -> tuple[Side, Side | None]:
    """``case`` extracted in fresh processes, the sides taking turns (``interleaved``): each
    run's extraction time and page faults as each side measures them inside."""
    script = folder / "bench_kitty_fresh.mjs"
    script.write_text(FRESH_NODE, encoding="utf-8")
    env = installed_env()
    write_bytecode()
    sides = {"silica": Side(), "node": Side()}
    commands = {"silica": [sys.executable, "-c", FRESH_SILICA, str(case.path)],
                "node": ["node", str(script), str(case.path)]}

    def run(name: str) -> float:
        out = subprocess.run(commands[name], capture_output=True, text=True, check=True,
                             cwd=folder, env=env).stdout
        found, side = json.loads(out), sides[name]
        side.times.append(found["seconds"])
        side.faults.append(found["faults"])
        side.images, side.text = found["images"], found["text"]
        return found["seconds"]

    steps = {"silica": partial(run, "silica")}
    if with_node:
        steps["node"] = partial(run, "node")
    for step in steps.values():  # untimed: the file in the page cache, bytecode read once
        step()
    for side in sides.values():
        side.times.clear()
        side.faults.clear()
    interleaved(repeat, **steps)
    return sides["silica"], sides["node"] if with_node else None


def fresh_row(case: Case, s: Side, n: Side | None) -> list[Row]:
    measure = f"extract, a fresh process each run: {case.label} ({len(case.text) / MB:.1f} MB)"
    rows = []
    if n is None:
        rows.append(Row(measure, f"silica {spread(s.times, ms)}, {med(s.faults):,.0f} page "
                        "faults; node not run", "-", "≥ 1.00× node", "NOT MEASURED"))
    else:
        ratio = med(n.times) / med(s.times)
        rows.append(Row.judged(
            measure, f"silica {spread(s.times, ms)} vs node {spread(n.times, ms)}; page faults "
            f"a run: silica {spread(s.faults, '{:,.0f}'.format)}, node "
            f"{spread(n.faults, '{:,.0f}'.format)}", ratio, f"{ratio:.2f}×", "≥ 1.00× node",
            ratio >= 1.0))
    for name, side in (("silica", s), ("node", n)):
        wrong = check(side, case) if side is not None else ""
        if wrong:
            rows.append(Row(f"  {name} result wrong in a fresh process: {case.name}", wrong, "-",
                            "the images and text sent", "FAIL" if name == "silica" else "WARN"))
    return rows


def install_node(folder: Path) -> tuple[str | None, str]:
    """Install the npm package into ``folder``; ``(version, "")`` or ``(None, why not)``."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        return None, "node or npm is not on PATH"
    try:
        proc = subprocess.run(
            [npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(folder),
             NPM_PACKAGE], capture_output=True, text=True, timeout=180,
            stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "npm install timed out (no network?)"
    manifest = folder / "node_modules" / NPM_PACKAGE / "package.json"
    if proc.returncode != 0 or not manifest.exists():
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        errors = [line for line in lines if "error" in line.lower()][:2] or lines[-2:]
        return None, f"npm install {NPM_PACKAGE} failed: " + " | ".join(errors)
    return json.loads(manifest.read_text())["version"], ""


def check(side: Side, case: Case) -> str:
    """What is wrong with one side's result ("" if nothing)."""
    wrong = []
    if len(side.images) != len(case.expected_images):
        wrong.append(f"{len(side.images)} images, not {len(case.expected_images)}")
    else:
        bad = sum(a != b for a, b in zip(side.images, case.expected_images, strict=True))
        if bad:
            wrong.append(f"{bad} of {len(side.images)} images with other bytes (sha256)")
    if side.text != sha(case.expected_text):
        wrong.append("cleaned text differs from the text sent")
    return "; ".join(wrong)


def mbps(chars: int, seconds: float) -> str:
    return f"{chars / MB / seconds:,.0f} MB/s ({ms(seconds)})"


def extraction_rows(cases: list[Case], silica: dict[str, Side],
                    node: dict[str, Side] | None) -> list[Row]:
    rows: list[Row] = []
    for case in cases:
        size = len(case.text)
        s = silica[case.name]
        measure = f"extract, in process after a warm-up: {case.label} ({size / MB:.1f} MB)"
        target = f"≥ {case.target:.2f}× node" if case.target else "report only"
        left = f" (+{ms(med(s.decoding))} to decode the {len(case.expected_text) / MB:.1f} MB left)"
        if node is None:
            rows.append(Row(measure, f"silica {mbps(size, med(s.times))}{left}; node not run",
                            "-", target, "NOT MEASURED" if case.target else "INFO"))
        else:
            n = node[case.name]
            ratio = med(n.times) / med(s.times)
            verdict = ("PASS" if ratio >= case.target else "FAIL") if case.target else "INFO"
            faults = ""
            if max(med(s.faults), med(n.faults)) >= 200:  # fresh memory: a cost of its own
                faults = (f"; page faults a run: silica {med(s.faults):,.0f}, node "
                          f"{med(n.faults):,.0f}")
            rows.append(Row(measure, f"silica {mbps(size, med(s.times))}{left} vs node "
                            f"{mbps(size, med(n.times))} (+{ms(med(n.decoding))} to decode its "
                            f"input){faults}", f"{ratio:.2f}×", target, verdict, ratio))
            node_wrong = check(n, case)
            if node_wrong or s.images != n.images:
                rows.append(Row(f"  results differ: {case.name}",
                                f"silica {len(s.images)} images, node {len(n.images)}; "
                                f"node: {node_wrong or 'matches the input'}",
                                "-", "same images and text", "WARN"))
        silica_wrong = check(s, case)
        if silica_wrong:
            rows.append(Row(f"  silica result wrong: {case.name}", silica_wrong, "-",
                            "the images and text sent", "FAIL"))
    return rows


# -- 2. and 3. a screenshot (common.screenshot_png) ---------------------------------------


def bench_prepare(png: bytes, repeat: int) -> tuple[Row, ImageBlock]:
    payload = ImagePayload(data=png, declared_type="image/png", source="bench")
    block = prepare_image(payload, ANTHROPIC)  # warm-up, untimed
    assert isinstance(block, ImageBlock), block
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        block = prepare_image(payload, ANTHROPIC)
        times.append(time.perf_counter() - started)
    assert isinstance(block, ImageBlock), block
    return Row("prepare_image (ANTHROPIC) on a 1920x1080 screenshot PNG "
               f"({len(png) / 1000:,.0f} kB)",
               f"{ms(med(times))} per image -> {block.media_type} {block.width}x{block.height}, "
               f"{len(block.data) / 1000:,.0f} kB", "-", "report only", "INFO"), block


def bench_tokens(png: bytes) -> Row:
    b64 = base64.b64encode(png).decode("ascii")
    output = json.dumps({"path": "screenshot.png", "base64": b64, "media_type": "image/png"})
    found = extract_json_images(output)
    assert len(found.images) == 1, found.text[:200]
    block = prepare_image(found.images[0], ANTHROPIC)
    assert isinstance(block, ImageBlock), block
    as_text = len(b64) / 4
    image = estimate_tokens(block.width or 0, block.height or 0, "anthropic")
    leftover = len(found.text) / 4
    unfitted = estimate_tokens(1920, 1080, "anthropic")
    ratio = as_text / (image + leftover)
    return Row("tokens: that screenshot returned as base64 JSON, after extract_json_images + "
               "prepare_image (estimates only: text = chars/4, image = Anthropic's w*h/750 "
               "after its own downscale; no tokenizer, no API call)",
               f"image block {block.width}x{block.height} ≈ {image:,} tokens "
               f"(+ {leftover:.0f} of JSON text left) vs the base64 as text: {len(b64):,} chars "
               f"≈ {as_text:,.0f} tokens; unfitted 1920x1080 would be ≈ {unfitted:,}",
               f"{ratio:.0f}× fewer", f"image ≤ {TOKEN_TARGET:,} tokens",
               "PASS" if image <= TOKEN_TARGET else "FAIL")


# -- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=20, help="runs per figure (median)")
    opts = parser.parse_args()
    command = "python benchmarks/bench_images.py " + shlex.join([f"--repeat={opts.repeat}"])

    started = time.perf_counter()
    rows: list[Row] = []
    why_not = ""
    with temporary_folder("silica-bench-images-", opts.keep) as root:
        search = escapes._stringzilla
        console.print(f"silica image benchmark: {os.cpu_count()} CPUs, Python "
                      f"{sys.version.split()[0]}, Pillow {PIL.__version__}, base64 decoder: "
                      f"{'pybase64' if escapes._pybase64 is not None else 'binascii'}, "
                      "escape search: "
                      f"{f'stringzilla {search.__version__}' if search else 'bytes.find hops'}, "
                      f"repeat {opts.repeat}, in {root}", soft_wrap=True)
        note(f"npm install --no-save --prefix {root} {NPM_PACKAGE}")
        version, why_not = install_node(root)
        if version is None:
            console.print(f"[yellow]node comparison skipped: {why_not}[/yellow]", soft_wrap=True)
        else:
            node_version = subprocess.run(["node", "--version"], capture_output=True,
                                          text=True).stdout.strip()
            console.print(f"node {node_version}, {NPM_PACKAGE} {version} "
                          "(extractKittyGraphics from 'kitty-graphics-agent/parser')")
        note("writing the inputs (log text, noise PNGs)")
        cases = make_cases(root)
        runner = Node(root) if version is not None else None
        node: dict[str, Side] | None = None
        try:
            silica, theirs = measure(cases, opts.repeat, runner)
            node = theirs if runner is not None else None
        except RuntimeError as exc:  # node failed: silica alone
            why_not = f"node run failed: {exc}"
            console.print(f"[yellow]{why_not}[/yellow]", soft_wrap=True)
            silica = measure(cases, opts.repeat, None)[0]
        finally:
            if runner is not None:
                runner.close()
        rows += extraction_rows(cases, silica, node)
        many = next(case for case in cases if case.name == "d_many")
        note(f"{many.name}: {opts.repeat} fresh processes of each side, taking turns")
        fresh_silica, fresh_node = measure_fresh(many, root, opts.repeat, node is not None)
        rows += fresh_row(many, fresh_silica, fresh_node)

        note("drawing a 1920x1080 screenshot")
        shot = screenshot_png(7, buttons=True)
        note("prepare_image")
        prepare_row, _ = bench_prepare(shot, opts.repeat)
        rows.append(prepare_row)
        note("token estimates")
        rows.append(bench_tokens(shot))

    notes = (load_line(),) if node is not None else (
        f"node comparison NOT MEASURED: {why_not}", load_line())
    return report(rows, title="silica image benchmark", command=command, started=started,
                  strict=opts.strict, notes=notes, verdict_width=12,
                  heading="summary (ratio: silica speed / node speed, base64 decoded on both "
                          "sides, text decoding on neither):")


if __name__ == "__main__":
    sys.exit(main())
