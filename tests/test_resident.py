"""``silica ask``/``chat`` through the resident (``silica.resident``): real processes, a real
Unix socket, the real SDK against the local Anthropic wire server. A run handed to the
resident prints, exits and is interrupted exactly as a direct run; the resident is reused,
replaced when its code is stale, refused when its socket is not safely this user's, ends
after idling and holds no secret. Every test stops the residents it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wire import anthropic_server, text, trickle

from silica import resident

SECRET = "sk-very-secret-value-1234"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


def status(home: Path) -> dict | None:
    return resident.request(home, {"op": "status"})


def wait_for(check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def lock_pid(home: Path) -> int | None:
    try:
        return int((resident.run_dir(home) / resident.LOCK_NAME).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture
def env(home, monkeypatch):
    """The environment of a user who has the resident on (the suite turns it off), with a
    secret of their own; every resident started under ``home`` is stopped at the end."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    monkeypatch.delenv("SILICA_RESIDENT")
    environ = {**os.environ, "MY_SERVICE_TOKEN": SECRET}
    yield environ
    seen = {lock_pid(home)}
    reply = status(home)
    if reply:
        seen.add(reply["pid"])
    resident.request(home, {"op": "stop"})
    for pid in seen - {None}:
        deadline = time.monotonic() + 20
        while alive(pid) and time.monotonic() < deadline:  # type: ignore[arg-type]
            time.sleep(0.05)
        if alive(pid):  # type: ignore[arg-type]
            os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]


def silica(args: list[str], env: dict, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=180, **kw)


def warm_resident(home: Path, env: dict, project: Path) -> dict:
    """Start the resident as a user does (a first ``ask``), and wait until it listens."""
    with anthropic_server([text("Warming.")]) as srv:
        first = silica(["ask", "warm up"], {**env, **srv.env}, project)
    assert first.returncode == 0, first.stderr
    return wait_for(lambda: status(home))


def same(done: subprocess.CompletedProcess) -> tuple[int, str, str]:
    """What a user sees, with the session's id (new every run) blanked."""
    blank = re.compile(r"\b[0-9a-f]{8,}[0-9a-f-]*\b")
    return done.returncode, blank.sub("ID", done.stdout), blank.sub("ID", done.stderr)


def test_ask_through_the_resident_matches_a_direct_run(home, project, env):
    before = warm_resident(home, env, project)
    def both(script: list) -> tuple[subprocess.CompletedProcess, ...]:
        runs = []
        for off in ({}, {"SILICA_RESIDENT": "0"}):  # each against a server of its own
            with anthropic_server(list(script)) as srv:
                runs.append(silica(["ask", "what is it?"], {**env, **srv.env, **off},
                                   project))
        return tuple(runs)

    handed, direct = both([text("The answer is 42.")])
    after = status(home)
    assert after and after["pid"] == before["pid"] and after["served"] == before["served"] + 1
    assert handed.returncode == 0, handed.stderr
    assert "The answer is 42." in handed.stdout
    assert same(handed) == same(direct)
    handed, direct = both([])  # a failing run fails alike: no reply left (HTTP 500)
    assert handed.returncode == direct.returncode == 1
    assert same(handed) == same(direct)
    assert status(home)["served"] == before["served"] + 2  # type: ignore[index]


def test_tools_run_and_list_through_the_resident_match_a_direct_run(home, project, env,
                                                                     user_tools):
    (user_tools / "greet.py").write_text(
        '"""Greets.\n\nMetadata:\n    category: demo\n"""\n'
        "import json, sys\n"
        "if '--toolspec' in sys.argv:\n"
        "    print(json.dumps({'name': 'greet', 'description': 'Greets.', 'input_schema': {\n"
        "        'type': 'object', 'properties': {'name': {'type': 'string'}},\n"
        "        'required': ['name']}}))\n"
        "else:\n"
        "    print('Hello, ' + sys.argv[-1].split('=', 1)[1] + '.')\n")
    before = warm_resident(home, env, project)
    commands = (["tools", "run", "greet", "--input", '{"name": "Ada"}'],
                ["tools", "list", "--json"],
                ["tools", "run", "greet", "--input", "{}"])  # fails alike: no name given
    for args in commands:
        handed = silica(args, env, project)
        direct = silica(args, {**env, "SILICA_RESIDENT": "0"}, project)
        assert same(handed) == same(direct)
    assert "Hello, Ada." in silica(commands[0], env, project).stdout
    assert handed.returncode == 1 and "name" in handed.stderr
    after = status(home)
    assert after and after["pid"] == before["pid"]
    assert after["served"] == before["served"] + 4


def test_chat_through_the_resident_reads_the_clients_stdin(home, project, env):
    warm_resident(home, env, project)
    with anthropic_server([text("One."), text("Two.")]) as srv:
        done = silica(["chat"], {**env, **srv.env}, project, input="first\nsecond\n/exit\n")
    assert done.returncode == 0, done.stderr
    said = [line.removeprefix("you> ") for line in done.stdout.splitlines()]
    assert [line for line in said if line.endswith(".")] == ["One.", "Two."]
    assert status(home)["served"] == 1  # type: ignore[index]


def test_a_second_ask_reuses_the_resident_and_the_client_imports_no_sdk(home, project, env):
    first = warm_resident(home, env, project)
    for n in range(2):
        with anthropic_server([text(f"Reply {n}.")]) as srv:
            done = subprocess.run([sys.executable, "-X", "importtime", "-m", "silica", "ask",
                                   "hi"], capture_output=True, text=True, cwd=project,
                                  env={**env, **srv.env}, timeout=180)
        assert done.returncode == 0, done.stderr
        assert f"Reply {n}." in done.stdout
        imported = [line.split("|")[-1].strip() for line in done.stderr.splitlines()
                    if line.startswith("import time:")]
        assert "silica.resident.client" in imported
        assert not {"anthropic", "silica.cli.agent", "cyclopts", "rich"} & set(imported)
    now = status(home)
    assert now and now["pid"] == first["pid"] and now["served"] == 2


def test_a_stale_resident_is_replaced_and_the_run_goes_direct(home, project, env, tmp_path):
    extra = tmp_path / "site"  # a folder on sys.path: a distribution installed there
    extra.mkdir()
    env = {**env, "PYTHONPATH": str(extra)}
    old = warm_resident(home, env, project)
    (extra / "newly_installed.py").write_text("")
    with anthropic_server([text("Straight through.")]) as srv:
        done = silica(["ask", "hi"], {**env, **srv.env}, project)
    assert done.returncode == 0, done.stderr
    assert "Straight through." in done.stdout
    wait_for(lambda: not alive(old["pid"]), 30)
    new = wait_for(lambda: status(home))
    assert new["pid"] != old["pid"] and new["served"] == 0
    with anthropic_server([text("Through the new one.")]) as srv:
        done = silica(["ask", "hi"], {**env, **srv.env}, project)
    assert "Through the new one." in done.stdout
    assert status(home)["served"] == 1  # type: ignore[index]


@pytest.mark.parametrize("how", ["env", "config"])
def test_turned_off_no_resident_starts(home, project, env, how):
    if how == "env":
        env = {**env, "SILICA_RESIDENT": "0"}
    else:
        (home / "config.toml").write_text('[sandbox]\nmode = "off"\n[resident]\n'
                                          'enabled = false\n')
    with anthropic_server([text("Direct.")]) as srv:
        done = silica(["ask", "hi"], {**env, **srv.env}, project)
    assert done.returncode == 0, done.stderr
    time.sleep(3)  # a resident started would have made its folder by now
    assert not resident.run_dir(home).exists()
    assert status(home) is None


def test_an_unsafe_socket_is_never_used(home, project, env):
    warm_resident(home, env, project)
    folder = resident.run_dir(home)
    folder.chmod(0o755)  # others may reach the socket: not used
    try:
        with anthropic_server([text("Direct anyway.")]) as srv:
            done = silica(["ask", "hi"], {**env, **srv.env}, project)
    finally:
        folder.chmod(0o700)
    assert done.returncode == 0, done.stderr
    assert "Direct anyway." in done.stdout
    assert status(home)["served"] == 0  # type: ignore[index]
    if os.getuid() == 0:  # a socket of another user's is not used either
        sock = resident.socket_path(home)
        os.chown(sock, 65534, 65534, follow_symlinks=False)
        try:
            with anthropic_server([text("Direct again.")]) as srv:
                done = silica(["ask", "hi"], {**env, **srv.env}, project)
        finally:
            os.chown(sock, 0, 0, follow_symlinks=False)
        assert "Direct again." in done.stdout
        assert status(home)["served"] == 0  # type: ignore[index]


def test_the_resident_exits_after_idling(home, project, env):
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n[resident]\nidle = 3\n')
    with anthropic_server([text("Warming.")]) as srv:
        assert silica(["ask", "warm up"], {**env, **srv.env}, project).returncode == 0
    pid = wait_for(lambda: lock_pid(home))  # written once it listens
    wait_for(lambda: not alive(pid), 60)
    assert not resident.socket_path(home).exists()


@pytest.mark.parametrize("through", [True, False])
def test_ctrl_c_ends_the_ask_as_a_direct_run_does(home, project, env, through):
    if through:
        warm_resident(home, env, project)
    else:
        env = {**env, "SILICA_RESIDENT": "0"}
    slow = trickle(text(" ".join(["word"] * 400)), 0.05)
    with anthropic_server([slow]) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "silica", "ask", "hi"], cwd=project,
                                env={**env, **srv.env}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: proc.stdout and srv.requests, 120)
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted"
    assert "Traceback" not in err
    if through:
        assert status(home)["served"] == 1  # type: ignore[index]


def test_the_residents_environment_holds_no_secret(home, project, env):
    running = warm_resident(home, env, project)
    pid = running["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"SILICA_HOME=" in environ  # the non-secret variables are there
    for value in (SECRET, "test-anthropic-key"):
        assert value.encode() not in environ and value.encode() not in cmdline
    # and a run through it still has the secrets the user set
    with anthropic_server([text("Keyed.")]) as srv:
        done = silica(["ask", "hi"], {**env, **srv.env}, project)
    assert "Keyed." in done.stdout
    assert any("test-anthropic-key" in value for value in srv.received[0].headers.values())


def test_silica_resident_status_and_stop(home, project, env):
    import json

    idle = silica(["resident", "status", "--json"], env, project)
    assert idle.returncode == 0 and json.loads(idle.stdout) == {"running": False}
    running = warm_resident(home, env, project)
    shown = silica(["resident", "status", "--json"], env, project)
    assert json.loads(shown.stdout)["pid"] == running["pid"]
    assert f"resident pid {running['pid']}" in silica(["resident", "status"], env, project).stdout
    stopped = silica(["resident", "stop"], env, project)
    assert stopped.returncode == 0 and f"resident {running['pid']} stopping" in stopped.stdout
    wait_for(lambda: not alive(running["pid"]), 30)
    assert json.loads(silica(["resident", "status", "--json"], env, project).stdout) == \
        {"running": False}


def test_chat_through_the_resident_at_a_terminal(home, project, env):
    """At a real terminal: the prompt, silica's colours (its consoles see the client's
    terminal, not the resident's /dev/null), Ctrl-C typed at the keyboard stopping the turn
    (the terminal signals the client, which forwards it), and /exit."""
    import fcntl
    import termios

    from test_chat_pty import Terminal

    running = warm_resident(home, env, project)
    slow = trickle(text(" ".join(["word"] * 400)), 0.05)

    def controlling_tty() -> None:  # the session's terminal: Ctrl-C signals its process group
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    class Controlling(Terminal):  # the pty is the session's terminal
        def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
            self.master, slave = os.openpty()
            self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                         env=env, cwd=cwd, start_new_session=True,
                                         preexec_fn=controlling_tty)
            os.close(slave)
            self.seen = b""

    with anthropic_server([slow]) as srv:
        term = Controlling([sys.executable, "-m", "silica", "chat"], {**env, **srv.env},
                           project)
        try:
            term.read_until(b"you> ")
            assert b"\x1b[2m" in term.seen  # the dim banner: a colour terminal was seen
            term.type("talk slowly")
            term.read_until(b"word word")
            seen = len(term.seen)
            os.write(term.master, b"\x03")  # Ctrl-C at the keyboard
            term.read_until(b"stopped", since=seen)
            term.read_until(b"you> ", since=seen)
            term.type("/exit")
            assert term.finish() == 0, term.seen[-2000:]
        finally:
            term.close()
    assert b"Traceback" not in term.seen
    assert status(home)["served"] == 1 and status(home)["pid"] == running["pid"]  # type: ignore[index]
