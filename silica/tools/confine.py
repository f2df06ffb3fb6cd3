"""Confine the process that runs a tool, then become it: silica's in-sandbox stage.

    python -I -S confine.py [--policy JSON] -- ARGV...
    python -I -S confine.py --probe

Started by silica's sandbox launcher (inside bubblewrap where user namespaces work, directly
under ``reaper.py`` where they do not), as ``script_command()`` says (its bytecode, for a fast
start). It imports nothing of silica; silica imports ``seccomp_filter`` and ``parse_policy``
from it. In this order it:

1. sets no-new-privileges (a setuid program cannot gain rights) and closes every fd above 2;
2. with network "proxy": listens on TCP 127.0.0.1:PORT and forks a forwarder that relays each
   connection, byte for byte, to the Unix socket of silica's proxy (which checks the hosts);
   the tool gets ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (and lower-case) pointing there;
3. applies Landlock (Linux 5.13+): reads only below ``read``, writes only below ``write``, no
   TCP unless network is "all" (ABI 4+: with "proxy", connect to the forwarder's port only),
   no signals to or abstract sockets of processes outside (ABI 6+);
4. installs a seccomp filter (x86_64, aarch64) returning EPERM for ptrace, process_vm_*,
   the kernel keyring, module loading, bpf, perf, userfaultfd, mounts and namespaces,
   personality changes, io_uring, TIOCSTI/TIOCLINUX, and sockets the network mode forbids;
5. execs ARGV (PATH searched, the environment inherited).

What a caller may rely on: exit 2 and one line on stderr for a bad command line or policy;
exit 126 and one line starting ``silica sandbox:`` when a required layer is missing
(``"landlock": "require"``; seccomp is required unless ``"seccomp": "best-effort"``);
exit 127 and ``could not start ARGV0: reason`` when ARGV cannot be executed. Otherwise the
process is ARGV. Without ``read`` and ``write`` in the policy, Landlock leaves files alone;
with them, the harmless devices (``/dev/null``...) stay writable. A path that is not there,
or a rule the kernel refuses, allows nothing. The forwarder is a child of ARGV's process.
"""

import _signal  # type: ignore[import-not-found]  # signal's C core has no stub; the child imports no more
import errno
import posix
import sys

_EXIT_USAGE, _EXIT_UNCONFINED, _EXIT_SPAWN_FAILED = 2, 126, 127
NETWORKS = ("none", "proxy", "all")
_POLICY_CHOICES = {"landlock": ("require", "best-effort", "off"), "network": NETWORKS,
                   "seccomp": ("require", "best-effort")}
_DEFAULTS = {"read": None, "write": None, "exec_anywhere": True, "landlock": "best-effort",
             "network": "none", "proxy_socket": None, "proxy_port": 0, "seccomp": "require",
             "unix_sockets": True}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP = 1, 4, 22
PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 38, 39
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_MAX_CONNECTIONS, _CHUNK = 64, 65536

# -- Landlock (include/uapi/linux/landlock.h) ------------------------------------------------
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446  # the same on x86_64 and aarch64
_LL_VERSION, _LL_PATH_BENEATH, _LL_NET_PORT = 1, 1, 2
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_FILE_ONLY = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
# what every program may open for writing (nothing is stored or shown); not ttys nor ptys:
# outside a fresh /dev those are the user's terminals
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2

# -- seccomp (include/uapi/linux/seccomp.h, filter.h, audit.h) --------------------------------
_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_LD_ABS, _JEQ, _JGE, _JSET, _AND, _RET = 0x20, 0x15, 0x35, 0x45, 0x54, 0x06
_NR, _ARCH = 0, 4
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000  # x86_64's x32 ABI: other numbers, other rules; refused as a foreign arch
_NS_FLAGS = 0x7E020000  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET}: what unshare() would do
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_AF_UNIX, _AF_INET, _AF_INET6, _SOCK_STREAM, _SOCK_TYPE_MASK, _IPPROTO_TCP = 1, 2, 10, 1, 15, 6
_SYSCALLS = {  # name: (x86_64, aarch64)
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "process_madvise": (440, 440),  # ptrace by other names
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "mount": (165, 40),
    "umount2": (166, 39), "pivot_root": (155, 41), "unshare": (272, 97), "setns": (308, 268),
    # the new mount API does what mount() does
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "open_by_handle_at": (304, 265),  # opens by inode, past every mount (needs a capability)
    "io_uring_setup": (425, 425),  # io_uring's requests are not seen by seccomp
    "clone": (56, 220), "clone3": (435, 435), "personality": (135, 92), "ioctl": (16, 29),
    "socket": (41, 198),
}
_DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise",
           "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load", "init_module",
           "finit_module", "delete_module", "bpf", "perf_event_open", "userfaultfd", "mount",
           "umount2", "pivot_root", "unshare", "setns", "open_tree", "move_mount", "fsopen",
           "fsconfig", "fsmount", "fspick", "mount_setattr", "open_by_handle_at",
           "io_uring_setup")


def main(args: list[str]) -> None:
    if args == ["--probe"]:
        _probe()
    text = "{}"
    if args[:1] == ["--policy"] and len(args) >= 2:
        text, args = args[1], args[2:]
    elif args[:1] == ["--policy-file"] and len(args) >= 2:
        try:  # a policy too long for one argument (the kernel takes 128 KiB)
            fd = posix.open(args[1], posix.O_RDONLY)
            try:
                text = b"".join(iter(lambda: posix.read(fd, 1 << 20), b"")).decode()
            finally:
                posix.close(fd)
        except (OSError, UnicodeDecodeError) as exc:
            _fail(f"--policy-file: cannot read {args[1]}: {exc}")
        args = args[2:]
    if args[:1] != ["--"] or len(args) < 2:
        _fail("usage: confine.py [--policy JSON | --policy-file PATH] -- ARGV...  |  "
              "confine.py --probe")
    try:
        policy = parse_policy(text)
    except ValueError as exc:
        _fail(f"--policy: {exc}")
    argv = args[1:]
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if posix.geteuid() == 0:
        _drop_capabilities()
    posix.closerange(3, 0x7FFFFFFF)
    env = dict(posix.environ)
    port = 0
    if policy["network"] == "proxy":
        try:
            port = _start_forwarder(policy["proxy_socket"], policy["proxy_port"])
        except (OSError, ImportError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            _unconfined(f"the network proxy could not start ({reason})")
        url = f"http://127.0.0.1:{port}".encode()
        for name in (b"HTTP_PROXY", b"HTTPS_PROXY", b"ALL_PROXY"):
            env[name] = env[name.lower()] = url
        env.pop(b"NO_PROXY", None)
        env.pop(b"no_proxy", None)
    if policy["landlock"] != "off":
        missing = landlock(policy, port)
        if missing and policy["landlock"] == "require":
            _unconfined(f"Landlock is not available ({missing})")
    arch = posix.uname().machine
    if arch in _AUDIT_ARCH:
        missing = install_seccomp(seccomp_filter(arch, policy["network"],
                                                 policy["unix_sockets"]))
        if missing and policy["seccomp"] == "require":
            _unconfined(f"seccomp is not available ({missing})")
    _exec(argv, env)


def script_command() -> list[str]:
    """How silica starts this script: ``[python, "-I", "-S", path]``, ``path`` being its
    compiled bytecode (kept fresh in ``__pycache__``) when that folder is writable, so that a
    start skips compiling this file (about 9 ms of 20); else this file itself."""
    import importlib.util
    import py_compile

    source = __file__
    try:
        cached = importlib.util.cache_from_source(source)
        if not _fresh(cached, source):
            py_compile.compile(source, cfile=cached, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        return [sys.executable, "-I", "-S", cached]
    except (OSError, py_compile.PyCompileError, NotImplementedError, ValueError):
        return [sys.executable, "-I", "-S", source]


def _fresh(cached: str, source: str) -> bool:
    """Whether ``cached`` is this Python's bytecode of ``source`` as it is now (the check an
    import makes: a .pyc run directly is not checked)."""
    import importlib.util

    try:
        with open(cached, "rb") as file:
            head = file.read(16)
    except OSError:
        return False
    stat = posix.stat(source)
    return head == importlib.util.MAGIC_NUMBER + bytes(4) + b"".join(
        (int(v) & 0xFFFFFFFF).to_bytes(4, "little") for v in (stat.st_mtime, stat.st_size))


# -- the policy ----------------------------------------------------------------------------


def parse_policy(text: str) -> dict:
    """The policy in ``text`` (one JSON object) with every key filled in; ValueError saying
    what is wrong otherwise."""
    value = _json_object(text)
    unknown = sorted(set(value) - set(_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (known: {', '.join(_DEFAULTS)})")
    policy = {**_DEFAULTS, **value}
    for key in ("read", "write"):
        paths = policy[key]
        if paths is not None and (not isinstance(paths, list) or not all(
                isinstance(p, str) and p.startswith("/") and "\0" not in p for p in paths)):
            raise ValueError(f"{key!r} must be a list of absolute paths")
    for key, choices in _POLICY_CHOICES.items():
        if policy[key] not in choices:
            raise ValueError(f"{key!r} must be one of {', '.join(choices)}")
    for key in ("exec_anywhere", "unix_sockets"):
        if not isinstance(policy[key], bool):
            raise ValueError(f"'{key}' must be true or false")
    port = policy["proxy_port"]
    if type(port) is not int or not 0 <= port <= 65535:
        raise ValueError("'proxy_port' must be a number from 0 to 65535")
    sock = policy["proxy_socket"]
    if policy["network"] == "proxy" and not (isinstance(sock, str) and sock.startswith("/")):
        raise ValueError("network 'proxy' needs 'proxy_socket', an absolute path")
    return policy


class _JSONContext:
    """What ``_json.make_scanner`` reads: json.loads's defaults (importing ``json`` would
    bring ``re`` in and double this script's start)."""
    strict, object_hook, object_pairs_hook = True, None, None
    parse_float, parse_int = float, int

    @staticmethod
    def parse_constant(name: str) -> None:
        raise ValueError(f"{name} is not allowed")


def _json_object(text: str) -> dict:
    try:
        import _json

        # the stub names the scanner class as make_scanner's argument; any context object works
        scanner = _json.make_scanner(_JSONContext())  # type: ignore[arg-type]
        value, end = scanner(text.strip(), 0)
        good = end == len(text.strip())
    except (ImportError, StopIteration, SystemError, ValueError, RecursionError):
        good = False
    if not good:  # only for bad input: json says what is wrong
        import json

        try:
            value = json.loads(text, parse_constant=_JSONContext.parse_constant)
        except RecursionError:
            raise ValueError("not JSON: nested too deeply") from None
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


# -- libc through ctypes' C core -------------------------------------------------------------


_LIBC: dict = {}


def _libc(name: str):
    """libc's ``name`` returning a C long and keeping errno, the C long type and the ctypes
    core module (``ctypes`` itself only as a fallback: importing it doubles the start)."""
    if name not in _LIBC:
        try:
            import _ctypes as c

            class CLong(c._SimpleCData):
                _type_ = "l"

            class CFunction(c.CFuncPtr):
                _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
                _restype_ = CLong

            class Process:
                _handle = c.dlopen(None, 0)  # type: ignore[arg-type]  # None: the process itself

            # any object with a _handle stands for the library (the stub asks for a CDLL)
            _LIBC[name] = CFunction((name, Process())), CLong, c  # type: ignore[arg-type]
        except (ImportError, OSError, AttributeError, TypeError):
            import ctypes

            function = getattr(ctypes.CDLL(None, use_errno=True), name)
            function.restype = ctypes.c_long
            _LIBC[name] = function, ctypes.c_long, ctypes
    return _LIBC[name]


def _call(name: str, *args) -> tuple[int, int]:
    """``name(*args)`` with each argument passed as a C long (bytes: the address of a copy,
    None: 0); its result and errno."""
    try:
        function, long, c = _libc(name)
    except (ImportError, OSError, AttributeError):
        return -1, errno.ENOSYS  # no way to call C: as if the kernel had no such call
    values, keep = [], []
    for arg in args:
        if isinstance(arg, bytes):
            keep.append(_char_array(c, len(arg)).from_buffer_copy(arg))
            arg = c.addressof(keep[-1])
        values.append(long(arg or 0))
    c.set_errno(0)
    return function(*values), c.get_errno()


def _char_array(c, length: int):
    class CChar(c._SimpleCData):
        _type_ = "c"

    class Chars(c.Array):
        _type_, _length_ = CChar, length

    return Chars


def _prctl(option: int, value: int = 0) -> int:
    return _call("prctl", option, value, 0, 0, 0)[0]  # unused arguments must be 0


def _drop_capabilities() -> None:
    """Root keeps no capability, now or after an exec: the bounding and ambient sets are
    emptied, then the effective, permitted and inheritable ones (capset, version 3). Without
    bubblewrap (which drops them itself) this is what stops a tool silica runs as root from
    setting the host name, the clock or loading modules."""
    for cap in range(64):
        if _prctl(PR_CAPBSET_DROP, cap) != 0:
            break  # past the last capability this kernel knows
    _call("prctl", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (0x20080522).to_bytes(4, sys.byteorder) + bytes(4)  # _LINUX_CAPABILITY_VERSION_3
    _call("capset", header, bytes(24))


def _strerror(code: int) -> str:
    return posix.strerror(code) if code else "refused"


# -- Landlock --------------------------------------------------------------------------------


def landlock(policy: dict, proxy_port: int = 0) -> str | None:
    """Restrict this process (and what it starts) as ``policy`` says; None when done, else
    why Landlock is not available. Paths that do not exist are skipped."""
    abi, err = _call("syscall", _LL_CREATE, 0, 0, _LL_VERSION)
    if abi <= 0:
        if err == errno.ENOSYS:
            return "the kernel has no Landlock: Linux 5.13 or later is needed"
        return f"the kernel says: {_strerror(err)}; is landlock in the lsm= boot parameter?"
    fs = 0
    if policy["read"] is not None or policy["write"] is not None:
        fs = (1 << 13) - 1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
        fs |= _FS_IOCTL_DEV if abi >= 5 else 0
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 and policy["network"] != "all" else 0
    scoped = _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET if abi >= 6 else 0
    if not fs | net | scoped:
        return None  # nothing this kernel's Landlock can add
    attr = b"".join(v.to_bytes(8, sys.byteorder) for v in (fs, net, scoped))
    ruleset, err = _call("syscall", _LL_CREATE, attr, 8 * (1 + (abi >= 4) + (abi >= 6)), 0)
    if ruleset < 0:
        return f"creating a ruleset: {_strerror(err)}"
    try:
        # with exec_anywhere false, what the tool may write it may not execute
        write = fs & ~_FS_EXECUTE | (_FS_EXECUTE if policy["exec_anywhere"] else 0)
        read = _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE
        devices = (_DEVICES if fs else (), _FS_READ_FILE | _FS_WRITE_FILE)
        for paths, rights in ((policy["read"], read), (policy["write"], write), devices):
            for path in paths or ():
                _allow_path(ruleset, path, rights)
        if net and policy["network"] == "proxy":
            rule = _NET_CONNECT_TCP.to_bytes(8, sys.byteorder) + \
                proxy_port.to_bytes(8, sys.byteorder)
            _call("syscall", _LL_ADD_RULE, ruleset, _LL_NET_PORT, rule, 0)
        done, err = _call("syscall", _LL_RESTRICT, ruleset, 0)
        return None if done == 0 else f"restricting: {_strerror(err)}"
    finally:
        posix.close(ruleset)


def _allow_path(ruleset: int, path: str, rights: int) -> None:
    """Allow ``rights`` below ``path``. A path that is not there, or a rule the kernel
    refuses, allows nothing: a failure here only ever leaves the tool with less."""
    try:
        fd = posix.open(path, posix.O_PATH | posix.O_CLOEXEC)
    except OSError:
        return
    try:
        if not posix.fstat(fd).st_mode & 0o040000:  # a file takes file rights only
            rights &= _FS_FILE_ONLY
        rule = rights.to_bytes(8, sys.byteorder) + fd.to_bytes(4, sys.byteorder, signed=True)
        _call("syscall", _LL_ADD_RULE, ruleset, _LL_PATH_BENEATH, rule, 0)
    finally:
        posix.close(fd)


# -- seccomp ---------------------------------------------------------------------------------


def seccomp_filter(arch: str, network: str, unix_sockets: bool = True) -> bytes:
    """The classic BPF program (``struct sock_filter[]``, native byte order) that this script
    installs for ``arch`` ("x86_64" or "aarch64") and ``network`` ("none", "proxy", "all").
    Without ``unix_sockets`` no ``socket(AF_UNIX)`` is made either (``socketpair`` still
    works): a path socket of the host (a container engine's, an editor's, a session bus)
    cannot be reached, since a read-only mount does not stop ``connect()``."""
    if arch not in _AUDIT_ARCH or network not in NETWORKS:
        raise ValueError(f"no seccomp filter for {arch!r} with network {network!r}")
    nr = {name: numbers[arch == "aarch64"] for name, numbers in _SYSCALLS.items()}
    eperm, allow = _RET_ERRNO | errno.EPERM, _RET_ALLOW
    prog = [(_LD_ABS, 0, 0, _ARCH), (_JEQ, 1, 0, _AUDIT_ARCH[arch]),
            (_RET, 0, 0, _RET_KILL_PROCESS), (_LD_ABS, 0, 0, _NR)]
    if arch == "x86_64":
        prog += [(_JGE, 0, 1, _X32_BIT), (_RET, 0, 0, _RET_KILL_PROCESS)]
    for name in _DENIED:
        prog += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, eperm)]
    # clone3 passes its flags in memory that seccomp cannot read: libc falls back to clone
    prog += _only_if(nr["clone3"], [(_RET, 0, 0, _RET_ERRNO | errno.ENOSYS)])
    prog += _only_if(nr["clone"], [_arg(0), (_JSET, 0, 1, _NS_FLAGS), (_RET, 0, 0, eperm),
                                   (_RET, 0, 0, allow)])
    # TIOCSTI pushes input into the terminal the user types in; TIOCLINUX can read its screen
    prog += _only_if(nr["ioctl"], [_arg(1), (_JEQ, 2, 0, _TIOCSTI), (_JEQ, 1, 0, _TIOCLINUX),
                                   (_RET, 0, 0, allow), (_RET, 0, 0, eperm)])
    # only the query and the default: no READ_IMPLIES_EXEC, no ADDR_NO_RANDOMIZE
    prog += _only_if(nr["personality"], [_arg(0), (_JEQ, 2, 0, 0), (_JEQ, 1, 0, 0xFFFFFFFF),
                                         (_RET, 0, 0, eperm), (_RET, 0, 0, allow)])
    if not unix_sockets:
        prog += [(_JEQ, 0, 3, nr["socket"]), _arg(0), (_JEQ, 0, 1, _AF_UNIX),
                 (_RET, 0, 0, eperm), (_LD_ABS, 0, 0, _NR)]
    if network == "none":  # Unix sockets only (no IP, netlink, packet, vsock...)
        prog += _only_if(nr["socket"], [_arg(0), (_JEQ, 0, 1, _AF_UNIX), (_RET, 0, 0, allow),
                                        (_RET, 0, 0, eperm)])
    elif network == "proxy":
        # TCP too, to reach the forwarder (the network namespace, or Landlock's port rule
        # without one, keeps it there); UDP, raw, SCTP and the rest stay refused: Landlock
        # does not see them
        prog += _only_if(nr["socket"], [
            _arg(0), (_JEQ, 8, 0, _AF_UNIX), (_JEQ, 1, 0, _AF_INET), (_JEQ, 0, 7, _AF_INET6),
            _arg(1), (_AND, 0, 0, _SOCK_TYPE_MASK), (_JEQ, 0, 4, _SOCK_STREAM),
            _arg(2), (_JEQ, 1, 0, 0), (_JEQ, 0, 1, _IPPROTO_TCP),
            (_RET, 0, 0, allow), (_RET, 0, 0, eperm)])
    prog.append((_RET, 0, 0, allow))
    return b"".join(code.to_bytes(2, sys.byteorder) + bytes((jt, jf)) + k.to_bytes(4, sys.byteorder)
                    for code, jt, jf, k in prog)


def _arg(index: int) -> tuple[int, int, int, int]:
    """Load the low 32 bits of argument ``index`` (little-endian: the first word)."""
    return (_LD_ABS, 0, 0, 16 + 8 * index)


def _only_if(number: int, block: list) -> list:
    """``block`` runs for syscall ``number`` (and ends in a return); others skip past it."""
    return [(_JEQ, 0, len(block), number), *block]


def install_seccomp(program: bytes) -> str | None:
    """Install ``program`` on this process; None when done, else why it could not be."""
    _, _, c = _libc("prctl")
    instructions = _char_array(c, len(program)).from_buffer_copy(program)
    # struct sock_fprog: an unsigned short, padding, then the pointer
    fprog = (len(program) // 8).to_bytes(2, sys.byteorder) + bytes(6) + \
        c.addressof(instructions).to_bytes(8, sys.byteorder)
    done, err = _call("prctl", PR_SET_SECCOMP, 2, fprog, 0, 0)
    return None if done == 0 else f"the kernel says: {_strerror(err)}"


# -- the proxy forwarder ---------------------------------------------------------------------


def _start_forwarder(target: str, port: int) -> int:
    """Listen on 127.0.0.1:``port`` and fork a process relaying each connection to the Unix
    socket ``target``; the port listened on. The forwarder dies with this process."""
    import _socket

    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(_MAX_CONNECTIONS)
    port = listener.getsockname()[1]
    parent = posix.getpid()
    if posix.fork() == 0:
        try:
            _prctl(PR_SET_PDEATHSIG, _signal.SIGKILL)
            if posix.getppid() == parent:  # else it died before the line above
                _prctl(PR_SET_DUMPABLE, 0)  # the tool, its parent, cannot write its memory
                null = posix.open("/dev/null", posix.O_RDWR)
                for fd in (0, 1, 2):
                    posix.dup2(null, fd)
                _forward(listener, target, parent)
        finally:
            posix._exit(0)
    listener.close()
    return port


def _forward(listener, target: str, parent: int) -> None:
    import _socket
    import select

    listener.setblocking(False)
    flows: list[list] = []  # [source, destination, pending bytes, source ended, peer flow]
    while posix.getppid() == parent:
        wanted: dict[int, int] = {}
        if len(flows) < 2 * _MAX_CONNECTIONS:
            wanted[listener.fileno()] = select.POLLIN
        for source, dest, pending, ended, _ in flows:
            if pending:
                wanted[dest.fileno()] = wanted.get(dest.fileno(), 0) | select.POLLOUT
            elif not ended:
                wanted[source.fileno()] = wanted.get(source.fileno(), 0) | select.POLLIN
        poller = select.poll()
        for fd, mask in wanted.items():
            poller.register(fd, mask)
        ready = dict(poller.poll(1000))
        if ready.get(listener.fileno()):
            flows += _accept(listener, target, _socket)
        dead = []
        for flow in flows:
            source, dest, pending, ended, peer = flow
            try:
                if not pending and not ended and ready.get(source.fileno()):
                    data = source.recv(_CHUNK)
                    flow[2], flow[3] = data, not data
                    if not data:
                        dest.shutdown(_socket.SHUT_WR)
                if flow[2] and ready.get(dest.fileno()):
                    flow[2] = flow[2][dest.send(flow[2]):]
            except BlockingIOError:
                pass
            except OSError:
                dead += [flow, peer]
            if flow[3] and peer[3] and not flow[2] and not peer[2]:
                dead += [flow, peer]
        gone = {id(flow) for flow in dead}  # a flow and its peer: both sockets
        for flow in dead:
            flow[0].close()
        flows = [flow for flow in flows if id(flow) not in gone]


def _accept(listener, target: str, _socket) -> list:
    try:
        fd, _ = listener._accept()
    except OSError:
        return []
    client = _socket.socket(fileno=fd)
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.settimeout(10)
        upstream.connect(target)
    except OSError:
        client.close()
        upstream.close()
        return []
    client.setblocking(False)
    upstream.setblocking(False)
    there = [client, upstream, b"", False, None]
    back = [upstream, client, b"", False, there]
    there[4] = back
    return [there, back]


# -- probing and starting ---------------------------------------------------------------------


def _probe() -> None:
    """Print which layers work here, each tried in a child (this process stays unconfined)."""
    result = {"landlock_abi": 0, "seccomp": False, "arch": "", "no_new_privs": False}
    try:
        result["arch"] = arch = posix.uname().machine
        result["no_new_privs"] = _in_child(
            lambda: _prctl(PR_SET_NO_NEW_PRIVS, 1) == 0 and _prctl(PR_GET_NO_NEW_PRIVS) == 1) == 1
        result["landlock_abi"] = _in_child(_probe_landlock)
        if arch in _AUDIT_ARCH:
            result["seccomp"] = _in_child(lambda: _probe_seccomp(arch)) == 1
    except Exception:  # noqa: BLE001 - the probe answers whatever happens
        pass
    posix.write(1, ("{" + ", ".join(f'"{k}": {_json_value(v)}' for k, v in result.items())
                    + "}\n").encode())
    posix._exit(0)


def _json_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int) else '"' + "".join(
        c if c.isalnum() or c in "_-." else "?" for c in value) + '"'


def _probe_landlock() -> int:
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    abi = _call("syscall", _LL_CREATE, 0, 0, _LL_VERSION)[0]
    policy: dict[str, object] = {**_DEFAULTS, "read": [], "write": [], "network": "all"}
    return abi if abi > 0 and landlock(policy) is None else 0


def _probe_seccomp(arch: str) -> bool:
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if install_seccomp(seccomp_filter(arch, "none")) is not None:
        return False
    return _call("syscall", _SYSCALLS["keyctl"][arch == "aarch64"], 0, 0, 0)[1] == errno.EPERM


def _in_child(check) -> int:
    """Run ``check`` in a forked child; what it returned as a number (0 if it failed)."""
    pid = posix.fork()
    if pid == 0:
        code = 0
        try:
            code = int(check())
        finally:
            posix._exit(code)
    _, status = posix.waitpid(pid, 0)
    return posix.WEXITSTATUS(status) if posix.WIFEXITED(status) else 0


def _exec(argv: list[str], env: dict) -> None:
    """execvp: ARGV with the signal dispositions a fresh process has."""
    for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):  # Python ignores them; ARGV must not
        _signal.signal(sig, _signal.SIG_DFL)
    name = argv[0]
    if "/" in name:
        candidates = [name]
    else:
        path = env.get(b"PATH", b"/bin:/usr/bin").decode(errors="surrogateescape")
        candidates = [f"{folder or '.'}/{name}" for folder in path.split(":")]
    first: OSError | None = None
    for candidate in candidates:
        try:
            posix.execve(candidate, argv, env)
        except OSError as exc:
            # as execvp: a missing file tries the next folder; another error is remembered
            if first is None or first.errno in (errno.ENOENT, errno.ENOTDIR):
                first = exc
    reason = (first.strerror or first) if first else "no such file"
    posix.write(2, f"could not start {name}: {reason}\n".encode())
    posix._exit(_EXIT_SPAWN_FAILED)


def _unconfined(reason: str) -> None:
    posix.write(2, f"silica sandbox: {reason}\n".encode())
    posix._exit(_EXIT_UNCONFINED)


def _fail(message: str) -> None:
    posix.write(2, f"confine.py: {message}\n".encode())
    posix._exit(_EXIT_USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
