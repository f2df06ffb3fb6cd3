"""Find a provider by name among those the plugins register (``silica_providers``)."""

from __future__ import annotations

from collections.abc import Callable

import pluggy

from silica.config import Settings
from silica.providers.base import Provider, ProviderError

Factory = Callable[[Settings], Provider]


def provider_factories(pm: pluggy.PluginManager | None = None) -> dict[str, Factory]:
    """Every registered provider factory by name; a later registration of a name wins."""
    if pm is None:
        from silica.plugins import get_plugin_manager

        pm = get_plugin_manager()
    factories: dict[str, Factory] = {}

    def register(name: str, factory: Factory) -> None:
        factories[name.strip().lower()] = factory

    pm.hook.silica_providers(register=register)
    return factories


def get_provider(name: str, settings: Settings,
                 pm: pluggy.PluginManager | None = None) -> Provider:
    """The provider ``name`` (case-insensitive) built for ``settings``.

    Raises ``ProviderError`` listing the known providers when no plugin registers ``name``.
    """
    factories = provider_factories(pm)
    factory = factories.get((name or "").strip().lower())
    if factory is None:
        known = ", ".join(sorted(factories)) or "none"
        raise ProviderError(f"unknown provider {name!r}; known providers: {known} "
                            "(set --provider, SILICA_PROVIDER or provider in config.toml)")
    return factory(settings)
