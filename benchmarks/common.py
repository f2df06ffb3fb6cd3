"""What the benchmark scripts share: the console, small helpers, the result row, the closing
report, and a screenshot-like PNG.

The scripts run as ``python benchmarks/bench_x.py``, which puts this folder on ``sys.path``;
they import from here with ``from common import ...``. Pillow is imported only when a
screenshot is drawn.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from PIL import ImageFont

REPO = Path(__file__).resolve().parent.parent

# Every silica process a benchmark starts is a fresh one of its own, unless its row is about
# the resident (silica.resident) and says so: such a row takes this variable out again.
os.environ.setdefault("SILICA_RESIDENT", "0")

console = Console(highlight=False)
if not console.is_terminal:  # piped or logged: do not squeeze the table into 80 columns
    console = Console(highlight=False, width=150)


def bench_parser(doc: str, *, strict: bool = True) -> argparse.ArgumentParser:
    """The command line every benchmark shares: described by the first line of ``doc``, with
    ``--keep`` (keep the temporary folder) and, unless ``strict`` is False, ``--strict``
    (exit 1 if a target is missed); a benchmark adds its own options."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if strict:
        parser.add_argument("--strict", action="store_true",
                            help="exit 1 if a target is missed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    return parser


def note(message: str) -> None:
    console.print(f"[dim]… {message}[/dim]")


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def ms(seconds: float, digits: int = 1, sub_ms_digits: int | None = None) -> str:
    """Milliseconds with ``digits`` decimals (``sub_ms_digits`` below 1 ms, if given); from
    10 s on, seconds."""
    if sub_ms_digits is not None and seconds < 0.001:
        return f"{seconds * 1000:.{sub_ms_digits}f} ms"
    return f"{seconds * 1000:.{digits}f} ms" if seconds < 10 else f"{seconds:.2f} s"


def spread(xs: list[float], fmt: Callable[[float], str] = ms) -> str:
    """The median of ``xs`` with its minimum and maximum, each through ``fmt``: every row shows
    how far its runs spread, not only the middle one."""
    return f"{fmt(med(xs))} (min {fmt(min(xs))}, max {fmt(max(xs))})"


def interleaved(n: int, **steps: Callable[[], float]) -> dict[str, list[float]]:
    """Run each step once per round, in a rotating order; the times of each step. The sides
    of a comparison take turns, so a machine shared with other work loads both alike."""
    times: dict[str, list[float]] = {k: [] for k in steps}
    names = list(steps)
    for r in range(n):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            times[name].append(steps[name]())
    return times


def installed_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (the environment by default) as an installed package starts in: bytecode is
    written and reused (``PYTHONDONTWRITEBYTECODE`` removed), so a start-up row does not
    time recompiling silica at every start. Call ``write_bytecode()`` once before timing."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def write_bytecode() -> None:
    """Compile silica's package once, as installing a wheel does, so fresh processes import
    it from bytecode."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "silica")],
                   check=True, stdout=subprocess.DEVNULL, env=installed_env())


def load_line() -> str:
    """The 1, 5 and 15 minute load averages and the CPU count: printed with the figures, since
    other work on the machine shows in every one."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


@contextmanager
def temporary_folder(prefix: str, keep: bool) -> Iterator[Path]:
    """A fresh temporary folder, removed at the end unless ``keep`` (then its path is printed)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        if keep:
            console.print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


# -- the report ---------------------------------------------------------------------------

VERDICT_STYLE = {"PASS": "green", "FAIL": "red", "NOT MEASURED": "yellow", "WARN": "yellow",
                 "INFO": "cyan"}


@dataclass
class Row:
    """One measure. ``verdict``: PASS, FAIL, NOT MEASURED (a comparison that could not be
    made; it does not fail), WARN (a check that failed), INFO (report only)."""

    measure: str
    figures: str
    ratio_text: str
    target: str
    verdict: str
    ratio: float | None = None  # the ratio as a number, where there is one

    @classmethod
    def judged(cls, measure: str, figures: str, ratio: float, ratio_text: str, target: str,
               passed: bool) -> Row:
        """A row against a target: PASS or FAIL."""
        return cls(measure, figures, ratio_text, target, "PASS" if passed else "FAIL", ratio)

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"


def report(rows: list[Row], *, title: str, command: str, started: float, strict: bool,
           heading: str = "summary:", notes: tuple[str, ...] = (), verdict_width: int = 5) -> int:
    """Print the table, the plain summary, ``notes``, the count of targets met and the command
    that reproduces the run; the exit code (1 if ``strict`` and a target was missed). With
    ``BENCH_ROWS`` set to a file path, the rows are also appended there as JSON lines (how
    ``headline.py`` gathers the rows of several scripts)."""
    if rows_file := os.environ.get("BENCH_ROWS"):
        with open(rows_file, "a", encoding="utf-8") as out:
            for r in rows:
                out.write(json.dumps({"script": Path(sys.argv[0]).name, **asdict(r)}) + "\n")
    table = Table(title=title)
    for col in ("measure", "figures", "ratio", "target", "result"):
        table.add_column(col, overflow="fold")
    for r in rows:
        style = VERDICT_STYLE[r.verdict]
        table.add_row(r.measure, r.figures, r.ratio_text, r.target,
                      f"[{style}]{r.verdict}[/{style}]")
    console.print(table)

    console.print(f"\n{heading}", markup=False)
    for r in rows:
        console.print(f"  {r.verdict:<{verdict_width}} {r.measure}: {r.figures} -> "
                      f"{r.ratio_text} (target {r.target})", markup=False, soft_wrap=True)
    targets = [r for r in rows if r.verdict in ("PASS", "FAIL", "NOT MEASURED")]
    failed = [r for r in rows if r.verdict == "FAIL"]
    unmeasured = [r for r in rows if r.verdict == "NOT MEASURED"]
    warned = [r for r in rows if r.verdict == "WARN"]
    for line in notes:
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"{len(targets) - len(failed) - len(unmeasured)}/{len(targets)} targets met"
                  + (f", {len(unmeasured)} NOT MEASURED" if unmeasured else "")
                  + (f", {len(warned)} warnings" if warned else "")
                  + f"; took {time.perf_counter() - started:.0f} s", markup=False)
    console.print(f"reproduce: cd {REPO} && . .venv/bin/activate && {command}", markup=False,
                  soft_wrap=True)
    return 1 if strict and failed else 0


# -- a screenshot -------------------------------------------------------------------------

WORDS = ["def", "return", "self", "value", "import", "from", "class", "for", "in", "if", "else",
         "None", "True", "list", "dict", "result", "data", "image", "width", "height", "async",
         "await", "yield", "config", "path", "session", "store", "turn", "request"]
PALETTE = [(198, 120, 221), (97, 175, 239), (152, 195, 121), (229, 192, 123), (171, 178, 191),
           (224, 108, 117)]
BUTTONS = [("Refresh", (66, 133, 244)), ("Export", (52, 168, 83)), ("Share", (251, 188, 5)),
           ("Delete", (234, 67, 53))]


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except Exception:  # no FreeType: the bitmap font
        return ImageFont.load_default()


def crop_png(data: bytes, box: tuple[int, int, int, int]) -> bytes:
    """The PNG of the part ``box`` (left, top, right, bottom) of image ``data``, pixel for
    pixel."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        buf = io.BytesIO()
        img.crop(box).save(buf, "PNG")
        return buf.getvalue()


def screenshot_png(seed: int, *, buttons: bool = False) -> bytes:
    """A 1920x1080 desktop: gradient wallpaper, an editor, a terminal, a browser with a chart
    (and a row of buttons if ``buttons``), a taskbar. ``seed`` moves the windows and changes
    every text and colour."""
    from PIL import Image, ImageDraw

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
    if buttons:
        for i, (label, fill) in enumerate(BUTTONS):
            d.rounded_rectangle((bx + 30 + i * 130, by + 530, bx + 140 + i * 130, by + 562),
                                radius=6, fill=fill)
            d.text((bx + 50 + i * 130, by + 538), label, fill=(255, 255, 255), font=font)
    d.rectangle((0, h - 44, w, h), fill=(28, 28, 34))  # taskbar
    for i in range(9):
        d.rounded_rectangle((16 + i * 52, h - 38, 56 + i * 52, h - 6), radius=8,
                            fill=(60 + 20 * i % 150, 90, 160 - 10 * i))
    d.text((w - 150, h - 30), f"{rng.randrange(24):02d}:{rng.randrange(60):02d}  09/05/2026",
           fill=(230, 230, 230), font=font)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()
