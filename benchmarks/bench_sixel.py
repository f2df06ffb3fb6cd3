"""Benchmark silica's sixel decoder against libsixel: correctness and speed.

    python benchmarks/bench_sixel.py [--repeat 10] [--strict] [--keep]

1. Correctness: a 320x200 and a 1920x1080 screenshot-like image (``common.screenshot_png``)
   are encoded by ``img2sixel``; silica's ``extract_sixel`` decode is compared with what
   ``sixel2png`` decodes from the same file: the share of pixels whose every channel is
   within 8 levels (target ≥ 98%).
2. Speed, the same work on both sides, each run a fresh process, the sides taking turns
   (``common.interleaved``): read the 1920x1080 sixel file, decode it, write a PNG file.
   silica's side is a small script (``SILICA_SIDE``, run with bytecode written, as an
   installed package) that imports silica's sixel module, then reads the file, runs
   ``extract_sixel`` on its bytes and writes the PNG it made; it times its imports and its
   work (read, decode, PNG, write) itself. libsixel's side is ``sixel2png -i file -o file``,
   timed from outside (its process start and library loading included). The target row
   compares silica's work with sixel2png's whole process (≤ 1x); the whole silica process
   (interpreter start and imports included) is reported beside it. Both PNGs are checked to
   decode to the same pixels within 8 levels.

Needs ``img2sixel`` and ``sixel2png`` (Debian ``libsixel-bin``); without them every row is
NOT MEASURED. Figures are min/median/max of ``--repeat`` runs after one untimed run of each
side. Exits 0 even when a target is missed, unless ``--strict``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
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
from PIL import Image

from silica.results.sixel import extract_sixel

CLOSE = 8  # levels per channel
SHARE_TARGET = 0.98


def share_close(a: Image.Image, b: Image.Image) -> float:
    if a.size != b.size:
        return 0.0
    diff = np.abs(np.asarray(a.convert("RGB"), np.int16) - np.asarray(b.convert("RGB"), np.int16))
    return float((diff.max(axis=2) <= CLOSE).mean())


# silica's side of the speed row, in a fresh process: argv is the sixel file and the PNG to
# write; it prints its import time and its work time (read, decode, PNG, write) as JSON.
SILICA_SIDE = """
import json, sys, time
started = time.perf_counter()
from silica.results.sixel import extract_sixel
imported = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    found = extract_sixel(f.read())
with open(sys.argv[2], "wb") as f:
    f.write(found.images[0].data)
done = time.perf_counter()
print(json.dumps({"imports": imported - started, "work": done - imported}))
"""


def speed_rows(path: Path, root: Path, repeat: int) -> list[Row]:
    """Decode + PNG file, silica and sixel2png, fresh processes taking turns."""
    env = installed_env()
    write_bytecode()
    inside: dict[str, list[float]] = {"imports": [], "work": []}

    def silica() -> float:
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", SILICA_SIDE, str(path), str(root / "s.png")],
                             capture_output=True, text=True, check=True, env=env).stdout
        took = time.perf_counter() - started
        for key, value in json.loads(out).items():
            inside[key].append(value)
        return took

    def libsixel() -> float:
        started = time.perf_counter()
        subprocess.run(["sixel2png", "-i", str(path), "-o", str(root / "l.png")], check=True)
        return time.perf_counter() - started

    silica(), libsixel()  # untimed: files in the page cache, bytecode read once
    inside = {"imports": [], "work": []}
    note(f"timing, {repeat} fresh processes of each side, taking turns")
    times = interleaved(repeat, silica=silica, libsixel=libsixel)
    same = share_close(Image.open(root / "s.png"), Image.open(root / "l.png"))
    work, theirs, whole = inside["work"], times["libsixel"], times["silica"]
    ratio = med(work) / med(theirs)
    return [
        Row.judged("decode + PNG file 1920x1080, fresh processes: silica's work (read, "
                   "extract_sixel, write; imports not counted) vs sixel2png process",
                   f"{spread(work)} vs {spread(theirs)}; PNGs agree on {same:.2%} of pixels",
                   ratio, f"{ratio:.2f}x", "≤ 1x", ratio <= 1.0 and same >= SHARE_TARGET),
        Row("  the whole silica process (python start, imports, work) vs sixel2png",
            f"{spread(whole)} (imports {spread(inside['imports'])}) vs {spread(theirs)}",
            f"{med(whole) / med(theirs):.2f}x", "-", "INFO", med(whole) / med(theirs)),
    ]


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    started = time.perf_counter()
    rows: list[Row] = []
    if not (shutil.which("img2sixel") and shutil.which("sixel2png")):
        for measure in ("320x200 vs sixel2png", "1920x1080 vs sixel2png", "speed 1920x1080"):
            rows.append(Row(measure, "img2sixel/sixel2png not installed", "-", "-",
                            "NOT MEASURED"))
        return report(rows, title="sixel", command="python benchmarks/bench_sixel.py",
                      started=started, strict=args.strict)
    big = Image.open(io.BytesIO(screenshot_png(7)))
    with temporary_folder("silica-bench-sixel-", args.keep) as root:
        streams: dict[str, Path] = {}
        for name, image in (("320x200", big.resize((320, 200), Image.Resampling.LANCZOS)),
                            ("1920x1080", big)):
            note(f"{name}: img2sixel, sixel2png")
            image.save(root / f"{name}.png")
            stream = subprocess.run(["img2sixel", str(root / f"{name}.png")],
                                    capture_output=True, check=True).stdout
            streams[name] = root / f"{name}.six"
            streams[name].write_bytes(stream)
            subprocess.run(["sixel2png", "-i", str(streams[name]), "-o",
                            str(root / f"{name}.ref.png")], check=True)
            found = extract_sixel(stream.decode("utf-8", "replace"))
            mine = Image.open(io.BytesIO(found.images[0].data)) if found.images else None
            ref = Image.open(root / f"{name}.ref.png")
            share = share_close(mine, ref) if mine else 0.0
            rows.append(Row.judged(
                f"{name} (img2sixel, {len(stream):,} bytes) vs sixel2png",
                f"{share:.2%} of pixels within {CLOSE} levels", share, f"{share:.2%}",
                f"≥ {SHARE_TARGET:.0%}", share >= SHARE_TARGET))

        rows += speed_rows(streams["1920x1080"], root, args.repeat)
    console.print(load_line())
    return report(rows, title="sixel: silica vs libsixel", command=(
        f"python benchmarks/bench_sixel.py --repeat {args.repeat}"), started=started,
        strict=args.strict)


if __name__ == "__main__":
    raise SystemExit(main())
