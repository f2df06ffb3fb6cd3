"""Installed packs as tool folders: one per pack, by name, after the user's own tools."""

from pathlib import Path

from silica.hookspecs import hookimpl
from silica.packs.folders import pack_dirs
from silica.tools.model import ToolFolder

PACK_BAND = 1000  # after project tools (0...) and the user's (500)


@hookimpl
def silica_tool_folders(cwd: Path, home: Path) -> list[ToolFolder]:
    return [ToolFolder(path, f"pack:{name}", PACK_BAND + i)
            for i, (name, path) in enumerate(pack_dirs(home))]
