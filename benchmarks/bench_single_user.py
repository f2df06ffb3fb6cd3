"""Benchmark the single-user path against an earlier silica: nothing configured, the same work.

    python benchmarks/bench_single_user.py [--baseline REV] [--repeat 7] [--strict] [--keep]

The same commands run on this checkout (A) and on ``--baseline`` (B, a git revision, default
``HEAD~1``, checked out into a temporary worktree and run with this interpreter and
``PYTHONPATH`` pointing at it), interleaved A B A B..., each with its own ``SILICA_HOME``
and no config, so both keep their sessions the way they do by default. The model is a local
server speaking the Anthropic Messages API (``tests/wire``) through the real SDK.

1. ``silica ask``: a fresh process per run (no resident, ``SILICA_RESIDENT=0``); the model
   calls a tool that prints a PNG as JSON, then answers. Wall time from spawn to exit.
2. A 12-turn chat in one fresh process: ``Agent.start`` then 12 ``Agent.send``, a different
   screenshot attached to each turn (the session saved after every step). Wall time.
3. ``silica sessions list --json`` over 300 saved sessions, a fresh process per run.
4. ``silica serve``: one daemon per side, started once (a daemon is long-lived); a turn sent
   with ``?wait=true`` (one text reply), interleaved across the two daemons. Per request.

The target (issue 25): every row within 1.1x of the baseline (A/B median <= 1.1). Figures are
medians of ``--repeat`` runs, min and max beside them. The script reports; it is not a test:
it exits 0 even when a target is missed, unless ``--strict`` is given.
"""

from __future__ import annotations

import io
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
    interleaved,
    load_line,
    med,
    note,
    report,
    spread,
    temporary_folder,
)

TARGET = 1.1
SESSIONS = 300
CHAT_TURNS = 12

CHAT = """
import asyncio, os, sys
from pathlib import Path
from silica.agent.loop import Agent
from silica.config import Settings
shots = sorted(Path(sys.argv[1]).glob("shot-*.png"))
agent = Agent.start(Settings(provider="anthropic"))
for n, shot in enumerate(shots, start=1):
    asyncio.run(agent.send(f"Turn {n}: what changed?", [shot]))
"""

SEED = """
import sys
from silica.agent.conversation import Conversation, Message
from silica.agent.sessions import save_session
from silica.blocks import TextBlock
for n in range(int(sys.argv[1])):
    c = Conversation(id=f"seed-{n:04d}", provider="anthropic", model="claude-sonnet-4-5")
    for t in range(4):
        c.messages.append(Message(role="user", turn=t + 1,
                                  content=[TextBlock(text=f"question {t} " * 20)]))
        c.messages.append(Message(role="assistant", turn=t + 1,
                                  content=[TextBlock(text="answer " * 60)]))
    save_session(c)
"""


def png(seed: int, size: tuple[int, int] = (800, 500)) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, (20 + seed % 200, 40, 90))
    draw = ImageDraw.Draw(image)
    for i in range(40):
        draw.rectangle((i * 17 % size[0], i * 11 % size[1], i * 17 % size[0] + 60,
                        i * 11 % size[1] + 30), fill=((seed * 7 + i * 13) % 255, 120, 200))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class Side:
    """One silica (this checkout or the baseline) with its own home and working folder."""

    def __init__(self, name: str, root: Path, source: Path, server_env: dict[str, str]) -> None:
        from serve_daemon import picture_tool

        self.name, self.source = name, source
        self.home, self.work = root / name / "home", root / name / "work"
        (self.work / ".git").mkdir(parents=True)  # tool discovery stops here
        picture_tool(self.home / "tools", png(1))
        base = installed_env()
        for var in [k for k in base if k.startswith(("ANTHROPIC_", "OPENAI_", "SILICA_"))]:
            del base[var]
        self.env = {**base, **server_env, "SILICA_HOME": str(self.home),
                    "SILICA_PROVIDER": "anthropic", "SILICA_RESIDENT": "0",
                    "PYTHONPATH": str(source)}

    def run(self, *args: str) -> float:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *args], cwd=self.work, env=self.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        took = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"{self.name}: {' '.join(args[:3])} failed: "
                             f"{done.stderr.decode(errors='replace')[-2000:]}")
        return took


def baseline_tree(rev: str, root: Path) -> Path:
    tree = root / "baseline-tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), rev],
                   check=True)
    return tree


def ratio_row(measure: str, a: list[float], b: list[float]) -> Row:
    """A against B: the median of the pairs' ratios (the sides ran in turn)."""
    r = med([x / y for x, y in zip(a, b, strict=True)])
    return Row.judged(measure, f"this {spread(a)}; baseline {spread(b)}", r, f"{r:.2f}x",
                      f"<= {TARGET}x", r <= TARGET)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--baseline", default="HEAD~1", help="the git revision to compare with")
    parser.add_argument("--repeat", type=int, default=7, help="runs of each side")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from serve_daemon import start_daemon
    from wire import anthropic_server, text, tool_call

    rows: list[Row] = []
    started = time.perf_counter()
    console.print(load_line())
    with temporary_folder("bench-single-", args.keep) as root, \
            anthropic_server([]) as srv:
        tree = baseline_tree(args.baseline, root)
        try:
            sides = {"this": Side("this", root, REPO, srv.env),
                     "baseline": Side("baseline", root, tree, srv.env)}
            shots = root / "shots"
            shots.mkdir()
            for n in range(CHAT_TURNS):
                (shots / f"shot-{n:02d}.png").write_bytes(png(10 + n))

            def ask(side: Side):
                def once() -> float:
                    srv.add(tool_call("picture"), text("A picture of boxes."))
                    return side.run("-m", "silica", "ask", "draw the boxes")
                return once

            def chat(side: Side):
                def once() -> float:
                    srv.add(*[text(f"Turn {n}: the boxes moved.") for n in range(CHAT_TURNS)])
                    return side.run("-c", CHAT, str(shots))
                return once

            def listing(side: Side):
                return lambda: side.run("-m", "silica", "sessions", "list", "--json")

            for side in sides.values():  # warm-up: bytecode, the tool's environment
                ask(side)()
            with console.status("ask: fresh processes, interleaved"):
                t = interleaved(args.repeat, this=ask(sides["this"]),
                                baseline=ask(sides["baseline"]))
            rows.append(ratio_row("ask (tool call + image), fresh process", t["this"],
                                  t["baseline"]))
            with console.status(f"a {CHAT_TURNS}-turn chat in a fresh process"):
                t = interleaved(max(3, args.repeat // 2), this=chat(sides["this"]),
                                baseline=chat(sides["baseline"]))
            rows.append(ratio_row(f"chat of {CHAT_TURNS} turns with a screenshot each",
                                  t["this"], t["baseline"]))
            for side in sides.values():
                side.run("-c", SEED, str(SESSIONS))
                side.run("-m", "silica", "sessions", "list", "--json")  # a first open migrates
            with console.status(f"sessions list over {SESSIONS}+ sessions"):
                t = interleaved(args.repeat, this=listing(sides["this"]),
                                baseline=listing(sides["baseline"]))
            rows.append(ratio_row(f"sessions list --json, {SESSIONS}+ sessions", t["this"],
                                  t["baseline"]))
            rows.append(bench_serve(sides, srv, start_daemon, text, args.repeat * 3))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                           check=False)
    console.print(load_line())
    return report(rows, title="the single-user path against the baseline",
                  command=f"python benchmarks/bench_single_user.py --baseline {args.baseline}",
                  started=started, strict=args.strict)


def bench_serve(sides: dict[str, Side], srv, start_daemon, text, repeat: int) -> Row:
    daemons = {name: start_daemon(side.home, env=side.env, cwd=side.work)
               for name, side in sides.items()}
    try:
        sids = {}
        for name, daemon in daemons.items():
            with daemon.client() as http:
                sids[name] = http.post("/sessions", json={}).json()["session_id"]

        def turn(name: str):
            def once() -> float:
                srv.add(text("Noted."))
                with daemons[name].client() as http:
                    start = time.perf_counter()
                    got = http.post(f"/sessions/{sids[name]}/messages",
                                    params={"wait": "true"}, json={"message": "note this"})
                    took = time.perf_counter() - start
                if got.status_code != 200:
                    raise SystemExit(f"{name}: serve answered {got.status_code}: {got.text}")
                return took
            return once

        for name in daemons:
            turn(name)()
        t = interleaved(repeat, this=turn("this"), baseline=turn("baseline"))
    finally:
        for daemon in daemons.values():
            daemon.stop()
    note("serve: one daemon per side, started once; each figure is one request")
    return ratio_row("serve: a turn with ?wait=true", t["this"], t["baseline"])


if __name__ == "__main__":
    raise SystemExit(main())
