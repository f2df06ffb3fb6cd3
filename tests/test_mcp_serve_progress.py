"""Progress from ``silica mcp serve``: the tool's own ``progress:`` lines, else elapsed time,
and only for a host that asked (a ``progressToken``); plus the runner's stderr-line callback.

Every await is bounded (``bounded``); no test asserts a duration.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from contextlib import asynccontextmanager

import mcp.types as types
import pytest
from conftest import script_tool, simple_spec
from mcp import ClientSession, StdioServerParameters, stdio_client
from test_mcp_serve import CALL_TIMEOUT, bounded, text_of

from silica.mcp.server import ProgressReport, ProgressReporter, progress_line
from silica.tools.runner import run_process


@asynccontextmanager
async def connected(errlog, notes: list[types.ProgressNotification]):
    """A session with a fresh ``silica mcp serve``; every progress notification that reaches
    the client, asked for or not, is appended to ``notes``."""
    async def handle(message):
        if isinstance(message, types.ProgressNotification):
            notes.append(message)

    params = StdioServerParameters(command=sys.executable, args=["-m", "silica", "mcp", "serve"],
                                   env=os.environ.copy(), cwd=os.getcwd())
    async with stdio_client(params, errlog=errlog) as (read, write), \
            ClientSession(read, write, message_handler=handle) as session:
        await session.initialize()
        yield session


SILENT = "import time\ntime.sleep(5)\nprint('done')\n"


def test_the_tools_own_progress_lines_reach_the_host(user_tools, errlog):
    script_tool(user_tools, "steps.py", simple_spec("steps"), body="""\
        import sys, time
        for line in ("progress: 1/3", "not progress", "progress: 2/3 second half"):
            print(line, file=sys.stderr, flush=True)
            time.sleep(0.5)
        print("done")
        """)

    async def act():
        got: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress, total, message):
            got.append((progress, total, message))

        async with connected(errlog, []) as session:
            result = await session.call_tool("steps", {}, progress_callback=on_progress)
            while len([g for g in got if g[1] is not None]) < 2:  # callbacks may trail
                await asyncio.sleep(0.05)
            return result, got

    result, got = bounded(act())
    assert not result.is_error and text_of(result).strip() == "done"
    own = [g for g in got if g[1] is not None]  # elapsed-time ones (slow start) have no total
    assert own == [(1.0, 3.0, None), (2.0, 3.0, "second half")]
    assert got[-2:] == own  # once the tool reports, elapsed time is no longer sent


def test_a_silent_tool_reports_how_long_it_has_been_running(user_tools, errlog):
    script_tool(user_tools, "silent.py", simple_spec("silent"), body=SILENT)

    async def act():
        got: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress, total, message):
            got.append((progress, total, message))

        async with connected(errlog, []) as session:
            result = await session.call_tool("silent", {}, progress_callback=on_progress)
            while not got:  # the callback may trail the result
                await asyncio.sleep(0.05)
            return result, got

    result, got = bounded(act())
    assert text_of(result).strip() == "done"
    for progress, total, message in got:
        assert total is None and message == f"running for {int(progress)} s"
    assert [g[0] for g in got] == sorted({g[0] for g in got})  # always increasing


def test_no_progress_without_a_token(user_tools, errlog):
    script_tool(user_tools, "silent.py", simple_spec("silent"), body=SILENT)
    script_tool(user_tools, "steps.py", simple_spec("steps"),
                body="import sys\nprint('progress: 1/2', file=sys.stderr)\nprint('done')\n")

    async def act():
        notes: list[types.ProgressNotification] = []
        async with connected(errlog, notes) as session:
            results = [await session.call_tool("silent", {}),
                       await session.call_tool("steps", {})]
            # A progress notification would be ahead of the answer: a ping behind both
            # answers has let the client read past anything sent with them.
            await session.send_ping()
            return results, notes

    results, notes = bounded(act())
    assert [text_of(r).strip() for r in results] == ["done", "done"]
    assert notes == []


# -- the pieces -----------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "report"), [
    ("progress: 3/10", ProgressReport(3, 10)),
    ("progress: 42% halfway there", ProgressReport(42, 100, "halfway there")),
    ("  Progress:7", ProgressReport(7)),
    ("progress: 1.5 / 4 ok", ProgressReport(1.5, 4, "ok")),
    ("progress: 2/3 \x1b]0;title\x07 x", ProgressReport(2, 3, "␛]0;title␇ x")),
    ("progress: 1/0", None),
    ("progress: 3/10x", None),
    ("progress:", None),
    ("50% done", None),
    ("warning: progress: 1/2", None),
])
def test_progress_lines(line, report):
    assert progress_line(line) == report


def test_the_reporter_sends_only_increasing_progress():
    async def act():
        sent: list[tuple[float, float | None, str | None]] = []

        async def send(progress, total, message):
            sent.append((progress, total, message))

        reporter = ProgressReporter(send, elapsed_every=3600)
        ticker = asyncio.ensure_future(reporter.run())
        for line in ("progress: 2/4", "progress: 1/4", "hello", "progress: 3/4 three"):
            reporter.line(line)
            await asyncio.sleep(0.3)
        ticker.cancel()
        await asyncio.wait([ticker])
        return sent

    assert bounded(act()) == [(2, 4, None), (3, 4, "three")]


def test_run_process_hands_over_each_stderr_line_as_it_comes():
    code = ("import sys, time\n"
            "err = sys.stderr.buffer\n"
            "err.write(b'one\\r\\ntw'); err.flush(); time.sleep(0.2)\n"
            "err.write(b'o\\n' + b'x' * 10000 + b'\\n\\xff last')\n")

    async def act():
        lines: list[str] = []
        raw = await run_process([sys.executable, "-c", code], on_stderr_line=lines.append,
                                timeout=CALL_TIMEOUT)
        return raw, lines

    raw, lines = bounded(act())
    assert lines == ["one", "two", "x" * 4096, "\ufffd last"]
    assert raw.exit_code == 0 and raw.stderr.endswith(b"x\n\xff last")  # kept as before
    assert re.match(rb"one\r\ntwo\n", raw.stderr)
