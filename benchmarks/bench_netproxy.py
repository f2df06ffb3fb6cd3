"""Benchmark what silica's network proxy costs a granted tool: time per call, per request and
per byte, and the memory 64 stalled tunnels take.

    python benchmarks/bench_netproxy.py [--repeat 300] [--megabytes 256] [--strict]

The proxy (``silica.security.netproxy.NetworkProxy``, granted ``127.0.0.1``) runs alone in a
child process, as it runs on silica's loop apart from the tool; the hosts (an HTTP server
answering ``hello``, an echo server, a source sending as fast as it may) run on a loop in a
thread of this process, and the clients are plain blocking sockets, as a tool's are. Each
figure compares the same work straight to the host over TCP with the work through the proxy's
Unix socket; the sides run interleaved, figures are medians. Memory is the child's peak RSS
(``VmHWM``) after 64 tunnels from the source to clients that read nothing, less its peak once
listening.

The script reports; it is not a test: it exits 0 even when a target is missed, unless
``--strict`` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import Row, bench_parser, console, med, ms, note, report, temporary_folder

TARGET_CALL_MS = 2.0      # start + close of a proxy, once per granted call
TARGET_REQUEST_MS = 2.0   # added to one plain-HTTP request
TARGET_TUNNEL_MS = 2.0    # added to opening a tunnel and one round trip
TARGET_MEMORY_MIB = 48    # 64 stalled tunnels

CHILD = """
import asyncio, sys
from silica.security.netproxy import HostRules, NetworkProxy

async def main():
    async with NetworkProxy(HostRules.parse(["127.0.0.1"]), sys.argv[1], tool="bench"):
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")


class Hosts:
    """The granted hosts, on a loop in a thread: ``http``, ``echo`` and ``source`` ports."""

    def __init__(self, source_bytes: int) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.source_bytes = source_bytes
        self.http = self._serve(self._http)
        self.echo = self._serve(self._echo)
        self.source = self._serve(self._source)

    def _serve(self, handler) -> int:
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(handler, "127.0.0.1", 0, backlog=256), self.loop).result()
        return server.sockets[0].getsockname()[1]

    async def _http(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        await writer.drain()
        writer.close()

    async def _echo(self, reader, writer):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        writer.close()

    async def _source(self, reader, writer):
        chunk, sent = b"x" * 65536, 0
        with contextlib.suppress(OSError):  # a stalled client is closed at the end
            while sent < self.source_bytes:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
        writer.close()


def tcp(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def unix(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(30)
    sock.connect(str(path))
    return sock


def read_all(sock: socket.socket) -> int:
    total = 0
    while chunk := sock.recv(262144):
        total += len(chunk)
    return total


def through(path: Path, port: int) -> socket.socket:
    sock = unix(path)
    sock.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"\r\n\r\n"):
        answer += sock.recv(1)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    return sock


def get_direct(port: int) -> None:
    with tcp(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        read_all(sock)


def get_proxied(path: Path, port: int) -> None:
    with unix(path) as sock:
        sock.sendall(f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode())
        read_all(sock)


def round_trip(sock: socket.socket) -> None:
    with sock:
        sock.sendall(b"x")
        sock.recv(1)


def timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def start_close_seconds(folder: Path, repeat: int) -> float:
    from silica.security.netproxy import HostRules, NetworkProxy

    async def cycles() -> list[float]:
        rules, times = HostRules.parse(["api.example.org"]), []
        for n in range(repeat):
            started = time.perf_counter()
            async with NetworkProxy(rules, folder / f"c{n}.sock", tool="bench"):
                pass
            times.append(time.perf_counter() - started)
        return times

    return med(asyncio.run(cycles()))


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=300, help="requests per figure (median)")
    parser.add_argument("--megabytes", type=int, default=256, help="MiB sent through a tunnel")
    opts = parser.parse_args()
    command = "python benchmarks/bench_netproxy.py " + shlex.join(
        [f"--repeat={opts.repeat}", f"--megabytes={opts.megabytes}"])
    started = time.perf_counter()
    rows: list[Row] = []
    with temporary_folder("silica-bench-netproxy-", opts.keep) as root:
        path = root / "proxy.sock"
        hosts = Hosts(opts.megabytes * 1024 * 1024)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            idle_kib = peak_kib(child.pid)
            console.print(f"network proxy benchmark: repeat {opts.repeat}, "
                          f"{opts.megabytes} MiB through a tunnel")

            note("start and close of a proxy (per granted call), in process")
            call = start_close_seconds(root, opts.repeat)
            rows.append(Row.judged("a proxy's start + close", ms(call, 2), call * 1000,
                                   f"{call * 1000:.2f} ms", f"≤ {TARGET_CALL_MS:g} ms",
                                   call * 1000 <= TARGET_CALL_MS))

            note("plain HTTP requests and tunnels, interleaved")
            times: dict[str, list[float]] = {k: [] for k in ("get", "pget", "tun", "ptun")}
            for _ in range(opts.repeat):
                times["get"].append(timed(get_direct, hosts.http))
                times["pget"].append(timed(get_proxied, path, hosts.http))
                times["tun"].append(timed(lambda: round_trip(tcp(hosts.echo))))
                times["ptun"].append(timed(lambda: round_trip(through(path, hosts.echo))))
            for name, direct, proxied, target in (
                    ("a plain-HTTP GET", "get", "pget", TARGET_REQUEST_MS),
                    ("open a tunnel + one round trip", "tun", "ptun", TARGET_TUNNEL_MS)):
                d, p = med(times[direct]), med(times[proxied])
                added = (p - d) * 1000
                rows.append(Row.judged(f"{name}: through the proxy vs straight",
                                       f"{ms(p, 2)} vs {ms(d, 2)}", added, f"+{added:.2f} ms",
                                       f"≤ +{target:g} ms", added <= target))

            note(f"{opts.megabytes} MiB from the source, straight and through a tunnel")
            straight = timed(lambda: read_all(tcp(hosts.source)))
            tunneled = timed(lambda: read_all(through(path, hosts.source)))
            mib = opts.megabytes
            rows.append(Row(f"{mib} MiB read: through a tunnel vs straight",
                            f"{mib / tunneled:.0f} MiB/s vs {mib / straight:.0f} MiB/s",
                            f"{straight / tunneled:.2f}×", "(report only)", "INFO",
                            straight / tunneled))

            note("64 tunnels from the source to clients that read nothing")
            stalled = [through(path, hosts.source) for _ in range(64)]
            time.sleep(2)  # the source fills every buffer it can, then waits
            grown = (peak_kib(child.pid) - idle_kib) / 1024
            rows.append(Row.judged("the proxy's peak memory with 64 stalled tunnels",
                                   f"+{grown:.1f} MiB over {idle_kib / 1024:.1f} MiB idle", grown,
                                   f"+{grown:.1f} MiB", f"≤ +{TARGET_MEMORY_MIB} MiB",
                                   grown <= TARGET_MEMORY_MIB))
            for sock in stalled:
                sock.close()
        finally:
            child.stdin.close()  # type: ignore[union-attr]
            child.wait(30)
    return report(rows, title="network proxy benchmark", command=command, started=started,
                  strict=opts.strict)


if __name__ == "__main__":
    sys.exit(main())
