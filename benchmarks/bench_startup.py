"""Benchmark silica's start: `silica --version`, and what `silica ask` spends of its own.

    python benchmarks/bench_startup.py [--repeat 7] [--tools 4] [--strict] [--keep]

1. ``silica --version`` against ``python -c pass`` (the venv's Python on both sides).
2. ``silica ask "hi"`` against a local server speaking the Anthropic Messages API
   (``tests/wire``, in a thread of this process) through the real ``anthropic`` SDK, with a
   tool folder of ``--tools`` small tools whose specs are warm in the spec cache. Its *own
   time* is the wall time from spawn to exit minus the server's own time (each request
   timed from its headers read to its last byte written). The model answers in text, so no
   tool runs: what is left is silica's start, the SDK's import, discovery, saving the
   session and the end of the process. Shown beside it: the time until the first request
   reached the server, the time from the reply's last byte to the process's exit, the
   SDK's import alone (``import anthropic`` timed inside a fresh interpreter), and what is
   left of ask's own time beyond it.
3. ``python -X importtime`` of both commands: which provider SDKs each imports (``--version``
   none, ``ask`` the one of its provider only), and the heaviest top-level imports.

The commands of each figure run interleaved, after one warm-up each; figures are medians of
``--repeat`` runs. Everything happens in a fresh temporary folder with its own
``SILICA_HOME`` and ``SILICA_TOOLS_DIR``. The load average at the start and the end is
printed: on a shared machine, other work shows in every figure. The script reports; it is
not a test: it exits 0 even when a target is missed, unless ``--strict`` is given.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench_toolbox import heaviest, parse_importtime
from common import (
    REPO,
    Row,
    bench_parser,
    console,
    interleaved,
    med,
    ms,
    note,
    report,
    temporary_folder,
)

VERSION_TARGET = 5.0  # silica --version <= 5x python -c pass
OWN_TARGET = 0.5  # seconds of silica ask's own time
SDKS = {"anthropic": "anthropic", "openai": "openai", "google.genai": "google-genai"}
TOOL = '''\
# /// script
# requires-python = ">=3.11"
# dependencies = []
# ///
"""{name}: echo some text."""
import json
import sys

if "--toolspec" in sys.argv:
    print(json.dumps({{"name": "{name}", "description": "Echo some text ({n}).",
                      "input_schema": {{"type": "object",
                                        "properties": {{"text": {{"type": "string"}}}}}}}}))
else:
    print(sys.argv[-1])
'''


class TimedServer:
    """The Anthropic wire server with each request's own time (headers read -> last byte
    written) and its start, on this process's ``perf_counter`` clock."""

    def __init__(self) -> None:
        sys.path.insert(0, str(REPO / "tests"))
        from wire import server as wire_server

        self.spans: list[tuple[float, float]] = []  # (start, end) of each request
        self.lock = threading.Lock()
        plain = wire_server._handler
        spans, lock = self.spans, self.lock

        def timed(srv):
            class Timed(plain(srv)):
                def do_POST(self) -> None:
                    started = time.perf_counter()
                    try:
                        super().do_POST()
                    finally:
                        with lock:
                            spans.append((started, time.perf_counter()))

            return Timed

        wire_server._handler = timed  # serve() builds its handler from this name

    def since(self, n: int) -> list[tuple[float, float]]:
        with self.lock:
            return list(self.spans[n:])


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Wall time of ``argv`` to exit; raises if it fails."""
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited with {proc.returncode}:\n"
                           f"{proc.stderr[-2000:]}")
    return took


def bench_version(silica: list[str], cwd: Path, repeat: int) -> Row:
    py = [sys.executable, "-c", "pass"]
    steps: dict[str, Callable[[], float]] = {
        "pass": lambda: run(py, cwd), "version": lambda: run([*silica, "--version"], cwd)}
    for step in steps.values():
        step()  # warm-up
    times = interleaved(repeat, **steps)
    bare, version = med(times["pass"]), med(times["version"])
    ratio = version / bare
    return Row.judged("`silica --version` vs `python -c pass`",
                      f"{ms(version)} vs {ms(bare)}", ratio, f"{ratio:.1f}×",
                      f"≤ {VERSION_TARGET:g}×", ratio <= VERSION_TARGET)


def bench_ask(silica: list[str], cwd: Path, env: dict[str, str], server: TimedServer,
              repeat: int) -> list[Row]:
    own, before, after, walls = [], [], [], []

    def ask() -> float:
        seen = len(server.spans)
        started = time.perf_counter()
        wall = run([*silica, "ask", "hi"], cwd, env)
        ended = started + wall
        spans = server.since(seen)
        if not spans:
            raise RuntimeError("silica ask sent no request to the wire server")
        busy = sum(end - start for start, end in spans)
        own.append(wall - busy)
        before.append(spans[0][0] - started)
        after.append(ended - spans[-1][1])
        walls.append(wall)
        return wall

    imports: list[float] = []

    def sdk() -> float:  # the import alone, timed inside a fresh interpreter
        code = ("import time; t = time.perf_counter(); import anthropic; "
                "print(time.perf_counter() - t)")
        proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                              text=True, check=True)
        imports.append(float(proc.stdout))
        return imports[-1]

    steps: dict[str, Callable[[], float]] = {"ask": ask, "sdk": sdk}
    for step in steps.values():
        step()  # warm-up: the OS's file cache, the spec cache
    del own[:], before[:], after[:], walls[:], imports[:]
    interleaved(repeat, **steps)
    mine, sdk_import = med(own), med(imports)
    return [
        Row.judged("`silica ask hi` own time: wall minus the wire server's own time",
                   f"{ms(mine)} (wall {ms(med(walls))})", mine, f"{mine:.2f} s",
                   f"≤ {OWN_TARGET:g} s", mine <= OWN_TARGET),
        Row("… of which before the first request reached the server", ms(med(before)), "",
            "report only", "INFO"),
        Row("… of which after the reply's last byte (save, close, exit)", ms(med(after)), "",
            "report only", "INFO"),
        Row("`import anthropic` in a fresh interpreter (the SDK's import alone, timed inside)",
            ms(sdk_import), f"{sdk_import / mine:.2f}× of ask's own time" if mine else "",
            "report only", "INFO"),
        Row("ask's own time beyond the SDK's import", ms(mine - sdk_import), "",
            "report only", "INFO"),
    ]


def bench_imports(argv: list[str], cwd: Path, env: dict[str, str],
                  allowed: set[str]) -> tuple[Row, dict[str, tuple[int, int]]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "silica", *argv],
                          cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True)
    modules = parse_importtime(proc.stderr)
    if proc.returncode != 0 or "silica.cli" not in modules:
        raise RuntimeError(f"silica {shlex.join(argv)} failed:\n{proc.stderr[-2000:]}")
    found = {label for name, label in SDKS.items() if name in modules}
    extra = found - allowed
    total = sum(self_us for self_us, _ in modules.values()) / 1e6
    want = ", ".join(sorted(allowed)) or "none"
    return Row.judged(f"provider SDKs imported by `silica {shlex.join(argv)}`",
                      f"{', '.join(sorted(found)) or 'none'}; all imports {ms(total)}",
                      float(len(extra)), f"{len(extra)} other", f"{want} only",
                      not extra), modules


def write_tools(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        name = f"echo_{n}"
        (folder / f"{name}.py").write_text(TOOL.format(name=name, n=n), encoding="utf-8")


def load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=7, help="runs per figure (median)")
    parser.add_argument("--tools", type=int, default=4, help="tools in the tool folder")
    opts = parser.parse_args()
    command = ("python benchmarks/bench_startup.py " +
               shlex.join([f"--repeat={opts.repeat}", f"--tools={opts.tools}"]))
    started = time.perf_counter()
    server = TimedServer()
    from wire import anthropic_server, text

    with temporary_folder("silica-bench-start-", opts.keep) as root:
        home, tools, project = root / "home", root / "tools", root / "project"
        (project / ".git").mkdir(parents=True)  # a repository: project folders stop here
        write_tools(tools, opts.tools)
        exe = Path(sys.executable).parent / "silica"
        silica = [str(exe)] if exe.exists() else [sys.executable, "-m", "silica"]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANTHROPIC_", "OPENAI_", "GEMINI_", "SILICA_"))}
        env |= {"SILICA_HOME": str(home), "SILICA_TOOLS_DIR": str(tools)}
        console.print(f"silica start-up benchmark: {opts.tools} tools, {os.cpu_count()} CPUs, "
                      f"repeat {opts.repeat}, load average {load()}", soft_wrap=True)
        rows: list[Row] = []
        note("silica --version vs python -c pass")
        rows.append(bench_version(silica, project, opts.repeat))
        with anthropic_server([text("Hello there.")] * (4 * opts.repeat + 20)) as srv:
            env |= srv.env
            note("warming the spec cache (silica tools list)")
            run([*silica, "tools", "list", "--json"], project, env)
            note("silica ask hi, own time")
            rows.extend(bench_ask(silica, project, env, server, opts.repeat))
            note("imports (python -X importtime)")
            version_row, version_mods = bench_imports(["--version"], project, env, set())
            ask_row, ask_mods = bench_imports(["ask", "hi"], project, env, {"anthropic"})
        rows += [version_row, ask_row]
        console.print(f"heaviest top-level imports (`silica --version`): "
                      f"{heaviest(version_mods)}", soft_wrap=True)
        console.print(f"heaviest top-level imports (`silica ask hi`): {heaviest(ask_mods)}",
                      soft_wrap=True)
        console.print(f"load average at the end: {load()}")
    return report(rows, title="silica start-up benchmark", command=command, started=started,
                  strict=opts.strict)


if __name__ == "__main__":
    sys.exit(main())
