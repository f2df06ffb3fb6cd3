"""Benchmark silica's start: `silica --version`, and what `silica ask` spends of its own.

    python benchmarks/bench_startup.py [--repeat 7] [--tools 4] [--strict] [--keep]

1. ``silica --version`` against ``python -c pass`` (the venv's Python on both sides).
2. ``silica ask "hi"`` against a local server speaking the Anthropic Messages API
   (``tests/wire``, in a thread of this process) through the real ``anthropic`` SDK, with a
   tool folder of ``--tools`` small tools whose specs are warm in the spec cache. Its *own
   time before the first request*: from spawn to the request's headers read by the server.
   Each run is a fresh ``silica ask`` process, interleaved: with the resident warm (the
   warm state, started once by a first ``ask`` and reused by every run: the row checks it
   was) and without one (``SILICA_RESIDENT=0``, report only). Beside them, each timed
   inside a fresh interpreter: ``import anthropic``; the same with aiohttp blocked
   (``sys.modules['aiohttp'] = None``: a user install has no ``[dev]`` extra, so no
   aiohttp, and the SDK skips its optional transport); and the two other ways past the
   SDK's import: importing less of it (its ``__init__`` imports ``anthropic.types``
   whatever is asked, so the floor is the import itself; the ``-X importtime`` shares are
   printed) and its lighter path, its HTTP client alone (``import httpx2``).
3. ``python -X importtime`` of both commands: which provider SDKs each imports (``--version``
   none, ``ask`` the one of its provider only), and the heaviest top-level imports.

The commands of each figure run interleaved, after one warm-up each, with bytecode written
(``installed_env``, as an installed package); figures are the median, min and max of
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
    installed_env,
    interleaved,
    load_line,
    med,
    ms,
    note,
    report,
    spread,
    temporary_folder,
    write_bytecode,
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


def first_request(silica: list[str], cwd: Path, env: dict[str, str], server: TimedServer,
                  own: list[float], walls: list[float]) -> float:
    """One fresh ``silica ask hi``: its own time before its first request reached the server
    (spawn -> the request's headers read), appended to ``own``; its wall time to ``walls``."""
    seen = len(server.spans)
    started = time.perf_counter()
    wall = run([*silica, "ask", "hi"], cwd, env)
    spans = server.since(seen)
    if not spans:
        raise RuntimeError("silica ask sent no request to the wire server")
    own.append(spans[0][0] - started)
    walls.append(wall)
    return own[-1]


def timed_import(code: str, cwd: Path, env: dict[str, str], into: list[float]) -> float:
    """``code`` (which prints the seconds it timed) in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, check=True)
    into.append(float(proc.stdout))
    return into[-1]


def _timed(statement: str, before: str = "") -> str:
    return (f"import time; {before}t = time.perf_counter(); {statement}; "
            "print(time.perf_counter() - t)")


def start_resident(silica: list[str], cwd: Path, env: dict[str, str]) -> int:
    """Start the resident as a user does (one ``ask``) and wait until it takes runs."""
    from silica import resident

    run([*silica, "ask", "hi"], cwd, env)
    home = Path(env["SILICA_HOME"])
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        reply = resident.request(home, {"op": "status"})
        if reply:
            return int(reply["pid"])
        time.sleep(0.1)
    raise RuntimeError("the resident did not start")


def stop_resident(env: dict[str, str]) -> None:
    from silica import resident

    resident.request(Path(env["SILICA_HOME"]), {"op": "stop"})


def bench_ask(silica: list[str], cwd: Path, env: dict[str, str], server: TimedServer,
              repeat: int) -> list[Row]:
    """``silica ask hi``'s own time before its first request, fresh processes: with the
    resident warm (the target) and without it (``SILICA_RESIDENT=0``); beside them the
    SDK's import alone, without aiohttp, and the two other ways past it."""
    direct_env = {**env, "SILICA_RESIDENT": "0"}
    warm, cold, warm_walls, cold_walls = [], [], [], []  # type: ignore[var-annotated]
    sdk: list[float] = []
    sdk_lean: list[float] = []
    http: list[float] = []
    pid = start_resident(silica, cwd, env)
    steps: dict[str, Callable[[], float]] = {
        "resident": lambda: first_request(silica, cwd, env, server, warm, warm_walls),
        "direct": lambda: first_request(silica, cwd, direct_env, server, cold, cold_walls),
        "sdk": lambda: timed_import(_timed("import anthropic"), cwd, direct_env, sdk),
        # a user install has no [dev] extra, so no aiohttp: its import is blocked here, as
        # the SDK then finds it missing and skips its optional aiohttp transport
        "sdk_lean": lambda: timed_import(
            _timed("import anthropic", "import sys; sys.modules['aiohttp'] = None; "),
            cwd, direct_env, sdk_lean),
        "http": lambda: timed_import(_timed("import httpx2"), cwd, direct_env, http),
    }
    for step in steps.values():
        step()  # warm-up: the OS's file cache, the spec cache
    for xs in (warm, cold, warm_walls, cold_walls, sdk, sdk_lean, http):
        del xs[:]
    interleaved(repeat, **steps)
    from silica import resident

    reused = resident.request(Path(env["SILICA_HOME"]), {"op": "status"})
    same = bool(reused and reused["pid"] == pid and reused["served"] >= repeat)
    stop_resident(env)
    mine = med(warm)
    return [
        Row.judged("`silica ask hi` own time before its first request, resident warm "
                   "(fresh client processes; the resident is the warm state)",
                   f"{spread(warm)}; wall {ms(med(warm_walls))}"
                   + ("" if same else "; the resident was NOT reused"),
                   mine, f"{mine:.2f} s", f"≤ {OWN_TARGET:g} s", mine <= OWN_TARGET and same),
        Row("… the same without a resident (`SILICA_RESIDENT=0`, a direct run)",
            f"{spread(cold)}; wall {ms(med(cold_walls))}",
            f"{med(cold) / mine:.1f}× the resident's" if mine else "", "report only", "INFO"),
        Row("`import anthropic` in a fresh interpreter (the SDK's import alone, timed inside)",
            spread(sdk), "", "report only", "INFO"),
        Row("… without aiohttp (a user install: its import blocked, `sys.modules['aiohttp'] "
            "= None`)", spread(sdk_lean), f"{med(sdk_lean) / med(sdk):.2f}× the full import",
            "report only", "INFO"),
        Row("other way: importing less of the SDK (`anthropic/__init__` imports its "
            "`types`, most of the import, whatever is asked of it: see the importtime "
            "share below)", "floor = the import above", "", "report only", "INFO"),
        Row("other way: a lighter path, the SDK's HTTP client alone (`import httpx2`; "
            "silica would speak the Messages API and its stream itself)",
            spread(http), f"{med(http) / med(sdk):.2f}× the SDK's import", "report only",
            "INFO"),
    ]


def sdk_shares(cwd: Path, env: dict[str, str]) -> str:
    """Where ``import anthropic``'s time goes (``-X importtime``, self times summed by part)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import anthropic"],
                          cwd=cwd, env=env, capture_output=True, text=True, check=True)
    modules = parse_importtime(proc.stderr)
    total = sum(self_us for self_us, _ in modules.values()) or 1
    parts = {"anthropic.types": ("anthropic.types",), "anthropic.lib": ("anthropic.lib",),
             "aiohttp and its parts": ("aiohttp", "multidict", "yarl", "frozenlist",
                                       "aiosignal", "propcache"),
             "pydantic": ("pydantic",)}
    shown = []
    for label, prefixes in parts.items():
        mine = [us for name, (us, _) in modules.items() if name.startswith(prefixes)]
        shown.append(f"{label} {100 * sum(mine) / total:.0f}% ({len(mine)} modules)")
    return f"{len(modules)} modules; " + ", ".join(shown)


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
        write_bytecode()  # start-up rows run as an installed package: bytecode written
        env = installed_env({k: v for k, v in os.environ.items()
                             if not k.startswith(("ANTHROPIC_", "OPENAI_", "GEMINI_", "SILICA_"))})
        env |= {"SILICA_HOME": str(home), "SILICA_TOOLS_DIR": str(tools)}
        console.print(f"silica start-up benchmark: {opts.tools} tools, repeat {opts.repeat}, "
                      f"{load_line()}", soft_wrap=True)
        rows: list[Row] = []
        note("silica --version vs python -c pass")
        rows.append(bench_version(silica, project, opts.repeat))
        with anthropic_server([text("Hello there.")] * (4 * opts.repeat + 20)) as srv:
            env |= srv.env
            note("warming the spec cache (silica tools list)")
            run([*silica, "tools", "list", "--json"], project, env)
            note("silica ask hi, own time before the first request (resident warm / none)")
            try:
                rows.extend(bench_ask(silica, project, env, server, opts.repeat))
            finally:
                stop_resident(env)  # no resident outlives the benchmark
            note("imports (python -X importtime; direct runs)")
            env["SILICA_RESIDENT"] = "0"
            version_row, version_mods = bench_imports(["--version"], project, env, set())
            ask_row, ask_mods = bench_imports(["ask", "hi"], project, env, {"anthropic"})
            console.print(f"where `import anthropic` goes: {sdk_shares(project, env)}",
                          soft_wrap=True)
        rows += [version_row, ask_row]
        console.print(f"heaviest top-level imports (`silica --version`): "
                      f"{heaviest(version_mods)}", soft_wrap=True)
        console.print(f"heaviest top-level imports (`silica ask hi`): {heaviest(ask_mods)}",
                      soft_wrap=True)
        console.print(f"at the end: {load_line()}")
    return report(rows, title="silica start-up benchmark", command=command, started=started,
                  strict=opts.strict)


if __name__ == "__main__":
    sys.exit(main())
