"""Errors of tool packs: each is a ``SilicaError`` whose message says what to do."""

from silica.errors import SilicaError


class PackError(SilicaError):
    """A pack could not be installed, updated, removed or read."""


class ManifestError(PackError):
    """A ``silica-pack.toml`` is missing, is not TOML, or has a field that is not valid."""


class UnsafePack(PackError):
    """A pack's files break a safety rule (a path out of the pack, a device, a cap)."""


class LocalEdits(PackError):
    """An installed pack was edited in place; updating would overwrite the edits."""
