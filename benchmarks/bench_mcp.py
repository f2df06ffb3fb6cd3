"""Benchmark MCP servers as a tool source: call cost, kept state, concurrency, listing.

    python benchmarks/bench_mcp.py [--calls 50] [--concurrent 20] [--repeat 5] [--no-npm]
                                   [--strict]

The server is ``benchmarks/mcp_bench_server.py`` (the official SDK, stdio): ``echo`` answers
with its pid, ``count`` counts in its process. ``@modelcontextprotocol/server-memory`` and
``server-everything`` come from npm (``npm install --no-save`` into the temporary folder)
when ``node`` and ``npm`` are on PATH; without them their rows are NOT MEASURED.

Everything happens in a fresh temporary folder with its own ``SILICA_HOME`` and
``SILICA_TOOLS_DIR`` (``~/.silica`` is never touched). It measures whatever silica's MCP code
does when it runs. The script reports; it is not a test: it exits 0 even when a target is
missed, unless ``--strict`` is given (then any missed target exits 1).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import (
    Row,
    bench_parser,
    console,
    load_line,
    med,
    ms,
    note,
    report,
    spread,
    temporary_folder,
)

from silica.config import McpServerSettings, McpSettings, Settings
from silica.tools.toolbox import Toolbox

SERVER = Path(__file__).resolve().parent / "mcp_bench_server.py"
NPM_PACKAGES = ("@modelcontextprotocol/server-memory", "@modelcontextprotocol/server-everything")
STEP_TIMEOUT = 120.0  # seconds any one measured step may take before the run gives up on it
_PID = re.compile(r"pid=(\d+)")


def bench_server() -> McpServerSettings:
    return McpServerSettings(command=sys.executable, args=[str(SERVER)])


@dataclass
class Bench:
    root: Path
    project: Path
    tools: Path
    silica: list[str]

    def toolbox(self, **servers: McpServerSettings) -> Toolbox:
        return Toolbox(cwd=self.project, home=self.root / "home-box",
                       settings=Settings(mcp=McpSettings(servers=servers, timeout=30)))


def stop_servers() -> None:
    """Stop every MCP server this process started (silica keeps a live connection to each)."""
    from silica.mcp.connections import connections

    connections().close()


async def bounded(step: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(step, STEP_TIMEOUT)


async def discovered(box: Toolbox, *names: str) -> None:
    """Discover, and stop the run with the reason if a tool the benchmark needs is missing."""
    found = await bounded(box.adiscover())
    tools = {t.name: t for t in found.all_tools}
    for name in names:
        if name not in tools or not tools[name].ok:
            server = name.split("__")[0]
            reasons = [t.reason for t in found.all_tools if t.name == f"{server}__*"]
            raise RuntimeError(f"no usable tool {name!r}: "
                               f"{'; '.join([*reasons, *found.warnings]) or 'not listed'}")


def met(ok: bool) -> str:
    return "met" if ok else "not met"


# -- 1. per-call cost, and 3. concurrency ---------------------------------------------------


@dataclass
class Peer:
    """One server measured from both sides: silica's Toolbox and one official session."""

    label: str  # "python" or "node"
    server: McpServerSettings  # started the same way (unconfined) on both sides
    tool: str  # the server's own tool name
    arguments: Callable[[str], dict[str, Any]]  # the call's arguments for a text
    answer: Callable[[str], str]  # what the answer's text starts with for that text


PYTHON_ECHO = Peer("python", McpServerSettings(command=sys.executable, args=[str(SERVER)]),
                   "echo", lambda text: {"text": text}, lambda text: f"{text} pid=")


def node_echo(scope: Path) -> Peer:
    server = McpServerSettings(
        command="node", args=[str(scope / "server-everything" / "dist" / "index.js"), "stdio"])
    return Peer("node", server, "echo", lambda text: {"message": text},
                lambda text: f"Echo: {text}")


async def _calls(b: Bench, peer: Peer, calls: int, concurrent: int) -> list[Row]:
    """The per-call row and the concurrency row for one server, both sides interleaved call
    by call (one call) and round by round (``concurrent`` at once)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    name = f"bench{peer.label}"
    # The same server started the same way on both sides: the session's is not confined, so
    # silica's is not either (confinement is paid at start, not per call).
    box = Toolbox(cwd=b.project, home=b.root / f"home-{name}",
                  settings=Settings(sandbox={"mode": "off"},
                                    mcp=McpSettings(servers={name: peer.server}, timeout=30)))
    qualified = f"{name}__{peer.tool}"
    await discovered(box, qualified)
    params = StdioServerParameters(command=peer.server.command or "", args=peer.server.args)
    quiet = open(os.devnull, "w")  # noqa: SIM115 -- the server's log lines are not figures
    try:
        async with stdio_client(params, errlog=quiet) as (read, write), \
                ClientSession(read, write) as session:
            await bounded(session.initialize())

            def checked(text: str, got: str, side: str) -> None:
                if not got.startswith(peer.answer(text)):
                    raise RuntimeError(f"{side} answered {got[:300]!r} to {text!r}")

            async def box_one(text: str) -> str:
                result = await box.acall(qualified, peer.arguments(text))
                if result.is_error:
                    raise RuntimeError(f"Toolbox.acall failed: {result.text[:500]}")
                checked(text, result.text, "Toolbox.acall")
                return result.text

            async def session_one(text: str) -> str:
                answer = await session.call_tool(peer.tool, peer.arguments(text))
                got = "".join(getattr(c, "text", "") for c in answer.content)
                if answer.is_error:
                    raise RuntimeError(f"ClientSession.call_tool failed: {got[:500]}")
                checked(text, got, "ClientSession.call_tool")
                return got

            cpu: dict[str, list[float]] = {"box": [], "session": []}

            def timed(step: Callable[[], Awaitable[Any]],
                      side: str = "") -> Callable[[], Awaitable[float]]:
                async def run() -> float:
                    started, used = time.perf_counter(), time.process_time()
                    await bounded(step())
                    took = time.perf_counter() - started
                    if side:  # this process's CPU (every thread), the server's not counted
                        cpu[side].append(time.process_time() - used)
                    return took
                return run

            async def box_batch() -> list[str]:
                return list(await asyncio.gather(*(box_one(f"c{i}") for i in range(concurrent))))

            async def session_batch() -> list[str]:
                return list(await asyncio.gather(
                    *(session_one(f"c{i}") for i in range(concurrent))))

            steps = {"box": timed(lambda: box_one("hi"), "box"),
                     "session": timed(lambda: session_one("hi"), "session"),
                     "box_batch": timed(box_batch), "session_batch": timed(session_batch)}
            for step in steps.values():  # warm-up: both connections up, code paths loaded
                await step()
            times: dict[str, list[float]] = {"box": [], "session": []}
            cpu["box"].clear()
            cpu["session"].clear()
            for i in range(calls):  # call by call, alternating which side goes first
                for side in ("box", "session") if i % 2 == 0 else ("session", "box"):
                    times[side].append(await steps[side]())
            order = ["box", "box_batch", "session", "session_batch"]
            rounds: dict[str, list[float]] = {side: [] for side in order}
            for i in range(max(5, calls // 5)):  # small rounds, in a rotating order
                for side in order[i % 4:] + order[:i % 4]:
                    rounds[side].append(await steps[side]())
            answers = await bounded(box_batch())
            seen = {int(m.group(1)) for a in answers if (m := _PID.search(a))}
    finally:
        quiet.close()
        stop_servers()
    box_t, session_t = med(times["box"]), med(times["session"])
    ratio = box_t / session_t
    per_call = Row.judged(
        f"per call, trivial tool ({peer.label} server, stdio): `Toolbox.acall` vs one "
        f"`ClientSession`, {calls} calls each, interleaved call by call",
        f"{spread(times['box'], ms2)} vs {spread(times['session'], ms2)}; CPU of this "
        f"process per call (all its threads): {ms2(med(cpu['box'][:calls]))} vs "
        f"{ms2(med(cpu['session'][:calls]))}",
        ratio, f"{ratio:.2f}×", "≤ 1.20×", ratio <= 1.2)
    one, wall, session_one, session_wall = (med(rounds[k]) for k in rounds)
    together_ratio = wall / one
    processes = f", answered by {len(seen)} server process(es)" if seen else ""
    together = Row.judged(
        f"{concurrent} concurrent `Toolbox.acall` ({peer.label} server) vs one `Toolbox.acall`,"
        f" in interleaved rounds",
        f"{spread(rounds['box_batch'], ms2)} vs {spread(rounds['box'], ms2)}; every answer "
        f"paired with its call{processes}; the same {concurrent} on one `ClientSession`: "
        f"{spread(rounds['session_batch'], ms2)} (silica {wall / session_wall:.2f}× it; the "
        f"session's own {concurrent} at once vs its one call: "
        f"{session_wall / session_one:.1f}×)",
        together_ratio, f"{together_ratio:.1f}×", "≤ 2.0×",
        together_ratio <= 2.0 and (not seen or len(seen) == 1))
    return [per_call, together]


def ms2(seconds: float) -> str:
    return ms(seconds, 2)


# -- 2. kept state ----------------------------------------------------------------------------


async def _counter(b: Bench, n: int = 10) -> Row:
    box = b.toolbox(counter=bench_server())  # a name of its own: a connection of its own
    try:
        await discovered(box, "counter__count")
        got: list[str] = []
        for _ in range(n):
            got.append((await bounded(box.acall("counter__count", {}))).text.strip())
    finally:
        stop_servers()
    want = [str(i) for i in range(1, n + 1)]
    shown = ", ".join(got) if len(", ".join(got)) < 60 else ", ".join(got)[:57] + "..."
    return Row.judged(f"stateful server: {n} `count` calls through one Toolbox",
                      f"got {shown}", float(got == want), met(got == want),
                      f"1..{n}", got == want)


def npm_install(folder: Path) -> Path | str:
    """The ``node_modules/@modelcontextprotocol`` folder, or why it could not be had."""
    if not (shutil.which("node") and shutil.which("npm")):
        return "no node/npm on PATH"
    proc = subprocess.run(["npm", "install", "--no-save", "--no-audit", "--no-fund",
                           "--prefix", str(folder), *NPM_PACKAGES],
                          capture_output=True, text=True, timeout=600)
    scope = folder / "node_modules" / "@modelcontextprotocol"
    if proc.returncode != 0 or not scope.is_dir():
        return f"npm install failed: {proc.stderr.strip()[-300:]}"
    return scope


async def _npm_rows(scope: Path, memory_file: Path) -> tuple[Row, Row]:
    # A confined server writes only where it starts: its graph file lives in its own folder.
    memory_file.parent.mkdir(parents=True, exist_ok=True)
    memory = McpServerSettings(command="node",
                               args=[str(scope / "server-memory" / "dist" / "index.js")],
                               env={"MEMORY_FILE_PATH": str(memory_file)},
                               cwd=str(memory_file.parent))
    everything = McpServerSettings(
        command="node", args=[str(scope / "server-everything" / "dist" / "index.js"), "stdio"])
    box = Toolbox(cwd=memory_file.parent.parent, home=memory_file.parent.parent / "home-npm",
                  settings=Settings(mcp=McpSettings(
                      servers={"memory": memory, "everything": everything}, timeout=60)))
    try:
        await discovered(box, "memory__create_entities", "memory__read_graph",
                         "everything__toggle-subscriber-updates")
        entity = {"name": "Benchmark_Ada", "entityType": "person",
                  "observations": ["measured silica"]}
        made = await bounded(box.acall("memory__create_entities", {"entities": [entity]}))
        graph = await bounded(box.acall("memory__read_graph", {}))
        kept = not made.is_error and not graph.is_error and "Benchmark_Ada" in graph.text
        if made.is_error:  # say why the entity is not there, not only that it is not
            graph = made
        first = await bounded(box.acall("everything__toggle-subscriber-updates", {}))
        second = await bounded(box.acall("everything__toggle-subscriber-updates", {}))
        toggled = first.text.startswith("Started") and second.text.startswith("Stopped")
    finally:
        stop_servers()
    memory_row = Row.judged(
        "npm server-memory: `create_entities`, then `read_graph` in the next call",
        "entity read back" if kept else f"read back: {graph.text[:80]!r}",
        float(kept), met(kept), "the entity", kept)
    memory_row.figures += " (its graph is in MEMORY_FILE_PATH, so this holds across restarts)"
    toggle_row = Row.judged(
        "npm server-everything: `toggle-subscriber-updates` twice (state in the process)",
        f"{first.text[:60]!r}, then {second.text[:60]!r}",
        float(toggled), met(toggled), "Started, then Stopped", toggled)
    return memory_row, toggle_row


# -- 4. listing ---------------------------------------------------------------------------


def bench_listing(b: Bench, repeat: int) -> Row:
    homes = {"none": b.root / "home-none", "three": b.root / "home-three"}
    for home in homes.values():
        home.mkdir()
    py, srv = json.dumps(sys.executable), json.dumps(str(SERVER))
    (homes["three"] / "config.toml").write_text(
        "[mcp]\ntimeout = 30\n" + "".join(
            f"[mcp.servers.bench{i}]\ncommand = {py}\nargs = [{srv}]\n" for i in (1, 2, 3)),
        encoding="utf-8")
    argv = [*b.silica, "tools", "list", "--json"]

    def listing(side: str) -> Callable[[], float]:
        env = {**os.environ, "SILICA_HOME": str(homes[side]), "SILICA_TOOLS_DIR": str(b.tools)}

        def step() -> float:
            started = time.perf_counter()
            proc = subprocess.run(argv, cwd=b.project, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=STEP_TIMEOUT)
            took = time.perf_counter() - started
            if proc.returncode != 0:
                raise RuntimeError(f"{shlex.join(argv)} ({side}) exited with "
                                   f"{proc.returncode}:\n{proc.stderr[-2000:]}")
            step.rows = json.loads(proc.stdout)  # type: ignore[attr-defined]
            return took

        return step

    steps = {side: listing(side) for side in homes}
    for step in steps.values():
        step()  # warm: caches filled, files in the page cache
    ok = sum(r.get("status") == "ok" and str(r.get("origin", "")).startswith("mcp:bench")
             for r in steps["three"].rows)  # type: ignore[attr-defined]
    times: dict[str, list[float]] = {side: [] for side in homes}
    for i in range(repeat):
        for side in (list(homes) if i % 2 == 0 else list(homes)[::-1]):
            times[side].append(steps[side]())
    three, none = med(times["three"]), med(times["none"])
    return Row.judged("warm `silica tools list --json`: 3 MCP servers vs none",
                      f"{ms(three)} vs {ms(none)}; {ok} ok MCP tools (of 6)",
                      three / none, f"{three / none:.2f}×", "≤ 1.50×",
                      ok == 6 and three / none <= 1.5)


# -- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--calls", type=int, default=50, help="calls per side (median)")
    parser.add_argument("--concurrent", type=int, default=20, help="calls made at once")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each listing (median)")
    parser.add_argument("--no-npm", action="store_true", help="skip the npm servers")
    opts = parser.parse_args()
    command = "python benchmarks/bench_mcp.py " + shlex.join(
        [f"--calls={opts.calls}", f"--concurrent={opts.concurrent}", f"--repeat={opts.repeat}",
         *(["--no-npm"] if opts.no_npm else [])])

    started = time.perf_counter()
    with temporary_folder("silica-bench-mcp-", opts.keep) as root:
        project, tools = root / "project", root / "tools"
        (project / ".git").mkdir(parents=True)  # a repository: project folders stop here
        tools.mkdir()
        os.environ["SILICA_HOME"] = str(root / "home")  # nothing reaches ~/.silica
        os.environ["SILICA_TOOLS_DIR"] = str(tools)
        exe = Path(sys.executable).parent / "silica"
        silica = [str(exe)] if exe.exists() else [sys.executable, "-m", "silica"]
        b = Bench(root, project, tools, silica)
        node = shutil.which("node")
        node_version = subprocess.run([node, "--version"], capture_output=True,
                                      text=True).stdout.strip() if node else "none"
        console.print(f"silica MCP benchmark: {os.cpu_count()} CPUs, node {node_version}, "
                      f"calls {opts.calls}, concurrent {opts.concurrent}, "
                      f"repeat {opts.repeat}; {load_line()}", soft_wrap=True)

        rows: list[Row] = []
        scope: Path | str = "--no-npm" if opts.no_npm else "no node/npm on PATH"
        if not opts.no_npm:
            note("npm install of server-memory and server-everything")
            scope = npm_install(root / "npm")
        peers = [PYTHON_ECHO, *([node_echo(scope)] if isinstance(scope, Path) else [])]
        together: list[Row] = []
        for peer in peers:
            note(f"per-call cost ({peer.label} server): Toolbox.acall vs one ClientSession, "
                 f"{opts.calls} calls each, then {opts.concurrent} at once")
            per_call, batch = asyncio.run(_calls(b, peer, opts.calls, opts.concurrent))
            rows.append(per_call)
            together.append(batch)
        if not isinstance(scope, Path):
            rows.append(Row("per call, trivial tool (node server-everything `echo`)", scope,
                            "-", "≤ 1.20×", "NOT MEASURED"))
        note("kept state: the counter server")
        rows.append(asyncio.run(_counter(b)))
        if isinstance(scope, Path):
            note("kept state: npm server-memory and server-everything")
            rows.extend(asyncio.run(_npm_rows(scope, root / "memory" / "memory.jsonl")))
        else:
            for measure in ("npm server-memory: entity created, then read back",
                            "npm server-everything: toggle-subscriber-updates twice"):
                rows.append(Row(measure, scope, "-", "met", "NOT MEASURED"))
        rows.extend(together)
        note(f"warm silica tools list --json with 3 servers vs none ({opts.repeat} runs each)")
        rows.append(bench_listing(b, opts.repeat))

    console.print(f"at the end: {load_line()}", soft_wrap=True)
    return report(rows, title="silica MCP benchmark", command=command, started=started,
                  strict=opts.strict, verdict_width=12)


if __name__ == "__main__":
    sys.exit(main())
