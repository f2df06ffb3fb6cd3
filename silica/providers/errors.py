"""``ProviderError`` messages shared by the built-in providers: what failed, what to do.

Each function returns (does not raise) a ``ProviderError`` so callers write
``raise http_error(...) from exc`` and keep the original cause attached.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from silica.providers.base import ProviderError


@dataclass(frozen=True)
class Endpoint:
    """Who was called, for messages: ``label`` ("Anthropic"), where, and which env vars."""

    label: str  # "Anthropic", "OpenAI", "Ollama"
    api: str  # the protocol, for "check that it speaks the ... API"
    base_url: str
    model: str
    key_var: str | None = None  # None: the API takes no key (Ollama)
    url_var: str | None = None
    retries: int = 2
    missing_model_fix: str = "choose another with --model or SILICA_MODEL"
    unreachable_fix: str = ""


def _retries(ep: Endpoint) -> str:
    attempts = ep.retries + 1
    return "1 attempt" if attempts == 1 else f"{attempts} attempts"


def api_message(body: object) -> str:
    """The API's own error text from a decoded or raw error body, whatever its shape."""
    if isinstance(body, bytes | str):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            body = json.loads(text)
        except ValueError:
            return text.strip()[:500]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("type") or err)[:500]
        if err is not None and err is not body:
            return str(err)[:500]
        if "message" in body:
            return str(body["message"])[:500]
    return "" if body is None else str(body)[:500]


def http_error(ep: Endpoint, status: int, detail: str) -> ProviderError:
    """An HTTP error status from the API, after any retries, as a message a user can act on."""
    said = f": {detail}" if detail else ""
    if status == 400:
        return ProviderError(
            f"{ep.label} rejected the request for model {ep.model!r} (HTTP 400){said}. "
            "If this names an image, that image was not accepted; since the history is re-sent "
            "every turn, start a new session or drop the image.")
    if status in (401, 403):
        fix = (f"check that {ep.key_var} holds a valid key with access to this model"
               if ep.key_var else f"check the server at {ep.base_url} allows this client")
        return ProviderError(f"{ep.label} refused the credentials (HTTP {status}){said}; {fix}.")
    if status == 404:
        return ProviderError(f"{ep.label} at {ep.base_url} has no model {ep.model!r} "
                             f"(HTTP 404){said}; {ep.missing_model_fix}.")
    if status == 413:
        return ProviderError(
            f"{ep.label} says the request is too large (HTTP 413){said}; fewer or smaller "
            "images (see [images] in config.toml) or a shorter history will fit.")
    if status == 429:
        return ProviderError(
            f"{ep.label} is rate limiting requests (HTTP 429){said}; still limited after "
            f"{_retries(ep)}. Wait a minute and try again, or raise the account's limits.")
    if status >= 500:
        return ProviderError(
            f"{ep.label} had a server error (HTTP {status}){said}; it persisted after "
            f"{_retries(ep)}. Try again later.")
    if status < 400:  # an error event inside a reply that had begun with HTTP 200
        return stream_error(ep, detail)
    return ProviderError(f"{ep.label} answered HTTP {status}{said}.")


def stream_error(ep: Endpoint, detail: str) -> ProviderError:
    """The API began its reply, then sent an error in the stream (overloaded, say)."""
    said = f": {detail}" if detail else ""
    return ProviderError(f"{ep.label} broke off its reply to {ep.model!r} with an error{said}; "
                         "try again.")


def connection_error(ep: Endpoint, exc: BaseException, *,
                     mid_stream: bool = False) -> ProviderError:
    """The connection failed (``mid_stream``: after the reply had started)."""
    where = f"{ep.label} at {ep.base_url}"
    fix = f"; check the address ({ep.url_var})" if ep.url_var else ""
    fix += ep.unreachable_fix
    reason = str(exc) or type(exc).__name__
    if mid_stream:
        return ProviderError(
            f"the connection to {where} dropped before the reply was complete ({reason}); "
            "try again.")
    return ProviderError(
        f"cannot reach {where} ({reason}) after {_retries(ep)}{fix}.")


def response_error(ep: Endpoint, detail: str) -> ProviderError:
    """The API answered, but not in a shape silica can read."""
    return ProviderError(
        f"{ep.label} at {ep.base_url} sent a reply silica cannot read ({detail}). If this "
        f"address is a proxy or a compatible server, check that it speaks the {ep.api} API.")
