"""A ``silica mcp serve --http`` process for tests: started on a free port, its address read
from what it says on stderr, stopped at the end.

    with mcp_http_process([sys.executable, "-m", "silica", "mcp", "serve", "--http",
                           "--port", "0"], tmp_path / "http.err") as (url, proc):
        ...
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

SERVING = re.compile(r"serving MCP at (http://\S+)")


@contextlib.contextmanager
def mcp_http_process(argv: list[str], err: Path, *, env: dict[str, str] | None = None,
                     stdout: int = subprocess.DEVNULL,
                     timeout: float = 60) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run ``argv`` (an MCP server over HTTP that logs where it serves to stderr, written to
    ``err``); yield its URL and the process, then stop it (TERM, then KILL)."""
    with open(err, "w", encoding="utf-8") as errfile:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=errfile, env=env)
    try:
        deadline = time.monotonic() + timeout
        while not (found := SERVING.search(err.read_text())):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "the server never said where it listens"
            time.sleep(0.1)
        yield found.group(1), proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
