"""A tool confined by ``confine.py`` cannot escape, and a normal program still runs (issue 20).

Each escape is a tiny Python child started through the real script
(``python -I -S confine.py --policy JSON -- python -c CODE``), below a shell of the same user
so that its parent is a process it could otherwise attach to. Everything runs as this user
and, when this runs as root, again as an unprivileged user (root and users differ here).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_process_secrets import as_user, unprivileged  # noqa: F401 - a fixture

from silica.tools import confine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="Landlock and seccomp are Linux's")
CONFINE = Path(confine.__file__)
X86 = platform.machine() == "x86_64"
PROBE = json.loads(subprocess.run([sys.executable, "-I", "-S", str(CONFINE), "--probe"],
                                  capture_output=True, text=True).stdout)
LANDLOCK = PROBE["landlock_abi"]
needs_landlock = pytest.mark.skipif(not LANDLOCK, reason="this kernel has no Landlock")

PRELUDE = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)

def outcome(result):
    return errno.errorcode[ctypes.get_errno()] if result == -1 else "ok"

def tried(action):
    try:
        action()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def sleeper():
    pid = os.fork()
    if pid == 0:
        import time
        time.sleep(60)
        os._exit(0)
    return pid
"""


@dataclass
class Who:
    """Someone to run confined children as: this user, or an unprivileged one."""
    user: str | None
    base: Path  # a folder they own
    python: str

    def command(self, argv: list[str]) -> list[str]:
        return as_user(self.user, argv) if self.user else argv

    def confined(self, code: str, policy: dict | None = None, *args: str, bwrap=(),
                 env=None) -> subprocess.CompletedProcess:
        """Run ``code`` (after PRELUDE) confined by ``policy``, below a shell of this user."""
        argv = [*bwrap, self.python, "-I", "-S", str(CONFINE), "--policy",
                json.dumps(policy or {}), "--", self.python, "-I", "-c", PRELUDE + code, *args]
        below_a_shell = ["sh", "-c", '"$@"; exit $?', "sh", *argv]
        return subprocess.run(self.command(below_a_shell), capture_output=True, text=True,
                              timeout=120, cwd=self.base, env=env)

    def outcome(self, code: str, policy: dict | None = None, *args: str, **kw) -> str:
        done = self.confined(code, policy, *args, **kw)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@pytest.fixture(params=["this user", "unprivileged"])
def who(request, tmp_path) -> Who:
    if request.param == "this user":
        return Who(None, tmp_path, sys.executable)
    user, folder, python, _ = request.getfixturevalue("unprivileged")
    return Who(user, folder, python)


def namespaces(who: Who, folder: Path) -> list[str]:
    """bwrap's command for new PID and network namespaces with ``folder`` writable (skips
    when bwrap cannot make them for ``who``, e.g. user namespaces restricted)."""
    argv = ["bwrap", "--unshare-pid", "--unshare-net", "--die-with-parent", "--ro-bind", "/",
            "/", "--dev", "/dev", "--proc", "/proc", "--bind", str(folder), str(folder)]
    if not shutil.which("bwrap"):
        pytest.skip("needs bwrap")
    tried = subprocess.run(who.command([*argv, "true"]), capture_output=True, text=True)
    if tried.returncode != 0:
        pytest.skip(f"bwrap cannot make namespaces here: {tried.stderr.strip()}")
    return argv


def mine(who: Who, path: Path) -> Path:
    """``path``, made and owned by ``who``."""
    path.mkdir(parents=True, exist_ok=True)
    if who.user:
        shutil.chown(path, who.user, who.user)
    return path


# -- syscalls seccomp refuses -----------------------------------------------------------------

KEYCTL = 250 if X86 else 219
ESCAPES = {
    "ptrace attach of a process of its own": """
pid = sleeper()
print(outcome(libc.ptrace(16, pid, 0, 0)))  # PTRACE_ATTACH
os.kill(pid, 9)
""",
    "ptrace seize of the parent": "print(outcome(libc.ptrace(0x4206, os.getppid(), 0, 0)))",
    "process_vm_readv of a process of its own": """
buf = ctypes.create_string_buffer(b"canary", 16)
pid = sleeper()
local = (ctypes.c_void_p * 2)(ctypes.addressof(ctypes.create_string_buffer(16)), 16)
remote = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
print(outcome(libc.process_vm_readv(pid, local, 1, remote, 1, 0)))
os.kill(pid, 9)
""",
    "process_vm_readv of the parent": """
local = (ctypes.c_void_p * 2)(ctypes.addressof(ctypes.create_string_buffer(16)), 16)
start = 0x400000
try:
    start = int(open(f"/proc/{os.getppid()}/maps").readline().split("-")[0], 16)
except OSError:
    pass
remote = (ctypes.c_void_p * 2)(start, 16)
print(outcome(libc.process_vm_readv(os.getppid(), local, 1, remote, 1, 0)))
""",
    "keyctl": f"print(outcome(libc.syscall({KEYCTL}, 0, -3, 0)))",  # the session keyring's id
    "TIOCSTI on its terminal": """
import fcntl, termios
master, slave = os.openpty()
try:
    os.setsid()
except OSError:
    pass
tty = os.open(os.ttyname(slave), os.O_RDWR)  # now its controlling terminal
print(tried(lambda: fcntl.ioctl(tty, termios.TIOCSTI, b"x")))
""",
    "a new user namespace": "print(outcome(libc.unshare(0x10000000)))",  # CLONE_NEWUSER
    "an IPv4 socket": "import socket\nprint(tried(lambda: socket.socket(socket.AF_INET)))",
    "an IPv6 socket": "import socket\nprint(tried(lambda: socket.socket(socket.AF_INET6)))",
    "a netlink socket": "import socket\n"
                        "print(tried(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)))",
}


@pytest.mark.parametrize("escape", ESCAPES)
def test_an_escape_is_refused(who, escape):
    assert who.outcome(ESCAPES[escape]) == "EPERM"


NORMAL = """
import json, socket, subprocess, tempfile
a, b = socket.socketpair(socket.AF_UNIX)
a.sendall(b"unix works")
here = sys.argv[1]
listed = subprocess.run(["ls", here], capture_output=True, text=True).stdout.split()
quiet = subprocess.run(["sh", "-c", "echo hidden; sleep 0.1 & wait"], stdout=subprocess.DEVNULL)
with tempfile.NamedTemporaryFile(dir=here) as f:
    f.write(b"x")
print(json.dumps({"unix": b.recv(64).decode(), "ls": listed, "persona": libc.personality(-1),
                  "sh": quiet.returncode}))
"""


@pytest.mark.parametrize("layers", ["alone", "in bwrap, with a file policy"])
def test_a_normal_program_still_works(who, layers):
    here = mine(who, who.base / "here")
    (here / "file.txt").write_text("x")
    policy, bwrap = {}, ()
    if layers != "alone":
        policy = {"read": read_paths(who), "write": [str(here)]}
        bwrap = [*namespaces(who, here), "--cap-drop", "ALL", "--"]
    done = json.loads(who.outcome(NORMAL, policy, str(here), bwrap=bwrap))
    assert done == {"unix": "unix works", "ls": ["file.txt"], "persona": 0, "sh": 0}


# -- files (Landlock) ---------------------------------------------------------------------------

FILES = """
import json
ws, out = sys.argv[1:3]
def write(path):
    with open(path, "w") as f:
        f.write("x")
print(json.dumps({
    "write inside": tried(lambda: write(f"{ws}/new.txt")),
    "rename inside": tried(lambda: os.rename(f"{ws}/new.txt", f"{ws}/moved.txt")),
    "write outside": tried(lambda: write(f"{out}/new.txt")),
    "rename outside": tried(lambda: os.rename(f"{out}/secret.txt", f"{out}/moved.txt")),
    "unlink outside": tried(lambda: os.unlink(f"{out}/secret.txt")),
    "move out of the workspace": tried(lambda: os.rename(f"{ws}/moved.txt", f"{out}/x.txt")),
    "read outside": tried(lambda: open(f"{out}/secret.txt").read()),
    "list outside": tried(lambda: os.listdir(out)),
    "write /dev/null": tried(lambda: write("/dev/null")),
    "make a symlink out": tried(lambda: os.symlink(out, f"{ws}/link")),
    "read through it": tried(lambda: open(f"{ws}/link/secret.txt").read()),
    "write through it": tried(lambda: write(f"{ws}/link/secret.txt")),
}))
"""


def read_paths(who: Who) -> list[str]:
    """What Python and a shell need to start."""
    return ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "/dev", sys.prefix,
            sys.base_prefix, str(Path(who.python).resolve().parent.parent), "/no/such/path"]


@needs_landlock
def test_files_outside_the_policy_cannot_be_touched(who):
    ws, out = mine(who, who.base / "ws"), mine(who, who.base / "outside")
    (out / "secret.txt").write_text("the secret")
    shutil.chown(out / "secret.txt", who.user or os.geteuid(), who.user or os.getegid())
    policy = {"read": read_paths(who), "write": [str(ws)], "landlock": "require"}
    found = json.loads(who.outcome(FILES, policy, str(ws), str(out)))
    assert found == {"write inside": "ok", "rename inside": "ok", "write outside": "EACCES",
                     "rename outside": "EACCES", "unlink outside": "EACCES",
                     "move out of the workspace": found["move out of the workspace"],
                     "read outside": "EACCES", "list outside": "EACCES",
                     "write /dev/null": "ok", "make a symlink out": "ok",
                     "read through it": "EACCES", "write through it": "EACCES"}
    assert found["move out of the workspace"] in ("EACCES", "EXDEV")
    assert (out / "secret.txt").read_text() == "the secret"
    assert sorted(p.name for p in out.iterdir()) == ["secret.txt"]


@needs_landlock
def test_without_exec_anywhere_what_was_written_cannot_be_executed(who):
    ws = mine(who, who.base / "ws")
    code = f"shutil = __import__('shutil')\nshutil.copy('/bin/true', '{ws}/t')\n" \
           f"os.chmod('{ws}/t', 0o755)\nprint(tried(lambda: os.posix_spawn('{ws}/t', ['t'], {{}})))"
    policy = {"read": read_paths(who), "write": [str(ws)], "landlock": "require"}
    assert who.outcome(code, {**policy, "exec_anywhere": False}) == "EACCES"
    assert who.outcome(code, policy) == "ok"


@pytest.mark.skipif(LANDLOCK < 6, reason="Landlock scopes signals from ABI 6")
def test_no_signal_reaches_a_process_outside(who):
    target = subprocess.Popen(who.command(["sleep", "60"]))
    try:
        pid = target.pid if not who.user else _child_named(target.pid, "sleep")
        code = f"print(tried(lambda: os.kill({pid}, 0)))\n" \
               "print(tried(lambda: os.kill(sleeper(), 9)))"
        assert who.outcome(code).split() == ["EPERM", "ok"]
        assert target.poll() is None
    finally:
        target.kill()
        target.wait()


@pytest.mark.skipif(LANDLOCK < 6, reason="Landlock scopes abstract sockets from ABI 6")
def test_no_abstract_socket_outside_is_reached(who):
    server = socket.socket(socket.AF_UNIX)
    name = f"\0silica-test-{os.getpid()}-{time.monotonic_ns()}"
    server.bind(name)
    server.listen()
    code = f"import socket\ns = socket.socket(socket.AF_UNIX)\n" \
           f"print(tried(lambda: s.connect({name!r})))"
    try:
        assert who.outcome(code) == "EPERM"
    finally:
        server.close()


def _child_named(pid: int, name: str) -> int:
    """The pid of ``name`` started below ``pid`` (runuser starts its command as a child)."""
    for _ in range(300):
        for task in Path("/proc").glob("[0-9]*"):
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            if f"({name})" in stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                return int(task.name)
        time.sleep(0.05)
    raise AssertionError(f"no {name} below {pid}")


# -- the network through silica's proxy ---------------------------------------------------------


class UnixEcho(threading.Thread):
    """silica's proxy, played by a Unix socket server answering ``relayed:`` + what it got."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        os.chmod(path, 0o777)
        self.server.listen()
        self.start()

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn: socket.socket) -> None:
        with conn:
            got = b""
            while data := conn.recv(65536):
                got += data
            conn.sendall(b"relayed:" + got)


THROUGH_PROXY = """
import hashlib, json, socket, threading, urllib.parse
url = os.environ["HTTP_PROXY"]
names = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"]
where = urllib.parse.urlsplit(url)
def exchange(payload, answers, i):
    with socket.create_connection((where.hostname, where.port)) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while data := s.recv(65536):
            got += data
    answers[i] = got
payload = os.urandom(300_000)
answers = [None] * 4
threads = [threading.Thread(target=exchange, args=(payload, answers, i)) for i in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
other = sys.argv[1:] and tried(lambda: socket.create_connection(("127.0.0.1", int(sys.argv[1]))))
def parent_of(task):
    try:
        return int(open(f"/proc/{task}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None
forwarder = [int(t) for t in os.listdir("/proc") if t.isdigit() and parent_of(t) == os.getpid()]
print(json.dumps({
    "url": url, "same": all(os.environ[n] == url for n in names),
    "no_proxy": [n for n in ("NO_PROXY", "no_proxy") if n in os.environ],
    "relayed": all(a == b"relayed:" + payload for a in answers),
    "udp": tried(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
    "other port": other, "forwarder": len(forwarder),
    "its memory": [tried(lambda: open(f"/proc/{pid}/mem", "r+b")) for pid in forwarder],
    "a signal to it": [tried(lambda: os.kill(pid, 0)) for pid in forwarder],
}))
"""


def _forwarders_left(marker: str) -> list[int]:
    found = []
    for task in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (task / "cmdline").read_bytes():
                found.append(int(task.name))
        except OSError:
            continue
    return found


def _gone(marker: str) -> list[int]:
    for _ in range(200):
        if not (left := _forwarders_left(marker)):
            return []
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("layer", ["bwrap", "no namespace"])
def test_the_network_goes_only_through_the_proxy(who, layer):
    folder = mine(who, who.base / f"proxy-{layer.replace(' ', '-')}")
    sock = folder / "proxy.sock"
    UnixEcho(sock)
    policy = {"network": "proxy", "proxy_socket": str(sock), "landlock": "best-effort"}
    args, bwrap = [], ()
    if layer == "bwrap":
        bwrap = [*namespaces(who, folder), "--"]
    else:  # a server on the real loopback: only Landlock's port rule keeps the tool off it
        outside = socket.create_server(("127.0.0.1", 0))
        args = [str(outside.getsockname()[1])]
    env = {**os.environ, "NO_PROXY": "example.org", "no_proxy": "example.org"}
    found = json.loads(who.outcome(THROUGH_PROXY, policy, *args, bwrap=bwrap, env=env))
    assert found["url"].startswith("http://127.0.0.1:")
    assert found["same"] and found["no_proxy"] == [] and found["relayed"], found
    assert found["udp"] == "EPERM"
    assert found["forwarder"] == 1 and found["its memory"] in (["EACCES"], ["EPERM"])
    if LANDLOCK >= 6:
        assert found["a signal to it"] == ["EPERM"]
    if not bwrap and LANDLOCK >= 4:
        assert found["other port"] == "EACCES"
    assert _gone(str(sock)) == []  # the forwarder ended with the tool


class CountingProxy(UnixEcho):
    """Holds every answer until ``hold`` connections are open at once (or 60 s have passed)
    and no other came for half a second, and records the most it saw open."""

    def __init__(self, path: Path, hold: int):
        self.hold, self.open, self.most, self.released = hold, 0, 0, False
        self.changed = threading.Condition()
        super().__init__(path)

    def answer(self, conn: socket.socket) -> None:
        with self.changed:
            self.open += 1
            self.most = max(self.most, self.open)
            self.changed.notify_all()
        got = b""
        while data := conn.recv(65536):
            got += data
        with self.changed:
            self.changed.wait_for(lambda: self.most >= self.hold, timeout=60)
            while not self.released and self.changed.wait(0.5):
                pass  # a connection more came: wait for the next
            self.released = True
            self.open -= 1
        with conn:
            conn.sendall(b"relayed:" + got)


MANY = """
import socket
where = os.environ["HTTP_PROXY"].rsplit(":", 1)
conns = [socket.create_connection(("127.0.0.1", int(where[1]))) for _ in range(80)]
for i, conn in enumerate(conns):
    conn.sendall(str(i).encode())
answers = []
for conn in conns:
    conn.shutdown(socket.SHUT_WR)
    answers.append(conn.makefile("rb").read().decode())
print(",".join(answers))
"""


def test_the_forwarder_relays_at_most_64_connections_at_a_time(tmp_path):
    proxy = CountingProxy(tmp_path / "proxy.sock", hold=64)
    policy = {"network": "proxy", "proxy_socket": str(tmp_path / "proxy.sock")}
    answers = Who(None, tmp_path, sys.executable).outcome(MANY, policy)
    assert answers.split(",") == [f"relayed:{i}" for i in range(80)]
    assert proxy.most == 64


# -- a missing layer -----------------------------------------------------------------------------

# Run confine.py below a filter that makes one layer's syscall fail as an older or stricter
# kernel would: landlock_create_ruleset (444) -> ENOSYS, prctl(PR_SET_SECCOMP) -> EINVAL.
WITHOUT = """
import os, struct, sys
from silica.tools import confine
number, arg0, errno = (int(a) for a in sys.argv[1:4])
load, jeq, ret = 0x20, 0x15, 0x06
program = [(load, 0, 0, 0), (jeq, 0, 3, number), (load, 0, 0, 16), (jeq, 0, 1, arg0),
           (ret, 0, 0, 0x50000 | errno), (ret, 0, 0, 0x7FFF0000)]
if arg0 < 0:  # any argument
    program[2:4] = [(jeq, 0, 0, 0), (jeq, 0, 0, 0)]
confine._prctl(confine.PR_SET_NO_NEW_PRIVS, 1)
assert confine.install_seccomp(b"".join(struct.pack("=HBBI", *i) for i in program)) is None
os.execv(sys.executable, [sys.executable, *sys.argv[4:]])
"""
PRCTL = 157 if X86 else 167


@pytest.mark.parametrize(("layer", "syscall", "arg0", "errno", "policy", "message"), [
    ("Landlock", 444, -1, 38, {"landlock": "require"},
     "Landlock is not available (the kernel has no Landlock: Linux 5.13 or later is needed)"),
    ("Landlock", 444, -1, 95, {"landlock": "require"},
     "Landlock is not available (the kernel says: Operation not supported; is landlock in "
     "the lsm= boot parameter?)"),
    ("seccomp", PRCTL, 22, 22, {},
     "seccomp is not available (the kernel says: Invalid argument)")])
def test_a_required_layer_that_is_missing_runs_nothing(layer, syscall, arg0, errno, policy,
                                                       message):
    def run(policy: dict) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-c", WITHOUT, str(syscall), str(arg0), str(errno), "-I", "-S",
                str(CONFINE), "--policy", json.dumps(policy), "--", "echo", "ran"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    refused = run(policy)
    assert (refused.returncode, refused.stdout) == (126, "")
    assert refused.stderr == f"silica sandbox: {message}\n"
    best_effort = run({**policy, layer.lower(): "best-effort"})
    assert (best_effort.returncode, best_effort.stdout, best_effort.stderr) == (0, "ran\n", "")


@needs_landlock
def test_a_rule_the_kernel_refuses_leaves_the_tool_with_less(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    policy = {"read": ["/"], "landlock": "best-effort"}
    argv = [sys.executable, "-c", WITHOUT, "445", "-1", "22", "-I", "-S", str(CONFINE),
            "--policy", json.dumps(policy), "--", "/bin/cat", str(secret)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (127, "")
    assert done.stderr == "could not start /bin/cat: Permission denied\n"


def test_a_proxy_port_that_is_taken_runs_nothing(tmp_path):
    taken = socket.create_server(("127.0.0.1", 0))
    policy = {"network": "proxy", "proxy_socket": str(tmp_path / "p.sock"),
              "proxy_port": taken.getsockname()[1]}
    done = subprocess.run([sys.executable, "-I", "-S", str(CONFINE), "--policy",
                           json.dumps(policy), "--", "echo", "ran"], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (126, "")
    assert done.stderr == "silica sandbox: the network proxy could not start (Address " \
                          "already in use)\n"


# -- the command line ---------------------------------------------------------------------------


def test_probe_says_which_layers_work():
    done = subprocess.run([sys.executable, "-I", "-S", str(CONFINE), "--probe"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    found = json.loads(done.stdout)
    assert set(found) == {"landlock_abi", "seccomp", "arch", "no_new_privs"}
    assert found["arch"] == platform.machine() and found["no_new_privs"] is True
    assert found["seccomp"] is (found["arch"] in ("x86_64", "aarch64"))
    assert isinstance(found["landlock_abi"], int) and found["landlock_abi"] >= 0


@pytest.mark.parametrize("policy", [
    "{", "[]", '{"network": "some"}', '{"read": ["relative/path"]}', '{"read": "/etc"}',
    '{"network": "proxy"}', '{"proxy_port": 70000}', '{"landlock": true}', '{"unknown": 1}',
    '{"exec_anywhere": "yes"}', '{"proxy_port": NaN}', "[" * 100_000])
def test_a_bad_policy_is_one_line_and_exit_2(policy):
    done = subprocess.run([sys.executable, "-I", "-S", str(CONFINE), "--policy", policy, "--",
                           "echo", "ran"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("confine.py: --policy: ") and done.stderr.count("\n") == 1


def test_script_command_starts_the_script_from_fresh_bytecode(tmp_path):
    copy = tmp_path / "confine.py"
    shutil.copy(CONFINE, copy)
    spec = importlib.util.spec_from_file_location("confine_copy", copy)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    command = loaded.script_command()
    assert command[:3] == [sys.executable, "-I", "-S"] and command[3].endswith(".pyc")
    assert json.loads(subprocess.run([*command, "--probe"], capture_output=True).stdout)
    copy.write_text(copy.read_text().replace('"arch": ""', '"arch": "edited"') + "\n")
    os.utime(copy, (1, 1))  # an edit the bytecode's timestamp does not match
    again = loaded.script_command()
    done = subprocess.run([*again, "--", "echo", "ran"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "ran\n") and Path(again[3]).stat().st_size
    assert b"edited" in Path(again[3]).read_bytes()


@pytest.mark.parametrize("args", [[], ["echo"], ["--policy"], ["--policy", "{}"], ["--"],
                                  ["--probe", "--", "echo"], ["--policy", "{}", "echo"]])
def test_a_bad_command_line_is_one_line_and_exit_2(args):
    done = subprocess.run([sys.executable, "-I", "-S", str(CONFINE), *args],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("confine.py: usage: ") and done.stderr.count("\n") == 1


def test_a_program_that_cannot_start_exits_127():
    done = subprocess.run([sys.executable, "-I", "-S", str(CONFINE), "--", "no-such-program"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 127
    assert done.stderr == "could not start no-such-program: No such file or directory\n"


# -- the policy parser and the BPF program ------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
POLICY_VALUES = st.fixed_dictionaries({}, optional={
    "read": st.lists(st.sampled_from(["/etc", "/tmp", "rel"]), max_size=2) | JSON,
    "write": st.lists(st.just("/tmp"), max_size=2), "exec_anywhere": st.booleans() | JSON,
    "landlock": st.sampled_from(["require", "best-effort", "off", "on"]),
    "network": st.sampled_from(["none", "proxy", "all", "some"]),
    "proxy_socket": st.sampled_from(["/run/p.sock", "p.sock"]),
    "proxy_port": st.integers(-5, 70000) | JSON, "seccomp": st.sampled_from(["require", "x"])})


@settings(max_examples=300)
@given(value=POLICY_VALUES | JSON, indent=st.sampled_from([None, 2]))
def test_parse_policy_takes_what_json_takes_or_says_why_not(value, indent):
    try:
        policy = confine.parse_policy(json.dumps(value, indent=indent))
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert isinstance(value, dict) and policy == {**confine._DEFAULTS, **value}


@given(st.text(max_size=40))
def test_parse_policy_of_any_text_is_a_dict_or_a_value_error(text):
    with contextlib.suppress(ValueError):
        assert isinstance(confine.parse_policy(text), dict)


KILL, ALLOW = 0x80000000, 0x7FFF0000
EPERM, ENOSYS = 0x50000 | 1, 0x50000 | 38
AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def run_bpf(program: bytes, data: bytes) -> int:
    """What a classic BPF seccomp program returns for ``data``, checking it as the kernel's
    verifier would: known instructions, aligned loads inside seccomp_data, jumps inside."""
    assert program and len(program) % 8 == 0 and len(program) // 8 <= 4096
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    assert insns[-1][0] == 0x06  # it ends in a return
    a = pc = 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x06:
            return k
        if code == 0x20:
            assert k % 4 == 0 and k + 4 <= 64
            a = struct.unpack_from("=I", data, k)[0]
        elif code == 0x54:
            a &= k
        else:
            taken = {0x15: a == k, 0x35: a >= k, 0x45: bool(a & k)}[code]
            pc += jt if taken else jf
        pc += 1
        assert pc < len(insns)


def expected(arch: str, network: str, nr: int, args: list[int], data_arch: int) -> int:
    """The rules of docs/security.md's "The in-sandbox stage", as a table."""
    if data_arch != AUDIT[arch] or (arch == "x86_64" and nr >= 0x40000000):
        return KILL
    name = {numbers[arch == "aarch64"]: name for name, numbers in confine._SYSCALLS.items()
            }.get(nr)
    low = [arg & 0xFFFFFFFF for arg in args]
    if name in confine._DENIED:
        return EPERM
    if name == "clone3":
        return ENOSYS
    refused = {"clone": low[0] & 0x7E020000,
               "ioctl": low[1] in (0x5412, 0x541C),
               "personality": low[0] not in (0, 0xFFFFFFFF),
               "socket": network == "none" and low[0] != 1 or network == "proxy" and (
                   low[0] not in (1, 2, 10)
                   or low[0] != 1 and (low[1] & 15 != 1 or low[2] not in (0, 6)))}
    return EPERM if refused.get(name) else ALLOW


NUMBERS = st.sampled_from([n for nums in confine._SYSCALLS.values() for n in nums]) | \
    st.integers(0, 0x7FFFFFFF)
ARGS = st.lists(st.sampled_from([0, 1, 2, 6, 10, 16, 0x5412, 0x541C, 0xFFFFFFFF, 0x10000000,
                                 0x100005412, 0x80001, 2**64 - 1]) | st.integers(0, 2**64 - 1),
                min_size=6, max_size=6)


@settings(max_examples=2000)
@given(arch=st.sampled_from(["x86_64", "aarch64"]), network=st.sampled_from(confine.NETWORKS),
       nr=NUMBERS, args=ARGS, foreign=st.sampled_from([None, 0x40000003, 0xC00000B7,
                                                         0xC000003E]))
def test_the_seccomp_program_is_valid_and_does_what_the_rules_say(arch, network, nr, args,
                                                                  foreign):
    data_arch = foreign or AUDIT[arch]
    data = struct.pack("=iIQ6Q", nr, data_arch, 0x1000, *args)
    program = confine.seccomp_filter(arch, network)
    assert run_bpf(program, data) == expected(arch, network, nr, args, data_arch)


@given(arch=st.text(max_size=8), network=st.text(max_size=8))
def test_seccomp_filter_names_what_it_cannot_build(arch, network):
    if arch in AUDIT and network in confine.NETWORKS:
        assert confine.seccomp_filter(arch, network)
    else:
        with pytest.raises(ValueError):
            confine.seccomp_filter(arch, network)


def test_the_syscall_numbers_are_the_kernels():
    # from arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h
    known = {"ptrace": (101, 117), "process_vm_readv": (310, 270), "keyctl": (250, 219),
             "socket": (41, 198), "ioctl": (16, 29), "clone": (56, 220), "unshare": (272, 97),
             "mount": (165, 40), "bpf": (321, 280), "io_uring_setup": (425, 425)}
    assert {name: confine._SYSCALLS[name] for name in known} == known
