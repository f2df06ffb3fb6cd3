"""Where silica keeps an MCP server's OAuth login: one file per server name and URL.

``TokenFile`` is the SDK's ``TokenStorage`` (``mcp.client.auth``) over
``<silica home>/mcp-auth/NAME-HASH.json``: the folder is made 0700 and the file written
0600 (to a new file renamed into place, so a reader never sees half of one). It holds the
tokens with the time they expire, the client's registration, and what discovery found
(the protected resource's and the authorization server's metadata), so that a later run
refreshes an expired token at the right endpoint without a login. The folder is hidden
from tools by the sandbox like the rest of the silica home, and nothing here is ever in a
tool's environment, a message or a log.

A file that cannot be read as a login (broken, or from another version) counts as no
login: ``silica mcp login`` writes a new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from silica.paths import silica_home

AUTH_DIR = "mcp-auth"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def token_path(name: str, url: str, home: Path | None = None) -> Path:
    """The file of the login to the server ``name`` at ``url`` (a changed URL is another
    server, and needs its own login)."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    stem = _SAFE.sub("_", name)[:64] or "server"
    return (silica_home() if home is None else home) / AUTH_DIR / f"{stem}-{digest}.json"


class TokenFile:
    """One server's login on disk; the ``TokenStorage`` protocol plus what discovery
    found (``metadata``), when the token expires (``expires_at``) and ``delete``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, **changes: Any) -> None:
        data = {**self._read(), **changes}
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(folder, 0o700)  # an existing folder made by hand is narrowed too
        temporary = folder / f".{self.path.name}.{os.getpid()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(temporary, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)

    def logged_in(self) -> bool:
        """Whether tokens are stored (they may have expired; a refresh may renew them)."""
        return self._tokens() is not None

    def delete(self) -> bool:
        """Forget the login; ``False`` when there was none."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def forget_tokens(self) -> None:
        """Drop the tokens (and what discovery found), keep the client's registration."""
        data = self._read()
        if not data:
            return
        self.delete()
        if "client" in data:
            self._write(client=data["client"])

    def _tokens(self) -> Any:
        from mcp.shared.auth import OAuthToken

        return self._kept("tokens", OAuthToken)

    def _kept(self, key: str, model: Any) -> Any:
        """What the file keeps under ``key``, as ``model``; ``None`` if missing or damaged."""
        from pydantic import ValidationError

        raw = self._read().get(key)
        if not isinstance(raw, dict):
            return None
        try:
            return model.model_validate(raw)
        except ValidationError:
            return None

    # -- the SDK's TokenStorage ----------------------------------------------------------

    async def get_tokens(self) -> Any:
        return self._tokens()

    async def set_tokens(self, tokens: Any) -> None:
        expires = tokens.expires_in
        self._write(tokens=tokens.model_dump(mode="json", exclude_none=True),
                    expires_at=time.time() + expires if expires is not None else None)

    async def get_client_info(self) -> Any:
        from mcp.shared.auth import OAuthClientInformationFull

        return self._kept("client", OAuthClientInformationFull)

    async def set_client_info(self, client_info: Any) -> None:
        self._write(client=client_info.model_dump(mode="json", exclude_none=True))

    # -- silica's additions --------------------------------------------------------------

    def expires_at(self) -> float | None:
        """When the stored access token expires (seconds since the epoch), if it said."""
        value = self._read().get("expires_at")
        return float(value) if isinstance(value, (int, float)) else None

    def metadata(self) -> dict[str, Any]:
        """What discovery found: ``resource`` (RFC 9728), ``server`` (RFC 8414) and
        ``issuer`` (the authorization server's URL), each when known."""
        found = self._read().get("metadata")
        return found if isinstance(found, dict) else {}

    def set_metadata(self, **found: Any) -> None:
        self._write(metadata={k: v for k, v in found.items() if v is not None})
