"""Find a provider by name among those the plugins register (``silica_providers``).

Every provider ``get_provider`` returns finds out by itself which models take no images
(``silica.providers.vision``), so each caller (``ask``, ``chat``, ``serve``, a library user)
gets that without doing anything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pluggy

from silica.config import Settings
from silica.providers.base import Provider, ProviderError

Factory = Callable[[Settings], Provider]


def provider_factories(pm: pluggy.PluginManager | None = None) -> dict[str, Factory]:
    """Every registered provider factory by name. Of two registrations of one name, the
    first pluggy calls wins: the plugin registered later (entry points come after the
    default plugins), or a ``tryfirst`` one, so a third-party plugin replaces a built-in."""
    if pm is None:
        from silica.plugins import get_plugin_manager

        pm = get_plugin_manager()
    factories: dict[str, Factory] = {}

    def register(name: str, factory: Factory) -> None:
        factories.setdefault(name.strip().lower(), factory)

    pm.hook.silica_providers(register=register)
    return factories


def get_provider(name: str, settings: Settings, pm: pluggy.PluginManager | None = None, *,
                 home: Path | None = None,
                 notice: Callable[[str], None] | None = None) -> Provider:
    """The provider ``name`` (case-insensitive) built for ``settings``, with vision
    detection installed (``silica.providers.vision.install``): a model found to take no
    images is remembered under ``home`` (default: silica's home), and ``notice`` (default: a
    warning on the ``silica.providers`` logger) tells the user once.

    Raises ``ProviderError`` listing the known providers when no plugin registers ``name``.
    """
    factories = provider_factories(pm)
    factory = factories.get((name or "").strip().lower())
    if factory is None:
        known = ", ".join(sorted(factories)) or "none"
        raise ProviderError(f"unknown provider {name!r}; known providers: {known} "
                            "(set --provider, SILICA_PROVIDER or provider in config.toml)")
    from silica.providers.vision import install  # the models table: only once one is used

    return install(factory(settings), settings, home=home, notice=notice)
