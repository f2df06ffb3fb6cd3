"""``silica exec``: any command run as a tool runs, real subprocesses, what a model gets."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from escape_streams import png

PY = sys.executable


def silica(*args: str, cwd: Path | None = None, env: dict | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "silica", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def kitty_script(tmp_path: Path) -> Path:
    """A program that prints a line, a kitty PNG escape, and another line."""
    data = base64.b64encode(png(4, 3)).decode()
    script = tmp_path / "emit.py"
    script.write_text(textwrap.dedent(f"""\
        import sys
        sys.stdout.write("before\\n\\x1b_Gf=100,a=T;{data}\\x1b\\\\after\\n")
        """))
    return script


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_text_output_is_shown_and_the_status_is_zero():
    done = silica("exec", "--", "echo", "hello", "--json")
    assert done.returncode == 0, done.stderr
    assert "hello --json" in done.stdout


def test_a_kitty_image_becomes_an_image_line(tmp_path):
    shots = tmp_path / "shots"
    done = silica("exec", "--save-images", str(shots), "--", PY, str(kitty_script(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert "before" in done.stdout and "after" in done.stdout
    assert "[image: image/png, 4x3 px" in done.stdout
    saved = list(shots.glob("*.png"))
    assert len(saved) == 1 and saved[0].read_bytes().startswith(b"\x89PNG")
    assert "\x1b_G" not in done.stdout


def test_json_gives_the_tool_result_form(tmp_path):
    done = silica("exec", "--json", "--", PY, str(kitty_script(tmp_path)))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False
    kinds = [b["type"] for b in result["content"]]
    assert kinds == ["text", "image"]
    assert result["content"][1]["source"]["media_type"] == "image/png"


def test_a_shell_line_runs_through_sh():
    done = silica("exec", "--shell", "echo hi | tr a-z A-Z")
    assert done.returncode == 0, done.stderr
    assert "HI" in done.stdout


def test_the_exit_status_is_the_commands_own():
    done = silica("exec", "--", PY, "-c", "import sys; print('x'); sys.exit(3)")
    assert done.returncode == 3
    killed = silica("exec", "--", PY, "-c", "import os, signal; os.kill(os.getpid(), 15)")
    assert killed.returncode == 128 + 15


def test_a_missing_command_is_127_with_a_clear_message():
    done = silica("exec", "--", "no-such-command-xyz")
    assert done.returncode == 127
    assert "no-such-command-xyz: command not found" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_file_that_is_not_executable_is_126(tmp_path):
    script = tmp_path / "plain.sh"
    script.write_text("#!/bin/sh\necho x\n")
    script.chmod(0o644)
    done = silica("exec", "--", str(script))
    assert done.returncode == 126
    assert "not an executable file" in done.stderr
    assert "Traceback" not in done.stderr


def test_no_command_says_how_to_give_one():
    done = silica("exec")
    assert done.returncode == 2
    assert "give a command after '--'" in done.stderr


def test_stdin_is_closed():
    code = "import sys; data = sys.stdin.read(); print('eof', len(data))"
    # a stdin that never ends: the command must not be reading this one
    proc = subprocess.Popen([PY, "-m", "silica", "exec", "--timeout", "60", "--", PY, "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "eof 0" in out


def test_a_flood_of_output_is_capped_and_says_so():
    code = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    done = silica("exec", "--json", "--", PY, "-c", code)
    assert done.returncode != 0
    result = json.loads(done.stdout)
    text = "".join(b.get("text", "") for b in result["content"])
    assert "output cut" in text
    from silica.tools.model import DEFAULT_STDOUT_CAP

    assert len(text) < DEFAULT_STDOUT_CAP + 1000


def test_a_command_ignoring_sigterm_is_still_stopped_at_the_timeout():
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('started', flush=True); time.sleep(600)")
    done = silica("exec", "--timeout", "1", "--", PY, "-c", code)
    assert done.returncode == 124
    assert "timed out after 1 s" in done.stdout + done.stderr


def test_children_left_behind_are_gone_after(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = textwrap.dedent(f"""\
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); "
                                  "time.sleep(600)"], start_new_session=True)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("left", child.pid)
        """)
    done = silica("exec", "--", PY, "-c", code)
    assert done.returncode == 0, done.stderr
    pid = int(pidfile.read_text())
    for _ in range(100):  # the kill is done when exec exits; reaping may lag a moment
        if not alive(pid):
            break
        time.sleep(0.05)
    assert not alive(pid)


def test_secrets_are_withheld():
    env = {**os.environ, "X_API_KEY": "sekrit-value", "PLAIN_SETTING": "visible-value"}
    code = "import os; print(os.environ.get('X_API_KEY'), os.environ.get('PLAIN_SETTING'), " \
           "os.environ.get('AGENT_GRAPHICS'))"
    done = silica("exec", "--", PY, "-c", code, env=env)
    assert done.returncode == 0, done.stderr
    assert "sekrit-value" not in done.stdout
    assert "None visible-value" in done.stdout
    assert "kitty" in done.stdout  # AGENT_GRAPHICS is set


def test_cwd_is_where_the_command_runs(tmp_path):
    done = silica("exec", "--cwd", str(tmp_path), "--", PY, "-c", "import os; print(os.getcwd())")
    assert done.returncode == 0, done.stderr
    assert str(tmp_path.resolve()) in done.stdout
    bad = silica("exec", "--cwd", str(tmp_path / "nope"), "--", "true")
    assert bad.returncode == 2 and "is not a folder" in bad.stderr
