"""The Content-Security-Policy of an MCP App's sandbox, built from what its server declared.

    header = app_csp(resource.csp, frame_ancestor="http://127.0.0.1:8700",
                     refused=("http://127.0.0.1:8700", "http://localhost:8700"))

Without declarations the policy is the extension's restrictive default (``default-src
'none'``; scripts and styles from the sandbox itself and inline; images and media also from
``data:``; no connections, no frames, no plugins). Each declared list widens one set of
directives by its origins and nothing else (``connectDomains``: ``connect-src``;
``resourceDomains``: scripts, styles, images, media, fonts; ``frameDomains``: ``frame-src``;
``baseUriDomains``: ``base-uri``), so the policy never allows more than the server declared.

A declared origin is kept only when it is one plain source: ``http``, ``https``, ``ws`` or
``wss``, a host name (its first label may be ``*``) or an IP address, an optional port; no
path, quote, space, ``;`` or ``,`` (which could add a keyword or a directive). Origins of
the daemon itself (``refused``) are dropped whatever the server says: an app never reaches
silica's own API. The sandbox page may be framed only by ``frame_ancestor``, the page.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

DOMAIN_KEYS = ("connectDomains", "resourceDomains", "frameDomains", "baseUriDomains")
_SOURCE = re.compile(r"(?:https?|wss?)://(?:\*\.)?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*"
                     r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?::[0-9]{1,5})?"
                     r"|(?:https?|wss?)://\[[0-9a-f:.]{2,45}\](?::[0-9]{1,5})?")


def clean_sources(values: Sequence[str] | None, refused: Collection[str] = ()) -> list[str]:
    """The declared origins kept (see the module docstring), lower case, each once."""
    kept: list[str] = []
    gone = {r.lower().rstrip("/") for r in refused}
    for value in values or ():
        if not isinstance(value, str):
            continue
        source = value.strip().lower().rstrip("/")
        if _SOURCE.fullmatch(source) and source not in gone and source not in kept:
            kept.append(source)
    return kept


def app_csp(declared: Mapping[str, Sequence[str]] | None, *, frame_ancestor: str,
            refused: Collection[str] = ()) -> str:
    """The policy (a header value) for an app whose ``_meta.ui.csp`` is ``declared``."""
    declared = declared or {}
    connect, resources, frames, bases = (clean_sources(declared.get(key), refused)
                                         for key in DOMAIN_KEYS)
    own = ["'self'", "'unsafe-inline'"]  # the app's own inline code, and the sandbox's

    def listed(directive: str, values: list[str], empty: str = "'none'") -> str:
        return f"{directive} {' '.join(values) if values else empty}"

    directives = [
        "default-src 'none'",
        listed("script-src", [*own, *resources]),
        listed("style-src", [*own, *resources]),
        listed("img-src", ["'self'", "data:", *resources]),
        listed("media-src", ["'self'", "data:", *resources]),
        listed("font-src", resources),
        listed("connect-src", connect),
        listed("frame-src", frames),
        listed("base-uri", bases, "'self'"),
        "object-src 'none'",
        "form-action 'none'",
        f"frame-ancestors {frame_ancestor}",
    ]
    return "; ".join(directives)
