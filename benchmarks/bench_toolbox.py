"""Benchmark silica's tool discovery, cached listing, call overhead and import weight.

    python benchmarks/bench_toolbox.py [--tools 50] [--repeat 5] [--call-repeat 20] [--strict]

Everything happens in a fresh temporary folder with its own ``SILICA_HOME`` and
``SILICA_TOOLS_DIR`` (``~/.silica`` is never touched). The uv cache is warmed first, and every
generated tool is run once before anything is measured, so that dependency downloads and
uv's first set-up of each script environment are not part of any figure. Every figure is
the median of several runs with their min and max; the two sides of each comparison do the
same work and are measured interleaved, each command in a fresh process. Commands run as an
installed package starts: silica's bytecode is written first and reused (``installed_env``).

The script reports; it is not a test: it exits 0 even when a target is missed, unless
``--strict`` is given (then any missed target exits 1).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from common import (
    REPO,
    Row,
    bench_parser,
    console,
    installed_env,
    interleaved,
    load_line,
    med,
    note,
    report,
    spread,
    temporary_folder,
    write_bytecode,
)
from common import ms as _ms

from silica.tools.discovery import DiscoveryOptions
from silica.tools.environment import tool_env
from silica.tools.helper import HELPER_NAME, helper_source
from silica.tools.toolbox import Toolbox
from silica.tools.uvbin import find_uv

HELLO_SOURCE = REPO / "user_tools" / "hello.py"
HEAVY_MODULES = ("anthropic", "PIL")

ms = partial(_ms, digits=0)  # whole milliseconds


# -- generated tools ----------------------------------------------------------------------

CATEGORIES = {
    "text": ["slugify", "wrap", "count_words", "redact", "title_case", "dedupe_lines",
             "extract_emails", "reverse", "truncate", "rot13"],
    "math": ["mean", "percentile", "round_to", "convert_units", "compound_interest",
             "prime_factors", "gcd_of", "fibonacci", "clamp", "histogram"],
    "files": ["find_large", "line_count", "hash_file", "tail_file", "list_dir",
              "disk_usage", "grep_file", "touch_file", "file_info", "newest_files"],
    "web": ["fetch_title", "url_parse", "http_status", "dns_lookup", "weather",
            "shorten_url", "rss_items", "ping_host", "robots_txt", "headers_of"],
    "data": ["csv_columns", "json_query", "sort_records", "group_by", "pivot",
             "sample_rows", "summarize", "to_yaml", "merge_tables", "dedupe_rows"],
}

# (name, annotation, default or None for required, help text)
REQUIRED = [
    ("text", "str", None, "The text to work on."),
    ("values", "list[float]", None, "The numbers to use."),
    ("path", "Path", None, "The file or folder to look at."),
    ("url", "str", None, "The address to ask."),
    ("source", "str", None, "A CSV or JSON file with the records."),
]
OPTIONAL = [
    ("count", "int", "3", "How many times to do it."),
    ("scale", "float", "1.0", "A factor applied to every number."),
    ("verbose", "bool", "False", "Print more detail."),
    ("mode", 'Literal["fast", "exact", "auto"]', '"auto"', "How hard to try."),
    ("tags", "list[str] | None", "None", "Labels to attach to the result."),
    ("limit", "int", "10", "At most this many results."),
    ("encoding", "str", '"utf-8"', "The text encoding of the input."),
]


def tool_source(name: str, category: str, index: int) -> str:
    """A cyclopts tool like user_tools/hello.py, with 2-4 typed parameters."""
    first = REQUIRED[list(CATEGORIES).index(category)]
    extra = [OPTIONAL[(index + k) % len(OPTIONAL)] for k in range(1 + index % 3)]
    params = [first, *extra]
    signature = ", ".join(f"{p}: {a}" + (f" = {d}" if d is not None else "")
                          for p, a, d, _ in params)
    args_doc = "\n".join(f"        {p}: {h}" for p, _, _, h in params)
    echoed = ", ".join(f'"{p}": str({p})' for p, _, _, _ in params)
    return f'''\
# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3"]
# ///
"""{name.replace("_", " ").capitalize()}: a generated {category} tool for silica's benchmark.

Metadata:
    category: {category}
    tags: bench, {category}
    long_running: false
"""

import json
import sys
from pathlib import Path
from typing import Literal

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()


@app.default
def {name}({signature}):
    """{name.replace("_", " ").capitalize()} ({category}, variant {index}).

    Args:
{args_doc}
    """
    print(json.dumps({{"tool": "{name}", "args": {{{echoed}}}}}))


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema({name})))
    else:
        app()
'''


def write_tools(folder: Path, count: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / HELPER_NAME).write_text(helper_source(), encoding="utf-8")
    names: list[str] = []
    cats = list(CATEGORIES)
    for i in range(count):
        category = cats[i % len(cats)]
        verbs = CATEGORIES[category]
        verb = verbs[(i // len(cats)) % len(verbs)]
        round_ = i // (len(cats) * len(verbs))
        name = f"{category}_{verb}" + (f"_{round_ + 1}" if round_ else "")
        (folder / f"{name}.py").write_text(tool_source(name, category, i), encoding="utf-8")
        names.append(name)
    shutil.copyfile(HELLO_SOURCE, folder / "hello.py")
    return [*names, "hello"]


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Bench:
    root: Path
    home: Path
    tools: Path
    project: Path
    silica: list[str]
    uv: str

    @property
    def spec_cache(self) -> Path:
        return self.home / "cache" / "specs"

    def clear_specs(self) -> None:
        shutil.rmtree(self.spec_cache, ignore_errors=True)

    def run(self, argv: list[str], cwd: Path | None = None,
            resident: bool = False) -> tuple[float, str]:
        """Wall time of ``argv`` to exit; raises if it fails. Without ``resident`` silica
        runs as a fresh process of its own (``SILICA_RESIDENT=0``); with it, the command
        hands its run to the resident when one is up (and starts one when none is)."""
        env = {**installed_env(), "SILICA_HOME": str(self.home), "SILICA_RESIDENT": "0"}
        if resident:
            del env["SILICA_RESIDENT"]
        started = time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd or self.project, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, env=env)
        took = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(argv)} exited with {proc.returncode}:\n"
                               f"{proc.stderr[-2000:]}")
        return took, proc.stdout


# -- 1. discovery and listing -------------------------------------------------------------


def bench_discovery(b: Bench, n_files: int, repeat: int) -> Row:
    def cold(options: DiscoveryOptions) -> Callable[[], float]:
        def step() -> float:
            b.clear_specs()
            box = Toolbox(cwd=b.project, home=b.home, options=options)
            started = time.perf_counter()
            found = box.discover()
            took = time.perf_counter() - started
            assert found.specs_fetched == n_files, found.specs_fetched
            return took
        return step

    parallel = DiscoveryOptions()
    t = interleaved(repeat, parallel=cold(parallel), sequential=cold(DiscoveryOptions(parallel=1)))
    p, s = med(t["parallel"]), med(t["sequential"])
    return Row.judged(f"cold discovery, {n_files} tools: parallel={parallel.parallel} vs "
                      "parallel=1 (in process, spec cache cleared each run)",
                      f"{spread(t['parallel'], ms)} vs {spread(t['sequential'], ms)}",
                      p / s, f"{p / s:.2f}×", "≤ 0.70×", p / s <= 0.70)


def bench_listing(b: Bench, n_files: int, repeat: int) -> tuple[Row, Row]:
    lst = [*b.silica, "tools", "list", "--json"]
    rich = [sys.executable, "-c", "import rich.console"]

    def cold() -> float:
        b.clear_specs()
        return b.run(lst)[0]

    def warm() -> float:
        return b.run(lst)[0]

    def rich_console() -> float:
        return b.run(rich)[0]

    # Cold then warm in each round: the cold run leaves the cache the warm one reads.
    t = {"cold": [], "warm": []}
    for _ in range(repeat):
        t["cold"].append(cold())
        t["warm"].append(warm())
    rows = json.loads(b.run(lst)[1])
    ok = sum(r.get("status") == "ok" for r in rows)
    if ok != n_files:
        console.print(f"[yellow]warning: tools list shows {ok} ok tools of {n_files}[/yellow]")
    c, w = med(t["cold"]), med(t["warm"])
    speedup = Row.judged("`silica tools list --json`: warm (cached specs) vs cold "
                         "(cache cleared; in turn, not interleaved: cold fills what warm "
                         "reads)",
                         f"{spread(t['warm'], ms)} vs {spread(t['cold'], ms)}",
                         c / w, f"{c / w:.1f}× faster", "≥ 20× faster",
                         c / w >= 20)
    t2 = interleaved(repeat, warm=warm, rich=rich_console)
    w2, v = med(t2["warm"]), med(t2["rich"])
    vs_rich = Row.judged(f"warm `silica tools list --json`, {n_files} tools (cached specs) vs "
                         "`python -c \"import rich.console\"`",
                         f"{spread(t2['warm'], ms)} vs {spread(t2['rich'], ms)}", w2 / v,
                         f"{w2 / v:.2f}×", "≤ 3.00×", w2 / v <= 3.0)
    return speedup, vs_rich


def warm_resident(b: Bench) -> bool:
    """Start the resident as a person does (a first ``tools list``) and wait until it
    answers; False when it does not come up."""
    b.run([*b.silica, "tools", "list", "--json"], resident=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            out = b.run([*b.silica, "resident", "status", "--json"], resident=True)[1]
            if json.loads(out).get("pid"):
                return True
        except (RuntimeError, ValueError):
            pass
        time.sleep(0.2)
    return False


def bench_resident(b: Bench, n_files: int, repeat: int) -> list[Row]:
    """The two start-up rows again with the resident warm (a warm state: the commands hand
    their run to it), interleaved with the same peers."""
    if not warm_resident(b):
        return [Row("resident rows", "the resident did not start", "-", "-", "NOT MEASURED")]
    lst = [*b.silica, "tools", "list", "--json"]
    run = [*b.silica, "tools", "run", "hello", "--input", '{"name":"x"}']
    rich = [sys.executable, "-c", "import rich.console"]
    direct = [b.uv, "run", "--script", str(b.tools / "hello.py"), "--name", "x"]
    try:
        assert "Hello, x." in b.run(run, resident=True)[1]
        t = interleaved(repeat, lst=lambda: b.run(lst, resident=True)[0],
                        rich=lambda: b.run(rich)[0],
                        run=lambda: b.run(run, resident=True)[0],
                        direct=lambda: b.run(direct)[0])
    finally:
        b.run([*b.silica, "resident", "stop"], resident=True)
    lr, rr = med(t["lst"]) / med(t["rich"]), med(t["run"]) / med(t["direct"])
    return [
        Row.judged(f"warm `silica tools list --json`, {n_files} tools, resident warm (a warm "
                   "state: the run is handed to it) vs `python -c \"import rich.console\"`",
                   f"{spread(t['lst'], ms)} vs {spread(t['rich'], ms)}", lr, f"{lr:.2f}×",
                   "≤ 3.00×", lr <= 3.0),
        Row.judged("`silica tools run hello`, resident warm (a warm state) vs "
                   "`uv run --script hello.py --name x`",
                   f"{spread(t['run'], ms)} vs {spread(t['direct'], ms)}", rr, f"{rr:.2f}×",
                   "≤ 1.50×", rr <= 1.5)]


# -- 2. call overhead ---------------------------------------------------------------------


def bench_cli_call(b: Bench, repeat: int) -> Row:
    hello = b.tools / "hello.py"
    run = [*b.silica, "tools", "run", "hello", "--input", '{"name":"x"}']
    direct = [b.uv, "run", "--script", str(hello), "--name", "x"]
    _, out = b.run(run)
    assert "Hello, x." in out, out
    _, out = b.run(direct)
    assert "Hello, x." in out, out
    t = interleaved(repeat, run=lambda: b.run(run)[0], direct=lambda: b.run(direct)[0])
    r, d = med(t["run"]), med(t["direct"])
    return Row.judged("`silica tools run hello --input \'{\"name\":\"x\"}\'` vs "
                      "`uv run --script hello.py --name x` (whole commands, warm spec cache)",
                      f"{spread(t['run'], ms)} vs {spread(t['direct'], ms)}", r / d,
                      f"{r / d:.2f}×", "≤ 1.50×", r / d <= 1.5)


async def _inprocess(b: Bench, repeat: int) -> tuple[list[float], list[float]]:
    box = Toolbox(cwd=b.project, home=b.home)
    await box.adiscover()
    tool = box.get("hello")
    argv = [b.uv, "run", "--quiet", "--script", str(tool.path), "--name=x"]
    env = tool_env(box.pm, tool.path)

    async def acall() -> float:
        started = time.perf_counter()
        result = await box.acall("hello", {"name": "x"})
        took = time.perf_counter() - started
        assert not result.is_error and "Hello, x." in result.text, result.text
        return took

    async def bare() -> float:
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=tool.path.parent, env=env)
        out, _ = await proc.communicate()
        took = time.perf_counter() - started
        assert proc.returncode == 0 and b"Hello, x." in out, out
        return took

    await acall()
    await bare()
    calls: list[float] = []
    bares: list[float] = []
    for i in range(repeat):
        pair = (acall, bare) if i % 2 == 0 else (bare, acall)
        for step in pair:
            (calls if step is acall else bares).append(await step())
    return calls, bares


def bench_inprocess_call(b: Bench, repeat: int) -> Row:
    calls, bares = asyncio.run(_inprocess(b, repeat))
    c, s = med(calls), med(bares)
    return Row.judged(f"in process, warm state: `Toolbox.acall('hello')` vs the same `uv run "
                      f"--script` as a bare subprocess ({repeat} runs)",
                      f"{spread(calls, ms)} vs {spread(bares, ms)}",
                      c / s, f"{c / s:.2f}×", "≤ 1.10×", c / s <= 1.1)


# -- 3. imports ---------------------------------------------------------------------------


def parse_importtime(stderr: str) -> dict[str, tuple[int, int]]:
    """``name -> (self µs, cumulative µs)`` from ``python -X importtime`` output."""
    found: dict[str, tuple[int, int]] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue  # the header line
        found[parts[2].strip()] = (int(parts[0]), int(parts[1]))
    return found


def bench_imports(b: Bench, argv: list[str]) -> tuple[Row, dict[str, tuple[int, int]]]:
    code = (f"import sys; sys.argv={argv!r}\n"
            "from silica.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=b.project,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env=installed_env())
    modules = parse_importtime(proc.stderr)
    if "silica.cli" not in modules:
        raise RuntimeError(f"no import times for silica.cli:\n{proc.stderr[-2000:]}")
    heavy = sorted({m.split(".")[0] for m in modules} & set(HEAVY_MODULES))
    total = modules["silica.cli"][1] / 1e6
    everything = sum(self_us for self_us, _ in modules.values()) / 1e6
    cmd = " ".join(argv[1:])
    return Row.judged(f"imports of `silica {cmd}`",
                      f"silica.cli {ms(total)}, all imports {ms(everything)}; "
                      f"heavy: {', '.join(heavy) or 'none'}",
                      float(len(heavy)), f"{len(heavy)} heavy", "no anthropic, no PIL",
                      not heavy), modules


def heaviest(modules: dict[str, tuple[int, int]], n: int = 8) -> str:
    top = sorted(modules.items(), key=lambda kv: kv[1][1], reverse=True)
    tops = [(k, v) for k, v in top if "." not in k][:n]  # top-level packages, cumulative
    return ", ".join(f"{k} {v[1] / 1000:.0f} ms" for k, v in tops)


# -- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--tools", type=int, default=50, help="generated tools (plus hello)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--call-repeat", type=int, default=20,
                        help="runs of the in-process call comparison (median)")
    opts = parser.parse_args()
    command = ("python benchmarks/bench_toolbox.py " +
               shlex.join([f"--tools={opts.tools}", f"--repeat={opts.repeat}",
                           f"--call-repeat={opts.call_repeat}"]))

    started = time.perf_counter()
    write_bytecode()  # start-up rows run as an installed package: bytecode written once
    with temporary_folder("silica-bench-", opts.keep) as root:
        home, tools, project = root / "home", root / "tools", root / "project"
        (project / ".git").mkdir(parents=True)  # a repository: project folders stop here
        os.environ["SILICA_HOME"] = str(home)  # inherited by every subprocess below
        os.environ["SILICA_TOOLS_DIR"] = str(tools)
        exe = Path(sys.executable).parent / "silica"
        silica = [str(exe)] if exe.exists() else [sys.executable, "-m", "silica"]
        b = Bench(root, home, tools, project, silica, find_uv())
        names = write_tools(tools, opts.tools)
        n_files = len(names)
        console.print(f"silica benchmark: {n_files} tools in {tools}, {os.cpu_count()} CPUs, "
                      f"uv {b.run([b.uv, '--version'])[1].split()[1]}, "
                      f"repeat {opts.repeat}, call repeat {opts.call_repeat}", soft_wrap=True)
        note("warming the uv cache (cyclopts)")
        b.run([b.uv, "run", "--script", str(tools / "hello.py"), "--name", "warm-up"])
        note("warming each tool's uv environment (one throwaway discovery)")
        found = Toolbox(cwd=project, home=home).discover()
        broken = [t for t in found.tools if not t.ok]
        for t in broken:
            console.print(f"[red]broken tool {t.name}: {t.reason}[/red]")
        if broken:
            return 2

        rows: list[Row] = []
        note("cold discovery, parallel vs sequential")
        rows.append(bench_discovery(b, n_files, opts.repeat))
        note("silica tools list --json, cold vs warm vs --version")
        rows.extend(bench_listing(b, n_files, opts.repeat))
        console.print(load_line())
        note("silica tools run hello vs uv run --script hello.py")
        rows.append(bench_cli_call(b, opts.repeat))
        rows.extend(bench_resident(b, n_files, opts.repeat))
        note("in-process call overhead")
        rows.append(bench_inprocess_call(b, opts.call_repeat))
        note("imports")
        version_row, version_mods = bench_imports(b, ["silica", "--version"])
        list_row, list_mods = bench_imports(b, ["silica", "tools", "list"])
        run_row, _ = bench_imports(b, ["silica", "tools", "run", "hello", "--input",
                                       '{"name":"x"}'])
        rows += [version_row, list_row, run_row]
        console.print(load_line())
        console.print(f"heaviest top-level imports (`silica --version`): "
                      f"{heaviest(version_mods)}")
        console.print(f"heaviest top-level imports (`silica tools list`): {heaviest(list_mods)}")

    return report(rows, title="silica toolbox benchmark", command=command, started=started,
                  strict=opts.strict)


if __name__ == "__main__":
    sys.exit(main())
