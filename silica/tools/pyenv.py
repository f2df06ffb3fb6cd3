"""A tool file's Python: its environment made by uv outside any sandbox, then run directly.

    found = await script_python(path, timeout=60, cache_folder=cache_dir() / "envs")
    if isinstance(found, str): ...            # why uv could not make it (shown to the user)
    argv = found.argv(path, ["--toolspec"])   # [<env>/bin/python, path, --toolspec]
    env = found.environ(env)                  # VIRTUAL_ENV, PATH as ``uv run`` sets them

uv resolves and installs the file's inline dependencies (PEP 723) with ``uv sync --script
--compile-bytecode``, where the package index is reachable and the uv cache writable (the
bytecode is written there once, since a confined run cannot write it); only the tool's own code then
runs, confined (``silica.tools.sandbox``), with the environment's interpreter. A file without
an inline-metadata block runs with the interpreter ``uv python find`` picks, as ``uv run
--script`` would. The answer is kept under ``$SILICA_HOME/cache/envs/``, keyed by the file's
path, its metadata block and the uv binary, so an unchanged tool costs no uv process; an entry
whose interpreter has gone (the uv cache was cleaned) is made again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from silica.tools.cache import SpecCache
from silica.tools.uvbin import find_uv, uv_identity

_BLOCK = re.compile(r"(?m)^# /// script$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
_FORMAT = 2  # 2: environments are made with their bytecode (entries of 1 are made again)
_OUTPUT_CAP = 1024 * 1024


@dataclass(frozen=True)
class ScriptPython:
    """The interpreter that runs one tool file, and its environment folder (if it has one)."""

    python: str
    env_dir: str | None = None
    uv: str = ""

    def argv(self, path: Path, args: list[str]) -> list[str]:
        return [self.python, str(path), *args]

    def environ(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with what ``uv run --script`` adds: the environment's ``bin`` first on
        ``PATH``, ``VIRTUAL_ENV``, and ``UV``."""
        out = dict(env)
        if self.env_dir:
            out["VIRTUAL_ENV"] = self.env_dir
            out["PATH"] = os.pathsep.join(
                [str(Path(self.env_dir) / "bin"), *filter(None, [env.get("PATH")])])
        if self.uv:
            out["UV"] = self.uv
        return out


def metadata_block(source: str) -> str | None:
    """The PEP 723 ``script`` block of ``source``, or ``None``."""
    match = _BLOCK.search(source)
    return match.group("content") if match else None


def _key(path: Path, block: str | None) -> str:
    h = hashlib.sha256()
    for part in (f"silica-env/{_FORMAT}".encode(), os.fsencode(path),
                 uv_identity().encode("utf-8", "surrogateescape"),
                 (block or "\0none").encode("utf-8", "surrogateescape")):
        h.update(part + b"\0")  # a file name need not be UTF-8
    return h.hexdigest()


def _cached(cache: SpecCache | None, key: str) -> ScriptPython | None:
    entry = cache.get(key) if cache else None
    if entry is None:
        return None
    try:
        found = ScriptPython(python=entry["python"], env_dir=entry.get("env_dir"))
    except (KeyError, TypeError, AttributeError):
        return None
    if not (isinstance(found.python, str) and os.access(found.python, os.X_OK)):
        return None  # the uv cache was cleaned: make it again
    return replace(found, uv=find_uv())


def uv_environment(env: dict[str, str]) -> dict[str, str]:
    """What uv itself runs with: the tool's environment plus the user's ``UV_*`` settings
    (an index's credentials among them); uv is silica's own helper, not the tool."""
    out = {**env, **{k: v for k, v in os.environ.items() if k.startswith("UV_")}}
    out.pop("VIRTUAL_ENV", None)  # silica's own venv is not the tool's (uv would inspect it)
    return out


async def script_python(path: Path, *, timeout: float, env: dict[str, str],
                        cache_folder: Path | None = None) -> ScriptPython | str:
    """The interpreter for the tool file ``path``, its environment made (or checked) by uv;
    a str saying why not (uv's own words) when uv could not."""
    from silica.errors import UvNotFound
    from silica.tools.runner import run_process

    try:
        source = path.read_text(encoding="utf-8", errors="replace")
        uv = find_uv()
    except UvNotFound as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    block = metadata_block(source)
    key = _key(path, block)
    cache = SpecCache(cache_folder) if cache_folder else None
    found = _cached(cache, key)
    if found is not None:
        return found
    if block is None:
        argv = [uv, "python", "find"]
    else:
        # With its bytecode: a confined tool cannot write it (the environment is read-only
        # there), so without it every run compiled its dependencies again (cyclopts: 0.27 s
        # a run instead of 0.1 s).
        argv = [uv, "sync", "--quiet", "--script", str(path), "--output-format", "json",
                "--compile-bytecode"]
    raw = await run_process(argv, env=uv_environment(env), cwd=path.parent, timeout=timeout,
                            stdout_cap=_OUTPUT_CAP)
    if raw.error or raw.timed_out or raw.exit_code != 0:
        why = (raw.error or (f"did not finish within {timeout:g} s" if raw.timed_out else "")
               or raw.stderr_tail(600) or f"exit code {raw.exit_code}")
        return f"uv could not prepare the environment of {path.name}: {why}"
    try:
        found = replace(_parse(raw.stdout, block is None), uv=uv)
    except (ValueError, KeyError, TypeError, IndexError):
        return (f"uv could not prepare the environment of {path.name}: it printed an answer "
                f"silica does not understand ({raw.stdout[:200]!r}); check 'uv --version'")
    if cache:
        cache.put(key, {"python": found.python, "env_dir": found.env_dir})
    return found


def _parse(stdout: bytes, bare: bool) -> ScriptPython:
    if bare:
        python = stdout.decode().strip().splitlines()[-1]
        if not os.path.isabs(python):
            raise ValueError(python)
        return ScriptPython(python=python)
    answer = json.loads(stdout)
    environment = answer["sync"]["environment"]
    python = environment["python"]["path"]
    if not (isinstance(python, str) and os.path.isabs(python)):
        raise ValueError(python)
    return ScriptPython(python=python, env_dir=str(environment["path"]))
