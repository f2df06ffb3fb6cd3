"""The rows people feel, gathered from the scripts that measure them, in one table.

    python benchmarks/headline.py [--quick] [--only mcp,startup,...] [--strict] [--keep]

Each script runs in its own process, one after the other (never two at once: they would load
each other's figures), with ``BENCH_ROWS`` pointing at a file where ``common.report`` writes
its rows. The table then shows, for each measure of the list below, the row of its script:
its figures (median with min and max), its ratio, its target and PASS/FAIL. A row its script
did not print is MISSING, which counts as a missed target. The load average is printed
before and after: other work on the machine shows in every figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import REPO, Row, bench_parser, console, load_line, report, temporary_folder


@dataclass(frozen=True)
class Source:
    """A script and the arguments that make it measure what the headline needs."""

    key: str
    script: str
    args: tuple[str, ...]
    quick: tuple[str, ...]  # the same, with fewer repeats


@dataclass(frozen=True)
class Headline:
    """One measure of the table: the row of ``source`` whose measure contains ``match``."""

    label: str
    source: str
    match: str


SOURCES = [
    Source("mcp", "bench_mcp.py", (), ("--calls", "20", "--repeat", "3")),
    Source("startup", "bench_toolbox.py", (), ("--repeat", "3", "--call-repeat", "5")),
    Source("ask", "bench_startup.py", (), ("--repeat", "3")),
    Source("cache", "bench_agent.py", (), ("--repeat", "2")),
    Source("serve", "bench_serve.py", ("--only", "latency"), ("--only", "latency")),
    Source("sixel", "bench_sixel.py", (), ("--repeat", "3")),
    Source("kitty", "bench_images.py", (), ("--repeat", "5")),
    Source("memory", "bench_chat_memory.py", (), ()),
    Source("draw", "bench_draw.py", (), ("--repeat", "3")),
]

HEADLINES = [
    Headline("MCP call through the agent vs the official client's session (python server)",
             "mcp", "per call, trivial tool (python"),
    Headline("the same, node server", "mcp", "per call, trivial tool (node"),
    Headline("20 concurrent MCP calls vs one call (python server)", "mcp",
             "concurrent `toolbox.acall` (python"),
    Headline("the same, node server", "mcp", "concurrent `toolbox.acall` (node"),
    Headline("silica tools run hello vs uv run --script hello.py (fresh process)", "startup",
             "`silica tools run hello --input"),
    Headline("the same, resident warm", "startup", "`silica tools run hello`, resident warm"),
    Headline("warm silica tools list, 50 tools, vs import rich.console (fresh process)",
             "startup", "tools (cached specs) vs `python -c"),
    Headline("the same, resident warm", "startup", "resident warm (a warm state: the run"),
    Headline("silica ask: own time before the first request, resident warm", "ask",
             "own time before its first request, resident warm"),
    Headline("prompt-cache reuse, byte-weighted, 12 turns", "cache",
             "12-turn chat, a 1600x1000 screenshot"),
    Headline("the last of 12 requests vs aging off", "cache", "the last of the 12 requests"),
    Headline("prompt-cache reuse, byte-weighted, 30 turns", "cache",
             "30-turn chat, a 1600x1000 screenshot"),
    Headline("the last of 30 requests vs aging off", "cache", "the last of the 30 requests"),
    Headline("serve: the last delta of a short reply, 20 Socket.IO clients, p50", "serve",
             "last delta of a short reply, 20 socket.io"),
    Headline("the same, 20 SSE clients", "serve", "last delta of a short reply, 20 sse"),
    Headline("sixel decode + PNG, 1920x1080, vs sixel2png (fresh processes)", "sixel",
             "decode + png file 1920x1080"),
    Headline("kitty, 1000 x 10 kB images, fresh processes, vs node", "kitty",
             "a fresh process each run: 1,000"),
    Headline("silica chat memory growth per turn, turns 5-30", "memory",
             "vmrss growth per turn"),
    Headline("draw a 1600x1000 screenshot, kitty, vs chafa (fresh processes)", "draw",
             "kitty: draw 1600x1000"),
    Headline("the same, sixel, vs img2sixel", "draw", "silica vs img2sixel"),
]


def run_source(source: Source, quick: bool, rows_file: Path) -> None:
    args = source.quick if quick else source.args
    console.rule(f"{source.script} {' '.join(args)}")
    env = {**os.environ, "BENCH_ROWS": str(rows_file)}
    subprocess.run([sys.executable, str(REPO / "benchmarks" / source.script), *args],
                   env=env, cwd=REPO, check=False)


def gathered(rows_file: Path) -> dict[str, list[dict[str, object]]]:
    by_script: dict[str, list[dict[str, object]]] = {}
    if rows_file.exists():
        for line in rows_file.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            by_script.setdefault(str(row["script"]), []).append(row)
    return by_script


def headline_row(headline: Headline, rows: list[dict[str, object]]) -> Row:
    for row in rows:
        if headline.match.lower() in str(row["measure"]).lower():
            return Row(headline.label, str(row["figures"]), str(row["ratio_text"]),
                       str(row["target"]), str(row["verdict"]))
    return Row(headline.label, "its script printed no such row", "-", "-", "FAIL")


def main() -> int:
    parser = bench_parser(__doc__ or "")
    parser.add_argument("--quick", action="store_true", help="fewer repeats in every script")
    parser.add_argument("--only", default="",
                        help="comma-separated keys: " + ",".join(s.key for s in SOURCES))
    args = parser.parse_args()
    started = time.perf_counter()
    keys = {k for k in args.only.split(",") if k} or {s.key for s in SOURCES}
    unknown = keys - {s.key for s in SOURCES}
    if unknown:
        parser.error(f"unknown --only key(s): {', '.join(sorted(unknown))}")
    before = load_line()
    with temporary_folder("silica-headline-", args.keep) as tmp:
        rows_file = tmp / "rows.jsonl"
        chosen = [s for s in SOURCES if s.key in keys]
        for source in chosen:
            run_source(source, args.quick, rows_file)
        by_script = gathered(rows_file)
    scripts = {s.key: s.script for s in chosen}
    rows = [headline_row(h, by_script.get(scripts[h.source], []))
            for h in HEADLINES if h.source in scripts]
    command = "python benchmarks/headline.py" + (" --quick" if args.quick else "") + (
        f" --only {args.only}" if args.only else "")
    return report(rows, title="the rows people feel", command=command, started=started,
                  strict=args.strict, notes=(f"before: {before}", f"after: {load_line()}"))


if __name__ == "__main__":
    raise SystemExit(main())
