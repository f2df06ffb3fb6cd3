"""What the sandbox costs a call, a cold `tools list` and a `tools run`, against today's runner.

    python benchmarks/bench_sandbox.py [--before /tmp/silica-before] [--repeat 30]
        [--list-repeat 5] [--run-repeat 10] [--tools 50] [--strict]

"Today's runner" is silica as it was before the sandbox (commit 35786d7: each tool run by
``uv run --script`` under the reaper), checked out beside this one:

    git worktree add --detach /tmp/silica-before 35786d7

Each side runs in processes of its own, with this venv's Python and ``PYTHONPATH`` set to its
checkout, its own ``SILICA_HOME`` and its own copy of the tools (``~/.silica`` is never
touched). The uv cache is shared and warmed first. Figures are medians; the sides of each
comparison run interleaved, in a rotating order.

1. A call: ``await Toolbox.acall`` of a small cyclopts tool and of ``user_tools/hello.py``, in
   one long-lived process per side (sandbox on, ``[sandbox] mode = "off"``, today's runner),
   the processes taking turns call by call.
2. A cold ``silica tools list --json`` of ``--tools`` generated tools plus hello: a fresh
   process and a fresh ``SILICA_HOME`` each run, so no spec, interpreter or probe is cached.
3. ``silica tools run hello`` in a fresh process (specs cached).

It reports; it is not a test: it exits 0 even when a target is missed, unless ``--strict``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_toolbox import HELLO_SOURCE, write_tools
from common import REPO, Row, bench_parser, console, med, ms, note, report, temporary_folder
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

sys.path.insert(0, str(REPO))
from silica.tools.helper import HELPER_NAME, helper_source  # noqa: E402
from silica.tools.sandbox import fresh_probe  # noqa: E402
from silica.tools.uvbin import find_uv  # noqa: E402

BEFORE_COMMIT = "35786d7"
CALL_TARGET_MS = 15.0
LIST_TARGET = 1.2

SMALL_TOOL = '''\
# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3"]
# ///
"""Repeat a word: a small cyclopts tool for silica's sandbox benchmark.

Metadata:
    category: bench
"""

import json
import sys
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()


@app.default
def repeat_word(word: str, times: int = 2):
    """Repeat a word.

    Args:
        word: The word.
        times: How many times.
    """
    print(json.dumps({"words": [word] * times}))


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema(repeat_word)))
    else:
        app()
'''

CALLS = {"repeat_word": ({"word": "x", "times": 3}, '"words"'),
         "hello": ({"name": "x"}, "Hello, x.")}

# One side's long-lived process: discovers once, then answers one call per line of stdin
# with the seconds ``Toolbox.acall`` took.
WORKER = """\
import asyncio, json, os, sys, time
from pathlib import Path
import silica
from silica.config import load_settings
from silica.tools.toolbox import Toolbox

async def main():
    home = Path(os.environ["SILICA_HOME"])
    box = Toolbox(cwd=Path.cwd(), home=home, settings=load_settings(home))
    await box.adiscover()
    print(json.dumps({"ready": silica.__file__}), flush=True)
    for line in sys.stdin:
        name, args = json.loads(line)
        started = time.perf_counter()
        result = await box.acall(name, args)
        took = time.perf_counter() - started
        print(json.dumps({"s": took, "error": result.is_error, "text": result.text[:300]}),
              flush=True)

asyncio.run(main())
"""


class Side:
    """One version of silica, set up in ``root``: its checkout, home and tool folders."""

    def __init__(self, name: str, checkout: Path, root: Path, config: str = "") -> None:
        self.name, self.checkout, self.root = name, checkout, root
        self.home, self.tools, self.project = root / "home", root / "tools", root / "project"
        (self.project / ".git").mkdir(parents=True)  # a repository: project folders end here
        self.home.mkdir()
        if config:
            (self.home / "config.toml").write_text(config, encoding="utf-8")
        self.tools.mkdir()
        (self.tools / HELPER_NAME).write_text(helper_source(), encoding="utf-8")
        (self.tools / "repeat_word.py").write_text(SMALL_TOOL, encoding="utf-8")
        shutil.copyfile(HELLO_SOURCE, self.tools / "hello.py")

    def env(self, home: Path | None = None, tools: Path | None = None) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.checkout),
                "SILICA_HOME": str(home or self.home), "SILICA_TOOLS_DIR": str(tools or self.tools)}

    def silica(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "silica", *args]

    def timed(self, argv: list[str], **env_args: Path) -> float:
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=self.project, env=self.env(**env_args),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        took = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: {shlex.join(argv)} exited {done.returncode}:\n"
                               f"{done.stderr[-2000:]}")
        return took


class Worker:
    """A side's process calling tools in-process, one call per request."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], cwd=side.project,
                                     env=side.env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        ready = json.loads(self.proc.stdout.readline() or "{}")
        where = Path(ready.get("ready", "?")).parent.parent
        if where != side.checkout:
            raise RuntimeError(f"{side.name}: the worker imported silica from {where}, not "
                               f"{side.checkout}")

    def call(self, name: str) -> float:
        args, expect = CALLS[name]
        self.proc.stdin.write(json.dumps([name, args]) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if answer["error"] or expect not in answer["text"]:
            raise RuntimeError(f"{self.side.name}: {name} answered {answer['text']!r}")
        return answer["s"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def rounds(progress: Progress, label: str, n: int, steps: dict) -> dict[str, list[float]]:
    """Each step once per round, in a rotating order; the times of each step."""
    times: dict[str, list[float]] = {k: [] for k in steps}
    names = list(steps)
    task = progress.add_task(label, total=n * len(names))
    for r in range(n):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(steps[name]())
            progress.advance(task)
    return times


def bench_calls(progress: Progress, sides: dict[str, Side], n: int) -> list[Row]:
    workers = {k: Worker(s) for k, s in sides.items()}
    try:
        for w in workers.values():  # the first call of each tool is not measured
            for name in CALLS:
                w.call(name)
        rows: list[Row] = []
        for name in CALLS:
            t = rounds(progress, f"Toolbox.acall({name})", n,
                       {k: (lambda w=w, name=name: w.call(name)) for k, w in workers.items()})
            on, off, before = (med(t[k]) for k in ("on", "off", "before"))
            extra = (on - before) * 1000
            rows.append(Row.judged(
                f"`Toolbox.acall('{name}')`: sandbox on − today's runner ({n} calls each)",
                f"{ms(on)} − {ms(before)} (mode off: {ms(off)})", extra, f"{extra:+.1f} ms",
                f"≤ +{CALL_TARGET_MS:.0f} ms", extra <= CALL_TARGET_MS))
            rows.append(Row(f"`Toolbox.acall('{name}')`: sandbox on − mode off",
                            f"{ms(on)} − {ms(off)}", f"{(on - off) * 1000:+.1f} ms",
                            "report only", "INFO"))
        return rows
    finally:
        for w in workers.values():
            w.close()


def bench_cold_list(progress: Progress, new: Side, before: Side, n: int, n_tools: int) -> Row:
    for side in (new, before):
        write_tools(side.root / "many", n_tools)
    count = 0

    def cold(side: Side) -> float:
        nonlocal count
        count += 1
        home = side.root / f"home-cold-{count}"  # nothing cached: specs, envs, the probe
        try:
            return side.timed(side.silica("tools", "list", "--json"), home=home,
                              tools=side.root / "many")
        finally:
            shutil.rmtree(home, ignore_errors=True)

    t = rounds(progress, f"cold tools list ({n_tools + 1} tools)", n,
               {"new": lambda: cold(new), "before": lambda: cold(before)})
    a, b = med(t["new"]), med(t["before"])
    return Row.judged(f"cold `silica tools list --json`, {n_tools + 1} tools, fresh SILICA_HOME: "
                      "new vs today's", f"{ms(a)} vs {ms(b)}", a / b, f"{a / b:.2f}×",
                      f"≤ {LIST_TARGET:.2f}×", a / b <= LIST_TARGET)


def bench_cli_run(progress: Progress, new: Side, before: Side, n: int) -> Row:
    argv = new.silica("tools", "run", "hello", "--input", '{"name":"x"}')
    for side in (new, before):
        side.timed(argv)  # specs and interpreters cached, as on a second run
    t = rounds(progress, "silica tools run hello", n,
               {"new": lambda: new.timed(argv), "before": lambda: before.timed(argv)})
    a, b = med(t["new"]), med(t["before"])
    return Row(f"`silica tools run hello` (fresh process): new vs today's ({n} runs each)",
               f"{ms(a)} vs {ms(b)}", f"{a / b:.2f}×, {(a - b) * 1000:+.1f} ms",
               "report only", "INFO", a / b)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--before", type=Path, default=Path("/tmp/silica-before"),
                        help=f"a checkout of silica at {BEFORE_COMMIT} (today's runner)")
    parser.add_argument("--repeat", type=int, default=30, help="calls per side (median)")
    parser.add_argument("--list-repeat", type=int, default=5,
                        help="cold tools list runs per side (median)")
    parser.add_argument("--run-repeat", type=int, default=10,
                        help="tools run processes per side (median)")
    parser.add_argument("--tools", type=int, default=50, help="generated tools for the listing")
    opts = parser.parse_args()
    command = "python benchmarks/bench_sandbox.py " + shlex.join(
        [f"--before={opts.before}", f"--repeat={opts.repeat}",
         f"--list-repeat={opts.list_repeat}", f"--run-repeat={opts.run_repeat}",
         f"--tools={opts.tools}"])
    started = time.perf_counter()
    before_repo = opts.before.resolve()
    if not (before_repo / "silica" / "tools" / "runner.py").is_file():
        console.print(f"[red]no checkout of today's runner at {opts.before}: run "
                      f"'git worktree add --detach {opts.before} {BEFORE_COMMIT}' first[/red]")
        return 2
    layers = fresh_probe()
    # The policy lists the session sockets in the temporary folder at each run: its size counts.
    tmp = tempfile.gettempdir()
    console.print(f"sandbox benchmark: bubblewrap {'yes' if layers.bwrap else 'no'}, Landlock "
                  f"ABI {layers.landlock_abi}, seccomp {'yes' if layers.seccomp else 'no'}; "
                  f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {len(os.listdir(tmp))} "
                  f"entries in {tmp}; today's runner: {before_repo}", soft_wrap=True)
    with temporary_folder("silica-bench-sandbox-", opts.keep) as root:
        sides = {"on": Side("sandbox on", REPO, root / "on"),
                 "off": Side("mode off", REPO, root / "off",
                             config='[sandbox]\nmode = "off"\n'),
                 "before": Side("today's runner", before_repo, root / "before")}
        note("warming the uv cache (cyclopts)")
        subprocess.run([find_uv(), "run", "--quiet", "--script",
                        str(sides["on"].tools / "hello.py")], check=True,
                       stdout=subprocess.DEVNULL)
        rows: list[Row] = []
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=console, transient=True) as progress:
            rows += bench_calls(progress, sides, opts.repeat)
            rows.append(bench_cold_list(progress, sides["on"], sides["before"],
                                        opts.list_repeat, opts.tools))
            rows.append(bench_cli_run(progress, sides["on"], sides["before"], opts.run_repeat))
    return report(rows, title="sandbox overhead", command=command, started=started,
                  strict=opts.strict)


if __name__ == "__main__":
    sys.exit(main())
