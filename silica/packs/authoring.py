"""For pack authors: start a pack (``new_pack``), add a tool to it (``add_tool``), and check
it before publishing it (``check_pack``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from silica.hookspecs import hookimpl
from silica.packs.errors import ManifestError, PackError, UnsafePack
from silica.packs.manifest import (
    MANIFEST_NAME,
    PACK_NAME_PATTERN,
    PackManifest,
    check_compatible,
    manifest_toml,
    read_manifest,
)
from silica.packs.safety import walk_pack
from silica.tools.discovery import Progress
from silica.tools.model import Tool, ToolFolder

# Text that ``new_pack`` and the tool template write for the author to replace.
PACK_PLACEHOLDER = "say in one line what they do"
TOOL_PLACEHOLDERS = ("say what this tool does in one line",
                     "replace this with what your tool does")


@dataclass
class CheckReport:
    """What ``check_pack`` found: problems with the pack itself, and every tool's status."""

    path: Path
    manifest: PackManifest | None
    problems: list[str] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not any(t.broken for t in self.tools)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "path": str(self.path),
                "manifest": self.manifest.model_dump() if self.manifest else None,
                "problems": self.problems, "tools": [t.to_row() for t in self.tools],
                "warnings": self.warnings}


class _OneFolder:
    """A plugin whose only tool folder is the pack being checked."""

    def __init__(self, folder: ToolFolder) -> None:
        self.folder = folder

    @hookimpl
    def silica_tool_folders(self, cwd: Path, home: Path) -> list[ToolFolder]:
        return [self.folder]


def check_pack(path: Path, progress: Progress | None = None) -> CheckReport:
    """Check the pack folder at ``path`` as an install would, then read every tool's spec.

    Reading specs runs each tool with ``--toolspec`` (and writes ``_silica_toolspec.py``
    into the folder, as discovery does): check only packs whose code you trust.
    """
    from silica.plugins import build_plugin_manager
    from silica.tools.toolbox import Toolbox

    path = path.expanduser().resolve()
    if not path.is_dir():
        raise PackError(f"{path} is not a folder; pass the folder of a pack")
    report = CheckReport(path, None)
    try:
        report.manifest = read_manifest(path)
        check_compatible(report.manifest, str(path / MANIFEST_NAME))
    except ManifestError as exc:
        report.problems.append(str(exc))
    try:
        for _entry in walk_pack(path):
            pass
    except UnsafePack as exc:
        report.problems.append(str(exc))
    pm = build_plugin_manager()
    for impl in pm.hook.silica_tool_folders.get_hookimpls():
        pm.unregister(impl.plugin)
    origin = f"pack:{report.manifest.name if report.manifest else path.name}"
    pm.register(_OneFolder(ToolFolder(path, origin, 1000)))
    found = Toolbox(cwd=path, pm=pm).discover(progress)
    listed = report.manifest.tools if report.manifest else None
    report.tools = [t for t in found.tools if listed is None or t.path.stem in listed]
    report.warnings = found.warnings
    stems = {t.path.stem for t in found.tools}
    for stem in listed or []:
        if stem not in stems:
            report.problems.append(f"{MANIFEST_NAME}: field 'tools' lists {stem!r}, but there "
                                   f"is no {stem}.py; add the file or take it off the list")
    if not report.tools:
        report.problems.append(f"the pack has no tools; add one with 'silica packs add-tool "
                               f"{path} NAME' (it writes NAME.py in the pack to start from)")
    report.problems += _placeholders(report)
    return report


def _placeholders(report: CheckReport) -> list[str]:
    """The text from ``packs new`` and the tool template that the author has yet to replace."""
    found = []
    if report.manifest and PACK_PLACEHOLDER in report.manifest.description:
        found.append(f"{MANIFEST_NAME}: field 'description' is still the placeholder from "
                     "'silica packs new'; say in one line what the pack's tools do")
    for tool in report.tools:
        try:
            text = tool.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue  # the tool's own status already says it cannot be read
        left = [phrase for phrase in TOOL_PLACEHOLDERS if phrase in text]
        if left:
            found.append(f"{tool.path.name} still has placeholder text from the tool template "
                         f"({left[0]!r}); describe what the tool does in its docstrings")
    return found


def add_tool(folder: Path, name: str) -> Path:
    """Write ``<folder>/<name>.py``, a working tool to start from, into the pack at ``folder``.

    Raises ``ManifestError`` if ``folder`` holds no valid pack manifest, and ``SilicaError``
    if the name is not a valid tool name or the file exists. The pack's manifest is left as
    it is: a pack that lists its ``tools`` exposes the new one once it is listed there.
    """
    from silica.tools.scaffold import new_tool

    folder = folder.expanduser().resolve()
    if not folder.is_dir():
        raise PackError(f"{folder} is not a folder; pass the folder of a pack (start one "
                        "with 'silica packs new NAME')")
    read_manifest(folder)
    return new_tool(folder, name)


def new_pack(name: str, folder: Path | None = None) -> Path:
    """Start pack ``name`` in ``folder`` (default ``./NAME``): a manifest and one working
    tool, ready for ``check_pack``. Returns the folder."""
    from silica.tools.scaffold import new_tool

    if not re.match(PACK_NAME_PATTERN, name):
        raise PackError(f"{name!r} is not a valid pack name: use 1-64 lowercase letters, digits, "
                        "'_' or '-', starting with a letter or digit")
    folder = (folder or Path.cwd() / name).expanduser()
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise PackError(f"{folder} already exists and is not an empty folder; choose another "
                        "path with --path")
    tool = re.sub(r"[^a-z0-9_]", "_", name)
    tool = tool if tool[0].isalpha() else f"tool_{tool}"
    new_tool(folder, tool[:64])
    manifest = PackManifest(name=name, version="0.1.0",
                            description=f"The {name} tools: say in one line what they do.")
    (folder / MANIFEST_NAME).write_text(manifest_toml(manifest), encoding="utf-8")
    return folder
