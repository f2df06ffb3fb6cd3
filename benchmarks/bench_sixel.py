"""Benchmark silica's sixel decoder against libsixel: correctness and speed.

    python benchmarks/bench_sixel.py [--repeat 10] [--strict] [--keep]

1. Correctness: a 320x200 and a 1920x1080 screenshot-like image (``common.screenshot_png``)
   are encoded by ``img2sixel``; silica's ``extract_sixel`` decode is compared with what
   ``sixel2png`` decodes from the same file: the share of pixels whose every channel is
   within 8 levels (target ≥ 98%).
2. Speed: ``decode_sixel`` on the 1920x1080 stream in process (the data already in memory)
   against the wall time of ``sixel2png -i file -o file`` (a process, reading the stream
   and writing PNG; target ≤ 1x). ``extract_sixel`` (decode plus PNG encoding) is reported.

Needs ``img2sixel`` and ``sixel2png`` (Debian ``libsixel-bin``); without them every row is
NOT MEASURED. Figures are medians of ``--repeat`` runs after one untimed warm-up. Exits 0
even when a target is missed, unless ``--strict``.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
from common import Row, bench_parser, med, ms, note, report, screenshot_png, temporary_folder
from PIL import Image

from silica.results.sixel import decode_sixel, extract_sixel

CLOSE = 8  # levels per channel
SHARE_TARGET = 0.98


def share_close(a: Image.Image, b: Image.Image) -> float:
    if a.size != b.size:
        return 0.0
    diff = np.abs(np.asarray(a.convert("RGB"), np.int16) - np.asarray(b.convert("RGB"), np.int16))
    return float((diff.max(axis=2) <= CLOSE).mean())


def sixel_body(stream: bytes) -> bytes:
    """The data after ``q``, before the terminator."""
    return stream[stream.index(b"q") + 1 : stream.rindex(b"\x1b\\")]


def timed(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return med(times)


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

        path = streams["1920x1080"]
        data = path.read_bytes()
        body = sixel_body(data)
        text = data.decode()
        note(f"timing, {args.repeat} runs each")
        ours = timed(lambda: decode_sixel(body), args.repeat)
        theirs = timed(lambda: subprocess.run(
            ["sixel2png", "-i", str(path), "-o", str(root / "timed.png")], check=True),
            args.repeat)
        whole = timed(lambda: extract_sixel(text), args.repeat)
        ratio = ours / theirs
        rows.append(Row.judged("decode 1920x1080: decode_sixel vs sixel2png wall",
                               f"{ms(ours)} vs {ms(theirs)}", ratio, f"{ratio:.2f}x", "≤ 1x",
                               ratio <= 1.0))
        rows.append(Row("extract_sixel 1920x1080 (decode + PNG)", ms(whole),
                        f"{whole / theirs:.2f}x", "-", "INFO", whole / theirs))
    return report(rows, title="sixel: silica vs libsixel", command=(
        f"python benchmarks/bench_sixel.py --repeat {args.repeat}"), started=started,
        strict=args.strict)


if __name__ == "__main__":
    raise SystemExit(main())
