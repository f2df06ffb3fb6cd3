"""The tokens that guard silica's servers (``serve``, ``mcp serve --http``): made, read from
where other users cannot see them, and checked.

    token = new_token()                       # a fresh random one, per start
    token = read_secret("~/.silica/token")    # the first line of a file; "-": stdin or a prompt
    check_token(token)                        # SilicaError unless printable ASCII, 1-512
    token_matches(token, bearer(headers))     # constant time
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from silica.errors import SilicaError

_TOKEN = re.compile(r"^[\x21-\x7e]{1,512}$")  # sent in headers and a cookie: printable ASCII
MAKE_ONE = 'python -c "import secrets; print(secrets.token_urlsafe())"'
SHORT = 16  # characters: a shorter token is worth a warning


def new_token() -> str:
    """A random token (32 URL-safe characters): what a server uses when given none."""
    return secrets.token_urlsafe(24)


def check_token(token: str) -> str:
    """``token``, or ``SilicaError`` saying how to make a good one."""
    if not _TOKEN.fullmatch(token):
        raise SilicaError("the token must be 1-512 printable characters without spaces; "
                          f"make one with: {MAKE_ONE}")
    return token


def read_secret(source: str, what: str = "token") -> str:
    """The first line of the file ``source`` (``~`` expanded), stripped; ``-``: a line of
    stdin, asked for without echo when stdin is a terminal. ``SilicaError`` when it cannot be
    read or is empty."""
    if source == "-":
        if sys.stdin.isatty():
            import getpass

            text = getpass.getpass(f"{what}: ", stream=sys.stderr)
        else:
            text = sys.stdin.readline()
        where = "stdin"
    else:
        path = Path(source).expanduser()
        try:
            with open(path, encoding="utf-8") as f:
                text = f.readline(4096)
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise SilicaError(f"cannot read the {what} from {source}: {reason}") from exc
        where = source
    text = text.strip()
    if not text:
        raise SilicaError(f"no {what} in {where}: put it on the first line")
    return text


def readable_by_others(source: str) -> bool:
    """Whether the file ``source`` may be read by its group or by other users."""
    if source == "-":
        return False
    try:
        mode = os.stat(Path(source).expanduser()).st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRGRP | stat.S_IROTH))


def token_matches(expected: str | None, given: str | None) -> bool:
    """Whether ``given`` is the token (always, when there is none); constant time."""
    if not expected:
        return True
    if not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogateescape"))


def bearer(headers: Mapping[str, str]) -> str | None:
    """The token of ``Authorization: Bearer T`` in ``headers`` (lower-case names)."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None
