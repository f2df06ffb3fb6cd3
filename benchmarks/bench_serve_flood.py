"""Benchmark ``silica serve`` under a flood of connections without the token.

    python benchmarks/bench_serve_flood.py [--connections 2000] [--fds 256]

Starts a real daemon with a token (and RLIMIT_NOFILE ``--fds``), opens ``--connections``
connections from a thread, each sending half a request line and stalling, and meanwhile
sends ``GET /sessions`` with the token every 0.2 s. Prints how long those took (median and
most, each against the time with no flood), how many descriptors the daemon held at the
end, and whether its stderr holds a traceback.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import httpx2  # noqa: E402
from serve_daemon import start_daemon  # noqa: E402

TOKEN = "a-long-benchmark-token-0123456789"


def timed_request(daemon) -> float:
    started = time.monotonic()
    with httpx2.Client(base_url=daemon.url, headers=daemon.headers, timeout=120) as client:
        assert client.get("/sessions").status_code == 200
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--fds", type=int, default=256)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    home = Path(tempfile.mkdtemp()) / "home"
    home.mkdir()
    with start_daemon(home, token=TOKEN, cwd=home.parent, fds=args.fds) as daemon:
        calm = sorted(timed_request(daemon) for _ in range(5))[2]
        held: list[socket.socket] = []
        done = threading.Event()

        def flood() -> None:
            for _ in range(args.connections):
                sock = socket.socket()
                sock.settimeout(5)
                try:
                    sock.connect(("127.0.0.1", daemon.port))
                    sock.sendall(b"GET /sess")
                    held.append(sock)
                except OSError:
                    sock.close()
            done.set()

        threading.Thread(target=flood, daemon=True).start()
        times = []
        while not done.is_set():
            times.append(timed_request(daemon))
            time.sleep(0.2)
        times.sort()
        fds = len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))
        for sock in held:
            sock.close()
    median, most = times[len(times) // 2], times[-1]
    print(f"{args.connections} half-open connections, RLIMIT_NOFILE {args.fds}: "
          f"{len(times)} requests with the token, median {median:.3f} s "
          f"({median / calm:.1f}x calm {calm:.3f} s), most {most:.3f} s "
          f"({most / calm:.1f}x); daemon descriptors at the end: {fds}; "
          f"traceback: {'Traceback' in daemon.stderr()}")


if __name__ == "__main__":
    main()
