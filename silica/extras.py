"""Optional features and the extras that install them (``pip install 'silica[serve]'``).

A feature whose dependencies are an extra calls ``require(extra)`` before importing them: a
missing one is one ``SilicaError`` naming the install command, never an ``ImportError``.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import PathFinder

from silica.errors import SilicaError

EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    # extra: (what it gives, the modules it installs, as imported)
    "serve": ("silica serve", ("starlette", "uvicorn", "python_multipart", "socketio")),
    "gemini": ("the gemini provider", ("google.genai",)),
    "redis": ("silica serve --redis", ("redis",)),
    "postgres": ("sessions in Postgres ([storage] database)", ("psycopg", "psycopg_pool")),
    "s3": ("images in an object store ([storage] images)", ("boto3",)),
}
"""Every extra of pyproject.toml's [project.optional-dependencies] but ``all`` and ``dev``."""


class MissingExtra(SilicaError):
    """A feature was used whose extra is not installed."""


def installed(module: str) -> bool:
    """Whether ``module`` (dotted) can be imported, without importing it or its parents (a
    parent package's ``__init__`` can be slow, and the feature may never be used)."""
    if module in sys.modules:
        return sys.modules[module] is not None  # None: blocked, as imports take it
    parent, _, _ = module.rpartition(".")
    try:
        if not parent or parent in sys.modules:
            return importlib.util.find_spec(module) is not None
        if not installed(parent):
            return False
        spec = importlib.util.find_spec(parent)
        places = spec.submodule_search_locations if spec else None
        return places is not None and PathFinder.find_spec(module, list(places)) is not None
    except (ImportError, ValueError):  # a parent package missing, or blocked in sys.modules
        return False


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported."""
    return [module for module in EXTRAS[extra][1] if not installed(module)]


def require(extra: str) -> None:
    """Raise ``MissingExtra`` naming the install command unless ``extra`` is installed."""
    absent = missing(extra)
    if absent:
        feature = EXTRAS[extra][0]
        raise MissingExtra(f"{feature} needs silica's {extra!r} extra ({', '.join(absent)} "
                           f"not installed): pip install 'silica[{extra}]'")
