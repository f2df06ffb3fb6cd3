"""Default tool folders: project folders (closest first), then the user's own folder.

Project folders are trusted only once the user has run ``silica trust`` on the project
(``silica.security.trust``); the user's own folder always is.
"""

from pathlib import Path

from silica.hookspecs import hookimpl
from silica.paths import project_tool_dirs, user_tools_dir
from silica.security.trust import TrustStore
from silica.tools.model import ToolFolder

# Precedence bands: project tools beat the user's own, which beat anything a plugin adds
# at 1000 and above (packs).
PROJECT_BAND = 0
USER_BAND = 500


@hookimpl
def silica_tool_folders(cwd: Path, home: Path) -> list[ToolFolder]:
    trust = TrustStore(home)
    folders = [ToolFolder(path, "project", PROJECT_BAND + i,
                          trusted=path.is_dir() and trust.is_trusted(path))
               for i, path in enumerate(project_tool_dirs(cwd))]
    folders.append(ToolFolder(user_tools_dir(home), "user", USER_BAND))
    return folders
