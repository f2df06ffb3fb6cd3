"""What an MCP server that lists 100,000 tools costs `silica tools list`: peak memory and time.

    python benchmarks/bench_mcp_list.py [--tools 100000] [--page 1000] [--repeat 3]
                                        [--before REV] [--strict] [--keep]

The server is ``tests/mcp_fixtures/many_tools_server.py`` (hand-written, no SDK: its own
cost is small), run over stdio by this venv's Python; each tool is about 250 bytes. Three
servers, each alone in its own ``SILICA_HOME``: 10 tools (the command's own cost), ``--tools``
in one ``tools/list`` answer (about 30 MB on one line), and ``--tools`` in pages of
``--page``. Each run is a fresh ``silica tools list --json --refresh`` process that reports
its own peak memory (``VmHWM`` from ``/proc/self/status``, read at exit once its servers are
stopped; the server's memory is not in it), its own CPU time (``time.process_time()``: the
server's is not in it) and its wall time from start to exit (the server's time to write its
answer included). ``--before REV`` runs the same against the
``silica`` package of a git revision (``git archive`` into the temporary folder, put first on
``PYTHONPATH``), interleaved with the working tree's runs. Figures: the largest peak and the
median time of ``--repeat`` runs; 1 MB = 1,000,000 bytes.

| measure | target |
|---|---|
| one answer of ``--tools`` tools: peak | ≤ 2x the 10-tool peak |
| ``--tools`` tools in pages: peak | ≤ 2x the 10-tool peak |
| each: 1000 tools listed, and a row saying the server offered more | yes |
| wall and CPU times, and everything of ``--before`` | report only |

It reports; it is not a test: it exits 0 even when a target is missed, unless ``--strict``.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import REPO, Row, bench_parser, note, report, temporary_folder

MB = 1_000_000
SERVER = REPO / "tests" / "mcp_fixtures" / "many_tools_server.py"

# ``silica tools list`` as the command line runs it; its own peak (KiB) and wall time last.
CHILD = """
import atexit, runpy, sys, time
started = time.perf_counter()
def peak():
    with open("/proc/self/status") as status:
        kib = int(status.read().split("VmHWM:")[1].split()[0])
    print("MEASURED", kib * 1024, time.process_time(), file=sys.stderr)
atexit.register(peak)  # registered first, so it runs last: after the servers are stopped
sys.argv = ["silica", "tools", "list", "--json", "--refresh"]
runpy.run_module("silica", run_name="__main__")
"""


@dataclass
class Run:
    peak: int
    wall: float
    cpu: float  # silica's own CPU time (its threads, not the server's)
    listed: int
    reason: str


def one_run(home: Path, source: Path | None) -> Run:
    env = {**os.environ, "SILICA_HOME": str(home)}
    env.pop("SILICA_TOOLS_DIR", None)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          env=env, cwd=home, timeout=600)
    wall = time.perf_counter() - started
    if done.returncode != 0 or "MEASURED" not in done.stderr:
        raise SystemExit(f"silica tools list failed:\n{done.stderr[-2000:]}")
    peak, cpu = done.stderr.rsplit("MEASURED", 1)[1].split()[:2]
    rows = json.loads(done.stdout)
    listed = len([r for r in rows if r["name"].startswith("many__t")])
    reason = next((r["reason"] for r in rows if r["name"] == "many__*"), "")
    return Run(int(peak), wall, float(cpu), listed, reason)


def configure(home: Path, *args: str) -> Path:
    home.mkdir(parents=True)
    argv = json.dumps([str(SERVER), *args])
    (home / "config.toml").write_text(
        f"[mcp.servers.many]\ncommand = {json.dumps(sys.executable)}\nargs = {argv}\n"
        "startup_timeout = 300\n", encoding="utf-8")
    return home


def checkout(rev: str, into: Path) -> Path:
    """The ``silica`` package of git revision ``rev``, unpacked under ``into``."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "silica"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--tools", type=int, default=100_000)
    parser.add_argument("--page", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", metavar="REV", help="also measure this git revision")
    options = parser.parse_args()
    started = time.perf_counter()
    with temporary_folder("silica-bench-mcp-list-", options.keep) as root:
        cases = {"10 tools": ("10",),
                 f"{options.tools:,} tools in one answer": (str(options.tools),),
                 f"{options.tools:,} tools in pages of {options.page}":
                     (str(options.tools), "--page", str(options.page))}
        sides: dict[str, Path | None] = {"now": None}
        if options.before:
            sides[f"before ({options.before})"] = checkout(options.before, root / "before")
        homes = {(case, side): configure(root / f"home-{n}-{m}", *args)
                 for n, (case, args) in enumerate(cases.items())
                 for m, side in enumerate(sides)}
        runs: dict[tuple[str, str], list[Run]] = {key: [] for key in homes}
        for _ in range(options.repeat):  # the sides interleaved: a busy machine loads both
            for (case, side), home in homes.items():
                note(f"{side}: {case}")
                runs[(case, side)].append(one_run(home, sides[side]))
        rows = _rows(runs, list(cases), list(sides))
    command = "python benchmarks/bench_mcp_list.py " + shlex.join(sys.argv[1:])
    return report(rows, title="silica tools list against a server of many tools",
                  command=command.strip(), started=started, strict=options.strict)


def _rows(runs: dict[tuple[str, str], list[Run]], cases: list[str],
          sides: list[str]) -> list[Row]:
    rows: list[Row] = []
    base = max(r.peak for r in runs[(cases[0], "now")])
    for case in cases:
        for side in sides:
            done = runs[(case, side)]
            peak, wall = max(r.peak for r in done), statistics.median(r.wall for r in done)
            cpu = statistics.median(r.cpu for r in done)
            figures = (f"peak {peak / MB:.0f} MB, {wall:.2f} s wall, {cpu:.2f} s CPU, "
                       f"{done[0].listed} tools listed"
                       + (f"; {done[0].reason}" if done[0].reason else ""))
            if case == cases[0] or side != "now":
                rows.append(Row(f"{side}: {case}", figures, f"{peak / base:.2f}x the 10-tool peak",
                                "report only", "INFO", peak / base))
                continue
            said = done[0].listed == 1000 and "more than 1000" in done[0].reason
            rows.append(Row.judged(f"{side}: {case}", figures, peak / base,
                                   f"{peak / base:.2f}x the 10-tool peak",
                                   "≤ 2x the 10-tool peak; 1000 listed, 'more than' said",
                                   peak <= 2 * base and said))
    return rows


if __name__ == "__main__":
    sys.exit(main())
