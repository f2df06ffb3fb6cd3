"""Benchmark silica against decompression bombs: the peak memory and time of each, alone.

    python benchmarks/bench_bombs.py [--repeat 3] [--strict] [--keep]

Each hostile input is made here (Pillow, zlib), written to a temporary folder as what a tool
would print, and put through ``build_result`` (default plugins, ``ANTHROPIC`` limits) in a
fresh ``python`` process, ``--repeat`` times. That process reports its peak memory (``VmHWM``
from ``/proc/self/status``: interpreter, silica and Pillow included; ``ru_maxrss`` would carry
over this script's own peak) and the wall time of ``build_result`` alone (imports done
before the clock starts), and what came out: a bomb must come back as a notice, with no
image block.

| input | what it is |
|---|---|
| WebP RGBA 10000x9999 | lossless, one flat colour: a few dozen bytes (decoded: ~1.6 GB) |
| five WebPs in one result | the same, five times in one JSON ``images`` list |
| 16-bit PNG 10000x9999 | ``I;16`` greyscale, ~200 kB |
| float TIFF 10000x9999 | mode ``F``, deflate, ~700 kB |
| kitty o=z 1x67108864 | ``a=T,f=32,s=1,v=67108864,o=z``: 256 MiB of zeros in ~260 kB of zlib |
| 8K RGBA screenshot (report only) | a 7680x4320 RGBA PNG that must still come out as an image |

Targets per input: peak < 300 MB and wall time < 2 s; the ratio is the figure over the
target (under 1: met). Figures: the largest peak and the median time of the runs. 1 MB =
1,000,000 bytes. It reports; it is not a test: it exits 0 even when a target is missed,
unless ``--strict`` is given.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import PIL
from common import REPO, bench_parser, console, note, temporary_folder
from PIL import Image, ImageDraw
from rich.table import Table

MB = 1_000_000
PEAK_TARGET = 300 * MB
TIME_TARGET = 2.0
BOMB_SIZE = (10000, 9999)
KITTY_ROWS = 67108864

# Runs build_result over the file in argv[1]; prints the blocks, its time and peak memory.
CHILD = """
import json, sys, time
from pathlib import Path
from silica.images import budget, check  # imported before the clock starts
from silica.plugins import get_plugin_manager
from silica.results.pipeline import build_result
from silica.tools.model import RawOutput

pm = get_plugin_manager()
stdout = Path(sys.argv[1]).read_bytes()
started = time.perf_counter()
result = build_result(RawOutput(stdout, b"", 0, 0.1), pm)
took = time.perf_counter() - started
status = Path("/proc/self/status").read_text()
peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
blocks = [[b.type, getattr(b, "text", "")[:160]] for b in result.blocks]
print(json.dumps({"blocks": blocks, "seconds": took, "peak": peak}))
"""


@dataclass
class Case:
    name: str
    make: Callable[[], bytes]  # what the tool prints
    bomb: bool = True  # else: must come out as an image, and the targets are report only


@dataclass
class Outcome:
    case: Case
    peak: int
    seconds: float
    summary: str
    right: bool


def encode(img: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, fmt, **options)
    return buffer.getvalue()


def as_json(*images: bytes) -> bytes:
    return json.dumps({"images": [{"base64": base64.b64encode(d).decode()} for d in images]}
                      ).encode()


def webp_bomb() -> bytes:
    return encode(Image.new("RGBA", BOMB_SIZE, (10, 20, 30, 128)), "WEBP", lossless=True,
                  quality=0, method=0)


def kitty_bomb() -> bytes:
    compressor, block = zlib.compressobj(9), bytes(1 << 20)
    squeezed = b"".join(compressor.compress(block) for _ in range(KITTY_ROWS * 4 >> 20))
    squeezed += compressor.flush()
    payload = base64.b64encode(squeezed).decode()
    return f"\x1b_Ga=T,f=32,s=1,v={KITTY_ROWS},o=z;{payload}\x1b\\".encode()


def screenshot_8k() -> bytes:
    size = (7680, 4320)
    shot = Image.linear_gradient("L").resize(size).convert("RGBA")
    draw = ImageDraw.Draw(shot)
    for i in range(40):  # windows, some see-through
        box = (100 + 180 * i, 80 + 90 * i, 1800 + 180 * i, 1200 + 70 * i)
        draw.rectangle(box, fill=(40 * i % 255, 90, 200 - 4 * i, 255 if i % 3 else 160))
    return as_json(encode(shot, "PNG", compress_level=1))


CASES = [
    Case("WebP RGBA 10000x9999 (lossless, flat)", lambda: as_json(webp_bomb())),
    Case("five WebP bombs in one result", lambda: as_json(*[webp_bomb()] * 5)),
    Case("16-bit PNG (I;16) 10000x9999",
         lambda: as_json(encode(Image.new("I;16", BOMB_SIZE, 3000), "PNG"))),
    Case("float TIFF (F) 10000x9999",
         lambda: as_json(encode(Image.new("F", BOMB_SIZE, 0.5), "TIFF",
                                compression="tiff_deflate"))),
    Case(f"kitty o=z f=32 s=1 v={KITTY_ROWS}", kitty_bomb),
    Case("8K RGBA screenshot PNG 7680x4320 (must pass)", screenshot_8k, bomb=False),
]


def run(case: Case, path: Path, repeat: int) -> Outcome:
    peaks, times, summary, right = [], [], "", True
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                              text=True, cwd=REPO)
        if done.returncode != 0:
            return Outcome(case, 0, 0.0, f"child failed: {done.stderr.strip()[-300:]}", False)
        got = json.loads(done.stdout)
        peaks.append(got["peak"])
        times.append(got["seconds"])
        kinds = [kind for kind, _ in got["blocks"]]
        notices = [text for kind, text in got["blocks"] if "dropped:" in text]
        if case.bomb:
            right = "image" not in kinds and bool(notices)
            summary = f"{len(notices)} notice(s): {notices[0][:110]}..." if notices else str(kinds)
        else:
            right = kinds.count("image") == 1 and not notices
            summary = "an image block" if right else str(got["blocks"])[:160]
    return Outcome(case, max(peaks), statistics.median(times), summary, right)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per input")
    opts = parser.parse_args()
    command = "python benchmarks/bench_bombs.py " + shlex.join([f"--repeat={opts.repeat}"])
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    with temporary_folder("silica-bench-bombs-", opts.keep) as root:
        console.print(f"silica bomb benchmark: {os.cpu_count()} CPUs, Python "
                      f"{sys.version.split()[0]}, Pillow {PIL.__version__}, repeat "
                      f"{opts.repeat}, in {root}", soft_wrap=True)
        for index, case in enumerate(CASES):
            note(f"making {case.name}")
            path = root / f"stdout-{index}.bin"
            path.write_bytes(case.make())
            note(f"build_result on it ({path.stat().st_size:,} bytes) in {opts.repeat} fresh "
                 "processes")
            outcomes.append(run(case, path, opts.repeat))

    table = Table(title="silica against decompression bombs (targets: < 300 MB, < 2 s)")
    for col in ("input", "peak MB", "ratio", "memory", "wall s", "ratio", "time", "outcome"):
        table.add_column(col, overflow="fold")
    lines, met, targets = [], 0, 0
    for o in outcomes:
        mem_ratio, time_ratio = o.peak / PEAK_TARGET, o.seconds / TIME_TARGET
        if o.case.bomb:
            verdicts = ["met" if mem_ratio < 1 else "missed", "met" if time_ratio < 1 else "missed"]
            verdicts = [v if o.right else "missed" for v in verdicts]
            targets += 2
            met += verdicts.count("met")
        else:
            verdicts = ["report only", "report only"]
        outcome = ("" if o.right else "WRONG: ") + o.summary
        table.add_row(o.case.name, f"{o.peak / MB:,.0f}", f"{mem_ratio:.2f}", verdicts[0],
                      f"{o.seconds:.2f}", f"{time_ratio:.2f}", verdicts[1], outcome[:72])
        lines.append(f"  {o.case.name}: peak {o.peak / MB:,.0f} MB ({mem_ratio:.2f}x of 300 MB, "
                     f"{verdicts[0]}), {o.seconds:.2f} s ({time_ratio:.2f}x of 2 s, "
                     f"{verdicts[1]}); {outcome}")
    console.print(table)
    console.print("\nsummary:", markup=False)
    for line in lines:
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"{met}/{targets} targets met; took {time.perf_counter() - started:.0f} s",
                  markup=False)
    console.print(f"reproduce: cd {REPO} && . .venv/bin/activate && {command}", markup=False,
                  soft_wrap=True)
    return 1 if opts.strict and met < targets else 0


if __name__ == "__main__":
    sys.exit(main())
