"""The Toolbox: the one object a program needs to find and call user tools.

    box = Toolbox()
    for tool in box.discover().tools: ...
    result = box.call("chart", {"values": [3, 1, 4]})      # or: await box.acall(...)

Discovery runs once per Toolbox (``refresh()`` re-reads); every call runs the file that won
discovery. Images in results are fitted to ``image_limits`` (Anthropic's by default). A
failing tool, a bad input or a tool that vanished gives a ``ToolResult`` with ``is_error``
set and a message that says what happened, never an exception.

Built-in tools (``silica_builtin_tools``) run in-process: ``run(arguments, ToolContext)``
with the Toolbox's ``cwd`` and ``settings``, after the same input checks a tool file gets.
Every ``ImageBlock`` a built-in returns is passed, as raw bytes, through
``silica_prepare_image`` with ``image_limits``, so a built-in may return an image of any
format (``ImageBlock(media_type=..., data=raw_bytes)``) and the model still gets one that fits.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

from silica.blocks import Block, ImageBlock, TextBlock, ToolResult
from silica.config import Settings
from silica.elicitation import Asker
from silica.errors import InvalidInput, ToolNotFound
from silica.images.limits import ANTHROPIC, ImageLimits
from silica.images.payload import ImagePayload
from silica.paths import cache_dir, silica_home
from silica.plugins import call_each, get_plugin_manager
from silica.security.env import EnvPolicy, withhold_from_environment
from silica.security.sandbox import SandboxPolicy
from silica.security.text import safe_text
from silica.tools.argv import build_arguments, subcommand_for
from silica.tools.builtin import Logger, RootLister, Sampler, ToolContext
from silica.tools.cache import SpecCache
from silica.tools.discovery import (
    Discovery,
    DiscoveryOptions,
    Progress,
    discover,
    discover_blocking,
)
from silica.tools.environment import granted_env, tool_env, tool_sandbox
from silica.tools.model import DEFAULT_STDOUT_CAP, Tool, ToolStatus

if TYPE_CHECKING:
    from asyncio import Timeout

DEFAULT_TIMEOUT = 60.0
NOTHING = "(the tool returned nothing)"  # a built-in's empty result, as the model is told


def progress_as_line(on_stderr_line: Callable[[str], None] | None,
                     ) -> Callable[[float, float | None, str | None], None] | None:
    """A built-in's ``context.progress``: each report becomes the ``progress: done/total
    message`` line a tool file prints on stderr, so both take one path to the client."""
    if on_stderr_line is None:
        return None
    line = on_stderr_line

    def progress(done: float, total: float | None = None, message: str | None = None) -> None:
        text = f"progress: {done:g}" + (f"/{total:g}" if total is not None else "")
        line(text + (f" {' '.join(message.split())}" if message else ""))

    return progress


Approve = Callable[[str], Awaitable[bool | str]]


def _clock_stopped(approve: Approve | None, clock: Timeout) -> Approve | None:
    """``approve`` with the call's clock (``clock``, the built-in's timeout) stopped while a
    person is asked: the time they take to answer is theirs, not the tool's (a front end
    bounds it: ``[serve] approval_timeout``)."""
    if approve is None:
        return None

    async def asking(command: str) -> bool | str:
        import asyncio  # loaded already: this runs on an event loop

        loop = asyncio.get_running_loop()
        when = clock.when()
        left = None if when is None else max(0.0, when - loop.time())
        clock.reschedule(None)
        try:
            return await approve(command)
        finally:  # not once it fired: that is the call being stopped
            if left is not None and not clock.expired():
                clock.reschedule(loop.time() + left)

    return asking


class Toolbox:
    """User tools seen from one working directory.

    ``settings`` (default: ``Settings()``) supplies the call timeout (``tools.timeout``,
    unless ``timeout`` is given), the secrets withheld from tools and those granted
    (``tools.env_withhold`` on top of ``SILICA_TOOL_ENV_WITHHOLD`` and the built-in list;
    ``tools.env_grant``), whether a tool file may replace a built-in
    (``tools.allow_shadow_builtins``) and what built-in tools read (``read_file``).
    """

    def __init__(self, cwd: Path | None = None, home: Path | None = None,
                 pm: pluggy.PluginManager | None = None,
                 options: DiscoveryOptions | None = None,
                 timeout: float | None = None, stdout_cap: int = DEFAULT_STDOUT_CAP,
                 image_limits: ImageLimits = ANTHROPIC,
                 settings: Settings | None = None) -> None:
        self.cwd = (cwd or Path.cwd()).resolve()
        self.home = home or silica_home()
        self.pm = pm or get_plugin_manager()
        self.settings = settings or Settings()
        if self.settings.mcp.enabled():  # servers may start: SIGTERM must stop them
            from silica.mcp.connections import stop_on_sigterm

            stop_on_sigterm()
        options = options or DiscoveryOptions()
        tools = self.settings.tools
        policy = EnvPolicy(
            withhold=(*options.env_policy.withhold, *withhold_from_environment(),
                      *tools.env_withhold),
            grants={**options.env_policy.grants,
                    **{k: tuple(v) for k, v in tools.env_grant.items()}})
        sandbox = options.sandbox or SandboxPolicy.from_settings(self.settings, self.home)
        self.options = dataclasses.replace(
            options, env_policy=policy, sandbox=sandbox,
            allow_shadow_builtins=options.allow_shadow_builtins or tools.allow_shadow_builtins)
        if timeout is None:
            timeout = self.settings.tools.timeout if settings else DEFAULT_TIMEOUT
        self.timeout = timeout
        self.stdout_cap = stdout_cap
        self.image_limits = image_limits
        self.cache = SpecCache(cache_dir(self.home) / "specs")
        self._discovery: Discovery | None = None
        # who approves a built-in's command (the shell tool); set by the CLI, None: nobody
        self.approve: Callable[[str], Awaitable[bool | str]] | None = None
        # who answers a tool's request for values (silica.elicitation); None: nobody
        self.elicit: Asker | None = None
        # where a built-in's log messages and model questions go (silica mcp serve: its
        # client); None: nowhere
        self.log: Logger | None = None
        self.sample: Sampler | None = None
        self.attach: Callable[[dict], None] | None = None  # MCP-only content (ToolContext)
        self.roots: RootLister | None = None  # the caller's roots (ToolContext)
        self._hinted: set[str] = set()  # tools told of secrets they lack (once each)

    # -- discovery ----------------------------------------------------------------------

    async def adiscover(self, progress: Progress | None = None) -> Discovery:
        if self._discovery is None:
            self._discovery = await discover(self.pm, self.cwd, self.home, self.cache,
                                             self.options, progress, self.settings)
        return self._discovery

    def discover(self, progress: Progress | None = None) -> Discovery:
        """Every tool found (cached for this Toolbox; see ``refresh``)."""
        if self._discovery is None:
            self._discovery = discover_blocking(self.pm, self.cwd, self.home, self.cache,
                                                self.options, progress, self.settings)
        return self._discovery

    def refresh(self) -> None:
        """Forget what was discovered; the next use scans the folders again."""
        self._discovery = None

    def get(self, name: str) -> Tool:
        """The tool that runs under ``name``; raises ``ToolNotFound`` with near names."""
        found = self.discover()
        tools = found.runnable()
        if name in tools:
            return tools[name]
        untrusted = [t for t in found.tools
                     if t.status is ToolStatus.UNTRUSTED and t.path.stem == name]
        if untrusted:
            raise ToolNotFound(f"{name} cannot run: {untrusted[0].reason}")
        failed = [t for t in found.builtins if t.status is ToolStatus.ERROR
                  and t.name.endswith("__*") and name.startswith(t.name[:-1])]
        if failed:  # an MCP server that could not be listed says why
            raise ToolNotFound(f"{name} cannot run: {failed[0].reason}")
        near = difflib.get_close_matches(name, list(tools), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else \
            "; run 'silica tools list' to see the tools"
        raise ToolNotFound(f"no tool named {name!r}{hint}")

    def specs(self) -> list[dict]:
        """What a model is told: the specs of every runnable tool (but an MCP App's own
        tools, whose visibility leaves the model out)."""
        return [t.spec.for_model() for t in self.discover().runnable().values()
                if t.ok and t.spec and (t.builtin is None or t.builtin.for_model)]

    # -- calling ------------------------------------------------------------------------

    async def acall(self, name: str, arguments: dict | None = None, *,
                    on_stderr_line: Callable[[str], None] | None = None) -> ToolResult:
        """Run tool ``name`` with ``arguments`` (the model's JSON input).

        ``on_stderr_line``, if given, is called with each line a tool file writes to stderr
        while it runs (see ``run_process``); a built-in's ``context.progress(...)`` reaches
        it as the ``progress: done/total message`` line a tool file would print.
        """
        await self.adiscover()
        try:
            tool = self.get(name)
        except ToolNotFound as exc:
            return ToolResult.error(str(exc))
        if tool.builtin is not None and not tool.builtin.for_model:
            return ToolResult.error(
                f"{name} is a tool of its MCP server's app only (its visibility leaves the "
                "model out): it is not offered to a model, and a model may not call it")
        result = await self._run(tool, arguments, on_stderr_line)
        self._observe(tool, arguments or {}, result)
        return result

    def call(self, name: str, arguments: dict | None = None) -> ToolResult:
        import asyncio  # the library's async core; listing tools never needs it

        return asyncio.run(self.acall(name, arguments))

    async def _run(self, tool: Tool, arguments: dict | None,
                   on_stderr_line: Callable[[str], None] | None = None) -> ToolResult:
        if tool.builtin is not None and tool.ok and tool.spec is not None:
            return await self._run_builtin(tool, arguments, on_stderr_line)
        if tool.status is ToolStatus.NEEDS_AUTHORIZATION:
            return ToolResult.error(
                f"{tool.name} needs authorization: {tool.reason}. "
                f"Run 'uv run --script {tool.path} --authorize' to authorize it.")
        if not tool.ok or tool.spec is None:
            return ToolResult.error(f"{tool.name} cannot run ({tool.status}): {tool.reason}")
        if not tool.path.is_file():
            return ToolResult.error(
                f"the file of {tool.name} ({tool.path}) is gone since the tools were "
                "discovered; run 'silica tools list' to see what is there now")
        try:
            tokens = build_arguments(tool.spec, arguments)
        except InvalidInput as exc:
            return ToolResult.error(str(exc))
        sub = subcommand_for(tool.spec, tool.path, tool.multi)
        from silica.tools.confined import run_script

        self._hint_secrets(tool)
        policy = self.options.env_policy
        timeout = tool.metadata.timeout or self.timeout
        deadline = time.monotonic() + timeout
        caches = cache_dir(self.home)
        env = tool_env(self.pm, tool.path, policy, granted_env([tool], policy))
        env["SILICA_WORKDIR"] = str(self.cwd)  # the workspace: where it may write
        raw = await run_script(tool.path, [*([sub] if sub else []), *tokens],
                               sandbox=tool_sandbox(self.options.sandbox, tool.path, [tool],
                                                    workspace=self.cwd, cache_folder=caches),
                               env=env, timeout=timeout, cache_folder=caches / "envs",
                               stdout_cap=self.stdout_cap, on_stderr_line=on_stderr_line)
        from silica.results.pipeline import build_result  # calls only: a listing needs none
        from silica.tools.workers import off_loop

        # Images are checked off the event loop, within what is left of the call's time.
        work = partial(build_result, raw, self.pm, self.image_limits, deadline=deadline)
        return await off_loop(work, deadline=deadline,
                              what=f"checking the images of {tool.name}")

    async def _run_builtin(self, tool: Tool, arguments: dict | None,
                           on_stderr_line: Callable[[str], None] | None = None) -> ToolResult:
        assert tool.builtin is not None and tool.spec is not None
        try:
            build_arguments(tool.spec, arguments)  # the input checks a tool file's call gets
        except InvalidInput as exc:
            return ToolResult.error(str(exc))
        import asyncio  # loaded already: this runs on an event loop

        try:
            async with asyncio.timeout(self.timeout) as clock:
                context = ToolContext(workdir=self.cwd, settings=self.settings,
                                      approve=_clock_stopped(self.approve, clock),
                                      elicit=self.elicit, log=self.log, sample=self.sample,
                                      attach=self.attach, roots=self.roots,
                                      progress=progress_as_line(on_stderr_line))
                result = await tool.builtin.run(dict(arguments or {}), context)
        except TimeoutError:
            return ToolResult.error(f"{tool.name} did not finish within {self.timeout:g} s "
                                    "and was stopped")
        except Exception as exc:  # a built-in's bug is the call's error, not the host's
            return ToolResult.error(f"{tool.name} failed: {type(exc).__name__}: {exc}")
        if not isinstance(result, ToolResult):
            return ToolResult.error(f"{tool.name} failed: it returned "
                                    f"{type(result).__name__}, not a ToolResult")
        deadline = time.monotonic() + self.timeout
        blocks: list[Block] | ToolResult
        if not any(isinstance(b, ImageBlock) for b in result.blocks):
            blocks = list(result.blocks)  # nothing to check: no hop to the work pool
        else:
            from silica.tools.workers import off_loop

            blocks = await off_loop(partial(self._prepare_blocks, tool, result.blocks, deadline),
                                    deadline=deadline,
                                    what=f"checking the images of {tool.name}")
        if isinstance(blocks, ToolResult):
            return blocks
        return ToolResult(blocks=blocks or [TextBlock(text=NOTHING)],
                          is_error=result.is_error)

    def _prepare_blocks(self, tool: Tool, given: list[Block], deadline: float) -> list[Block]:
        """A built-in's (or an MCP server's) blocks in their order, each image replaced by
        what ``silica_prepare_image`` made of it, within the same per-result budget and
        deadline as a tool file's (a notice counting several images stands where the first
        of them was).

        Each prepared block (image or notice) keeps the ``audience`` of the image it came
        from; a notice standing for several images has theirs if they all share one."""
        from silica.results.pipeline import place_images

        images = [b for b in given if isinstance(b, ImageBlock)]
        payloads = [ImagePayload(data=b.data, declared_type=b.media_type,
                                 source=b.source or tool.name) for b in images]
        shared = {b.audience for b in images}
        common = next(iter(shared)) if len(shared) == 1 else None
        placed: dict[int, list[Block]] = {}
        for index, block, alone in place_images(payloads, self.pm, self.image_limits,
                                                deadline):
            audience = images[index].audience if alone else common
            if audience is not None:
                block = block.model_copy(update={"audience": audience})
            placed.setdefault(index, []).append(block)
        blocks: list[Block] = []
        index = 0
        for b in given:
            if isinstance(b, ImageBlock):
                blocks.extend(placed.get(index, ()))
                index += 1
            else:
                blocks.append(b)
        return blocks

    def _hint_secrets(self, tool: Tool) -> None:
        """Once per tool, on stderr: it asked for secrets it is not granted (it runs without
        them), and the setting that grants them."""
        hint = tool.env_access.hint(tool.name) if tool.env_access else ""
        if hint and tool.name not in self._hinted:
            self._hinted.add(tool.name)
            print(safe_text(f"silica: {hint}"), file=sys.stderr)

    def _observe(self, tool: Tool, arguments: dict, result: ToolResult) -> None:
        def failed(plugin: str, exc: Exception) -> None:  # must not change or lose the result
            print(safe_text(f"silica: tool-result observer {plugin!r} failed: {exc}"),
                  file=sys.stderr)

        call_each(self.pm.hook.silica_tool_result, failed, tool=tool, arguments=arguments,
                  result=result)
