"""Benchmark ``silica serve``: event latency, a burst of screenshots, history, turn overhead.

    python benchmarks/bench_serve.py [--clients 50] [--turns 3] [--chunks 100] [--gap 0.04]
                                     [--client-procs 5] [--sessions 20] [--history-gets 50]
                                     [--overhead-turns 30] [--only latency,burst,history,overhead]
                                     [--strict] [--keep]

Real daemons (``python -m silica serve``, started by ``tests/serve_daemon.py``) talk to a
local Anthropic Messages API (``tests/wire``) run in this process.

1. Event latency with ``--clients`` clients joined to one session, Socket.IO (python-socketio's
   ``AsyncClient``, websocket) and then SSE (``GET /sessions/{sid}/events`` read straight off
   the socket), spread over ``--client-procs`` worker processes as separate programs would
   be. The wire server streams replies of ``--chunks`` text pieces ``--gap`` seconds apart;
   as it writes each piece it puts its clock (``time.perf_counter_ns``, CLOCK_MONOTONIC: the
   same in every process) into the text. A client's figure for a piece is that clock when
   its ``text_delta`` handler runs minus the stamp: from the provider sending a piece to a
   client holding it, so the daemon's whole path (the SDK's stream parsing, the agent, the
   bus, the transport) is inside, and the publish itself is a little later than the stamp.
   A warm-up turn, then ``--turns`` turns; p50 and p99 over every piece and client. The same
   with 1 client, and the CPU time of the daemon and of the clients, are printed beside it.
2. ``--sessions`` sessions each post a message with 3 different 1600x1000 screenshots
   (multipart, ``?wait=true``) at once to a fresh daemon: every one must answer 200, and the
   daemon's peak resident memory (``VmHWM`` in ``/proc/<pid>/status``) must stay low.
3. A session gets 100 images (10 messages of 10 different 480x300 PNGs); its
   ``GET /sessions/{sid}/history``: body size, and the median time of ``--history-gets``
   requests on one keep-alive connection.
4. Daemon overhead per turn: the wall time of ``POST /sessions/{sid}/messages?wait=true``
   (a text-only reply, no tools) against ``await Agent.send(...)`` in this process, on the
   same wire server, ``--overhead-turns`` each, interleaved, after 3 warm-up turns each. The
   wire server's own time per reply is printed beside them.

Everything happens in a fresh temporary folder with its own ``SILICA_HOME``. 1 kB = 1,000
bytes, 1 MB = 1,000,000 bytes. The script reports; it is not a test: it exits 0 even when a
target is missed, unless ``--strict`` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    REPO,
    Row,
    bench_parser,
    console,
    med,
    ms,
    note,
    report,
    screenshot_png,
    temporary_folder,
)

sys.path.insert(0, str(REPO / "tests"))
import httpx2  # noqa: E402
import socketio  # noqa: E402
from serve_daemon import Daemon, start_daemon  # noqa: E402
from wire import text  # noqa: E402
from wire.anthropic_wire import render as anthropic_render  # noqa: E402
from wire.server import Wire, WireServer, serve  # noqa: E402

LATENCY_P50, LATENCY_P99 = 0.005, 0.050
RSS_TARGET = 300_000_000
HISTORY_SIZE, HISTORY_P50 = 50_000, 0.020
OVERHEAD_TARGET = 0.030
SCREEN = (1600, 1000)
SMALL = (480, 300)
STAMP = b"@" * 20  # replaced by the wire server's clock as it writes the piece
MEASURES = ("latency", "burst", "history", "overhead")
STEP_TIMEOUT = 600.0  # seconds any one measured step may take before the run gives up


# -- the provider: a wire server that stamps its pieces ----------------------------------


@dataclass
class Provider:
    """The wire server and what it measured: ``own`` holds, per streamed reply, the seconds
    from the request's arrival to its last piece."""

    server: Any = None  # the WireServer
    gap: float = 0.0
    own: list[float] = field(default_factory=list)


class StampedChunks(list):
    """A reply's chunks: a piece holding ``STAMP`` is sent ``gap`` seconds after the one
    before, with the clock of that moment in place of the stamp."""

    def __init__(self, chunks: list[bytes], provider: Provider) -> None:
        super().__init__(chunks)
        self.provider, self.started = provider, time.perf_counter()

    def __iter__(self):
        for chunk in list.__iter__(self):
            if STAMP in chunk:
                time.sleep(self.provider.gap)
                chunk = chunk.replace(STAMP, b"%020d" % time.perf_counter_ns(), 1)
            yield chunk
        self.provider.own.append(time.perf_counter() - self.started)


@contextmanager
def provider_server():
    provider = Provider()

    def render(reply: Any, body: Any, n: int) -> Wire:
        wire = anthropic_render(reply, body, n)
        if wire.stream:
            wire.chunks = StampedChunks(wire.chunks, provider)
        return wire

    provider.server = WireServer(render, [], paths=("/v1/messages",),
                                 stream_type="text/event-stream")
    with serve(provider.server) as srv:
        srv.env = {"ANTHROPIC_BASE_URL": srv.base_url, "ANTHROPIC_API_KEY": "bench-key",
                   "SILICA_PROVIDER": "anthropic"}
        yield provider


def stamped_reply(pieces: int):
    return text("", chunks=[f"<{STAMP.decode()}>" for _ in range(pieces)])


def stamp_of(piece: str) -> int | None:
    return int(piece[1:21]) if len(piece) == 22 and piece[1:21].isdigit() else None


# -- clients: each worker process holds some, as separate programs would -------------------


class Listener:
    """One client's view: latencies of stamped pieces after the warm-up turn, turns ended."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.ends = 0

    def heard(self, event: str, data: Any) -> None:
        now = time.perf_counter_ns()  # CLOCK_MONOTONIC: the same clock in every process
        if event == "text_delta" and self.ends >= 1 and isinstance(data, dict):
            sent = stamp_of(str(data.get("text", "")))
            if sent is not None:
                self.latencies.append((now - sent) / 1e9)
        elif event == "turn_end":
            self.ends += 1


class SioClient(Listener):
    def __init__(self, url: str, sid: str) -> None:
        super().__init__()
        self.url, self.sid = url, sid
        self.client = socketio.AsyncClient(reconnection=False)
        self.client.on("text_delta", lambda d: self.heard("text_delta", d), namespace="/events")
        self.client.on("turn_end", lambda d: self.heard("turn_end", d), namespace="/events")

    async def open(self) -> None:
        await self.client.connect(self.url, namespaces=["/events"], transports=["websocket"],
                                  wait_timeout=60)
        joined = await self.client.call("join", {"session_id": self.sid}, namespace="/events",
                                        timeout=60)
        assert joined.get("ok"), joined

    async def close(self) -> None:
        await self.client.disconnect()


class SseClient(Listener):
    """``GET /sessions/{sid}/events`` read straight off the socket (HTTP/1.1, chunked): an
    SSE reader that costs next to nothing per event, so the clients' own work stays small
    beside the daemon's on a machine they share."""

    def __init__(self, url: str, sid: str) -> None:
        super().__init__()
        self.url, self.sid = url, sid
        self.ready = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        reader, self.writer = await asyncio.open_connection(host, int(port))
        self.writer.write(f"GET /sessions/{self.sid}/events HTTP/1.1\r\nHost: {host}:{port}"
                          "\r\nAccept: text/event-stream\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0], head
        assert b"transfer-encoding: chunked" in head.lower(), head
        self.task = asyncio.ensure_future(self._read(reader))
        await asyncio.wait_for(self.ready.wait(), 60)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        pending = b""
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return
            pending += chunk[:-2]
            *blocks, pending = pending.split(b"\n\n")
            for block in blocks:
                if block.startswith(b":"):
                    self.ready.set()
                    continue
                name, data = "", b""
                for line in block.split(b"\n"):
                    if line.startswith(b"event:"):
                        name = line[6:].strip().decode()
                    elif line.startswith(b"data:"):
                        data = line[5:]
                if name in ("text_delta", "turn_end"):
                    self.heard(name, json.loads(data))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        if self.writer is not None:
            self.writer.close()


async def until(predicate, what: str, timeout: float = STEP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        await asyncio.sleep(0.01)


async def worker(kind: str, url: str, sid: str, count: int, turns: int) -> None:
    """Hold ``count`` clients of the session; print ``ready``, then once each has seen
    ``turns`` turns end, one JSON line: the latencies and the CPU time it took meanwhile."""
    listeners: list[Any] = [SioClient(url, sid) if kind == "socket.io" else SseClient(url, sid)
                            for _ in range(count)]
    for listener in listeners:
        await listener.open()
    print("ready", flush=True)
    cpu = time.process_time()
    await until(lambda: all(x.ends >= turns for x in listeners), f"{turns} turns")
    for listener in listeners:
        await listener.close()
    print(json.dumps({"latencies": [x.latencies for x in listeners],
                      "cpu": time.process_time() - cpu}), flush=True)


def session(daemon: Daemon) -> str:
    with daemon.client() as http:
        made = http.post("/sessions", json={})
    assert made.status_code == 201, made.text
    return made.json()["session_id"]


# -- 1. event latency ---------------------------------------------------------------------


@dataclass
class LatencyRun:
    latencies: list[float]  # seconds, every stamped piece on every client
    missing: int  # pieces some client never got
    wall: float  # seconds of the measured turns
    daemon_cpu: float  # CPU seconds the daemon used meanwhile
    clients_cpu: float  # CPU seconds the client workers used from ready to done


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def latency_run(root: Path, daemon: Daemon, provider: Provider, kind: str, clients: int,
                opts: Any) -> LatencyRun:
    """``clients`` clients of one session, in up to ``--client-procs`` worker processes, hear
    a warm-up turn and ``--turns`` stamped turns."""
    sid = session(daemon)
    procs = max(1, min(clients, opts.client_procs))
    shares = [clients // procs + (i < clients % procs) for i in range(procs)]
    workers = []
    for i, share in enumerate(shares):
        log = open(root / f"worker-{kind}-{clients}-{i}.log", "w")  # noqa: SIM115
        workers.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", kind, daemon.url, sid, str(share),
             str(opts.turns + 1)], stdout=subprocess.PIPE, stderr=log, text=True))
    try:
        for w in workers:
            if w.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a {kind} client worker failed; see {log.name}")
        provider.gap = opts.gap
        wall = daemon_cpu = 0.0
        with daemon.client(timeout=STEP_TIMEOUT) as http:
            for turn in range(opts.turns + 1):  # the first is a warm-up
                if turn == 1:
                    wall, daemon_cpu = time.perf_counter(), cpu_seconds(daemon.proc.pid)
                provider.server.add(stamped_reply(opts.chunks))
                sent = http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                                 json={"message": f"stream {opts.chunks} pieces"})
                assert sent.status_code == 200, sent.text
        wall = time.perf_counter() - wall
        daemon_cpu = cpu_seconds(daemon.proc.pid) - daemon_cpu
        heard = [json.loads(w.communicate(timeout=STEP_TIMEOUT)[0].splitlines()[-1])
                 for w in workers]
    finally:
        provider.gap = 0.0
        for w in workers:
            if w.poll() is None:
                w.kill()
    latencies = [x for one in heard for client in one["latencies"] for x in client]
    return LatencyRun(latencies, clients * opts.turns * opts.chunks - len(latencies), wall,
                      daemon_cpu, sum(one["cpu"] for one in heard))


def quantile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_latency(root: Path, daemon: Daemon, provider: Provider, opts: Any) -> list[Row]:
    rows = []
    for kind in ("socket.io", "sse"):
        label = "Socket.IO (websocket)" if kind == "socket.io" else "SSE"
        note(f"event latency: 1 {kind} client, then {opts.clients}; {opts.turns} turns of "
             f"{opts.chunks} pieces {ms(opts.gap, 0)} apart")
        one = latency_run(root, daemon, provider, kind, 1, opts)
        run = latency_run(root, daemon, provider, kind, opts.clients, opts)
        latencies = run.latencies
        p50, p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
        worst = max(p50 / LATENCY_P50, p99 / LATENCY_P99)
        rows.append(Row.judged(
            f"event latency, {opts.clients} {label} clients of one session: the wire server "
            "writes a text piece -> a client's text_delta handler has it",
            f"p50 {ms(p50, 2)}, p99 {ms(p99, 2)}, max {ms(max(latencies), 1)} "
            f"({len(latencies):,} receipts)", worst,
            f"p50 {p50 / LATENCY_P50:.2f}, p99 {p99 / LATENCY_P99:.2f} of target",
            "p50 ≤ 5 ms, p99 ≤ 50 ms", p50 <= LATENCY_P50 and p99 <= LATENCY_P99))
        receipts = max(1, len(latencies))
        rows.append(Row(
            f"{label}: the same with 1 client; the daemon's CPU during the {opts.clients}-"
            f"client turns ({run.wall:.1f} s)",
            f"1 client: p50 {ms(quantile(one.latencies, 0.5), 2)}, p99 "
            f"{ms(quantile(one.latencies, 0.99), 2)}; daemon CPU {run.daemon_cpu:.1f} s "
            f"({run.daemon_cpu / run.wall:.0%} of a core); client workers' CPU "
            f"{run.clients_cpu:.1f} s",
            f"{run.daemon_cpu / receipts * 1e6:,.0f} µs of daemon CPU per receipt",
            "report only", "INFO"))
        if run.missing or one.missing:
            rows.append(Row(f"{label}: text pieces that never reached a client",
                            f"{run.missing + one.missing:,}", "", "none", "WARN"))
    return rows


# -- 2. a burst of screenshot messages ----------------------------------------------------


def crop_png(data: bytes, box: tuple[int, int, int, int]) -> bytes:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        buf = io.BytesIO()
        img.crop(box).save(buf, "PNG")
        return buf.getvalue()


def burst_screens(sessions: int) -> list[list[bytes]]:
    """Three different 1600x1000 crops of one desktop per session (a desktop per session)."""
    w, h = SCREEN
    offsets = [(0, 0), (160, 40), (320, 80)]
    return [[crop_png(screenshot_png(500 + s), (x, y, x + w, y + h)) for x, y in offsets]
            for s in range(sessions)]


def status_bytes(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


async def burst(daemon: Daemon, sids: list[str], screens: list[list[bytes]]) -> list[Any]:
    limits = httpx2.Limits(max_connections=len(sids) + 5)
    async with daemon.async_client(timeout=httpx2.Timeout(STEP_TIMEOUT), limits=limits) as http:
        async def one(sid: str, images: list[bytes]) -> Any:
            files = [("images[]", (f"screen-{i + 1}.png", data, "image/png"))
                     for i, data in enumerate(images)]
            return await http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                                   data={"message": "What is wrong on these screens?"},
                                   files=files)

        return await asyncio.gather(*(one(sid, imgs) for sid, imgs in
                                      zip(sids, screens, strict=True)))


def bench_burst(root: Path, provider: Provider, opts: Any) -> list[Row]:
    note(f"drawing {opts.sessions * 3} different {SCREEN[0]}x{SCREEN[1]} screenshots")
    screens = burst_screens(opts.sessions)
    size = sum(len(d) for imgs in screens for d in imgs) / (opts.sessions * 3)
    note(f"{opts.sessions} sessions post 3 screenshots each ({size / 1000:,.0f} kB per PNG on "
         "average) at once to a fresh daemon")
    with start_daemon(root / "home", env=provider.server.env, cwd=root) as daemon:
        sids = [session(daemon) for _ in range(opts.sessions)]
        provider.server.add(text("One warm-up answer."))
        asyncio.run(burst(daemon, sids[:1], [[crop_png(screenshot_png(1), (0, 0, 640, 400))]]))
        idle = status_bytes(daemon.proc.pid, "VmHWM")
        provider.server.add(*[text(f"Screen set {i}: the chart overlaps the terminal.")
                              for i in range(opts.sessions)])
        started = time.perf_counter()
        answers = asyncio.run(burst(daemon, sids, screens))
        took = time.perf_counter() - started
        peak = status_bytes(daemon.proc.pid, "VmHWM")
        now = status_bytes(daemon.proc.pid, "VmRSS")
        ok = sum(1 for a in answers if a.status_code == 200 and "Screen set" in a.json()["text"])
        refused = [f"{a.status_code} {a.text[:200]}" for a in answers if a.status_code != 200]
        with daemon.client() as http:
            stored = sum(s["images"] for s in http.get("/sessions").json()["sessions"]
                         if s["id"] in sids)
    rows = [Row.judged(
        f"{opts.sessions} sessions each post a message with 3 {SCREEN[0]}x{SCREEN[1]} "
        "screenshots (multipart, ?wait=true) at once: answers, and the daemon's peak RSS",
        f"{ok}/{opts.sessions} complete ({stored} images stored) in {took:.1f} s; VmHWM "
        f"{peak / 1e6:,.0f} MB (idle {idle / 1e6:,.0f} MB, after {now / 1e6:,.0f} MB)",
        peak / RSS_TARGET, f"{peak / RSS_TARGET:.2f} of target",
        f"all {opts.sessions} complete, VmHWM ≤ 300 MB",
        ok == opts.sessions and peak <= RSS_TARGET)]
    if refused:
        rows.append(Row("burst: answers that were not 200", "; ".join(refused[:3]), "",
                        "none", "WARN"))
    return rows


# -- 3. history of a session with 100 images ----------------------------------------------


def small_images(count: int) -> list[bytes]:
    """``count`` different 480x300 PNGs: crops of a few desktops at different places."""
    w, h = SMALL
    per = 20
    out = []
    for s in range(-(-count // per)):
        desk = screenshot_png(900 + s)
        for i in range(per):
            x, y = (i % 5) * 280, (i // 5) * 190
            out.append(crop_png(desk, (x, y, x + w, y + h)))
    return out[:count]


def bench_history(daemon: Daemon, provider: Provider, opts: Any) -> Row:
    note("a session with 100 images (10 messages of 10), then its history")
    images = small_images(100)
    sid = session(daemon)
    with daemon.client(timeout=STEP_TIMEOUT) as http:
        for m in range(10):
            provider.server.add(text(f"Noted set {m}."))
            files = [("images[]", (f"shot-{m}-{i}.png", data, "image/png"))
                     for i, data in enumerate(images[m * 10:(m + 1) * 10])]
            sent = http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                             data={"message": f"Set {m} of the screens."}, files=files)
            assert sent.status_code == 200, sent.text
        times, size, refs = [], 0, 0
        for _ in range(opts.history_gets + 1):
            started = time.perf_counter()
            got = http.get(f"/sessions/{sid}/history")
            times.append(time.perf_counter() - started)
            assert got.status_code == 200, got.text
            size = len(got.content)
            refs = got.text.count('"type":"image_ref"') + got.text.count('"type": "image_ref"')
    times = times[1:]  # the first one warms the route
    p50 = med(times)
    worst = max(size / HISTORY_SIZE, p50 / HISTORY_P50)
    return Row.judged(
        f"GET /sessions/{{sid}}/history of a session with 100 images ({refs} image refs in "
        f"it), {opts.history_gets} requests on one connection",
        f"{size / 1000:,.1f} kB, p50 {ms(p50, 2)} (p90 {ms(quantile(times, 0.9), 2)})", worst,
        f"size {size / HISTORY_SIZE:.2f}, p50 {p50 / HISTORY_P50:.2f} of target",
        "≤ 50 kB, p50 ≤ 20 ms", size <= HISTORY_SIZE and p50 <= HISTORY_P50 and refs == 100)


# -- 4. daemon overhead per turn ----------------------------------------------------------


def bench_overhead(root: Path, daemon: Daemon, provider: Provider, opts: Any) -> list[Row]:
    from silica.agent.loop import Agent
    from silica.config import Settings

    note(f"turn overhead: {opts.overhead_turns} turns through the daemon and in process, "
         "interleaved")
    os.environ.update(provider.server.env)
    os.environ["SILICA_HOME"] = str(root / "home-inproc")
    agent = Agent.start(Settings(provider="anthropic"), home=root / "home-inproc",
                        workdir=root)
    sid = session(daemon)
    served, inproc, own_served, own_inproc = [], [], [], []

    async def run() -> None:
        async with daemon.async_client(timeout=httpx2.Timeout(STEP_TIMEOUT)) as http:
            for turn in range(opts.overhead_turns + 3):  # 3 warm-up turns each
                provider.server.add(text("Pong, all good."))
                before = len(provider.own)
                started = time.perf_counter()
                answer = await http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                                         json={"message": f"ping {turn}"})
                took = time.perf_counter() - started
                assert answer.status_code == 200 and answer.json()["text"] == "Pong, all good."
                if turn >= 3:
                    served.append(took)
                    own_served.extend(provider.own[before:])
                provider.server.add(text("Pong, all good."))
                before = len(provider.own)
                started = time.perf_counter()
                reply = await agent.send(f"ping {turn}")
                took = time.perf_counter() - started
                assert reply == "Pong, all good.", reply
                if turn >= 3:
                    inproc.append(took)
                    own_inproc.extend(provider.own[before:])

    asyncio.run(run())
    d, a = med(served), med(inproc)
    overhead = d - a
    return [
        Row.judged("daemon overhead per turn (text reply, no tools): POST ?wait=true wall "
                   "time − await Agent.send(...) in process, same wire server",
                   f"daemon {ms(d)} vs in process {ms(a)} (wire server's own time "
                   f"{ms(med(own_served))} / {ms(med(own_inproc))})",
                   overhead / OVERHEAD_TARGET,
                   f"overhead {ms(overhead)} ({overhead / OVERHEAD_TARGET:.2f} of target; "
                   f"{d / a:.2f}× in process)", "≤ 30 ms", overhead <= OVERHEAD_TARGET),
        Row("the same daemon turns minus the wire server's own time (request in -> last "
            "piece out)", f"{ms(d - med(own_served))}",
            f"in process: {ms(a - med(own_inproc))}", "report only", "INFO"),
    ]


# -- main ---------------------------------------------------------------------------------


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:  # a client worker of the latency runs
        kind, url, sid, count, turns = sys.argv[2:7]
        asyncio.run(worker(kind, url, sid, int(count), int(turns)))
        return 0
    parser = bench_parser(__doc__)
    parser.add_argument("--clients", type=int, default=50, help="clients for the latency runs")
    parser.add_argument("--turns", type=int, default=3, help="measured turns per run")
    parser.add_argument("--chunks", type=int, default=100, help="text pieces per turn")
    parser.add_argument("--gap", type=float, default=0.04, help="seconds between pieces")
    parser.add_argument("--client-procs", type=int, default=5,
                        help="worker processes the latency clients are spread over")
    parser.add_argument("--sessions", type=int, default=20, help="sessions in the burst")
    parser.add_argument("--history-gets", type=int, default=50, help="history requests")
    parser.add_argument("--overhead-turns", type=int, default=30, help="turns per side")
    parser.add_argument("--only", default=",".join(MEASURES),
                        help=f"measures to run, comma-separated: {','.join(MEASURES)}")
    opts = parser.parse_args()
    only = [m for m in opts.only.split(",") if m]
    if not only or set(only) - set(MEASURES):
        parser.error(f"--only takes some of {','.join(MEASURES)}")
    command = "python benchmarks/bench_serve.py " + shlex.join(
        [f"--clients={opts.clients}", f"--turns={opts.turns}", f"--chunks={opts.chunks}",
         f"--gap={opts.gap}", f"--client-procs={opts.client_procs}", f"--sessions={opts.sessions}",
         f"--history-gets={opts.history_gets}", f"--overhead-turns={opts.overhead_turns}"]
        + ([f"--only={','.join(only)}"] if set(only) != set(MEASURES) else []))
    sys.setswitchinterval(0.0005)  # the wire server's thread stamps on time

    started = time.perf_counter()
    rows: list[Row] = []
    from importlib.metadata import version

    console.print(f"silica serve benchmark: {os.cpu_count()} CPUs, Python "
                  f"{sys.version.split()[0]}, " + ", ".join(
                      f"{name} {version(name)}" for name in ("uvicorn", "python-socketio",
                                                             "redis", "pillow")),
                  soft_wrap=True)
    loads = [os.getloadavg()[0]]
    console.print(f"load average at the start: {loads[0]:.2f}")
    with temporary_folder("silica-bench-serve-", opts.keep) as root:
        (root / ".git").mkdir()  # tool discovery stops here
        with provider_server() as provider:
            if "latency" in only:
                with start_daemon(root / "home", env=provider.server.env, cwd=root) as daemon:
                    rows += bench_latency(root, daemon, provider, opts)
            if "burst" in only:
                rows += bench_burst(root, provider, opts)
            if "history" in only or "overhead" in only:
                with start_daemon(root / "home", env=provider.server.env, cwd=root) as daemon:
                    if "history" in only:
                        rows.append(bench_history(daemon, provider, opts))
                    if "overhead" in only:
                        rows += bench_overhead(root, daemon, provider, opts)
    loads.append(os.getloadavg()[0])
    notes = ("latency: from the wire server writing a piece to a client's handler (one clock "
             "for both); the daemon's publish happens in between",
             f"load average (1 min) at the start {loads[0]:.2f}, at the end {loads[1]:.2f}, "
             f"on {os.cpu_count()} CPUs: other work on the machine shows in every figure")
    return report(rows, title="silica serve benchmark", command=command, started=started,
                  strict=opts.strict, notes=notes)


if __name__ == "__main__":
    sys.exit(main())
