"""Benchmark how much resident memory a `silica chat` session gains per turn (a warm process).

    python benchmarks/bench_chat_memory.py [--turns 30] [--repeat 3] [--every 2]
                                           [--strict] [--keep]

A real ``silica chat`` process (installed as a package would be: bytecode written, see
``common.installed_env``), talking to the local server that speaks the Anthropic Messages API
(``tests/wire``, in a thread of this process) through the real ``anthropic`` SDK. The
person's messages go in on its stdin, one line a turn (a pipe: chat reads a line at a time,
and prints the reply on stdout). Turn ``k`` of ``--turns``: the person asks; on every
``--every``-th turn the scripted model first calls the ``screenshot`` tool (a real PEP 723
tool run by ``uv``) which returns a different 1024x640 desktop-like PNG each call (about
190 KB; no two alike, as on a screen that changes), then
answers in about 300 characters; on the other turns it only answers. After each reply the
script reads ``VmRSS`` and ``VmHWM`` of the chat process from ``/proc/PID/status``.

The row is about a warm process: one chat runs all its turns. It prints the growth per turn
over turns 5 to ``--turns``: the least-squares slope of VmRSS against the turn (each run's,
as median, min and max over ``--repeat`` fresh chats), and the per-turn deltas (all runs
pooled, median, min and max). Target: a slope of at most 100 KiB per turn. 1 KiB = 1024
bytes.
"""

from __future__ import annotations

import io
import os
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

from common import (
    REPO,
    Row,
    bench_parser,
    console,
    installed_env,
    load_line,
    med,
    note,
    report,
    screenshot_png,
    spread,
    temporary_folder,
    write_bytecode,
)

KIB = 1024
TARGET_KIB = 100  # per turn, after turn 5
FIRST = 5  # the turns before this one warm the process (imports, first allocations)
SHOT_SIZE = (1024, 640)
TOOL = '''\
# /// script
# requires-python = ">=3.11"
# dependencies = []
# ///
"""screenshot: a picture of the desktop."""
import base64
import json
import sys
from pathlib import Path

if "--toolspec" in sys.argv:
    print(json.dumps({"name": "screenshot", "description": "Take a screenshot.",
                      "input_schema": {"type": "object",
                                       "properties": {"n": {"type": "integer"}}}}))
else:
    n = int(sys.argv[-1].split("=", 1)[-1]) if len(sys.argv) > 1 else 0
    data = (Path(__file__).parent / "shots" / f"{n}.png").read_bytes()
    print(json.dumps({"label": f"screen {n}", "media_type": "image/png",
                      "base64": base64.b64encode(data).decode()}))
'''


def small_screenshot(seed: int) -> bytes:
    """A 1024x640 PNG: a desktop screenshot scaled down (a small screen, or a window)."""
    from PIL import Image

    with Image.open(io.BytesIO(screenshot_png(seed))) as img:
        buf = io.BytesIO()
        img.resize(SHOT_SIZE).save(buf, "PNG")
        return buf.getvalue()


def answer(turn: int) -> str:
    """The model's answer of ``turn``: about 300 characters, ending with a marker."""
    words = " ".join(["the dashboard shows the chart and the terminal as before"] * 5)
    return f"Turn {turn}: {words}. Done {turn}."


def script(turns: int, every: int) -> list:
    from wire import text, tool_call

    replies = []
    for turn in range(1, turns + 1):
        if turn % every == 0:
            replies.append(text("Let me look.") + tool_call("screenshot", {"n": turn}))
        replies.append(text(answer(turn)))
    return replies


def status(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of ``pid``, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * KIB
    return found


class Chat:
    """A ``silica chat`` process fed on a pipe; ``say`` sends a line and waits for a text."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, errors: Path) -> None:
        self.errors = errors.open("wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errors, env=env, cwd=cwd)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.fd = self.proc.stdin, self.proc.stdout.fileno()
        self.seen = b""

    def say(self, line: str, marker: bytes, limit: float = 300) -> None:
        start = len(self.seen)
        self.stdin.write(line.encode() + b"\n")
        self.stdin.flush()
        end = time.monotonic() + limit
        while marker not in self.seen[start:]:
            if time.monotonic() > end or self.proc.poll() is not None:
                raise RuntimeError(f"no {marker!r} from silica chat: {self.seen[-1000:]!r}")
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if ready:
                self.seen += os.read(self.fd, 65536)

    def close(self) -> int:
        try:
            self.stdin.write(b"/exit\n")
            self.stdin.close()
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.errors.close()


def run_chat(silica: list[str], env: dict[str, str], project: Path, log: Path, turns: int,
             every: int) -> list[dict[str, int]]:
    """One chat of ``turns`` turns; the chat's memory after each."""
    from wire import anthropic_server

    with anthropic_server(script(turns, every)) as srv:
        chat = Chat(silica + ["chat"], env | srv.env, project, log)
        seen = []
        try:
            for turn in range(1, turns + 1):
                chat.say(f"Turn {turn}: what is on the screen now?", f"Done {turn}.".encode())
                time.sleep(0.05)  # the usage line after the reply
                seen.append(status(chat.proc.pid))
        finally:
            code = chat.close()
        if code != 0:
            raise RuntimeError(f"silica chat exited with {code}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
    return seen


def slope(ys: list[float]) -> float:
    """The least-squares slope of ``ys`` against 0, 1, 2, ..."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in enumerate(ys)) / sum((x - mx) ** 2
                                                                   for x in range(n))


def kib(n: float) -> str:
    return f"{n / KIB:,.0f} KiB"


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--turns", type=int, default=30, help="turns of each chat")
    parser.add_argument("--repeat", type=int, default=3, help="chats (fresh processes)")
    parser.add_argument("--every", type=int, default=2,
                        help="a screenshot tool call on every N-th turn")
    opts = parser.parse_args()
    if opts.turns < FIRST + 2:
        parser.error(f"--turns must be at least {FIRST + 2}")
    command = "python benchmarks/bench_chat_memory.py " + shlex.join(
        [f"--turns={opts.turns}", f"--repeat={opts.repeat}", f"--every={opts.every}"])
    started = time.perf_counter()
    sys.path.insert(0, str(REPO / "tests"))
    write_bytecode()
    console.print(f"silica chat memory: {opts.turns} turns, a screenshot every {opts.every}, "
                  f"{opts.repeat} chats; {load_line()}", soft_wrap=True)
    with temporary_folder("silica-bench-chatmem-", opts.keep) as root:
        home, tools, project = root / "home", root / "tools", root / "project"
        (project / ".git").mkdir(parents=True)
        (tools / "shots").mkdir(parents=True)
        (tools / "screenshot.py").write_text(TOOL, encoding="utf-8")
        for turn in range(opts.every, opts.turns + 1, opts.every):  # a new picture each call
            (tools / "shots" / f"{turn}.png").write_bytes(small_screenshot(turn))
        exe = Path(sys.executable).parent / "silica"
        silica = [str(exe)] if exe.exists() else [sys.executable, "-m", "silica"]
        env = {k: v for k, v in installed_env().items()
               if not k.startswith(("ANTHROPIC_", "OPENAI_", "GEMINI_", "SILICA_"))}
        # the chat runs in the process measured: handed to a resident, only its client would be
        env |= {"SILICA_HOME": str(home), "SILICA_TOOLS_DIR": str(tools), "NO_COLOR": "1",
                "SILICA_RESIDENT": "0"}
        note("warming uv and the spec cache (silica tools list)")
        subprocess.run([*silica, "tools", "list", "--json"], cwd=project, env=env,
                       check=True, capture_output=True)
        slopes, deltas, peaks, ends = [], [], [], []
        for n in range(opts.repeat):
            note(f"chat {n + 1} of {opts.repeat}")
            seen = run_chat(silica, env, project, root / f"chat-{n}.err", opts.turns,
                            opts.every)
            rss = [s["VmRSS"] for s in seen]
            tail = rss[FIRST - 1:]  # turns 5..N
            slopes.append(slope(tail))
            deltas += [b - a for a, b in zip(tail, tail[1:], strict=False)]
            peaks.append(seen[-1]["VmHWM"])
            ends.append(rss[-1])
            console.print(f"  chat {n + 1}: VmRSS turn 1 {kib(rss[0])}, turn {FIRST} "
                          f"{kib(rss[FIRST - 1])}, turn {opts.turns} {kib(rss[-1])}; "
                          f"VmHWM {kib(seen[-1]['VmHWM'])}; slope {kib(slopes[-1])}/turn",
                          soft_wrap=True)
            console.print("    VmRSS by turn, MiB: " + " ".join(f"{r / KIB / KIB:.1f}"
                                                                for r in rss), soft_wrap=True)
    growth = med(slopes)
    rows = [
        Row.judged(f"`silica chat` VmRSS growth per turn, turns {FIRST}-{opts.turns} "
                   "(warm process; least-squares slope of each chat)",
                   f"{spread(slopes, kib)} per turn", growth / KIB, f"{kib(growth)}/turn",
                   f"≤ {TARGET_KIB} KiB/turn", growth <= TARGET_KIB * KIB),
        Row(f"per-turn VmRSS deltas, turns {FIRST}-{opts.turns}, all chats",
            spread(deltas, kib), "-", "-", "INFO"),
        Row(f"VmRSS and VmHWM after turn {opts.turns}",
            f"RSS {spread(ends, kib)}; HWM {spread(peaks, kib)}", "-", "-", "INFO"),
    ]
    console.print(load_line())
    return report(rows, title="silica chat memory", command=command, started=started,
                  strict=opts.strict)


if __name__ == "__main__":
    sys.exit(main())
