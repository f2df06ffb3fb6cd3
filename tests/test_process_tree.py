"""A call's processes never outlive the call, even those that leave its process group.

Real tools through the real uv, and ``run_process`` on plain commands. The escaping
processes record their pid and start time (so a recycled pid is never mistaken for them);
every wait is bounded, and no test asserts a duration.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import script_tool, simple_spec, unconfined

from silica.tools import runner
from silica.tools.runner import run_process
from silica.tools.toolbox import Toolbox
from silica.tools.uvbin import find_uv

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the subreaper that ends an escaped process is Linux's")

# Starts a process that leaves the tool's process group (setsid, or setpgid), optionally as
# a double-forked daemon, records "pid starttime" in ``pidfile`` and sleeps; returns once
# that process is ready.
ESCAPER = '''
import os, sys, time

def start_escaper(pidfile, how="setsid", double_fork=False, keep_stdio=False):
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.setsid() if how == "setsid" else os.setpgid(0, 0)
        if double_fork and os.fork() != 0:
            os._exit(0)
        if not keep_stdio:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
        with open("/proc/self/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        with open(pidfile + ".tmp", "w") as f:
            f.write(f"{os.getpid()} {start}")
        os.replace(pidfile + ".tmp", pidfile)
        os.write(ready_w, b"x")
        time.sleep(300)
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)
'''


@pytest.fixture
def escaped():
    """Reads what an escaper recorded; SIGKILLs it at the end if a test left it running."""
    seen: list[tuple[int, str]] = []

    def read(pidfile: Path) -> tuple[int, str]:
        pid, start = pidfile.read_text().split()
        seen.append((int(pid), start))
        return int(pid), start

    yield read
    for pid, start in seen:
        if _running(pid, start):
            os.kill(pid, signal.SIGKILL)


def _running(pid: int, start: str) -> bool:
    """Whether that very process (same pid and start time) exists and is not dead."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start and fields[0] not in ("Z", "X", "x")


def _gone(process: tuple[int, str], patience: float = 10.0) -> bool:
    """True once the process has ended; False if it still runs after ``patience`` s."""
    deadline = time.monotonic() + patience
    while _running(*process):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _tool(user_tools: Path, name: str, body: str, timeout: int | None = None) -> Path:
    path = script_tool(user_tools, f"{name}.py", simple_spec(name), body=ESCAPER + body)
    if timeout is not None:
        path.write_text(f'"""{name}.\n\nMetadata:\n    timeout: {timeout}\n"""\n'
                        + path.read_text())
    return path


# -- through the Toolbox, with uv ---------------------------------------------------------
# The reaper's layer, seen from outside by pid: without the sandbox, whose PID namespace
# hides those pids (tests/test_sandbox_escapes.py has the same escapes under the sandbox).


def test_a_setsid_grandchild_does_not_outlive_the_call(user_tools, tmp_path, escaped):
    pidfile = tmp_path / "escaper.pid"
    _tool(user_tools, "escape", f"start_escaper({str(pidfile)!r})\nprint('left one behind')\n")
    result = Toolbox(settings=unconfined()).call("escape", {})
    assert not result.is_error, result.text
    assert result.text.strip() == "left one behind"
    assert _gone(escaped(pidfile))


def test_a_setsid_grandchild_does_not_outlive_a_timeout(user_tools, tmp_path, escaped):
    pidfile = tmp_path / "escaper.pid"
    _tool(user_tools, "stuck", f"start_escaper({str(pidfile)!r})\ntime.sleep(300)\n",
          timeout=2)
    result = Toolbox(timeout=600, settings=unconfined()).call("stuck", {})
    assert result.is_error and "timed out after 2 s" in result.text
    assert _gone(escaped(pidfile))


def test_a_double_forked_daemon_holding_stdout_neither_holds_the_call_nor_survives(
        user_tools, tmp_path, escaped):
    pidfile = tmp_path / "daemon.pid"
    body = (f"print('before the daemon', flush=True)\n"
            f"start_escaper({str(pidfile)!r}, double_fork=True, keep_stdio=True)\n")
    _tool(user_tools, "daemon", body)
    result = Toolbox(timeout=600, settings=unconfined()).call("daemon", {})
    assert not result.is_error, result.text
    assert result.text.strip() == "before the daemon"
    assert _gone(escaped(pidfile))


def test_exit_code_stdout_and_stderr_of_a_failing_tool_are_unchanged(user_tools):
    body = "print('partial')\nprint('disk full', file=sys.stderr)\nsys.exit(3)\n"
    script_tool(user_tools, "fail.py", simple_spec("fail"), body=body)
    result = Toolbox().call("fail", {})
    assert result.is_error
    assert "partial" in result.text and "disk full" in result.text
    assert "exited with code 3" in result.text


def test_a_tool_killed_by_a_signal_reports_what_uv_reports(user_tools):
    body = "import os, signal\nprint('going', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n"
    path = script_tool(user_tools, "killed.py", simple_spec("killed"), body=body)
    direct = subprocess.run([find_uv(), "run", "--quiet", "--script", str(path)],
                            stdin=subprocess.DEVNULL, capture_output=True, cwd=path.parent)
    assert direct.returncode != 0 and direct.stdout == b"going\n"
    result = Toolbox().call("killed", {})
    assert result.is_error and "going" in result.text
    assert f"exited with code {direct.returncode}]" in result.text


# -- run_process itself -------------------------------------------------------------------


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("code", [
    "print('out'); import sys; print('err', file=sys.stderr)",
    "import sys; sys.stdout.write('x' * 3_000_000); sys.exit(3)",
    "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
    "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    "import os; os.abort()",
])
def test_run_process_reports_what_running_the_command_directly_gives(code):
    direct = subprocess.run(_py(code), stdin=subprocess.DEVNULL, capture_output=True)
    raw = asyncio.run(run_process(_py(code)))
    assert (raw.exit_code, raw.stdout, raw.stderr) == (direct.returncode, direct.stdout,
                                                       direct.stderr)
    assert not raw.error and not raw.timed_out


def test_a_stopped_command_still_reports_sigkill():
    raw = asyncio.run(run_process(_py("import time; time.sleep(300)"), timeout=1))
    assert raw.timed_out and raw.exit_code == -signal.SIGKILL


def test_a_missing_executable_is_an_error_not_an_exit_code(tmp_path):
    raw = asyncio.run(run_process([str(tmp_path / "nothing-here")]))
    assert raw.exit_code is None and raw.stdout == b"" and raw.stderr == b""
    assert raw.error.startswith(f"could not start {tmp_path / 'nothing-here'}: ")
    bad_cwd = asyncio.run(run_process(["true"], cwd=tmp_path / "no-such-folder"))
    assert bad_cwd.error.startswith("could not start true: ")


def test_setpgid_is_no_way_out_either(tmp_path, escaped):
    pidfile = tmp_path / "escaper.pid"
    code = ESCAPER + f"start_escaper({str(pidfile)!r}, how='setpgid')\nprint('ok')\n"
    raw = asyncio.run(run_process(_py(code)))
    assert raw.exit_code == 0 and raw.stdout == b"ok\n"
    assert _gone(escaped(pidfile))


def test_cancelling_the_call_ends_the_tree(tmp_path, escaped):
    pidfile = tmp_path / "escaper.pid"
    code = ESCAPER + f"start_escaper({str(pidfile)!r})\ntime.sleep(300)\n"

    async def cancel_once_started() -> None:
        call = asyncio.create_task(run_process(_py(code), timeout=600))
        for _ in range(600):
            if pidfile.exists() or call.done():
                break
            await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancel_once_started())
    assert _gone(escaped(pidfile))


def test_the_tree_ends_when_silica_itself_dies(tmp_path, escaped):
    pidfile = tmp_path / "escaper.pid"
    code = ESCAPER + f"start_escaper({str(pidfile)!r})\ntime.sleep(300)\n"
    host = ("import asyncio, sys\n"
            "from silica.tools.runner import run_process\n"
            f"asyncio.run(run_process([sys.executable, '-c', {code!r}], timeout=600))\n")
    silica = subprocess.Popen(_py(host), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and silica.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        process = escaped(pidfile)
    finally:
        silica.kill()
        silica.wait()
    assert _gone(process)


def test_without_the_reaper_the_process_group_is_still_stopped(monkeypatch, tmp_path):
    # What is left where there is no subreaper (not Linux): the group kill of before.
    monkeypatch.setattr(runner, "_reaper_command", lambda: ())
    pidfile = tmp_path / "child.pid"
    code = ("import subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
            f"open({str(pidfile)!r}, 'w').write(str(child.pid))\nsys.exit(3)\n")
    raw = asyncio.run(run_process(_py(code)))
    assert raw.exit_code == 3
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _state(pid) not in ("", "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(pid) in ("", "Z")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""
