"""Tool packs: folders of tools, with a ``silica-pack.toml`` manifest, installed from a
folder, a git repository or an archive into ``$SILICA_HOME/packs/<name>/``.

    from silica import packs

    change = packs.install("https://example.org/team/tools.git", ref="v1.2")
    for pack in packs.installed(): ...
    packs.update("team-tools")          # a Change: added, changed, removed tools
    packs.remove("team-tools")
    packs.check_pack(Path("my-pack"))   # for authors: a CheckReport
    packs.new_pack("my-pack")
    packs.add_tool(Path("my-pack"), "weather")   # my-pack/weather.py to start from

Every error is a ``PackError`` (a ``SilicaError``) whose message says what to do. The parts:
``manifest`` (the manifest), ``sources`` (folder, git, archive), ``safety`` (the rules and
caps), ``archives`` (unpacking), ``download`` (http), ``contents`` (copy, hash), ``lock``
(the lock file), ``locking`` (one command at a time), ``journal`` (crash-safe changes),
``store`` (install, update, remove), ``authoring`` (new, add a tool, check).
"""

from __future__ import annotations

import importlib
from typing import Any

_API = {
    "install": "store", "update": "store", "remove": "store", "installed": "store",
    "get_pack": "store", "Change": "store", "InstalledPack": "store",
    "check_pack": "authoring", "new_pack": "authoring", "add_tool": "authoring",
    "CheckReport": "authoring",
    "PackManifest": "manifest", "read_manifest": "manifest", "MANIFEST_NAME": "manifest",
    "LockEntry": "lock", "packs_dir": "folders",
    "PackError": "errors", "ManifestError": "errors", "UnsafePack": "errors",
    "LocalEdits": "errors",
    "MAX_FILES": "safety", "MAX_TOTAL_BYTES": "safety", "MAX_DOWNLOAD_BYTES": "safety",
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    # Imported on first use: discovery needs only ``silica.packs.lock``, not git or urllib.
    if name in _API:
        return getattr(importlib.import_module(f"silica.packs.{_API[name]}"), name)
    raise AttributeError(f"module 'silica.packs' has no attribute {name!r}")
