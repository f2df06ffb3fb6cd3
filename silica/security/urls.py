"""One rule for every URL silica prints or sends: its credentials are masked.

A URL may carry a secret in two places: its user information (``http://user:pw@host``,
``redis://:pw@host``, ``https://TOKEN@host``) and its query (``?password=...``,
``?api_key=...``, ``?token=...``, ``?sig=...``). ``mask_urls`` replaces each with ``***``
wherever a URL appears in a text (a message that quotes a URL, an SDK's exception text, a
bare URL), so one call covers a URL and any message built around one:

    >>> mask_urls("cannot reach http://me:hunter2@proxy:8080/v1 (refused)")
    'cannot reach http://***@proxy:8080/v1 (refused)'

The host, port and path stay, so the message still says where. Anything that is not a URL
is left as it is; applying it twice changes nothing more.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://userinfo@ : userinfo runs to the last "@" before the host (as URL parsers read
# it), so a password with an unencoded "@" is masked whole.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#\[\]]*@")
# A query or fragment parameter whose name says it holds a secret.
_SECRET_PARAM = re.compile(
    r"(?i)([?&;#](?:[^\s=&;#]*?)(?:pass|pwd|token|secret|key|sig|auth|credential)"
    r"[^\s=&;#]*=)[^\s&;#]*")


def mask_urls(text: str) -> str:
    """``text`` with the user information and secret-looking query values of every URL in it
    replaced by ``***``. Linear in ``len(text)``; never raises for a ``str``."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    return _SECRET_PARAM.sub(lambda m: m.group(1) + MASK, text)


def secret_spans(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` of each secret ``mask_urls`` would replace in ``text``: for masking
    in place, where the text must keep its length (a process's command line)."""
    spans = [(m.end(1), m.end() - 1) for m in _USERINFO.finditer(text)]
    spans += [(m.end(1), m.end()) for m in _SECRET_PARAM.finditer(text)]
    return [(start, end) for start, end in spans if end > start]
