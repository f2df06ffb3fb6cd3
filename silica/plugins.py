"""The plugin manager: silica's default plugins, then entry points, in one registry.

Third-party plugins are entry points in the ``silica`` group. ``SILICA_LOAD_PLUGINS``, when
set, is a comma-separated allow-list of entry-point names to load (empty: load none); the
default plugins are always registered, exactly as third-party plugins are.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pluggy

from silica import hookspecs

DEFAULT_PLUGINS = (
    "silica.default_plugins.tool_folders",
    "silica.default_plugins.pack_folders",
    "silica.default_plugins.tool_env",
    "silica.default_plugins.builtin_tools",
    "silica.default_plugins.mcp_tools",
    "silica.default_plugins.terminal_images",
    "silica.default_plugins.json_images",
    "silica.default_plugins.image_check",
    "silica.default_plugins.providers",
    "silica.default_plugins.anthropic_files",
    "silica.default_plugins.image_objects",
)

ENTRY_POINT_GROUP = "silica"
ALLOW_LIST_VAR = "SILICA_LOAD_PLUGINS"

_pm: pluggy.PluginManager | None = None


def build_plugin_manager() -> pluggy.PluginManager:
    """A fresh plugin manager with the default plugins and the allowed entry points."""
    pm = pluggy.PluginManager("silica")
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    allowed = os.environ.get(ALLOW_LIST_VAR)
    allow = None if allowed is None else {n.strip() for n in allowed.split(",") if n.strip()}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if allow is not None and ep.name not in allow:
            continue
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            pm.register(ep.load(), name=ep.name)
        except Exception as exc:  # a broken plugin must not take the host down
            from silica.security.text import safe_text

            print(safe_text(f"silica: plugin {ep.name!r} failed to load and was skipped: {exc}"),
                  file=sys.stderr)
    return pm


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, built on first use."""
    global _pm
    if _pm is None:
        _pm = build_plugin_manager()
    return _pm


def hook() -> Any:
    """Shortcut for ``get_plugin_manager().hook``."""
    return get_plugin_manager().hook


def call_each(caller: Any, report: Callable[[str, Exception], None], *,
              starting: Callable[[str], None] | None = None, **kwargs: Any) -> list:
    """``caller(**kwargs)`` (a ``pm.hook.X``), except that an implementation that raises is
    handed to ``report(plugin_name, error)`` and the others still run; ``starting``, when
    given, is told the name of each plugin before it is called.

    Implementations run in pluggy's own call order (the last registered first, ``tryfirst``
    ones before and ``trylast`` ones after the rest), each given the arguments it names, and
    the results that are not ``None`` are returned in that order, as pluggy returns them.
    Hook wrappers are not run: these hooks are for plain implementations.
    """
    results = []
    for impl in reversed(caller.get_hookimpls()):  # pluggy calls them from the end
        if impl.hookwrapper or getattr(impl, "wrapper", False):
            continue
        if starting is not None:
            starting(impl.plugin_name)
        try:
            result = impl.function(*(kwargs[name] for name in impl.argnames))
        except Exception as exc:
            report(impl.plugin_name, exc)
            continue
        if result is not None:
            results.append(result)
    return results
