"""The tokens that guard silica's servers (``serve``, ``mcp serve --http``): made, read from
where other users cannot see them, and checked.

    choice = choose_token(token_file=None, given=None, no_token=False,
                          variable="SILICA_SERVE_TOKEN")   # what a server's options say
    token = new_token()                       # a fresh random one, per start
    token = read_secret("~/.silica/token")    # the first line of a file; "-": stdin or a prompt
    check_token(token)                        # UsageError unless printable ASCII, 1-512
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
from dataclasses import dataclass, field
from pathlib import Path

from silica.errors import UsageError

_TOKEN = re.compile(r"^[\x21-\x7e]{1,512}$")  # sent in headers and a cookie: printable ASCII
MAKE_ONE = 'python -c "import secrets; print(secrets.token_urlsafe())"'
SHORT = 16  # characters: a shorter token is worth a warning


@dataclass(frozen=True)
class TokenChoice:
    """The token a server needs (``None``: none), whether it was ``made`` here (so it must
    be shown to the user), and ``warnings`` to print."""

    token: str | None
    made: bool = False
    warnings: list[str] = field(default_factory=list)


def choose_token(*, token_file: str | None, given: str | None, no_token: bool,
                 variable: str) -> TokenChoice:
    """The token of a server started with ``--token-file`` (``token_file``), ``--token``
    (``given``: masked in this process's command line, with a warning) or ``--no-token``,
    else ``$variable``, else a new one. ``UsageError`` for options that contradict each
    other, or a token that cannot be read or used."""
    from silica.security.process import hide_from_proc

    named = [name for name, value in (("--token-file", token_file), ("--token", given),
                                      ("--no-token", no_token or None)) if value is not None]
    if len(named) > 1:
        raise UsageError(f"{' and '.join(named)} contradict each other: give one")
    if no_token:
        return TokenChoice(None, warnings=[
            "--no-token: every user of this machine can run your tools through this server"])
    if given is not None:
        hide_from_proc(given)
        return TokenChoice(check_token(given), warnings=[
            "--token on the command line can be read by every user of this machine (ps, "
            f"/proc) until silica starts; use --token-file PATH or ${variable} instead"])
    if token_file is not None:
        warnings = [f"{token_file} can be read by other users; make it yours only: "
                    f"chmod 600 {token_file}"] if readable_by_others(token_file) else []
        return TokenChoice(check_token(read_secret(token_file)), warnings=warnings)
    if from_env := os.environ.get(variable):
        return TokenChoice(check_token(from_env))
    return TokenChoice(new_token(), made=True)


def new_token() -> str:
    """A random token (32 URL-safe characters): what a server uses when given none."""
    return secrets.token_urlsafe(24)


def check_token(token: str) -> str:
    """``token``, or ``UsageError`` saying how to make a good one."""
    if not _TOKEN.fullmatch(token):
        raise UsageError("the token must be 1-512 printable characters without spaces; "
                          f"make one with: {MAKE_ONE}")
    return token


def read_secret(source: str, what: str = "token") -> str:
    """The first line of the file ``source`` (``~`` expanded), stripped; ``-``: a line of
    stdin, asked for without echo when stdin is a terminal. ``UsageError`` when it cannot be
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
            raise UsageError(f"cannot read the {what} from {source}: {reason}") from exc
        where = source
    text = text.strip()
    if not text:
        raise UsageError(f"no {what} in {where}: put it on the first line")
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
