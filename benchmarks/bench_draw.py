"""Time to draw a 1600x1000 screenshot in the terminal: silica's encoders against chafa and
img2sixel.

    python benchmarks/bench_draw.py [--repeat 10] [--strict] [--keep]

The image is the top-left 1600x1000 of a desktop screenshot (``common.screenshot_png``),
written once to a PNG file. Every run is a fresh process on both sides, the sides taking
turns (``common.interleaved``), and each writes what draws the image to ``/dev/null``:

- silica: ``python -c`` (``SILICA_SIDE``, run with bytecode written, as an installed package)
  that imports ``silica.display.encode``, reads the file and writes
  ``encode(data, protocol, Cells(80, 24, 10, 20))``; it times its imports and its work
  (read, decode, fit, encode, write) itself;
- chafa: ``chafa -f kitty|iterm|sixels|symbols --size 71x22`` on the same file (the cells
  silica's fit takes: 704x440 px in 10x20 px cells), symbols with ``--symbols vhalf
  --colors full`` (half blocks in 24-bit colour, as silica's fallback);
- libsixel: ``img2sixel -w 704 -h 440`` on the same file.

The peer's side is timed from outside, its whole process. The target rows compare silica's
whole process (interpreter start and imports included) with the peer's (≤ 1x); silica's work
alone (imports not counted) is printed beside it. Then the time of ``encode`` in this process,
warm, per protocol (report only). Each silica output is decoded back with silica's own
extractors and must have the fitted size, or its row fails. Needs ``chafa`` and
``img2sixel`` (Debian ``chafa``, ``libsixel-bin``); a peer that is missing makes its rows
NOT MEASURED. Exits 0 even when a target is missed, unless ``--strict``.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import resource
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from common import (
    Row,
    bench_parser,
    console,
    crop_png,
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

from silica.display.encode import Cells, encode, fit
from silica.results.iterm2 import extract_iterm2
from silica.results.kitty import extract_kitty
from silica.results.sixel import extract_sixel

SIZE = (1600, 1000)
CELLS = Cells(80, 24, 10, 20)
FITTED = fit(*SIZE, CELLS)

# silica's side, in a fresh process: argv is the PNG file and the protocol; it writes the
# drawing to /dev/null and prints its import time and its work time as JSON.
SILICA_SIDE = """
import json, sys, time
started = time.perf_counter()
from silica.display.encode import Cells, encode
imported = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    data = f.read()
text = encode(data, sys.argv[2], Cells(80, 24, 10, 20))
with open("/dev/null", "w", encoding="utf-8") as out:
    out.write(text)
done = time.perf_counter()
print(json.dumps({"imports": imported - started, "work": done - imported}))
"""

SIZE_ARG = f"{FITTED.columns}x{FITTED.rows}"
PEERS: dict[str, list[tuple[str, list[str]]]] = {
    "kitty": [("chafa", ["chafa", "-f", "kitty", "--size", SIZE_ARG])],
    "iterm2": [("chafa", ["chafa", "-f", "iterm", "--size", SIZE_ARG])],
    "sixel": [("chafa", ["chafa", "-f", "sixels", "--size", SIZE_ARG]),
              ("img2sixel", ["img2sixel", "-w", str(FITTED.width_px), "-h",
                             str(FITTED.height_px)])],
    "blocks": [("chafa", ["chafa", "-f", "symbols", "--symbols", "vhalf", "--colors", "full",
                          "--size", SIZE_ARG])],
}


def drawn_size(protocol: str, text: str) -> tuple[int, int] | None:
    """The size of the image ``text`` draws, as silica's extractors read it."""
    if protocol == "blocks":
        lines = text.split("\n")[:-1]
        return (lines[0].count("\u2580") + lines[0].count("\u2584") + lines[0].count(" "),
                2 * len(lines))
    extract = {"kitty": extract_kitty, "iterm2": extract_iterm2, "sixel": extract_sixel}
    images = extract[protocol](text).images
    if len(images) != 1:
        return None
    with Image.open(io.BytesIO(images[0].data)) as img:
        return img.size


def cell_terminal() -> int:
    """A pseudo-terminal's end that says it is 80x24 cells of 10x20 px (``TIOCGWINSZ``):
    chafa reads its cell size there (on its standard input, its output going elsewhere),
    so both sides draw at the same pixel size."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack(
        "HHHH", CELLS.rows, CELLS.columns, CELLS.columns * CELLS.cell_width,
        CELLS.rows * CELLS.cell_height))
    os.close(master)
    return slave


def timed(command: list[str], cpu: list[float], **kwargs) -> tuple[float, str]:
    """Run ``command``; its wall time and standard output. Its CPU time (user + system, from
    ``RUSAGE_CHILDREN``) goes to ``cpu``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(command, check=True, **kwargs).stdout
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return took, out or ""


def fresh_rows(path: Path, protocol: str, repeat: int, terminal: int) -> list[Row]:
    """silica's fresh process against each peer's, taking turns."""
    env = installed_env()
    rows = []
    for name, command in PEERS[protocol]:
        measure = (f"{protocol}: draw {SIZE[0]}x{SIZE[1]} to {FITTED.width_px}x"
                   f"{FITTED.height_px} px, fresh processes, silica vs {name}")
        if shutil.which(command[0]) is None:
            rows.append(Row(measure, f"{command[0]} not installed", "-", "≤ 1x", "NOT MEASURED"))
            continue
        inside: dict[str, list[float]] = {"imports": [], "work": []}
        cpu: dict[str, list[float]] = {"silica": [], "peer": []}

        def silica(inside: dict[str, list[float]] = inside,
                   cpu: dict[str, list[float]] = cpu) -> float:
            took, out = timed([sys.executable, "-c", SILICA_SIDE, str(path), protocol],
                              cpu["silica"], capture_output=True, text=True, env=env)
            for key, value in json.loads(out).items():
                inside[key].append(value)
            return took

        def peer(command: list[str] = command, cpu: dict[str, list[float]] = cpu) -> float:
            with open("/dev/null", "wb") as sink:  # chafa reads its cell size on stdin
                return timed([*command, str(path)], cpu["peer"], stdin=terminal,
                             stdout=sink)[0]

        silica(), peer()  # untimed: files in the page cache, bytecode read once
        for values in (*inside.values(), *cpu.values()):
            values.clear()
        note(f"{protocol}: {repeat} fresh processes of silica and {name}, taking turns")
        times = interleaved(repeat, silica=silica, peer=peer)
        whole, theirs = times["silica"], times["peer"]
        ratio = med(whole) / med(theirs)
        PEER_PROCESS.setdefault(protocol, (name, med(theirs)))
        rows.append(Row.judged(
            measure, f"{spread(whole)} vs {spread(theirs)}; CPU {spread(cpu['silica'])} vs "
            f"{spread(cpu['peer'])}; silica's work {spread(inside['work'])}, its imports "
            f"{spread(inside['imports'])}", ratio, f"{ratio:.2f}x", "≤ 1x", ratio <= 1.0))
    return rows


PEER_PROCESS: dict[str, tuple[str, float]] = {}
"""The first peer of each protocol and the median of its whole process (``fresh_rows``)."""


def warm_row(data: bytes, protocol: str, repeat: int) -> Row:
    """``encode`` in this process, warm: the time of the work alone, beside the first peer's
    whole process (report only: what a running ``silica chat`` spends on an image)."""
    text = encode(data, protocol, CELLS)  # warm-up, and the check
    size = drawn_size(protocol, text)
    want = ((FITTED.columns, 2 * FITTED.rows) if protocol == "blocks"
            else (FITTED.width_px, FITTED.height_px))
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        encode(data, protocol, CELLS)
        times.append(time.perf_counter() - started)
    figures = f"{spread(times)}, {len(text):,} characters, drawn at {size}"
    if size != want:
        return Row(f"{protocol}: encode in process, warm", figures + f" (want {want})", "-",
                   "the fitted size", "FAIL")
    if protocol not in PEER_PROCESS:
        return Row(f"{protocol}: encode in process, warm", figures, "-", "-", "INFO")
    name, theirs = PEER_PROCESS[protocol]
    ratio = med(times) / theirs
    return Row(f"{protocol}: encode in process, warm, vs the {name} process",
               f"{figures}; {name} {theirs * 1000:.1f} ms", f"{ratio:.2f}x", "-", "INFO", ratio)


def main() -> int:
    parser = bench_parser(__doc__ or "")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--only", default="kitty,iterm2,sixel,blocks",
                        help="comma-separated protocols")
    args = parser.parse_args()
    started = time.perf_counter()
    protocols = [p for p in args.only.split(",") if p]
    rows: list[Row] = []
    data = crop_png(screenshot_png(7), (0, 0, *SIZE))
    write_bytecode()
    terminal = cell_terminal()
    with temporary_folder("silica-bench-draw-", args.keep) as root:
        path = root / "screenshot.png"
        path.write_bytes(data)
        for protocol in protocols:
            rows += fresh_rows(path, protocol, args.repeat, terminal)
        for protocol in protocols:
            rows.append(warm_row(data, protocol, args.repeat))
    console.print(load_line())
    return report(rows, title="drawing a screenshot in the terminal: silica vs chafa, img2sixel",
                  command=f"python benchmarks/bench_draw.py --repeat {args.repeat}",
                  started=started, strict=args.strict)


if __name__ == "__main__":
    raise SystemExit(main())
