"""A throwaway ``redis-server`` for the tests (and benchmarks) that need a real Redis.

    server = RedisServer(tmp_path / "redis").start()   # on 127.0.0.1, a free port
    server.url                                          # redis://127.0.0.1:PORT/0
    server.stop(); server.start()                       # a restart: same port, empty
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis
from serve_daemon import free_port

REDIS_SERVER = "/usr/bin/redis-server"


class RedisServer:
    """A throwaway ``redis-server`` on 127.0.0.1 (no persistence), in a temporary folder."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(self.folder)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with redis.Redis(port=self.port, socket_connect_timeout=1) as client:
                    client.ping()
                return self
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("redis-server did not start: "
                                         + (self.folder / "redis.log").read_text()) from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
