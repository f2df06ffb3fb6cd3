"""Benchmark silica beyond one machine: turns through two fronts on 1 worker against 2.

    python benchmarks/bench_scale.py [--sessions 200] [--repeat 3] [--warmup 16]
                                     [--concurrency N] [--keep]

Real servers, as in the tests: ``postgresql`` (``tests/pg_server.py``), ``redis-server``
(``tests/redis_server.py``) and a process speaking the S3 API (``tests/s3_server.py``), and
a scripted Anthropic Messages API (``tests/wire``) in a process of its own that answers by
what it is asked: a message without a tool result gets a call of the ``picture`` tool, one
with a tool result gets a short text whose piece carries the server's clock.

Each run starts fresh processes: two fronts (``silica serve --redis URL --no-worker``) and
one or two workers (``silica worker``), each with a ``SILICA_HOME`` of its own, sessions in
Postgres and images in the object store. ``--sessions`` sessions are made (not timed), each
with an SSE client on the front it did not post to; after ``--warmup`` turns (not timed) every
session posts one message with a small PNG at once (half to each front; the clients connect
32 at a time and post over 32 keep-alive connections per front, since a front closes the
oldest of more than 64 connections that have not shown the token); each turn calls the
tool, which prints an image, and ends with a text. The 1-worker and 2-worker runs take turns,
``--repeat`` times each; the figures are medians over the runs.

- turns per second: sessions / (the last ``turn_end`` read - the first post), and the ratio
  of 2 workers to 1 (target >= 1.7x), beside the machine's CPU count: every process of the
  run (fronts, workers, the tools they start, Postgres, Redis, the S3 server, the model
  server and this script's clients) shares those CPUs.
- event p99 (target <= 50 ms): for every event every client read, the time it was read
  minus the time it entered Redis, the time part of its stream id (Redis's clock, in whole
  milliseconds; this script's clock is the same wall clock, so each figure is up to 1 ms
  high). Beside it, the same for the final text piece from the moment the model server
  wrote it (``CLOCK_MONOTONIC``, the same in every process): that path holds the worker's
  own work (the SDK's parsing, the agent, its publish), so it bounds the time from the
  worker's publish from above; the worker's publish itself carries no clock to read.
- RSS: the peak (``VmHWM``) of each front and worker at the end of its run; the largest
  over the runs. CPU: the seconds the fronts and the workers (with the tools they ran) used
  during the timed turns, per turn: what a second worker has to share the CPUs with.
- sessions lost (target 0): a session whose client never read its ``turn_end``, or whose
  history (read through the other front) does not hold the finished turn with its tool
  result and image.

The script reports; it asserts nothing, and exits 0 even when a target is missed unless
``--strict`` is given.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    REPO,
    Row,
    bench_parser,
    console,
    load_line,
    med,
    ms,
    note,
    report,
    temporary_folder,
)
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

sys.path.insert(0, str(REPO / "tests"))
import httpx2  # noqa: E402
from bench_serve import STAMP, sse_blocks, stamp_of, status_bytes  # noqa: E402
from serve_daemon import Daemon, daemon_env, picture_tool, start_daemon  # noqa: E402
from wire import text, tool_call  # noqa: E402
from wire.anthropic_wire import render as anthropic_render  # noqa: E402
from wire.server import Wire, WireServer, serve  # noqa: E402

RATIO_TARGET = 1.7
P99_TARGET = 0.050
STEP_TIMEOUT = 900.0  # seconds one run's turns may take before the run gives up
START_TIMEOUT = 120.0
BUCKET, PREFIX = "silica-bench", "scale"
# Connections a client opens at once to one front: a front keeps at most 64 connections that
# have not shown the token yet ([serve] max_pending_connections) and closes the oldest past
# that, so 200 clients connect in batches and post over a pool of keep-alive connections.
OPENING = 32
STREAM_ID = re.compile(r"^(\d+)-\d+$")  # a Redis stream entry id: milliseconds-sequence


def png(i: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A small PNG of its own colour for session ``i``."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, (i * 37 % 256, i * 91 % 256, i * 53 % 256)).save(buf, "PNG")
    return buf.getvalue()


# -- the model: answers by what it is asked -----------------------------------------------


class ModelServer(WireServer):
    """The Anthropic Messages API answering any number of sessions at once, in any order:
    a request whose last message holds a tool result gets the final text (its piece stamped
    with the clock as it is written), any other a call of ``picture``."""

    CALL = text("Drawing it. ") + tool_call("picture")
    ANSWER = text("", chunks=["{" + STAMP.decode() + "}"])

    def __init__(self) -> None:
        super().__init__(self.render, [], paths=("/v1/messages",),
                         stream_type="text/event-stream")
        self.count = 0

    def _next(self, received: Any) -> Wire:
        with self._lock:
            self.count += 1
            n = self.count
        return self.render(self.ANSWER if answered(received.body) else self.CALL,
                           received.body, n)

    @staticmethod
    def render(reply: Any, body: Any, n: int) -> Wire:
        wire = anthropic_render(reply, body, n)
        if wire.stream:
            wire.chunks = Stamped(wire.chunks)
        return wire


class Stamped(list):
    """A reply's chunks, ``STAMP`` replaced by the clock as the piece is written."""

    def __iter__(self):
        for chunk in list.__iter__(self):
            if STAMP in chunk:
                chunk = chunk.replace(STAMP, b"%020d" % time.perf_counter_ns(), 1)
            yield chunk


def answered(body: Any) -> bool:
    """Whether the request's last message holds a tool result."""
    try:
        content = body["messages"][-1]["content"]
    except (KeyError, IndexError, TypeError):
        return False
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def model_server_main() -> None:
    """``--model-server``: serve until stdin closes; the first line printed is the URL."""
    server = ModelServer()
    with serve(server) as srv:
        print(srv.base_url, flush=True)
        sys.stdin.read()


@contextlib.contextmanager
def model_server(root: Path):
    with open(root / "model.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, __file__, "--model-server"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            said = (root / "model.log").read_text()
            raise RuntimeError(f"the model server did not start: {said}")
        yield {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "bench-key",
               "SILICA_PROVIDER": "anthropic"}
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- the engines ----------------------------------------------------------------------------


@contextlib.contextmanager
def engines(root: Path):
    """Postgres, Redis and the S3 server, started once: Redis, Postgres, and the environment
    every silica process of a run gets to use the object store."""
    from pg_server import PostgresServer
    from redis_server import RedisServer
    from s3_server import S3Server

    redis = RedisServer(root / "redis").start()
    pg = s3 = None
    try:
        pg = PostgresServer(root / "pg").start()
        s3 = S3Server(root / "s3", bucket=BUCKET, prefix=PREFIX).start()
        yield redis, pg, {**s3.env, "SILICA_IMAGES": s3.url}
    finally:
        for server in (s3, pg, redis):
            if server is not None:
                getattr(server, "remove", server.stop)()


# -- one run: fresh fronts and workers --------------------------------------------------------


@dataclass
class Worker:
    proc: subprocess.Popen
    log: Path

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while "takes turns from" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"silica worker did not start:\n{self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_worker(root: Path, name: str, env: dict[str, str], concurrency: int | None) -> Worker:
    """``silica worker`` in a home of its own (``concurrency``: its ``[worker] concurrency``,
    in that home's config.toml)."""
    home = root / name / "home"
    home.mkdir(parents=True)
    if concurrency:
        (home / "config.toml").write_text(f"[worker]\nconcurrency = {concurrency}\n")
    log = root / name / "stderr"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "silica", "worker"],
                                cwd=root / name, env=daemon_env(home, env),
                                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    return Worker(proc, log)


@dataclass
class Run:
    workers: int
    seconds: float
    sessions: int
    from_redis: list[float] = field(default_factory=list)  # seconds, every event read
    from_model: list[float] = field(default_factory=list)  # seconds, every final piece read
    lost: list[str] = field(default_factory=list)
    rss: dict[str, int] = field(default_factory=dict)  # name -> VmHWM bytes
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds of the timed turns

    @property
    def rate(self) -> float:
        return self.sessions / self.seconds


class Client:
    """One session's SSE stream, read straight off the socket: what it read, and when."""

    def __init__(self, daemon: Daemon, sid: str) -> None:
        self.daemon, self.sid = daemon, sid
        self.from_redis: list[float] = []
        self.from_model: list[float] = []
        self.ended = asyncio.Event()
        self.ready = asyncio.Event()
        self.names: list[str] = []
        self.task: asyncio.Task | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        host, port = "127.0.0.1", self.daemon.port
        reader, self.writer = await asyncio.open_connection(host, port)
        self.writer.write(f"GET /sessions/{self.sid}/events HTTP/1.1\r\nHost: {host}:{port}"
                          f"\r\nAccept: text/event-stream\r\nAuthorization: Bearer "
                          f"{self.daemon.token}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"SSE refused: {head[:300]!r}")
        self.task = asyncio.ensure_future(self._read(reader))
        await asyncio.wait_for(self.ready.wait(), START_TIMEOUT)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        async for block in sse_blocks(reader):
            now, clock = time.time(), time.perf_counter_ns()
            if block.startswith(b":"):
                self.ready.set()
                continue
            name, data, entry = "", b"", ""
            for line in block.split(b"\n"):
                if line.startswith(b"event:"):
                    name = line[6:].strip().decode()
                elif line.startswith(b"data:"):
                    data = line[5:]
                elif line.startswith(b"id:"):
                    entry = line[3:].strip().decode()
            self.names.append(name)
            if found := STREAM_ID.match(entry):
                self.from_redis.append(now - int(found.group(1)) / 1000)
            if name == "text_delta":
                stamped = stamp_of(str(json.loads(data).get("text", "")))
                if stamped is not None:
                    self.from_model.append((clock - stamped[0]) / 1e9)
            elif name == "turn_end":
                self.ended.set()

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        if self.writer is not None:
            self.writer.close()


def whole(history: dict) -> bool:
    """Whether a session's history holds its finished turn, with the tool's image."""
    turns = history.get("turns") or []
    if not turns or turns[-1].get("status") != "complete":
        return False
    results = [item for m in history.get("messages", []) for item in m.get("content", [])
               if item.get("type") == "tool_result"]
    return any(part.get("type") == "image_ref" for r in results for part in r["content"])


async def drive(fronts: list[Daemon], sids: list[str], images: list[bytes], progress: Any,
                task: Any) -> tuple[float, list[Client], list[str]]:
    """Every session posts its message at once (half to each front) while a client of the
    other front reads its events; the seconds from the first post to the last turn_end, the
    clients, and the sessions whose history is not whole."""
    clients = [Client(fronts[(i + 1) % 2], sid) for i, sid in enumerate(sids)]
    for start in range(0, len(clients), OPENING):
        await asyncio.gather(*(c.open() for c in clients[start:start + OPENING]))
    limits = httpx2.Limits(max_connections=OPENING)
    timeout = httpx2.Timeout(STEP_TIMEOUT)
    posters = [f.async_client(limits=limits, timeout=timeout) for f in fronts]
    try:
        async def post(i: int, sid: str) -> None:
            data = base64.b64encode(images[i]).decode()
            answer = await posters[i % 2].post(f"/sessions/{sid}/messages", json={
                "message": "Draw it.", "images": [{"data": data, "mime": "image/png",
                                                   "name": f"card-{i}.png"}]})
            if answer.status_code != 202:
                raise RuntimeError(f"a message was refused: {answer.status_code} "
                                   f"{answer.text[:300]}")

        async def end(client: Client) -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client.ended.wait(), STEP_TIMEOUT)
            progress.advance(task)

        started = time.time()
        ends = [asyncio.ensure_future(end(c)) for c in clients]
        await asyncio.gather(*(post(i, sid) for i, sid in enumerate(sids)))
        await asyncio.gather(*ends)
        seconds = time.time() - started
        for client in clients:
            await client.close()

        async def check(i: int, sid: str) -> bool:
            answer = await posters[(i + 1) % 2].get(f"/sessions/{sid}/history")
            return answer.status_code == 200 and whole(answer.json())

        checked = await asyncio.gather(*(check(i, sid) for i, sid in enumerate(sids)))
    finally:
        for poster in posters:
            await poster.aclose()
    lost = [sid for sid, c, ok in zip(sids, clients, checked, strict=True)
            if not (ok and c.ended.is_set())]
    return seconds, clients, lost


def one_run(root: Path, workers: int, env: dict[str, str], opts: Any, progress: Any,
            number: int) -> Run:
    """Fresh fronts and ``workers`` workers; the warm-up, then the timed turns."""
    run_root = root / f"run-{number}-{workers}w"
    token = secrets.token_urlsafe(16)
    started: list[Any] = []
    try:
        crew = [start_worker(run_root, f"worker-{i + 1}", env, opts.concurrency)
                for i in range(workers)]
        started.extend(crew)
        fronts = [start_daemon(run_root / f"front-{i + 1}" / "home", env=env, token=token,
                               args=["--no-worker"], cwd=run_root) for i in range(2)]
        started.extend(fronts)
        for w in crew:
            w.wait_ready()

        def make(n: int) -> list[str]:
            with fronts[0].client() as http:
                return [http.post("/sessions", json={}).json()["session_id"] for _ in range(n)]

        if opts.warmup:
            task = progress.add_task(f"run {number}: {workers} worker(s), warm-up",
                                     total=opts.warmup)
            asyncio.run(drive(fronts, make(opts.warmup), [png(i) for i in range(opts.warmup)],
                              progress, task))
            progress.remove_task(task)
        sids = make(opts.sessions)
        task = progress.add_task(f"run {number}: {workers} worker(s)", total=opts.sessions)
        roles = {"front": [f.proc.pid for f in fronts], "worker": [w.proc.pid for w in crew]}
        before = {role: sum(map(cpu_seconds, pids)) for role, pids in roles.items()}
        seconds, clients, lost = asyncio.run(drive(
            fronts, sids, [png(1000 + i) for i in range(opts.sessions)], progress, task))
        progress.remove_task(task)
        run = Run(workers, seconds, opts.sessions, lost=lost)
        run.cpu = {role: sum(map(cpu_seconds, pids)) - before[role]
                   for role, pids in roles.items()}
        for c in clients:
            run.from_redis.extend(c.from_redis)
            run.from_model.extend(c.from_model)
        for i, f in enumerate(fronts):
            run.rss[f"front-{i + 1}"] = status_bytes(f.proc.pid, "VmHWM")
        for i, w in enumerate(crew):
            run.rss[f"worker-{i + 1}"] = status_bytes(w.proc.pid, "VmHWM")
        return run
    finally:
        for process in reversed(started):
            process.stop()


def cpu_seconds(pid: int) -> float:
    """CPU seconds of process ``pid`` and of the children it waited for (a worker's tools)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


# -- the report -----------------------------------------------------------------------------


def quantile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rows_for(runs: list[Run], opts: Any) -> list[Row]:
    one = [r.rate for r in runs if r.workers == 1]
    two = [r.rate for r in runs if r.workers == 2]
    ratio = med(two) / med(one)
    cpus = os.cpu_count()
    rows = [Row.judged(
        f"turns per second, {opts.sessions} concurrent sessions (a tool call and an image "
        f"each) through 2 fronts: 1 worker vs 2 workers ({cpus} CPUs shared by everything)",
        f"1 worker {med(one):.2f}/s (min {min(one):.2f}, max {max(one):.2f}); 2 workers "
        f"{med(two):.2f}/s (min {min(two):.2f}, max {max(two):.2f}); {len(one)} runs each",
        ratio, f"{ratio:.2f}x on {cpus} CPUs", f">= {RATIO_TARGET}x", ratio >= RATIO_TARGET)]
    from_redis = [x for r in runs for x in r.from_redis]
    if from_redis:
        p99 = quantile(from_redis, 0.99)
        rows.append(Row.judged(
            "event p99: entered Redis (its stream id's time) -> read by a client, every "
            "event of every run",
            f"p99 {ms(p99)}, p50 {ms(quantile(from_redis, 0.5))}, max {ms(max(from_redis))} "
            f"over {len(from_redis):,} events", p99 / P99_TARGET,
            f"{p99 / P99_TARGET:.2f} of target", "<= 50 ms", p99 <= P99_TARGET))
    else:
        rows.append(Row("event p99: entered Redis -> read by a client",
                        "the events carry no Redis stream id", "", "<= 50 ms",
                        "NOT MEASURED"))
    from_model = [x for r in runs for x in r.from_model]
    if from_model:
        rows.append(Row(
            "the final text piece: written by the model server -> read by a client (holds "
            "the worker's SDK parsing, agent and publish)",
            f"p99 {ms(quantile(from_model, 0.99))}, p50 {ms(quantile(from_model, 0.5))} over "
            f"{len(from_model):,} pieces", "", "report only", "INFO"))
    for role in ("front", "worker"):
        peaks = [v for r in runs for k, v in r.rss.items() if k.startswith(role)]
        by_count = "; ".join(
            f"{n} worker(s): " + ", ".join(
                f"{k} {max(r.rss[k] for r in runs if r.workers == n and k in r.rss) / 1e6:,.0f}"
                " MB" for k in sorted({k for r in runs if r.workers == n for k in r.rss
                                       if k.startswith(role)}))
            for n in (1, 2))
        rows.append(Row(f"peak RSS (VmHWM) of each {role}, the largest over the runs",
                        by_count, f"max {max(peaks) / 1e6:,.0f} MB", "report only", "INFO"))
    def cpu_per_turn(role: str, n: int) -> str:
        return f"{med([r.cpu[role] / r.sessions for r in runs if r.workers == n]) * 1000:.0f} ms"

    per_turn = "; ".join(f"{n} worker(s): fronts {cpu_per_turn('front', n)}, workers and "
                         f"their tools {cpu_per_turn('worker', n)}" for n in (1, 2))
    rows.append(Row("CPU time per turn during the timed turns (median over the runs)", per_turn,
                    "", "report only", "INFO"))
    lost = sum(len(r.lost) for r in runs)
    total = sum(r.sessions for r in runs)
    rows.append(Row.judged(
        "sessions lost: no turn_end read, or the history lacks the finished turn with its "
        "tool result and image",
        f"{lost} of {total} over {len(runs)} runs"
        + (f" (e.g. {next(s for r in runs for s in r.lost)})" if lost else ""),
        float(lost), str(lost), "0", lost == 0))
    return rows


def main() -> int:
    if "--model-server" in sys.argv:
        model_server_main()
        return 0
    parser = bench_parser(__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=16,
                        help="turns before each timed run, not timed")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="[worker] concurrency of each worker (default: silica's)")
    opts = parser.parse_args()
    began = time.perf_counter()
    console.print(f"bench_scale: {load_line()}")
    runs: list[Run] = []
    with temporary_folder("silica-bench-scale-", opts.keep) as root:
        picture_tool(root / "tools", png(7, (320, 200)))
        with engines(root) as (redis, pg, stores), model_server(root) as model:
            env = {**stores, **model, "SILICA_SERVE_REDIS": redis.url,
                   "SILICA_TOOLS_DIR": str(root / "tools")}
            note(f"{opts.repeat} rounds of a 1-worker and a 2-worker run, in turn, each "
                 f"{opts.sessions} sessions after {opts.warmup} warm-up turns")
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=console, transient=True) as progress:
                for r in range(opts.repeat):
                    for workers in ((1, 2) if r % 2 == 0 else (2, 1)):
                        # a database of its own: the sessions of earlier runs would slow
                        # this run's GET /sessions (how its fronts are seen to answer)
                        database = pg.new_database(f"run{len(runs) + 1}")
                        run = one_run(root, workers, {**env, "SILICA_DATABASE": database},
                                      opts, progress, len(runs) + 1)
                        runs.append(run)
                        progress.console.print(
                            f"run {len(runs)}: {workers} worker(s): {run.rate:.2f} turns/s "
                            f"({run.seconds:.1f} s), {len(run.lost)} lost")
                        redis_flush(redis.url)
    command = "python benchmarks/bench_scale.py " + " ".join(sys.argv[1:])
    return report(rows_for(runs, opts), title="silica beyond one machine", command=command,
                  started=began, strict=opts.strict)


def redis_flush(url: str) -> None:
    """Between runs: nothing of one run's streams is left for the next."""
    import redis

    with redis.Redis.from_url(url) as client:
        client.flushall()


if __name__ == "__main__":
    sys.exit(main())
