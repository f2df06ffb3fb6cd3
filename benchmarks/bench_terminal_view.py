"""Benchmark showing a failing tool's flood of output in the terminal, before and after the cap.

    python benchmarks/bench_terminal_view.py [--sizes 4 16] [--repeat 3] [--skip-before] [--keep]

A failing tool's output of each size (MiB): half log lines, half random bytes, decoded as the
tool runner decodes stdout (UTF-8, undecodable bytes as U+FFFD), then a final block saying
the tool exited with code 1, as ``build_result`` makes it. Both sides print the same
``ToolResult`` on silica's stderr console, pointed at a writer that counts what it is given.

- before: what ``show_result`` did until the cap: every text block printed whole through
  ``plain`` (the same console, markup off, soft wrap).
- after: ``silica.cli.show.show_result``: each block cut to ``SHOW_CHARS`` characters /
  ``SHOW_LINES`` lines, plus one line naming the file that holds all of the text (written
  under the temporary ``SILICA_HOME``; writing it is part of the time).

Figures are medians of ``--repeat`` runs (before: one run, it is slow). The script reports;
it asserts nothing and always exits 0.
"""

from __future__ import annotations

import io
import os
import random
import shlex
import sys
import time

from common import Row, bench_parser, console, med, ms, note, report, temporary_folder

MIB = 1024 * 1024


class Counter(io.TextIOBase):
    """A text stream that keeps nothing but the count of characters written."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, s: str) -> int:
        self.chars += len(s)
        return len(s)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


def failing_output(size: int, seed: int = 7):
    """A failing ``ToolResult`` whose stdout was ``size`` bytes: log lines, then binary."""
    from silica.blocks import TextBlock, ToolResult

    rng = random.Random(seed)
    lines, used = [], 0
    while used < size // 2:
        line = f"2026-05-09 14:22:{used % 60:02d} ERROR step {len(lines)} failed: {rng.random()}\n"
        lines.append(line)
        used += len(line)
    raw = "".join(lines).encode() + rng.randbytes(size - used)
    text = raw.decode("utf-8", errors="replace")
    return ToolResult(blocks=[TextBlock(text=text),
                              TextBlock(text="[the tool exited with code 1]")], is_error=True)


def render_before(result, stream: Counter) -> None:
    from silica.blocks import TextBlock
    from silica.cli import output

    output.err.file = stream
    for block in result.blocks:
        if isinstance(block, TextBlock):
            output.err.print(output.plain(block.text))


def render_after(result, stream: Counter) -> None:
    from silica.cli import output, show

    output.err.file = stream
    show.show_result(result, [], images="off")


def timed(render, result) -> tuple[float, int]:
    stream = Counter()
    started = time.perf_counter()
    render(result, stream)
    return time.perf_counter() - started, stream.chars


def main() -> int:
    parser = bench_parser(__doc__, strict=False)
    parser.add_argument("--sizes", type=float, nargs="+", default=[4, 16],
                        help="output sizes in MiB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per 'after' figure")
    parser.add_argument("--skip-before", action="store_true",
                        help="do not time the uncapped view (it takes minutes at 16 MiB)")
    opts = parser.parse_args()
    command = "python benchmarks/bench_terminal_view.py " + shlex.join(
        ["--sizes", *(f"{s:g}" for s in opts.sizes), f"--repeat={opts.repeat}"]
        + (["--skip-before"] if opts.skip_before else []))

    started = time.perf_counter()
    rows: list[Row] = []
    saved_stderr = None
    with temporary_folder("silica-bench-view-", opts.keep) as root:
        os.environ["SILICA_HOME"] = str(root / "home")
        from silica.cli import output

        saved_stderr = output.err.file
        console.print(f"silica terminal view benchmark: sizes {opts.sizes} MiB, "
                      f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}", soft_wrap=True)
        try:
            for size in opts.sizes:
                result = failing_output(int(size * MIB))
                label = f"{size:g} MiB of failing output"
                after = [timed(render_after, result) for _ in range(opts.repeat)]
                after_s, after_chars = med([a[0] for a in after]), after[0][1]
                if opts.skip_before:
                    figures = f"after {ms(after_s)} ({after_chars:,} chars shown)"
                    rows.append(Row(label, figures, "-", "report only", "INFO"))
                    continue
                note(f"{label}: the uncapped view (one run)")
                before_s, before_chars = timed(render_before, result)
                figures = (f"before {ms(before_s)} ({before_chars:,} chars shown), "
                           f"after {ms(after_s)} ({after_chars:,} chars shown)")
                ratio = before_s / after_s if after_s else float("inf")
                rows.append(Row(label, figures, f"{ratio:,.0f}x faster", "report only",
                                "INFO", ratio))
        finally:
            output.err.file = saved_stderr
    return report(rows, title="silica terminal view benchmark", command=command,
                  started=started, strict=False)


if __name__ == "__main__":
    sys.exit(main())
