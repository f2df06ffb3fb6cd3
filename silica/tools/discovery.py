"""Discovery: tool folders -> tool files -> specs (cached) -> tools with a status each.

Specs are read with ``uv run --script FILE --toolspec``, several files at once up to a
bound, each with a timeout. A file whose spec cannot be read still gives a row, named after
the file, with the reason. When two folders hold a tool of the same name, the folder with
the lower precedence wins and the other tool is listed as shadowed; the tool that wins is
the one that runs. Built-in tools (``silica_builtin_tools``) are listed too, with their
origin (``builtin``, ``mcp:<server>``); they lose a name clash to any tool file, except
silica's own built-ins (origin ``builtin``), which a file may replace only when the settings
say ``tools.allow_shadow_builtins``.

Files in an untrusted folder (a project not yet trusted with ``silica trust``) are listed
with status ``untrusted``, named after the file: they are not read, run or written beside,
and take no part in name clashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy
from pydantic import ValidationError

from silica.config import Settings
from silica.security.env import EnvPolicy
from silica.security.sandbox import SandboxPolicy
from silica.security.trust import trust_command
from silica.tools.builtin import BuiltinTool
from silica.tools.cache import SpecCache, spec_cache_key
from silica.tools.clashes import BUILTIN_ORIGIN, resolve_clashes
from silica.tools.environment import from_pack, granted_env, tool_env, tool_sandbox
from silica.tools.helper import HELPER_NAME, ensure_helper, helper_version
from silica.tools.metadata import parse_metadata
from silica.tools.model import (
    Tool,
    ToolFolder,
    ToolMetadata,
    ToolSpec,
    ToolStatus,
    explain_validation_error,
)
from silica.tools.spec_output import parse_toolspec_output, refusal_hint
from silica.tools.uvbin import uv_identity

Progress = Callable[[int, int], None]
# Built-in tools sit after every folder a plugin may add, so any tool file beats them.
BUILTIN_FOLDER = ToolFolder(Path("<builtin>"), BUILTIN_ORIGIN, 2000)


@dataclass
class DiscoveryOptions:
    spec_timeout: float = 120.0  # the first run of a tool may install its dependencies
    auth_timeout: float = 30.0
    parallel: int = max(4, 2 * (os.cpu_count() or 2))
    # Secrets withheld from tools and those granted (``silica.security.env``).
    env_policy: EnvPolicy = field(default_factory=EnvPolicy)
    allow_shadow_builtins: bool = False
    # How tool processes are confined (``silica.security.sandbox``); None: unconfined.
    sandbox: SandboxPolicy | None = None


@dataclass
class Discovery:
    """Every tool found, winners and shadowed alike, plus problems with folders.

    ``tools`` holds the tools of tool files, ``builtins`` the built-in tools; ``all_tools``
    is both, in precedence order.
    """

    tools: list[Tool] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    specs_fetched: int = 0  # how many files were run for their spec (cache misses)
    builtins: list[Tool] = field(default_factory=list)

    @property
    def all_tools(self) -> list[Tool]:
        return [*self.tools, *self.builtins]

    def runnable(self) -> dict[str, Tool]:
        """The tool that wins each name, by name (tools are in precedence order)."""
        winners: dict[str, Tool] = {}
        for t in self.all_tools:
            if t.status not in (ToolStatus.SHADOWED, ToolStatus.UNTRUSTED):
                winners.setdefault(t.name, t)
        return winners


@dataclass
class _File:
    path: Path
    folder: ToolFolder
    source: bytes = b""
    key: str = ""
    metadata: ToolMetadata = field(default_factory=ToolMetadata)
    raw: Any = None  # parsed --toolspec JSON
    error: str = ""
    fetched: bool = False
    untrusted: bool = False


def tool_folders(pm: pluggy.PluginManager, cwd: Path, home: Path) -> list[ToolFolder]:
    """Every folder plugins name, by precedence, each real folder once, as an absolute path
    (tools run in their own folder, so a relative path would point elsewhere there)."""
    seen: dict[Path, ToolFolder] = {}
    for group in pm.hook.silica_tool_folders(cwd=cwd, home=home):
        for folder in group or []:
            key = Path(os.path.abspath(folder.path))
            trusted = folder.trusted or (key in seen and seen[key].trusted)
            if key not in seen or folder.precedence < seen[key].precedence:
                seen[key] = dataclasses.replace(folder, path=key, trusted=trusted)
            else:  # one folder named twice is trusted if any naming trusts it
                seen[key] = dataclasses.replace(seen[key], trusted=trusted)
    return sorted(seen.values(), key=lambda f: f.precedence)


async def discover(pm: pluggy.PluginManager, cwd: Path, home: Path, cache: SpecCache,
                   options: DiscoveryOptions | None = None,
                   progress: Progress | None = None,
                   settings: Settings | None = None) -> Discovery:
    """Every tool in the folders plugins name, plus the built-in tools registered with
    ``settings`` (default: ``Settings()``)."""
    result, files = _scan_all(pm, cwd, home, cache)
    return await _complete(result, files, pm, cache, options, progress, settings)


async def _complete(result: Discovery, files: list[_File], pm, cache: SpecCache,
                    options: DiscoveryOptions | None, progress: Progress | None,
                    settings: Settings | None) -> Discovery:
    """Fetch the specs the scan did not find cached, check authorizations, add built-ins."""
    import asyncio

    options = options or DiscoveryOptions()
    todo = [f for f in files if not f.error and f.raw is None]
    if todo:
        await _fetch_all(todo, pm, cache, options, progress)
    result.specs_fetched = len(todo)
    per_file = [(f, _tools_of(f)) for f in files]
    for _, tools in per_file:
        result.tools.extend(tools)
    # In a thread: a built-in source may block (the MCP source starts its servers).
    result.builtins = await asyncio.to_thread(builtin_tools, pm, result.warnings, settings)
    _settle(result, options)
    # Only after name clashes are settled: a file is authorized with the grants of the
    # names it wins, so a shadowed tool never receives what was granted to its namesake.
    for f, tools in per_file:
        if _needs_authorization(f, tools):
            _mark_unauthorized(tools, await _check_authorization(f, tools, pm, cache, options))
    return _note_env(result, options, cache)


def _settle(result: Discovery, options: DiscoveryOptions) -> None:
    """Settle name clashes: the winner of each name keeps its status, the rest are
    shadowed (``silica.tools.clashes``)."""
    result.warnings.extend(resolve_clashes(result.all_tools, options.allow_shadow_builtins))


def _note_env(result: Discovery, options: DiscoveryOptions, cache: SpecCache) -> Discovery:
    """Note what each tool asked for of the environment and the sandbox, and what it gets."""
    environ = dict(os.environ)
    for tool in result.all_tools:
        if tool.builtin is None and tool.status is not ToolStatus.UNTRUSTED:
            tool.env_access = options.env_policy.access(
                environ, tool.name, tool.metadata.env, from_pack(tool))
            if options.sandbox is not None:
                meta = tool.metadata
                tool.sandbox = options.sandbox.access(tool.name, meta.network, meta.write,
                                                      meta.display, from_pack(tool))
                _refuse_under_require(tool, cache)
    return result


def _refuse_under_require(tool: Tool, cache: SpecCache) -> None:
    """Under ``[sandbox] mode = "require"`` a tool this machine cannot confine is listed as
    an error, not offered (even when its spec was cached before)."""
    access = tool.sandbox
    if access is None or access.mode != "require" or not tool.ok:
        return
    from silica.tools.sandbox import probe

    missing = probe(cache.folder.parent).missing(access.confinement)
    if missing:
        tool.status = ToolStatus.ERROR
        tool.reason = ("[sandbox] mode = \"require\" and this machine leaves unconfined: "
                       + "; ".join(missing) + ". Fix that (see 'silica sandbox'), or set "
                       "[sandbox] mode = \"best-effort\"")


def discover_blocking(pm: pluggy.PluginManager, cwd: Path, home: Path, cache: SpecCache,
                      options: DiscoveryOptions | None = None,
                      progress: Progress | None = None,
                      settings: Settings | None = None) -> Discovery:
    """``discover`` for callers without an event loop. When every spec is cached and no tool
    needs an authorization check, no process is started and no event loop either: a warm
    ``silica tools list`` costs little more than starting Python."""
    result, files = _scan_all(pm, cwd, home, cache)
    if not any(f.raw is None and not f.error for f in files):
        per_file = [(f, _tools_of(f)) for f in files]
        if not any(_needs_authorization(f, tools) for f, tools in per_file):
            options = options or DiscoveryOptions()
            for _, tools in per_file:
                result.tools.extend(tools)
            result.builtins = builtin_tools(pm, result.warnings, settings)
            _settle(result, options)
            return _note_env(result, options, cache)
    import asyncio  # processes to run: the scan is reused, not done again

    return asyncio.run(_complete(result, files, pm, cache, options, progress, settings))


def _scan_all(pm, cwd: Path, home: Path, cache: SpecCache) -> tuple[Discovery, list[_File]]:
    """Every tool file with its source, metadata and cached spec (``raw`` None if none)."""
    result = Discovery()
    files: list[_File] = []
    for folder in tool_folders(pm, cwd, home):
        files.extend(_scan(folder, result.warnings))
    uv_id = uv_identity()
    version = helper_version()
    helpers: dict[Path, list[str]] = {}
    for f in files:
        if f.untrusted:
            continue  # nothing of an untrusted folder is read
        try:
            f.source = f.path.read_bytes()
        except OSError as exc:
            f.error = f"cannot read the file: {exc.strerror or exc}"
            continue
        f.metadata = parse_metadata(f.source.decode("utf-8", errors="replace"))
        if f.path.parent not in helpers:
            helpers[f.path.parent] = _helper_hashes(f.path.parent)
        f.key = spec_cache_key(f.source, helpers[f.path.parent], version, uv_id)
        f.raw = cache.get(f.key)
    return result, files


def builtin_tools(pm: pluggy.PluginManager, warnings: list[str],
                  settings: Settings | None = None) -> list[Tool]:
    """The tools plugins register through ``silica_builtin_tools``, in pluggy's call order
    (the plugin registered last first), each plugin's in the order it registers them.

    A plugin that raises, or registers something that is not a ``BuiltinTool``, adds a
    warning; a name registered twice keeps the first, so a third-party plugin's tool wins
    over a default plugin's of the same name, and the other is marked invalid. A
    ``BuiltinTool`` with ``error`` set is listed with status error and that reason.
    """
    from silica.plugins import call_each

    tools: list[Tool] = []
    plugin = [""]  # the plugin being called

    def register(builtin: Any) -> None:
        if isinstance(builtin, BuiltinTool):
            tools.append(_builtin_tool(builtin, plugin[0], tools))
        else:
            warnings.append(f"plugin {plugin[0]!r} registered a {type(builtin).__name__}, "
                            "not a BuiltinTool; it was skipped")

    def starting(name: str) -> None:
        plugin[0] = name

    def failed(name: str, exc: Exception) -> None:  # a broken plugin must not hide the rest
        warnings.append(f"plugin {name!r} failed to register built-in tools: {exc}")

    call_each(pm.hook.silica_builtin_tools, failed, starting=starting, register=register,
              settings=settings or Settings())
    return tools


def _builtin_tool(builtin: BuiltinTool, plugin: str, earlier: list[Tool]) -> Tool:
    folder = BUILTIN_FOLDER if builtin.origin == BUILTIN_FOLDER.origin else \
        ToolFolder(Path(f"<{builtin.origin}>"), builtin.origin, BUILTIN_FOLDER.precedence)
    tool = Tool(builtin.name, folder.path, folder, ToolStatus.OK, builtin=builtin,
                metadata=ToolMetadata(title=builtin.title, read_only=builtin.read_only,
                                      destructive=builtin.destructive,
                                      idempotent=builtin.idempotent,
                                      open_world=builtin.open_world, icon=builtin.icon))
    if builtin.error:
        tool.status, tool.reason = ToolStatus.ERROR, builtin.error
        return tool
    try:
        tool.spec = ToolSpec.model_validate({"name": builtin.name,
                                             "description": builtin.description,
                                             "input_schema": builtin.input_schema,
                                             "output_schema": builtin.output_schema})
    except ValidationError as exc:
        tool.status, tool.reason = ToolStatus.INVALID_SPEC, explain_validation_error(exc)
    if tool.ok and any(t.name == builtin.name for t in earlier):
        tool.status = ToolStatus.INVALID_SPEC
        tool.reason = (f"the built-in name {builtin.name!r} is registered twice "
                       f"(again by plugin {plugin!r})")
    return tool


def _scan(folder: ToolFolder, warnings: list[str]) -> list[_File]:
    path = folder.path
    if not path.exists():
        return []
    if not path.is_dir():
        warnings.append(f"{path} is not a folder; no tools were read from it")
        return []
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        warnings.append(f"cannot read the tools folder {path}: {exc.strerror or exc}; "
                        "check its permissions")
        return []
    tool_names = [n for n in names if n.endswith(".py") and not n.startswith(("_", "."))]
    if not folder.trusted:
        reason = (f"this project is not trusted, so nothing in {path} runs; "
                  f"run '{trust_command(path)}' if you trust its code")
        return [_File(path / n, folder, error=reason, untrusted=True) for n in tool_names]
    if tool_names and not ensure_helper(path) and HELPER_NAME not in names:
        warnings.append(f"cannot write {HELPER_NAME} into {path} (read-only?); "
                        "tools there that import it will fail")
    return [_File(path / n, folder) for n in tool_names if (path / n).is_file()]


def _helper_hashes(folder: Path) -> list[str]:
    """Hashes of the ``_*.py`` helpers beside the tools: a changed helper can change specs."""
    out: list[str] = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("_") and n.endswith(".py"))
    except OSError:
        return out
    for name in names:
        try:
            out.append(name + ":" + hashlib.sha256((folder / name).read_bytes()).hexdigest())
        except OSError:
            continue
    return out


async def _fetch_all(files: list[_File], pm, cache: SpecCache, options: DiscoveryOptions,
                     progress: Progress | None) -> None:
    import asyncio

    bound = asyncio.Semaphore(max(1, options.parallel))
    done = 0

    async def one(f: _File) -> None:
        nonlocal done
        async with bound:
            try:
                await _fetch(f, pm, cache, options)
            except Exception as exc:  # one file's surprise is its error, not the listing's
                f.error = f"its spec could not be read: {type(exc).__name__}: {exc}"
        done += 1
        if progress:
            progress(done, len(files))

    await asyncio.gather(*(one(f) for f in files))


async def _fetch(f: _File, pm, cache: SpecCache, options: DiscoveryOptions) -> None:
    from silica.tools.confined import run_script  # not imported when every spec is cached

    caches = cache.folder.parent
    raw = await run_script(f.path, ["--toolspec"],
                           sandbox=tool_sandbox(options.sandbox, f.path, [],
                                                workspace=None, cache_folder=caches),
                           env=tool_env(pm, f.path, options.env_policy),
                           timeout=options.spec_timeout, cache_folder=caches / "envs",
                           stdout_cap=8 * 1024 * 1024)
    if raw.error:
        f.error = raw.error
    elif raw.timed_out:
        f.error = f"--toolspec did not finish within {options.spec_timeout:g} s"
    elif raw.exit_code != 0:
        tail = raw.stderr_tail(600) or "(no error output)"
        f.error = f"--toolspec exited with code {raw.exit_code}: {tail}"
        f.error += refusal_hint(tail, raw.stdout)
    else:
        try:
            f.raw = parse_toolspec_output(raw.stdout)
        except ValueError as exc:
            f.error = str(exc)
            return
        f.fetched = True
        cache.put(f.key, f.raw)


def _tools_of(f: _File) -> list[Tool]:
    stem = f.path.stem
    if f.error:
        status = ToolStatus.UNTRUSTED if f.untrusted else ToolStatus.ERROR
        return [Tool(stem, f.path, f.folder, status, f.error, metadata=f.metadata)]
    items = f.raw if isinstance(f.raw, list) else [f.raw]
    if not items:
        return [Tool(stem, f.path, f.folder, ToolStatus.INVALID_SPEC,
                     "--toolspec printed an empty list", metadata=f.metadata)]
    tools: list[Tool] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        label = name if isinstance(name, str) and name else f"{stem}[{i}]"
        tool = Tool(label, f.path, f.folder, ToolStatus.OK, metadata=f.metadata,
                    file_hash=f.key)
        if not isinstance(item, dict):
            tool.status, tool.reason = ToolStatus.INVALID_SPEC, "a spec must be a JSON object"
        else:
            try:
                tool.spec = ToolSpec.model_validate(item)
            except ValidationError as exc:
                tool.status = ToolStatus.INVALID_SPEC
                tool.reason = explain_validation_error(exc)
        if tool.ok and label in names:
            tool.status = ToolStatus.INVALID_SPEC
            tool.reason = f"the name {label!r} is declared twice in this file"
        names.add(label)
        tool.multi = isinstance(f.raw, list)
        tools.append(tool)
    return tools


def _needs_authorization(f: _File, tools: list[Tool]) -> bool:
    return f.metadata.requires_auth and any(t.ok for t in tools)


def _mark_unauthorized(tools: list[Tool], check: tuple[bool, str]) -> None:
    ok, message = check
    if not ok:
        for t in tools:
            if t.ok:
                t.status, t.reason = ToolStatus.NEEDS_AUTHORIZATION, message


async def _check_authorization(f: _File, tools: list[Tool], pm, cache: SpecCache,
                               options: DiscoveryOptions) -> tuple[bool, str]:
    """Run ``FILE --authorize``: exit 0 and (JSON ``success`` true, or no JSON) means ok."""
    from silica.tools.confined import run_script

    winners = [t for t in tools if t.ok]  # a shadowed name's grants are not this file's
    caches = cache.folder.parent
    raw = await run_script(f.path, ["--authorize"],
                           sandbox=tool_sandbox(options.sandbox, f.path, winners,
                                                workspace=None, cache_folder=caches),
                           env=tool_env(pm, f.path, options.env_policy,
                                        granted_env(winners, options.env_policy)),
                           timeout=options.auth_timeout, cache_folder=caches / "envs",
                           stdout_cap=1024 * 1024)
    if raw.timed_out:
        return False, f"--authorize did not finish within {options.auth_timeout:g} s"
    if raw.error or raw.exit_code != 0:
        detail = raw.error or raw.stderr_tail(300) or f"exit code {raw.exit_code}"
        return False, f"--authorize failed: {detail}"
    try:
        answer = json.loads(raw.stdout)
    except (ValueError, RecursionError):
        return True, ""  # only a JSON object with "success": false says no
    if isinstance(answer, dict) and not answer.get("success", True):
        return False, str(answer.get("message") or "--authorize reported no success")
    return True, ""


