"""``silica tools ...``: list, inspect, check, run and scaffold user tools."""

from __future__ import annotations

import functools
import json
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from silica.cli.output import (
    JsonFlag,
    err,
    fail,
    out,
    plain,
    print_json,
    print_table,
    say,
    table,
    to_terminal,
    warn,
)
from silica.cli.show import ImagesFlag
from silica.config import Settings
from silica.elicitation import Answer, Elicitation
from silica.paths import project_tool_folder, silica_home, user_tools_dir
from silica.security.text import safe_text
from silica.tools.discovery import Discovery
from silica.tools.model import Tool, ToolStatus
from silica.tools.toolbox import Toolbox
from silica.words import counted

app = App(name="tools", help="Find, inspect, check, run and create user tools.")

_STATUS_STYLE = {
    ToolStatus.OK: "green",
    ToolStatus.SHADOWED: "dim",
    ToolStatus.NEEDS_AUTHORIZATION: "yellow",
    ToolStatus.UNTRUSTED: "yellow",
}


@contextmanager
def spec_progress():
    """A progress bar on stderr for spec fetching; shown only once a fetch starts, and only
    on a terminal (pipes and logs get no bar)."""
    if not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(TextColumn("reading tool specs"), BarColumn(), MofNCompleteColumn(),
                   console=err, transient=True)
    task = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task("specs", total=total)
        bar.update(task, completed=done)

    try:
        yield update
    finally:
        bar.stop()


def user_settings() -> Settings:
    """The user's settings (config.toml and environment); a bad file ends the command
    (``ConfigError``)."""
    from silica.config import load_settings

    return load_settings()


def toolbox(provider: str | None = "anthropic") -> Toolbox:
    """A Toolbox with the user's settings (config.toml and environment) applied, its images
    fitted as ``provider`` (any name ``ask --provider`` takes; None: the configured one)
    fits them for the configured model (or the provider's default model)."""
    from silica.errors import SilicaError, UsageError
    from silica.providers.models import DEFAULT_MODELS
    from silica.providers.registry import get_provider

    settings = user_settings()
    try:
        chosen = get_provider(provider or settings.provider, settings)
    except SilicaError as exc:  # an unknown --provider: a usage error (exit 2)
        raise UsageError(str(exc)) from exc
    model = settings.model or DEFAULT_MODELS.get(chosen.name, "")
    return Toolbox(settings=settings, image_limits=chosen.model_info(model).limits)


def listing_toolbox() -> Toolbox:
    """A Toolbox with the user's settings, for commands that only find and show tools: no
    provider is chosen (image limits matter only to a call), so none is imported."""
    return Toolbox(settings=user_settings())


def discover_tools(box: Toolbox | None = None) -> Discovery:
    with spec_progress() as update:
        found = (box or listing_toolbox()).discover(progress=update)
    for warning in found.warnings:
        warn(warning)
    return found


def _summary(description: str, limit: int | None = 160) -> str:
    """A description's first paragraph on one line, cut at ``limit`` characters (``None``:
    the whole description on one line, nothing cut)."""
    if limit is None:
        return " ".join(description.split())
    first = " ".join(description.split("\n\n", 1)[0].split())
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _tool_rows(tools: list[Tool], limit: int | None) -> tuple[list[str], list[list[str]]]:
    """The columns of a listing of ``tools`` and a row of cells per tool (descriptions as
    ``_summary`` gives them with ``limit``); the sandbox and env columns only when a tool
    has something to say in them."""
    env = [t.env_access.summary() if t.env_access else "" for t in tools]
    boxes = [t.sandbox.summary() if t.sandbox else "" for t in tools]
    columns = ["name", "status", "origin", "description / reason", "path"]
    if any(env):  # only when some tool asked for or was granted a secret
        columns.insert(4, "env (secrets)")
    if any(boxes):
        columns.insert(4, "sandbox")
    rows = []
    for t, secrets, box in zip(tools, env, boxes, strict=True):
        about = _summary(t.spec.description, limit) if t.ok and t.spec else t.reason
        cells = [t.name, str(t.status), t.folder.origin, about, str(t.path)]
        if any(env):
            cells.insert(4, secrets)
        if any(boxes):
            cells.insert(4, box)
        rows.append(cells)
    return columns, rows


def tools_table(tools: list[Tool]):
    """A rich table of tools (rich.table is imported here: ``--json`` output needs none)."""
    columns, rows = _tool_rows(tools, limit=160)
    grid = table(*columns, whole=("name", "path"))
    for t, cells in zip(tools, rows, strict=True):
        style = _STATUS_STYLE.get(t.status, "red")
        # plain(): names, descriptions, reasons and paths come from outside; never markup
        grid.add_row(*(plain(c, style if i == 1 else "") for i, c in enumerate(cells)))
    return grid


def print_tools(tools: list[Tool]) -> None:
    """``tools`` on stdout: a table at a terminal; into a pipe or a file, a tab-separated
    header line, then one whole line per tool (no description cut, no rules drawn)."""
    if to_terminal(sys.stdout):
        print_table(tools_table(tools))
        return
    columns, rows = _tool_rows(tools, limit=None)
    for cells in (columns, *rows):  # made safe: cells come from outside
        sys.stdout.write("\t".join(safe_text(_one_line(c)) for c in cells) + "\n")


def _one_line(cell: str) -> str:
    """``cell`` with its tabs and line ends as spaces: one field of one line."""
    return re.sub(r"[\t\r\n]+", " ", cell)


@app.command(name="list")
def list_tools(*, json_: JsonFlag = False,
               refresh: Annotated[bool, Parameter(negative="")] = False):
    """List every tool found, with its status, origin and source file.

    Parameters
    ----------
    refresh
        Start every MCP server to list its tools, instead of showing the list it gave last
        time (origin "mcp:NAME (cached)").
    """
    box = listing_toolbox()
    if refresh or not box.settings.mcp.enabled():  # no server: nothing to take from a cache
        found = discover_tools(box)
    else:
        from silica.mcp.source import cached_listing

        with cached_listing():
            found = discover_tools(box)
    if json_:
        print_json([t.to_row() for t in found.all_tools])
        return
    print_tools(found.all_tools)
    if not found.tools:
        say(f"No tool files found. Create one with 'silica tools new NAME' (it goes to "
            f"{user_tools_dir()}).", console=err)


@app.command
def check(*, json_: JsonFlag = False):
    """Validate every tool; exits non-zero if any tool is broken."""
    found = discover_tools()
    broken = [t for t in found.all_tools if t.broken]
    if json_:
        print_json({"ok": not broken, "tools": [t.to_row() for t in found.all_tools],
                    "warnings": found.warnings})
    else:
        print_tools(found.all_tools)
        summary = f"{counted(len(found.all_tools), 'tool')}, {len(broken)} broken"
        (err if broken else out).print(summary, markup=False)
    if broken:
        raise SystemExit(1)


@app.command
def spec(name: str | None = None):
    """Print the spec of tool NAME as JSON, as a model sees it.

    Parameters
    ----------
    name
        The tool, as 'silica tools list' names it.
    """
    name = _named(name, "spec NAME")
    tool = _get(name)
    if tool.spec is None:
        fail(f"{name} has no valid spec ({tool.status}): {tool.reason}")
    print_json(tool.spec.for_model())


@app.command
def run(
    name: str | None = None,
    *,
    input_: Annotated[str, Parameter(name="--input")] = "{}",
    json_: Annotated[bool, Parameter(name="--json", negative="")] = False,
    save_images: Path | None = None,
    provider: str | None = None,
    images: ImagesFlag = None,
):
    """Run tool NAME with a JSON input, as an agent would, and show what the model gets.

    Parameters
    ----------
    name
        The tool to run.
    input_
        The tool's input as a JSON object, e.g. '{"city": "Oslo"}'.
    json_
        Print {"is_error", "content"} with blocks in the Anthropic tool_result form.
    save_images
        Folder to save images to (default: the silica image folder).
    provider
        Fit images to this provider's limits, as ``ask --provider`` does: anthropic,
        openai, openai-responses, gemini, ollama or a plugin's (default: config, then
        anthropic).
    """
    from silica.cli.show import images_setting, save_image, show_result

    name = _named(name, "run NAME --input '{...}'")
    if save_images is not None and save_images.exists() and not save_images.is_dir():
        fail(f"--save-images {save_images} is a file, not a folder; give a folder to save "
             "the images in (it is created if it does not exist)", 2)
    try:
        arguments = json.loads(input_)
    except ValueError as exc:
        fail(f"--input is not valid JSON ({exc}); pass an object like '{{\"x\": 1}}'", 2)
    if not isinstance(arguments, dict):
        fail("--input must be a JSON object like '{\"x\": 1}'", 2)
    box = toolbox(provider)  # None: the configured provider, as ask
    _get(name, box)
    # nobody is asked here: [mcp] elicitation says whether a form's defaults are taken
    box.elicit = functools.partial(_unattended, box.settings.mcp.elicitation)
    result = box.call(name, arguments)
    if json_:
        print_json(result.to_anthropic())
    else:
        saved = [save_image(img, save_images) for img in result.images]
        show_result(result, saved, images_setting(images, box.settings))
    if result.is_error:
        raise SystemExit(1)


@app.command
def new(name: str, *, project: Annotated[bool, Parameter(negative="")] = False):
    """Create a working tool NAME to start from (in the user's folder, or the project's).

    Parameters
    ----------
    name
        The new tool's name (letters, digits, '_' or '-'); the file is NAME.py.
    project
        Put it in the project's tools folder (the closest existing .silica/tools or
        .agent/tools up to the git root, else .silica/tools at the root) instead of yours.
    """
    from silica.tools.scaffold import new_tool

    folder = project_tool_folder(Path.cwd()) if project else user_tools_dir()
    box = listing_toolbox()
    builtin = _builtin(name, box)
    if builtin and not box.options.allow_shadow_builtins:
        fail(f"{name!r} is the name of silica's built-in tool, which would be used instead "
             "of your file; choose another name (or, to replace the built-in, set "
             "allow_shadow_builtins = true under [tools] in config.toml)", 2)
    path = new_tool(folder, name)
    say(f"Created {path}\nTry it: silica tools run {name} --input "
        "'{\"text\": \"hi\", \"repeat\": 2}'")
    if builtin:  # allowed: say what it does
        warn(f"this tool replaces silica's built-in {name!r} (allow_shadow_builtins = true)")
    mine = user_tools_dir() / f"{name}.py"
    if project and mine.is_file():
        warn(f"this project tool shadows your own {mine} in this project")
    if project:
        from silica.security.trust import TrustStore, trust_command

        if not TrustStore(silica_home()).is_trusted(folder):
            say(f"This project is not trusted yet, so its tools do not run; "
                f"'{trust_command(folder)}' lets them.", console=err)


def _named(name: str | None, usage: str) -> str:
    """``name``, or exit 2 saying how to give it (not cyclopts' "--name requires ...")."""
    if not name:
        fail(f"give the tool's name: silica tools {usage}; 'silica tools list' shows "
             "the names", 2)
    return name


def _builtin(name: str, box: Toolbox) -> bool:
    """Whether a built-in tool is called ``name``."""
    from silica.tools.discovery import builtin_tools

    return any(t.name == name for t in builtin_tools(box.pm, []))


def _get(name: str, box: Toolbox | None = None) -> Tool:
    box = box or listing_toolbox()
    with spec_progress() as update:
        box.discover(progress=update)
    return box.get(name)


async def _unattended(mode: str, request: Elicitation) -> Answer:
    """``tools run``'s answer to a request for input; the form's code is imported only
    when a tool asks (a run that asks nothing loads nothing of MCP)."""
    from silica.cli.elicit import unattended_asker

    return await unattended_asker(mode, "tools run")(request)
