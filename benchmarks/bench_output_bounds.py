"""Benchmark what a tool's output costs silica in memory and time, end to end.

    python benchmarks/bench_output_bounds.py [--repeat 1] [--only plain,sixel-20] [--strict]

Each case is a command that prints a hostile or just large output, run through the real
``silica exec -- python3 -c CODE`` in a fresh process with its own ``SILICA_HOME`` (a
``tempfile.mkdtemp()`` folder, removed at the end unless ``--keep``). The command writes its
output in 64 KiB pieces, so it stays small itself. The figures: the peak resident memory of
the silica process tree (``ru_maxrss`` from ``os.wait4`` on the silica process: silica, its
reaper and the command, the largest of them; silica is by far the largest) and the wall
time from start to exit, the largest peak and the median time of ``--repeat`` runs. The
view silica prints is checked for what the case must show (a notice, the start of the
text), or the row fails whatever the figures.

| case | what the command prints |
|---|---|
| plain 64 MiB | ASCII log lines past the 64 MiB stdout cap (silica stops it there) |
| kitty chunks (4096) | ``a=T,f=100,m=1``, then ``m=1`` chunks of 4096 base64 chars, unfinished |
| kitty chunks (4) | the same, chunks of 4 characters: millions of sequences |
| JSON 3M objects | ``{"items": [{"i": 0}, {"i": 1}, ...]}``: 3,000,000 objects, ~40 MB |
| sixel 20 MB / 60 MB token | ``ESC P q #1;1;1;...`` one token of 20 (60) MB, then ST |

Target per case: peak at most 3x the output cap (64 MiB: 201 MB); the ratio is peak / cap.
Times are reported, and judged only as linear: the 60 MB sixel against the 20 MB one (about
3x). 1 MB = 1,000,000 bytes. It takes about 30 s. It reports; it is not a test: it exits 0
even when a target is missed, unless ``--strict`` is given. To measure another checkout
(before a change), run it with ``PYTHONPATH=<that checkout>``: silica is run as
``python -m silica``, so it is imported from there.
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import Row, bench_parser, console, note, report, temporary_folder

MB = 1_000_000
MIB = 1024 * 1024
CAP = 64 * MIB  # silica's default stdout cap
TARGET = 3 * CAP

# What the commands share: write(bytes) in 64 KiB pieces.
HEAD = "import sys\nw = sys.stdout.buffer.write\n"


@dataclass
class Case:
    name: str
    code: str  # the command's Python
    shows: str  # what silica's view must hold


def repeated(piece: str, total: str, first: str = "b''", last: str = "b''") -> str:
    """Code printing ``first``, then ``piece`` until ``total`` bytes, then ``last``."""
    return (HEAD + f"w({first})\nblock = {piece} * max(1, 65536 // len({piece}))\n"
            f"n = 0\nwhile n + len(block) <= {total}:\n    w(block)\n    n += len(block)\n"
            f"w({last})\n")


CASES = [
    Case("plain 64 MiB", repeated("b'x' * 79 + b'\\n'", str(CAP + MIB)),
         "output cut: the command printed more than the 67108864-byte cap"),
    Case("kitty chunks 64 MiB (4096 chars)",
         repeated("b'\\x1b_Gm=1;' + b'A' * 4096 + b'\\x1b\\\\'", str(CAP - MIB),
                  first="b'\\x1b_Ga=T,f=100,m=1;' + b'A' * 4096 + b'\\x1b\\\\'"),
         "[kitty image dropped: transfer not finished at the end of the output]"),
    Case("kitty chunks 64 MiB (4 chars)",
         repeated("b'\\x1b_Gm=1;AAAA\\x1b\\\\'", str(CAP - MIB),
                  first="b'\\x1b_Ga=T,f=100,m=1;AAAA\\x1b\\\\'"),
         "[kitty image dropped: transfer not finished at the end of the output]"),
    Case("JSON 3M objects",
         HEAD + "w(b'{\"items\": [')\nfor i in range(0, 3_000_000, 10_000):\n"
         "    w(b', '.join(b'{\"i\": %d}' % j for j in range(i, i + 10_000)))\n"
         "    w(b', ' if i + 10_000 < 3_000_000 else b'')\nw(b']}\\n')\n",
         '{"items": [{"i": 0}, {"i": 1}'),
    Case("sixel 20 MB single token",
         repeated("b'1;'", str(20 * MB), first="b'\\x1bPq#'", last="b'\\x1b\\\\'"),
         "[sixel image dropped: no pixels]"),
    Case("sixel 60 MB single token",
         repeated("b'1;'", str(60 * MB), first="b'\\x1bPq#'", last="b'\\x1b\\\\'"),
         "[sixel image dropped: no pixels]"),
]


@dataclass
class Outcome:
    case: Case
    peak: int
    seconds: float
    problem: str  # empty when silica showed what it must


def run_once(case: Case, root: Path) -> tuple[int, float, str]:
    """Peak bytes, wall seconds, and what went wrong (empty: nothing) of one run."""
    env = dict(os.environ, SILICA_HOME=str(root / "home"))
    view = root / "view.txt"
    argv = [sys.executable, "-m", "silica", "exec", "--", sys.executable, "-c", case.code]
    started = time.perf_counter()
    with view.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.perf_counter() - started
    shown = view.read_text("utf-8", "replace")
    problem = ""
    if case.shows not in shown:
        problem = f"exit {proc.returncode}, view: {shown[-300:]!r}"
    elif "Traceback" in shown:
        problem = "a traceback"
    return usage.ru_maxrss * 1024, took, problem


def run(case: Case, root: Path, repeat: int) -> Outcome:
    peaks, times, problem = [], [], ""
    for _ in range(repeat):
        peak, took, why = run_once(case, root)
        peaks.append(peak)
        times.append(took)
        problem = problem or why
    return Outcome(case, max(peaks), statistics.median(times), problem)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=1, help="fresh silica processes per case")
    parser.add_argument("--only", default="", help="comma-separated words: cases whose name "
                        "holds one of them (e.g. plain,sixel)")
    opts = parser.parse_args()
    words = [w.strip().lower() for w in opts.only.split(",") if w.strip()]
    cases = [c for c in CASES if not words or any(w in c.name.lower() for w in words)]
    command = "python benchmarks/bench_output_bounds.py " + shlex.join(
        [f"--repeat={opts.repeat}"] + ([f"--only={opts.only}"] if opts.only else []))
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    with temporary_folder("silica-bench-output-", opts.keep) as root:
        where = os.environ.get("PYTHONPATH", "") or "this checkout"
        console.print(f"silica output bounds: {os.cpu_count()} CPUs, Python "
                      f"{sys.version.split()[0]}, silica from {where}, repeat {opts.repeat}, "
                      f"in {root}", soft_wrap=True)
        for case in cases:
            note(f"silica exec on: {case.name}")
            outcomes.append(run(case, root, opts.repeat))

    rows = []
    for o in outcomes:
        ratio = o.peak / CAP
        figures = f"peak {o.peak / MB:,.0f} MB, {o.seconds:.1f} s"
        if o.problem:
            figures += f"; WRONG: {o.problem}"
        rows.append(Row.judged(f"silica exec, {o.case.name}", figures, ratio,
                               f"{ratio:.2f}x cap", f"≤ 3x cap ({TARGET / MB:,.0f} MB)",
                               ratio <= 3 and not o.problem))
    times = {o.case.name: o.seconds for o in outcomes}
    small, big = times.get("sixel 20 MB single token"), times.get("sixel 60 MB single token")
    if small and big:
        grows = big / small
        rows.append(Row.judged("sixel time, 60 MB vs 20 MB (linear: about 3x)",
                               f"{big:.1f} s vs {small:.1f} s", grows, f"{grows:.1f}x",
                               "≤ 4.5x", grows <= 4.5))
    return report(rows, title="tool output in memory (silica exec, fresh process each)",
                  command=command, started=started, strict=opts.strict,
                  notes=("peak: ru_maxrss of the silica process tree (os.wait4); the cap is "
                         "64 MiB = 67,108,864 bytes",))


if __name__ == "__main__":
    sys.exit(main())
