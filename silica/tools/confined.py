"""Running one tool process in its sandbox: the call's folder, its proxy, the mode's rules.

    raw = await run_confined(argv, sandbox=Sandboxed(policy, confinement), env=env, cwd=cwd,
                             timeout=60)
    raw = await run_script(path, ["--toolspec"], sandbox=..., env=env, timeout=120)

``run_confined`` wraps ``run_process`` (bounded output, a timeout, nothing left running): it
makes the call's private folder (``/tmp`` inside, removed afterwards), starts the network
proxy when the tool was granted hosts, builds the confined command (``silica.tools.sandbox``)
and applies ``[sandbox] mode``:

- ``require``: a process that cannot be confined as its policy says is not started; the
  result's ``error`` names what is missing and how to fix it;
- ``best-effort`` (the default): it runs with the layers that work, and silica says once, on
  its stderr, what is not confined;
- ``off``: it runs as the user, unconfined.

``run_script`` runs a tool file: uv makes its environment outside (``silica.tools.pyenv``),
then only the file's own code runs, confined.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from silica.security.sandbox import Confinement, SandboxPolicy, tilde
from silica.security.text import safe_text
from silica.tools.model import DEFAULT_STDERR_CAP, DEFAULT_STDOUT_CAP, RawOutput
from silica.tools.runner import run_process

_warned: set[str] = set()


@dataclass(frozen=True)
class Sandboxed:
    """How one process runs: the user's policy and this run's confinement."""

    policy: SandboxPolicy
    confinement: Confinement
    cache_folder: Path | None = None  # where the probe's answer is kept


def _warn_once(text: str, key: str | None = None) -> None:
    """Print ``text`` on silica's stderr unless ``key`` (default: the text) was said before
    by this process."""
    if (key or text) not in _warned:
        _warned.add(key or text)
        print(safe_text(f"silica: {text}"), file=sys.stderr)


class SandboxRefused(Exception):
    """``[sandbox] mode = "require"`` and this process cannot be confined; the message says
    what is missing and how to fix it."""


@contextlib.asynccontextmanager
async def confined_command(argv: list[str], sandbox: Sandboxed | None, cwd: Path,
                           notes: list[str] | None = None):
    """``(command, env, proxy)`` for running ``argv`` confined while the context lasts: the
    command line, what to add to its environment (``TMPDIR``, the call's folder) and the
    proxy (``None`` without one; its ``denied`` hosts are known afterwards). Raises
    ``SandboxRefused`` under ``require`` when a layer is missing.

    When the context ends, what the run planted at protected paths is moved aside
    (``remove_planted``); the notes saying so go to ``notes`` when given (a result's), else
    to silica's stderr (a stdio MCP server has no result to carry them)."""
    if sandbox is None or sandbox.policy.mode == "off":
        yield argv, {}, None
        return
    from silica.tools.sandbox import PROXY_NAME, new_call_dir, probe, wrap

    conf = sandbox.confinement
    layers = probe(sandbox.cache_folder)
    missing = layers.missing(conf)
    if missing and sandbox.policy.mode == "require":
        raise SandboxRefused(
            "silica sandbox: " + conf.label + " was not run, because [sandbox] mode = "
            "\"require\" and this machine leaves unconfined: " + "; ".join(missing) +
            ". Fix that (see 'silica sandbox'), or set [sandbox] mode = \"best-effort\"")
    if missing:  # once per process, whichever run meets it first
        _warn_once("tools run only partly confined here: not confined: " + "; ".join(missing)
                   + " (see 'silica sandbox'; [sandbox] mode = \"require\" refuses instead)",
                   key="partly confined")
    try:
        call_dir = new_call_dir()
    except OSError as exc:
        raise SandboxRefused(f"silica sandbox: {conf.label} was not run: its own folder "
                             f"could not be made ({exc})") from None
    for folder in conf.writable:  # a granted folder is made, not silently left out
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
    absent = absent_protected(conf)
    try:
        async with _proxy(conf, call_dir / PROXY_NAME) as proxy:
            yield (wrap(argv, conf, layers, cwd=cwd, call_dir=call_dir,
                        proxy_port_socket=call_dir / PROXY_NAME),
                   {"TMPDIR": str(call_dir)}, proxy)
    finally:
        await asyncio.to_thread(shutil.rmtree, call_dir, True)
        said = await asyncio.to_thread(remove_planted, conf.label, absent)
        if notes is not None:
            notes += said
        else:
            for note in said:
                print(safe_text(f"silica: {note}"), file=sys.stderr)


@dataclass
class Protected:
    """What the protected paths hold before a run: those not there (bubblewrap can make
    read-only only what exists), the entries of those that are folders, and the size and
    time of those that are files (without bubblewrap Landlock cannot keep either)."""

    absent: list[Path]
    entries: dict[Path, set[str]]
    files: dict[Path, tuple[int, int]]


def absent_protected(conf: Confinement) -> Protected:
    """The protected paths as they are before a run (see ``remove_planted``). A repository
    the run makes itself (``git init`` where there was no ``.git``) is its own."""
    absent = [p for p in conf.protected if not os.path.lexists(p)
              and not (p.parent.name == ".git" and not os.path.lexists(p.parent))]
    entries: dict[Path, set[str]] = {}
    files: dict[Path, tuple[int, int]] = {}
    for path in conf.protected:
        with contextlib.suppress(OSError):
            st = path.lstat()
            if stat.S_ISDIR(st.st_mode):
                entries[path] = set(os.listdir(path))
            elif stat.S_ISREG(st.st_mode):
                files[path] = (st.st_size, st.st_mtime_ns)
    return Protected(absent, entries, files)


def remove_planted(label: str, before: Protected) -> list[str]:
    """Move aside (to ``NAME.silica-quarantine``) what a finished run made at the protected
    paths or inside the protected folders, so it never runs, and name a protected file it
    changed; a note for each."""
    made = [p for p in before.absent if os.path.lexists(p)]
    for folder, names in before.entries.items():
        with contextlib.suppress(OSError):
            made += [folder / n for n in sorted(set(os.listdir(folder)) - names)
                     if ".silica-quarantine" not in n]
    notes = []
    for path in made:
        aside = path.with_name(path.name + ".silica-quarantine")
        n = 1
        while os.path.lexists(aside):
            n += 1
            aside = path.with_name(f"{path.name}.silica-quarantine-{n}")
        try:
            os.rename(path, aside)
        except OSError as exc:
            notes.append(f"{label} made {tilde(path)}, which no tool may write, and it could "
                         f"not be moved aside ({exc.strerror or exc}): remove it yourself")
            continue
        notes.append(f"{label} made {tilde(path)}, which no tool may write (it runs later, "
                     f"outside the sandbox); it was moved to {tilde(aside)}")
    for path, (size, mtime) in before.files.items():
        with contextlib.suppress(OSError):
            st = path.lstat()
            if (st.st_size, st.st_mtime_ns) != (size, mtime):
                notes.append(f"{label} changed {tilde(path)}, which no tool may write (it "
                             "runs later, outside the sandbox): check it before it runs")
    return notes


def denied_note(conf: Confinement, proxy) -> str:
    """What the person and the model are told about hosts the proxy refused ("" if none),
    naming the setting that grants them to this run."""
    if proxy is None or not proxy.denied:
        return ""
    return "".join(f"\n[silica: {conf.label} may not reach {host} (not granted). Grant it "
                   "in config.toml: " + conf.network_setting.format(
                       host=host.rsplit(":", 1)[0]) + "]"
                   for host in dict.fromkeys(proxy.denied))


async def run_confined(argv: list[str], *, sandbox: Sandboxed | None,
                       env: dict[str, str] | None, cwd: Path | None, timeout: float,
                       stdout_cap: int = DEFAULT_STDOUT_CAP,
                       stderr_cap: int = DEFAULT_STDERR_CAP,
                       on_stderr_line: Callable[[str], None] | None = None) -> RawOutput:
    """Run ``argv`` as ``run_process`` does, confined as ``sandbox`` says (unconfined when
    ``sandbox`` is ``None`` or its mode is ``off``)."""
    planted: list[str] = []
    try:
        async with confined_command(argv, sandbox, cwd or Path.cwd(),
                                    planted) as (command, extra, proxy):
            raw = await run_process(command, env={**(os.environ if env is None else env), **extra},
                                    cwd=cwd, timeout=timeout, stdout_cap=stdout_cap,
                                    stderr_cap=stderr_cap, on_stderr_line=on_stderr_line)
            if sandbox is not None and (note := denied_note(sandbox.confinement, proxy)):
                raw.notes.append(note.strip())
    except SandboxRefused as exc:
        return RawOutput(b"", b"", None, 0.0, error=str(exc))
    raw.notes += [f"[silica: {n}]" for n in planted]
    return raw


@contextlib.asynccontextmanager
async def _proxy(conf: Confinement, socket_path: Path):
    if conf.network_kind != "proxy":
        yield None
        return
    from silica.security.netproxy import HostRules, NetworkProxy

    try:
        proxy = NetworkProxy(HostRules.parse(list(conf.network)), socket_path,
                             tool=conf.label)
        await proxy.__aenter__()
    except OSError as exc:
        raise SandboxRefused(f"silica sandbox: {conf.label} was not run: its network proxy "
                             f"could not start ({exc}); set TMPDIR to a short path") from None
    try:
        yield proxy
    finally:
        await proxy.__aexit__(None, None, None)


async def run_script(path: Path, args: list[str], *, sandbox: Sandboxed | None,
                     env: dict[str, str], timeout: float, cache_folder: Path | None = None,
                     stdout_cap: int = DEFAULT_STDOUT_CAP,
                     on_stderr_line: Callable[[str], None] | None = None) -> RawOutput:
    """Run the tool file ``path`` with ``args`` in its own folder: its environment made by
    uv (within ``timeout``), then the file run confined with the time left."""
    import time

    from silica.tools.pyenv import script_python

    started = time.monotonic()
    found = await script_python(path, timeout=timeout, env=env, cache_folder=cache_folder)
    if isinstance(found, str):
        return RawOutput(b"", b"", None, time.monotonic() - started, error=found)
    left = max(0.1, timeout - (time.monotonic() - started))
    raw = await run_confined(found.argv(path, args), sandbox=sandbox, env=found.environ(env),
                             cwd=path.parent, timeout=left, stdout_cap=stdout_cap,
                             on_stderr_line=on_stderr_line)
    raw.duration, raw.timeout = time.monotonic() - started, timeout
    return raw
