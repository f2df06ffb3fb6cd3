"""How long ``silica ask`` takes to end once its work is done.

    python benchmarks/bench_exit.py [--repeat 5]

Runs ``silica ask hi`` (a subprocess, as a user does) against a local server speaking the
Anthropic Messages API (``tests/wire``), first with no MCP server configured, then with the
``state_server`` fixture configured (started to list its tools, stopped at exit). Prints,
for each, the median seconds from the session line on stderr (the last thing ``ask`` says)
to the process's end: the exit handlers, the MCP servers' own shutdown and the interpreter's
teardown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from wire import anthropic_server, text  # noqa: E402

SERVER = ROOT / "tests" / "mcp_fixtures" / "state_server.py"


def exit_seconds(env: dict[str, str]) -> float:
    proc = subprocess.Popen([sys.executable, "-m", "silica", "ask", "hi"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tempfile.mkdtemp())
    said = b""
    while b"session " not in said:
        chunk = proc.stderr.read1(4096)
        if not chunk:
            break
        said += chunk
    done = time.monotonic()
    proc.wait(timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"ask failed ({proc.returncode}): {said.decode()[-500:]}")
    return time.monotonic() - done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    for label, mcp in (("no MCP server", ""), ("one MCP server", (
            f'[mcp.servers.state]\ncommand = "{sys.executable}"\nargs = ["{SERVER}"]\n'))):
        home = Path(tempfile.mkdtemp())
        (home / "config.toml").write_text(f'[sandbox]\nmode = "off"\n{mcp}')
        with anthropic_server([text("hello")] * repeat) as srv:
            env = {**os.environ, **srv.env, "SILICA_HOME": str(home)}
            times = [exit_seconds(env) for _ in range(repeat)]
        print(f"{label}: exit {statistics.median(times):.3f} s after the session line "
              f"(median of {repeat}; min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
