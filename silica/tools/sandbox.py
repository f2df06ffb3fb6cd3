"""The sandbox launcher: the command line that runs one tool process confined.

    layers = probe()                      # what works on this machine (cached per boot)
    argv = wrap(argv, confinement, layers, cwd=..., call_dir=..., proxy_socket=...)

Two layers, each optional, both used where they work (the policy is
``silica.security.sandbox``):

- **bubblewrap** (user namespaces): its own PID namespace and ``/proc``, IPC and UTS
  namespaces, no network namespace unless the tool has the whole network, ``/`` read-only,
  the hidden paths masked (an empty folder, or ``/dev/null`` for a file), the workspace, the
  call's folder (``/tmp`` inside) and granted paths writable, protected paths read-only again
  (and the folders between them and their writable root pinned, so none is moved aside),
  every capability dropped, a new session (no terminal to push input into), and it dies with
  its parent (the runner's reaper, which stays outside).
- **the in-sandbox stage** (``confine.py``, inside bubblewrap or alone): no new privileges,
  a seccomp filter (no ptrace, ``process_vm_*``, keyring, TIOCSTI, namespaces, mounts; no
  sockets but Unix ones without network), Landlock (writes only where allowed; outside
  bubblewrap also reads, with the hidden paths left out) and, for a tool granted hosts, the
  forwarder from ``127.0.0.1`` inside to silica's proxy.

A path is mounted after every path above it, so a workspace inside a hidden folder and a
hidden folder inside the workspace both come out right.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from silica.security.sandbox import HIDDEN_IN_TMP, Confinement

CONFINE = Path(__file__).with_name("confine.py")
# Without a PID namespace, /proc/<pid>/environ of the user's other processes stays readable
# under Landlock: then only these of /proc are.
_PROC_READABLE = ("/proc/self", "/proc/thread-self", "/proc/cpuinfo", "/proc/meminfo",
                  "/proc/stat", "/proc/loadavg", "/proc/uptime", "/proc/version",
                  "/proc/filesystems", "/proc/sys/kernel", "/proc/sys/vm")
PROXY_NAME = "proxy.sock"
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
            "/dev/shm", "/dev/pts", "/dev/ptmx")
_X11 = "/tmp/.X11-unix"
_ARG_ROOM = 64 * 1024  # a longer policy goes through a file (one argument may hold 128 KiB)
_FORMAT = 1
SYSCTL_ROOT = Path("/proc/sys")
"""Where the kernel settings behind a bubblewrap failure are read (a test points it
elsewhere)."""


@dataclass(frozen=True)
class Layers:
    """What confinement works here: ``bwrap`` is its path when a sandbox could be started
    (else ``bwrap_problem`` says why and what to do); Landlock's ABI (0: none); seccomp."""

    bwrap: str | None = None
    bwrap_problem: str = ""
    landlock_abi: int = 0
    seccomp: bool = False
    platform: str = sys.platform

    def to_json(self) -> dict:
        return asdict(self)

    def missing(self, confinement: Confinement | None = None) -> list[str]:
        """What of ``confinement`` (any tool's, when ``None``) these layers leave
        unconfined, one phrase each."""
        if not self.platform.startswith("linux"):
            return [f"every layer ({self.platform} has neither namespaces nor Landlock; "
                    "tools run with your full rights)"]
        out: list[str] = []
        if not self.bwrap:
            out.append("Unix sockets reached by path, the host names a granted tool may "
                       "reach, and .git/hooks and start-up files inside the workspace (no "
                       f"bubblewrap: {self.bwrap_problem})")
            if not self.landlock_abi:
                out.append("files and other processes' /proc (no Landlock: Linux 5.13 or "
                           "later with lsm=landlock)")
        if not self.seccomp:
            out.append("ptrace and the network (no seccomp)")
        if confinement is not None and confinement.network_kind == "proxy" and not self.bwrap:
            out.append(f"the hosts {confinement.label} may reach (without a network "
                       "namespace its network is limited by port only)")
        return out


def _identity() -> str:
    """What the probe's answer depends on: this boot, this user, the bwrap binary."""
    parts = [str(os.getuid()), sys.executable, str(CONFINE.stat().st_mtime_ns)]
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    except OSError:
        parts.append("no-boot-id")
    found = shutil.which("bwrap")
    if found:
        st = os.stat(found)
        parts.append(f"{found}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


@functools.cache
def probe(cache_folder: Path | None = None) -> Layers:
    """The layers that work on this machine, found by starting each once (about 30 ms), the
    answer kept for this boot under ``cache_folder``."""
    cached = _cache_file(cache_folder)
    if cached is not None:
        try:
            entry = json.loads(cached.read_text(encoding="utf-8"))
            if entry.pop("format") == _FORMAT:
                return Layers(**entry)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return fresh_probe(cache_folder)


def fresh_probe(cache_folder: Path | None = None) -> Layers:
    """The layers that work now, found afresh (``silica sandbox``), and kept for ``probe``:
    a machine fixed since (a sysctl, bubblewrap installed) is believed at once."""
    layers = _probe_now()
    cached = _cache_file(cache_folder)
    if cached is not None:
        from silica.fsutil import write_atomic

        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(cached, json.dumps({"format": _FORMAT, **layers.to_json()}))
        except OSError:
            pass
    probe.cache_clear()
    return layers


def _cache_file(cache_folder: Path | None) -> Path | None:
    return cache_folder / f"sandbox-{_identity()}.json" if cache_folder else None


def _probe_now() -> Layers:
    if not sys.platform.startswith("linux"):
        return Layers(bwrap_problem=f"{sys.platform} has no user namespaces")
    abi, seccomp = 0, False
    try:
        done = subprocess.run([*_confine_command(), "--probe"],
                              capture_output=True, timeout=10, check=False)
        answer = json.loads(done.stdout)
        abi, seccomp = int(answer.get("landlock_abi", 0)), bool(answer.get("seccomp"))
    except (OSError, ValueError, subprocess.SubprocessError, AttributeError):
        pass
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return Layers(bwrap_problem="bubblewrap is not installed; install the package "
                      "'bubblewrap' (apt-get install bubblewrap, dnf install bubblewrap)",
                      landlock_abi=abi, seccomp=seccomp)
    try:
        done = subprocess.run([bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc",
                               "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                               "--dev", "/dev", "--", "/bin/true"],
                              capture_output=True, timeout=10, check=False)
        said = done.stderr.decode(errors="replace").strip()
        ok = done.returncode == 0
    except (OSError, subprocess.SubprocessError) as exc:
        ok, said = False, str(exc)
    if ok:
        return Layers(bwrap=bwrap, landlock_abi=abi, seccomp=seccomp)
    return Layers(bwrap_problem=_why_no_namespaces(said), landlock_abi=abi, seccomp=seccomp)


def _why_no_namespaces(said: str) -> str:
    """bubblewrap's failure, and the machine setting behind it with its fix."""
    def setting(name: str) -> str:
        try:
            return (SYSCTL_ROOT / name).read_text().strip()
        except OSError:
            return ""

    line = said.splitlines()[-1] if said else "it failed"
    if setting("kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (f"bubblewrap could not start ({line}): AppArmor restricts unprivileged user "
                "namespaces here (kernel.apparmor_restrict_unprivileged_userns = 1, as on "
                "Ubuntu 24.04); give bwrap an AppArmor profile that allows userns (see "
                "docs/security.md) or run 'sudo sysctl "
                "kernel.apparmor_restrict_unprivileged_userns=0'")
    if setting("kernel/unprivileged_userns_clone") == "0":
        return (f"bubblewrap could not start ({line}): unprivileged user namespaces are off "
                "(kernel.unprivileged_userns_clone = 0); run 'sudo sysctl "
                "kernel.unprivileged_userns_clone=1'")
    if setting("user/max_user_namespaces") == "0":
        return (f"bubblewrap could not start ({line}): user namespaces are off "
                "(user.max_user_namespaces = 0); run 'sudo sysctl user.max_user_namespaces="
                "15000'")
    return f"bubblewrap could not start: {line}"


def calls_root() -> Path:
    """The folder every run's own folder is made in (``$TMPDIR`` inside): one per user, 0700.
    Inside bubblewrap it is hidden but for the run's own, so no run reaches another's files
    or its proxy's socket."""
    root = Path(tempfile.gettempdir()) / f"silica-calls-{os.getuid()}"
    try:
        root.mkdir(mode=0o700)
    except FileExistsError:
        st = root.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(f"{root} is not a folder of this user; remove it") from None
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(root, 0o700)
    return root


def new_call_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="", dir=calls_root()))


def _in_tmp() -> list[Path]:
    """What of ``HIDDEN_IN_TMP`` is in the temporary folder now (one listing)."""
    tmp = Path(tempfile.gettempdir())
    pattern = re.compile("|".join(fnmatch.translate(p) for p in HIDDEN_IN_TMP))
    try:
        names = os.listdir(tmp)
    except OSError:
        return []
    return [tmp / n for n in names if pattern.match(n)]


def wrap(argv: list[str], confinement: Confinement, layers: Layers, *, cwd: Path,
         call_dir: Path, proxy_port_socket: Path | None = None) -> list[str]:
    """``argv`` as it runs confined by ``layers`` (``argv`` itself when none works)."""
    stage = _stage(argv, confinement, layers, call_dir, proxy_port_socket)
    if not layers.bwrap:
        return stage
    return [*_bwrap(confinement, layers.bwrap, cwd, call_dir), "--", *stage]


def _stage(argv: list[str], c: Confinement, layers: Layers, call_dir: Path,
           proxy_socket: Path | None) -> list[str]:
    if not (layers.seccomp or layers.landlock_abi):
        return argv
    inside = layers.bwrap is not None
    writes = [str(p) for p in ((c.workspace,) if c.workspace else ()) + c.writable]
    writes += [str(call_dir), *_DEVICES]
    policy: dict = {"write": writes, "network": c.network_kind,
                    # a path socket of the host (a container engine's, a session bus) is
                    # reached only by a tool with the whole network or the display
                    "unix_sockets": c.network_kind == "all" or c.display,
                    # a layer the probe found must hold: never a silent unconfined run
                    "landlock": "require" if layers.landlock_abi else "off",
                    "seccomp": "require" if layers.seccomp else "best-effort"}
    if inside:
        policy["read"] = ["/"]
    else:
        hidden = (*c.hidden, Path("/proc"), call_dir.parent, *_in_tmp())
        policy["read"] = [*_readable_around(hidden), *map(str, c.visible), *_PROC_READABLE]
    if c.network_kind == "proxy" and proxy_socket is not None:
        policy["proxy_socket"] = str(proxy_socket)
    text = json.dumps(policy)
    if len(text) < _ARG_ROOM:
        return [*_confine_command(), "--policy", text, "--", *argv]
    path = call_dir / "policy.json"  # read by the stage before it restricts itself
    path.write_text(text, encoding="utf-8")
    return [*_confine_command(), "--policy-file", str(path), "--", *argv]


@functools.cache
def _confine_command() -> tuple[str, ...]:
    """How the in-sandbox stage starts (from its bytecode when it can be kept fresh)."""
    from silica.tools.confine import script_command

    return tuple(script_command())


def _readable_around(hidden: tuple[Path, ...]) -> list[str]:
    """Folders and files that together cover ``/`` except ``hidden`` (Landlock grants, it
    cannot refuse beneath a grant): at each folder on the way to a hidden path, every entry
    but the one leading there. Entries made later under those folders stay unreadable. A
    link is granted only when where it leads holds no hidden path (Landlock follows it)."""
    hidden = tuple(dict.fromkeys([*hidden, *map(_real, hidden)]))
    tree: dict = {}
    for path in hidden:
        node = tree
        for part in path.absolute().parts[1:]:
            node = node.setdefault(part, {})
        node[None] = True  # hidden itself: nothing beneath is read
    out: list[str] = []

    def walk(folder: Path, node: dict) -> None:
        try:
            entries = os.listdir(folder)
        except OSError:
            return
        for name in entries:
            child = node.get(name)
            if child is None:
                if not (os.path.islink(folder / name) and _leads_to(folder / name, hidden)):
                    out.append(str(folder / name))
            elif None not in child:
                walk(folder / name, child)

    walk(Path("/"), tree)
    return out


def _leads_to(link: Path, hidden: tuple[Path, ...]) -> bool:
    """Whether the link leads to, into or above one of ``hidden``."""
    target = _real(link)
    return any(h == target or target in h.parents or h in target.parents for h in hidden)


def _bwrap(c: Confinement, bwrap: str, cwd: Path, call_dir: Path) -> list[str]:
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL"]
    if c.network_kind != "all":
        args.append("--unshare-net")
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    mounts: list[tuple[Path, list[str]]] = [(call_dir, ["--bind", str(call_dir),
                                                        str(call_dir)])]
    for root in ((c.workspace,) if c.workspace else ()) + c.writable:
        mounts.append((root, ["--bind-try", str(root), str(root)]))
    hidden = [*c.hidden, *_in_tmp(), call_dir.parent,
              *(() if c.display else (Path(_X11),))]
    masked = [*hidden, *map(_real, hidden)]
    for path in map(_real, hidden):
        if path.is_dir():
            mounts.append((path, ["--tmpfs", str(path)]))
        elif path.exists():
            mounts.append((path, ["--ro-bind", "/dev/null", str(path)]))
    for path in c.visible:
        mounts.append((path, ["--ro-bind-try", str(path), str(path)]))
    roots = [r for r in ((c.workspace,) if c.workspace else ()) + c.writable]
    pinned: set[Path] = set()
    for path in c.protected:
        owner = next((r for r in roots if r == path or r in path.parents), None)
        if owner is None or not path.exists() or _beneath(path, masked):
            continue  # a hidden path is no more writable than it is readable: left hidden
        mounts.append((path, ["--ro-bind", str(path), str(path)]))
        # Each folder between the root and the path is bound onto itself: a mount point
        # cannot be renamed or removed, so ``.git`` cannot be moved aside for a new one.
        for folder in path.parents:
            if folder == owner or owner not in folder.parents:
                break
            if folder not in pinned and folder.is_dir() and not folder.is_symlink() \
                    and not _beneath(folder, masked):
                pinned.add(folder)
                mounts.append((folder, ["--bind", str(folder), str(folder)]))
    # Outer paths first: a later mount on an inner path is what stays visible there.
    for _, words in sorted(mounts, key=lambda m: len(m[0].parts)):
        args += words
    args += ["--chdir", str(cwd)]
    return args


def _beneath(path: Path, folders: list[Path]) -> bool:
    """Whether ``path`` is one of ``folders`` or inside one."""
    return any(f == path or f in path.parents for f in folders)


def _real(path: Path) -> Path:
    """Where ``path`` leads (a link to a secret hides its target), else itself."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path
