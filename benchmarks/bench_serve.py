"""Benchmark ``silica serve``: event latency, a burst of screenshots, history, turn overhead.

    python benchmarks/bench_serve.py [--clients 20] [--short-turns 30] [--short-pieces 4]
                                     [--turns 2] [--chunks 50] [--gap 0.04]
                                     [--client-procs 5] [--sessions 20] [--history-gets 50]
                                     [--overhead-turns 30] [--only latency,burst,history,overhead]
                                     [--redis] [--strict] [--keep]

Real daemons (``python -m silica serve``, started by ``tests/serve_daemon.py``) talk to a
local Anthropic Messages API (``tests/wire``) run in this process.

1. Event latency. As the wire server writes a text piece it puts its clock
   (``time.perf_counter_ns``, CLOCK_MONOTONIC: the same in every process) into the text; a
   client's figure for a piece is that clock when its ``text_delta`` handler runs minus the
   stamp: the daemon's whole path (the SDK's stream parsing, the agent, its end of turn, the
   bus, the transport) is inside. Clients are spread over ``--client-procs`` worker processes
   per session, as separate programs would be: python-socketio's ``AsyncClient`` (websocket),
   or an SSE reader of ``GET /sessions/{sid}/events`` straight off the socket.
   The judged rows: the LAST delta of a short reply (``--short-pieces`` pieces ``--gap``
   apart, then the end of the stream at once: the moment a person sees the reply complete),
   ``--clients`` Socket.IO clients on one session, ``--clients`` SSE clients on another and
   ``--clients`` AI SDK UI stream clients on a third, the three sessions' turns interleaved,
   a warm-up turn each then ``--short-turns`` each; p50 with min and max over every last
   delta on every client, and the UI stream's p50 against SSE's. A UI stream turn is posted
   to ``POST /api/chat`` (its stream read to the end by the poster) and each client reads it
   with ``GET /api/chat/{sid}/stream`` (a keep-alive connection, one request per turn): the
   wire server holds the reply's first piece until every client has the stream, as the
   other transports' clients are subscribed before a turn begins. Report only: the pieces of
   ``--turns`` long replies of ``--chunks`` pieces (every piece but the last), per transport
   (Socket.IO and SSE).
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
import json
import os
import shlex
import subprocess
import sys
import threading
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
    crop_png,
    interleaved,
    load_line,
    med,
    ms,
    note,
    report,
    screenshot_png,
    spread,
    temporary_folder,
)

sys.path.insert(0, str(REPO / "tests"))
import httpx2  # noqa: E402
import socketio  # noqa: E402
from serve_daemon import Daemon, start_daemon  # noqa: E402
from wire import text  # noqa: E402
from wire.anthropic_wire import render as anthropic_render  # noqa: E402
from wire.server import Wire, WireServer, serve  # noqa: E402

LATENCY_P50 = 0.005  # the last delta's p50
UI_VS_SSE = 1.2  # the UI stream's last-delta p50 against SSE's
RSS_TARGET = 300_000_000
HISTORY_SIZE, HISTORY_P50 = 50_000, 0.020
OVERHEAD_TARGET = 0.030
SCREEN = (1600, 1000)
SMALL = (480, 300)
STAMP = b"@" * 20  # replaced by the wire server's clock as it writes the piece
MEASURES = ("latency", "burst", "history", "overhead")
TOKEN = os.environ.get("SILICA_SERVE_TOKEN", "")  # a client worker's: the daemon's token
STEP_TIMEOUT = 600.0  # seconds any one measured step may take before the run gives up


# -- the provider: a wire server that stamps its pieces ----------------------------------


@dataclass
class Provider:
    """The wire server and what it measured: ``own`` holds, per streamed reply, the seconds
    from the request's arrival to its last piece."""

    server: Any = None  # the WireServer
    gap: float = 0.0
    own: list[float] = field(default_factory=list)
    hold: threading.Event | None = None  # set: a reply's first piece may go


class StampedChunks(list):
    """A reply's chunks: a piece holding ``STAMP`` is sent ``gap`` seconds after the one
    before, with the clock of that moment in place of the stamp."""

    def __init__(self, chunks: list[bytes], provider: Provider) -> None:
        super().__init__(chunks)
        self.provider, self.started = provider, time.perf_counter()

    def __iter__(self):
        held = self.provider.hold
        for chunk in list.__iter__(self):
            if STAMP in chunk:
                if held is not None:
                    held.wait(STEP_TIMEOUT)
                    held = None
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


def stamped_reply(pieces: int, *, last: bool = False):
    """A reply of ``pieces`` stamped pieces; with ``last``, the final one is marked as the
    last delta (``{stamp}`` rather than ``<stamp>``)."""
    marks = ["<>"] * pieces
    if last:
        marks[-1] = "{}"
    return text("", chunks=[f"{a}{STAMP.decode()}{b}" for a, b in marks])


def stamp_of(piece: str) -> tuple[int, bool] | None:
    """``(stamp, is the last delta)`` of a stamped piece, ``None`` for any other text."""
    if len(piece) != 22 or not piece[1:21].isdigit():
        return None
    return int(piece[1:21]), piece[0] == "{"


# -- clients: each worker process holds some, as separate programs would -------------------


class Listener:
    """One client's view after the warm-up turn: latencies of stamped pieces (``last``: of
    the pieces marked as a reply's last delta), and the turns ended."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.last: list[float] = []
        self.ends = 0

    def heard(self, event: str, data: Any) -> None:
        now = time.perf_counter_ns()  # CLOCK_MONOTONIC: the same clock in every process
        if event == "text_delta" and isinstance(data, dict):
            stamped = stamp_of(str(data.get("text", "")))
            if stamped is not None:
                sent, last = stamped
                if self.ends >= 1:
                    (self.last if last else self.latencies).append((now - sent) / 1e9)
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
                                  auth={"token": TOKEN} if TOKEN else None, wait_timeout=60)
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
        auth = f"\r\nAuthorization: Bearer {TOKEN}" if TOKEN else ""
        self.writer.write(f"GET /sessions/{self.sid}/events HTTP/1.1\r\nHost: {host}:{port}"
                          f"\r\nAccept: text/event-stream{auth}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0], head
        assert b"transfer-encoding: chunked" in head.lower(), head
        self.task = asyncio.ensure_future(self._read(reader))
        await asyncio.wait_for(self.ready.wait(), 60)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        async for block in sse_blocks(reader):
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


async def sse_blocks(reader: asyncio.StreamReader):
    """The server-sent events of a chunked HTTP/1.1 body, as they arrive, until it ends."""
    pending = b""
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return
        pending += chunk[:-2]
        *blocks, pending = pending.split(b"\n\n")
        for block in blocks:
            yield block


class UiClient(Listener):
    """An AI SDK UI stream client: each turn, ``GET /api/chat/{sid}/stream`` on a connection
    of its own (a connection idle between turns is closed by the daemon's header timeout),
    read straight off the socket like ``SseClient``."""

    def __init__(self, url: str, sid: str) -> None:
        super().__init__()
        self.url, self.sid = url, sid
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.host, self.port = self.url.removeprefix("http://").split(":")
        auth = f"\r\nAuthorization: Bearer {TOKEN}" if TOKEN else ""
        self.request = (f"GET /api/chat/{self.sid}/stream HTTP/1.1\r\nHost: {self.host}:"
                        f"{self.port}\r\nAccept: text/event-stream{auth}\r\n\r\n").encode()

    async def turn(self, connected: asyncio.Event) -> None:
        """Read the running turn's stream to its end; ``connected`` once it has begun."""
        await self.close()
        reader, self.writer = await asyncio.open_connection(self.host, int(self.port))
        self.writer.write(self.request)
        head = await reader.readuntil(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0], head
        async for block in sse_blocks(reader):
            connected.set()
            if not block.startswith(b"data: {"):
                continue
            chunk = json.loads(block[6:])
            if chunk["type"] == "text-delta":
                self.heard("text_delta", {"text": chunk["delta"]})
            elif chunk["type"] == "finish":
                self.heard("turn_end", chunk)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def ui_turns(listeners: list[UiClient], turns: int) -> None:
    """Each turn: wait for ``go`` on stdin, have every client read the turn's stream, say
    ``in`` once every one has begun, and wait until every one has read it to the end."""
    loop = asyncio.get_running_loop()
    for _ in range(turns):
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "go":
            raise RuntimeError(f"expected go, got {line!r}")
        begun = [asyncio.Event() for _ in listeners]
        reads = [asyncio.ensure_future(x.turn(b)) for x, b in zip(listeners, begun, strict=True)]
        await asyncio.wait_for(asyncio.gather(*(b.wait() for b in begun)), STEP_TIMEOUT)
        print("in", flush=True)
        await asyncio.wait_for(asyncio.gather(*reads), STEP_TIMEOUT)


async def until(predicate, what: str, timeout: float = STEP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        await asyncio.sleep(0.01)


async def worker(kind: str, url: str, sid: str, count: int, turns: int) -> None:
    """Hold ``count`` clients of the session; print ``ready``, then once each has seen
    ``turns`` turns end, one JSON line: the latencies (of pieces, and of last deltas) and the
    CPU time it took meanwhile."""
    kinds = {"socket.io": SioClient, "sse": SseClient, "uistream": UiClient}
    listeners: list[Any] = [kinds[kind](url, sid) for _ in range(count)]
    for listener in listeners:
        await listener.open()
    print("ready", flush=True)
    cpu = time.process_time()
    if kind == "uistream":
        await ui_turns(listeners, turns)
    await until(lambda: all(x.ends >= turns for x in listeners), f"{turns} turns")
    for listener in listeners:
        await listener.close()
    print(json.dumps({"latencies": [x.latencies for x in listeners],
                      "last": [x.last for x in listeners],
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


class Workers:
    """``clients`` clients of session ``sid`` in up to ``--client-procs`` worker processes,
    each waiting for ``turns`` turns to end."""

    def __init__(self, root: Path, daemon: Daemon, kind: str, sid: str, clients: int,
                 turns: int, opts: Any) -> None:
        self.kind, self.clients = kind, clients
        procs = max(1, min(clients, opts.client_procs))
        shares = [clients // procs + (i < clients % procs) for i in range(procs)]
        self.procs: list[subprocess.Popen] = []
        for i, share in enumerate(shares):
            self.log = root / f"worker-{kind}-{sid}-{i}.log"
            with open(self.log, "w") as log:
                self.procs.append(subprocess.Popen(
                    [sys.executable, __file__, "--worker", kind, daemon.url, sid, str(share),
                     str(turns)], stdout=subprocess.PIPE, stderr=log, text=True,
                    stdin=subprocess.PIPE if kind == "uistream" else None,
                    env={**os.environ, "SILICA_SERVE_TOKEN": daemon.token or ""}))

    def ready(self) -> None:
        for w in self.procs:
            assert w.stdout is not None
            if w.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a {self.kind} client worker failed; see {self.log}")

    def go(self) -> None:
        """UI stream workers: read this turn's stream; back once every client has begun."""
        for w in self.procs:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        for i, w in enumerate(self.procs):
            assert w.stdout is not None
            said = w.stdout.readline().strip()
            if said != "in":
                log = self.log.with_name(f"{self.log.stem[:-1]}{i}.log")
                raise RuntimeError(f"a {self.kind} client worker said {said[:200]!r}, not in: "
                                   f"{log.read_text()[-2000:] if log.exists() else ''}")

    def heard(self) -> list[dict]:
        """What each worker heard, once they are done."""
        return [json.loads(w.communicate(timeout=STEP_TIMEOUT)[0].splitlines()[-1])
                for w in self.procs]

    def kill(self) -> None:
        for w in self.procs:
            if w.poll() is None:
                w.kill()


def post_turn(http: Any, provider: Provider, sid: str, reply: Any, what: str) -> None:
    provider.server.add(reply)
    sent = http.post(f"/sessions/{sid}/messages", params={"wait": "true"},
                     json={"message": what})
    assert sent.status_code == 200, sent.text


def post_chat_turn(http: Any, provider: Provider, sid: str, reply: Any, what: str,
                   workers: Workers) -> None:
    """A turn through ``POST /api/chat``, its stream read to the end; the workers' clients
    read it too, the reply held until they all have it."""
    provider.server.add(reply)
    provider.hold = threading.Event()
    try:
        with http.stream("POST", "/api/chat", json={
                "id": sid, "trigger": "submit-message",
                "messages": [{"id": "m", "role": "user",
                              "parts": [{"type": "text", "text": what}]}]}) as sent:
            assert sent.status_code == 200, sent.read()
            workers.go()
            provider.hold.set()
            body = sent.read()
        assert body.endswith(b"data: [DONE]\n\n"), body[-300:]
    finally:
        provider.hold.set()
        provider.hold = None


def latency_run(root: Path, daemon: Daemon, provider: Provider, kind: str, clients: int,
                opts: Any) -> LatencyRun:
    """``clients`` clients of one session, in up to ``--client-procs`` worker processes, hear
    a warm-up turn and ``--turns`` stamped turns of ``--chunks`` pieces."""
    sid = session(daemon)
    workers = Workers(root, daemon, kind, sid, clients, opts.turns + 1, opts)
    try:
        workers.ready()
        provider.gap = opts.gap
        wall = daemon_cpu = 0.0
        with daemon.client(timeout=STEP_TIMEOUT) as http:
            for turn in range(opts.turns + 1):  # the first is a warm-up
                if turn == 1:
                    wall, daemon_cpu = time.perf_counter(), cpu_seconds(daemon.proc.pid)
                post_turn(http, provider, sid, stamped_reply(opts.chunks),
                          f"stream {opts.chunks} pieces")
        wall = time.perf_counter() - wall
        daemon_cpu = cpu_seconds(daemon.proc.pid) - daemon_cpu
        heard = workers.heard()
    finally:
        provider.gap = 0.0
        workers.kill()
    latencies = [x for one in heard for client in one["latencies"] for x in client]
    return LatencyRun(latencies, clients * opts.turns * opts.chunks - len(latencies), wall,
                      daemon_cpu, sum(one["cpu"] for one in heard))


def last_delta_run(root: Path, daemon: Daemon, provider: Provider,
                   opts: Any) -> dict[str, LatencyRun]:
    """Per transport, ``--clients`` clients of its own session; the two sessions take turns
    (``interleaved``): a warm-up turn each, then ``--short-turns`` short replies each, of
    ``--short-pieces`` pieces whose last is marked. The latencies are of the last deltas."""
    kinds = ("socket.io", "sse", "uistream")
    sids = {kind: session(daemon) for kind in kinds}
    groups: dict[str, Workers] = {}
    try:
        for kind in kinds:  # one transport's clients connect at a time
            groups[kind] = Workers(root, daemon, kind, sids[kind], opts.clients,
                                   opts.short_turns + 1, opts)
            groups[kind].ready()
        provider.gap = opts.gap
        with daemon.client(timeout=STEP_TIMEOUT) as http:
            def turn(kind: str) -> float:
                reply = stamped_reply(opts.short_pieces, last=True)
                if kind == "uistream":
                    post_chat_turn(http, provider, sids[kind], reply, "a short one",
                                   groups[kind])
                else:
                    post_turn(http, provider, sids[kind], reply, "a short one")
                return 0.0

            for kind in kinds:  # the warm-up turns
                turn(kind)
            started, cpu = time.perf_counter(), cpu_seconds(daemon.proc.pid)
            interleaved(opts.short_turns, **{k.replace(".", ""): lambda k=k: turn(k)
                                             for k in kinds})
            wall = time.perf_counter() - started
            daemon_cpu = cpu_seconds(daemon.proc.pid) - cpu
        heard = {kind: group.heard() for kind, group in groups.items()}
    finally:
        provider.gap = 0.0
        for group in groups.values():
            group.kill()
    runs = {}
    for kind in kinds:
        last = [x for one in heard[kind] for client in one["last"] for x in client]
        runs[kind] = LatencyRun(last, opts.clients * opts.short_turns - len(last), wall,
                                daemon_cpu, sum(one["cpu"] for one in heard[kind]))
    return runs


def quantile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_latency(root: Path, daemon: Daemon, provider: Provider, opts: Any) -> list[Row]:
    note(f"last-delta latency: {opts.clients} Socket.IO, {opts.clients} SSE and "
         f"{opts.clients} UI stream clients, {opts.short_turns} short replies "
         f"({opts.short_pieces} pieces {ms(opts.gap, 0)} apart) each, interleaved")
    rows = []
    short = last_delta_run(root, daemon, provider, opts)
    labels = {"socket.io": "Socket.IO (websocket)", "sse": "SSE",
              "uistream": "AI SDK UI stream (GET /api/chat/{sid}/stream)"}
    for kind, run in short.items():
        label = labels[kind]
        p50 = quantile(run.latencies, 0.5)
        rows.append(Row.judged(
            f"last delta of a short reply, {opts.clients} {label} clients of one session: "
            "the wire server writes the reply's last text piece -> a client's text_delta "
            "handler has it",
            f"p50 {spread(run.latencies, lambda x: ms(x, 2))}, p90 "
            f"{ms(quantile(run.latencies, 0.9), 2)} ({len(run.latencies):,} receipts)",
            p50 / LATENCY_P50, f"{p50 / LATENCY_P50:.2f} of target", "p50 ≤ 5 ms",
            p50 <= LATENCY_P50))
        if run.missing:
            rows.append(Row(f"{label}: last deltas that never reached a client",
                            f"{run.missing:,}", "", "none", "WARN"))
    ui, sse = (quantile(short[k].latencies, 0.5) for k in ("uistream", "sse"))
    rows.append(Row.judged(
        f"last delta, the same short reply, {opts.clients} clients each: AI SDK UI stream "
        "(/api/chat) against SSE (/sessions/{sid}/events)",
        f"p50 {ms(ui, 2)} vs {ms(sse, 2)}", ui / sse / UI_VS_SSE,
        f"{ui / sse:.2f}× SSE", f"≤ {UI_VS_SSE}× SSE", ui <= UI_VS_SSE * sse))
    run = next(iter(short.values()))
    turns = len(short) * opts.short_turns
    rows.append(Row(f"the daemon's CPU during the {turns} short turns "
                    f"({run.wall:.1f} s)", f"{run.daemon_cpu:.2f} s "
                    f"({run.daemon_cpu / run.wall:.0%} of a core)",
                    f"{run.daemon_cpu / turns * 1e3:.1f} ms per turn",
                    "report only", "INFO"))
    for kind in ("socket.io", "sse"):
        label = "Socket.IO (websocket)" if kind == "socket.io" else "SSE"
        note(f"mid-reply latency: {opts.clients} {kind} clients; {opts.turns} turns of "
             f"{opts.chunks} pieces {ms(opts.gap, 0)} apart")
        run = latency_run(root, daemon, provider, kind, opts.clients, opts)
        latencies = run.latencies
        receipts = max(1, len(latencies))
        rows.append(Row(
            f"pieces in the middle of a long reply, {opts.clients} {label} clients: the "
            "same clock, every piece but the last",
            f"p50 {spread(latencies, lambda x: ms(x, 2))}, p99 "
            f"{ms(quantile(latencies, 0.99), 2)} ({len(latencies):,} receipts); daemon CPU "
            f"{run.daemon_cpu:.1f} s in {run.wall:.1f} s",
            f"{run.daemon_cpu / receipts * 1e6:,.0f} µs of daemon CPU per receipt",
            "report only", "INFO"))
        if run.missing:
            rows.append(Row(f"{label}: text pieces that never reached a client",
                            f"{run.missing:,}", "", "none", "WARN"))
    return rows


# -- 2. a burst of screenshot messages ----------------------------------------------------


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
    parser.add_argument("--clients", type=int, default=20,
                        help="clients per transport in the latency runs")
    parser.add_argument("--short-turns", type=int, default=30,
                        help="measured short replies per transport (last-delta row)")
    parser.add_argument("--short-pieces", type=int, default=4,
                        help="text pieces of a short reply")
    parser.add_argument("--turns", type=int, default=2, help="measured long replies per "
                        "transport (mid-reply row)")
    parser.add_argument("--chunks", type=int, default=50, help="text pieces of a long reply")
    parser.add_argument("--gap", type=float, default=0.04, help="seconds between pieces")
    parser.add_argument("--client-procs", type=int, default=5,
                        help="worker processes the latency clients are spread over")
    parser.add_argument("--sessions", type=int, default=20, help="sessions in the burst")
    parser.add_argument("--history-gets", type=int, default=50, help="history requests")
    parser.add_argument("--overhead-turns", type=int, default=30, help="turns per side")
    parser.add_argument("--redis", action="store_true",
                        help="the latency daemon shares its events through a local "
                        "redis-server (per-session streams) instead of in process")
    parser.add_argument("--only", default=",".join(MEASURES),
                        help=f"measures to run, comma-separated: {','.join(MEASURES)}")
    opts = parser.parse_args()
    only = [m for m in opts.only.split(",") if m]
    if not only or set(only) - set(MEASURES):
        parser.error(f"--only takes some of {','.join(MEASURES)}")
    command = "python benchmarks/bench_serve.py " + shlex.join(
        [f"--clients={opts.clients}", f"--short-turns={opts.short_turns}",
         f"--short-pieces={opts.short_pieces}", f"--turns={opts.turns}",
         f"--chunks={opts.chunks}",
         f"--gap={opts.gap}", f"--client-procs={opts.client_procs}", f"--sessions={opts.sessions}",
         f"--history-gets={opts.history_gets}", f"--overhead-turns={opts.overhead_turns}"]
        + ([f"--only={','.join(only)}"] if set(only) != set(MEASURES) else [])
        + (["--redis"] if opts.redis else []))
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
    console.print(load_line())
    with temporary_folder("silica-bench-serve-", opts.keep) as root:
        (root / ".git").mkdir()  # tool discovery stops here
        with provider_server() as provider:
            if "latency" in only:
                with contextlib.ExitStack() as stack:
                    args: list[str] = []
                    if opts.redis:  # events through Redis: appended, read back, delivered
                        from redis_server import RedisServer
                        server = RedisServer(root / "redis").start()
                        stack.callback(server.stop)
                        args = ["--redis", server.url]
                    daemon = stack.enter_context(start_daemon(
                        root / "home", env=provider.server.env, cwd=root, args=args))
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
             "for both); the daemon's whole path (SDK, agent, bus, transport) is in between",
             f"load average (1 min) at the start {loads[0]:.2f}, at the end {loads[1]:.2f}, "
             f"on {os.cpu_count()} CPUs: other work on the machine shows in every figure")
    return report(rows, title="silica serve benchmark", command=command, started=started,
                  strict=opts.strict, notes=notes)


if __name__ == "__main__":
    sys.exit(main())
