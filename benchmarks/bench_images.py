"""Benchmark silica's image path: kitty extraction speed against npm, image fitting, tokens.

    python benchmarks/bench_images.py [--repeat 20] [--strict] [--keep]

1. ``silica.results.kitty.extract_kitty`` against ``extractKittyGraphics`` from the npm package
   ``kitty-graphics-agent`` (installed at run time with ``npm install --no-save`` into the
   temporary folder; nothing is installed anywhere else). Both sides get the same bytes: each
   input is written to a file once and each side reads it before its clock starts. Only the
   extraction call is timed, in process on each side (the node side in a small script written
   to the temporary folder, which prints its timings as JSON). The npm extractor returns
   images as base64 text, so the node side also decodes each one to a ``Buffer``: base64 is
   decoded on both sides. Both results are checked against the images and text that went in.
2. ``prepare_image`` (default ``ANTHROPIC`` limits) on a 1920x1080 screenshot-like PNG.
3. The tokens that screenshot costs as an image block, after ``extract_json_images`` and
   ``prepare_image``, against its base64 left as text.

Figures are medians of ``--repeat`` runs, after one untimed warm-up run. 1 MB = 1,000,000
bytes. The script reports; it is not a test: it exits 0 even when a target is missed, unless
``--strict`` is given (then a missed target exits 1; a comparison that could not be made,
e.g. without network for npm, is NOT MEASURED and does not fail).
"""

from __future__ import annotations

import base64
import gc
import hashlib
import io
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import PIL
from common import Row, bench_parser, console, med, note, report, screenshot_png, temporary_folder
from common import ms as _ms
from PIL import Image

from silica.blocks import ImageBlock
from silica.images.check import prepare_image
from silica.images.limits import ANTHROPIC
from silica.images.payload import ImagePayload
from silica.images.tokens import estimate_tokens
from silica.results import escapes
from silica.results.json_images import extract_json_images
from silica.results.kitty import extract_kitty

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
    has_target: bool = True
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
    cases = [
        Case("a_plain", "10 MB log text, no image", plain, plain, []),
        Case("a_ansi", "10 MB log text, ANSI colours on every line, no image", ansi, ansi, []),
        Case("b_chunked", f"10 MB log text + ten {len(small[0]) / MB:.2f} MB PNGs in "
             f"{CHUNK}-char chunks (keys on the first chunk)",
             with_images(images_text, small, False), images_text, small_sha),
        Case("b_repeated", "the same, keys a=T,f=100 repeated on every chunk",
             with_images(images_text, small, True), images_text, small_sha, has_target=False),
        Case("c_single", f"one {len(big) / MB:.1f} MB PNG, unchunked, one sequence",
             head + kitty_sequences(big, None) + tail, head + tail, [sha(big)]),
    ]
    for case in cases:
        case.path = folder / f"{case.name}.txt"
        case.path.write_bytes(case.text.encode("ascii"))  # ASCII: 1 char = 1 byte
    return cases


# -- 1. extraction, silica vs node --------------------------------------------------------

NODE_SCRIPT = r"""
import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { extractKittyGraphics } from 'kitty-graphics-agent/parser'

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'))
const sha = (x) => createHash('sha256').update(x).digest('hex')

// The extraction as timed: the package's extractor, then each image's base64 to bytes.
function extract(text) {
  const result = extractKittyGraphics(text)
  return [result, result.images.map((image) => Buffer.from(image.data, 'base64'))]
}

const out = {}
for (const input of spec.inputs) {
  const text = readFileSync(input.path, 'utf8')
  let last = extract(text)  // warm-up, untimed
  const times = []
  for (let i = 0; i < spec.repeat; i++) {
    last = undefined
    globalThis.gc?.()
    const started = process.hrtime.bigint()
    last = extract(text)
    times.push(Number(process.hrtime.bigint() - started) / 1e9)
  }
  const [result, buffers] = last
  out[input.name] = {
    times,
    chars: text.length,
    images: buffers.map(sha),
    text: sha(result.cleanedOutput),
  }
}
process.stdout.write(JSON.stringify(out))
"""


@dataclass
class Side:
    times: list[float]
    images: list[str]
    text: str


def run_silica(case: Case, repeat: int) -> Side:
    with open(case.path, encoding="ascii", newline="") as f:
        text = f.read()
    result = extract_kitty(text)  # warm-up, untimed
    times = []
    for _ in range(repeat):
        del result
        gc.collect()
        started = time.perf_counter()
        result = extract_kitty(text)
        times.append(time.perf_counter() - started)
    return Side(times, [sha(p.data) for p in result.images], sha(result.text))


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


def run_node(folder: Path, cases: list[Case], repeat: int) -> dict[str, Side]:
    script, spec = folder / "bench_kitty.mjs", folder / "spec.json"
    script.write_text(NODE_SCRIPT, encoding="utf-8")
    spec.write_text(json.dumps({"repeat": repeat, "inputs": [
        {"name": c.name, "path": str(c.path)} for c in cases]}), encoding="utf-8")
    proc = subprocess.run(["node", "--expose-gc", "--max-old-space-size=4096", str(script),
                           str(spec)], cwd=folder, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"node exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    found = json.loads(proc.stdout)
    for c in cases:
        assert found[c.name]["chars"] == len(c.text), (c.name, found[c.name]["chars"])
    return {name: Side(v["times"], v["images"], v["text"]) for name, v in found.items()}


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
        measure = f"extract: {case.label} ({size / MB:.1f} MB)"
        target = "≥ 1.00× node (aim 2×)" if case.has_target else "report only"
        if node is None:
            rows.append(Row(measure, f"silica {mbps(size, med(s.times))}; node not run",
                            "-", target, "NOT MEASURED" if case.has_target else "INFO"))
        else:
            n = node[case.name]
            ratio = med(n.times) / med(s.times)
            verdict = ("PASS" if ratio >= 1.0 else "FAIL") if case.has_target else "INFO"
            rows.append(Row(measure, f"silica {mbps(size, med(s.times))} vs node "
                            f"{mbps(size, med(n.times))}", f"{ratio:.2f}×", target, verdict))
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
    node: dict[str, Side] | None = None
    why_not = ""
    with temporary_folder("silica-bench-images-", opts.keep) as root:
        console.print(f"silica image benchmark: {os.cpu_count()} CPUs, Python "
                      f"{sys.version.split()[0]}, Pillow {PIL.__version__}, base64 decoder: "
                      f"{'pybase64' if escapes._pybase64 is not None else 'binascii'}, "
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
        if version is not None:
            note(f"node: extractKittyGraphics + Buffer.from(base64), {opts.repeat} runs each")
            try:
                node = run_node(root, cases, opts.repeat)
            except Exception as exc:
                why_not = f"node run failed: {exc}"
                console.print(f"[yellow]{why_not}[/yellow]", soft_wrap=True)
        silica: dict[str, Side] = {}
        for case in cases:
            note(f"silica: extract_kitty on {case.name}")
            silica[case.name] = run_silica(case, opts.repeat)
        rows += extraction_rows(cases, silica, node)

        note("drawing a 1920x1080 screenshot")
        shot = screenshot_png(7, buttons=True)
        note("prepare_image")
        prepare_row, _ = bench_prepare(shot, opts.repeat)
        rows.append(prepare_row)
        note("token estimates")
        rows.append(bench_tokens(shot))

    notes = () if node is not None else (f"node comparison NOT MEASURED: {why_not}",)
    return report(rows, title="silica image benchmark", command=command, started=started,
                  strict=opts.strict, notes=notes, verdict_width=12,
                  heading="summary (ratio: silica speed / node speed, base64 decoded on both "
                          "sides):")


if __name__ == "__main__":
    sys.exit(main())
