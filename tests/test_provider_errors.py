"""Every way a provider call fails ends in one ``ProviderError`` a user can act on.

Each test runs against all three providers: the real SDKs (and httpx2 for Ollama) talking to
local servers scripted to fail. Retries are counted by the requests the server saw.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from wire import anthropic_server, drop, error, garbage, ollama_server, openai_server, text
from wire.samples import text_request

from silica.config import Settings
from silica.providers.base import ProviderError
from silica.providers.registry import get_provider

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

SERVERS = {"anthropic": anthropic_server, "openai": openai_server, "ollama": ollama_server}
MODELS = {"anthropic": "claude-sonnet-5-5", "openai": "gpt-4.1", "ollama": "llava"}
KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def call(kind: str, srv, monkeypatch, **attributes):
    srv.use(monkeypatch)
    provider = get_provider(kind, Settings(provider=kind))
    if kind == "ollama":
        provider.retry_delay = 0.001
    for name, value in attributes.items():
        setattr(provider, name, value)
    return asyncio.run(provider.complete(text_request(MODELS[kind])))


def fails(kind: str, script, monkeypatch, **attributes) -> tuple[str, object]:
    with SERVERS[kind](script) as srv, pytest.raises(ProviderError) as info:
        call(kind, srv, monkeypatch, **attributes)
    return str(info.value), srv


def test_a_bad_request_carries_the_apis_own_message(kind, monkeypatch):
    message, srv = fails(kind, [error(400, "Could not process image")], monkeypatch)
    assert "HTTP 400" in message and "Could not process image" in message
    assert len(srv.requests) == 1  # never retried


def test_refused_credentials_name_the_key_variable(kind, monkeypatch):
    message, _ = fails(kind, [error(401, "invalid x-api-key")], monkeypatch)
    assert "HTTP 401" in message and "invalid x-api-key" in message
    if kind in KEY_VARS:
        assert KEY_VARS[kind] in message


def test_an_unknown_model_is_named(kind, monkeypatch):
    message, _ = fails(kind, [error(404, f"model '{MODELS[kind]}' not found")], monkeypatch)
    assert "HTTP 404" in message and repr(MODELS[kind]) in message
    if kind == "ollama":
        assert "ollama pull llava" in message


def test_rate_limited_once_then_answered(kind, monkeypatch):
    with SERVERS[kind]([error(429, "slow down"), text("made it")]) as srv:
        reply = call(kind, srv, monkeypatch)
    assert reply.text == "made it"
    assert len(srv.requests) == 2


def test_server_errors_are_retried_then_reported(kind, monkeypatch):
    message, srv = fails(kind, [error(500, "internal trouble")] * 3, monkeypatch)
    assert len(srv.requests) == 3  # the first try and 2 retries
    assert "HTTP 500" in message and "internal trouble" in message and "3 attempts" in message


def test_retries_are_configurable(kind, monkeypatch):
    _, srv = fails(kind, [error(503, "busy")] * 3, monkeypatch, max_retries=0)
    assert len(srv.requests) == 1


def test_a_connection_dropped_mid_stream(kind, monkeypatch):
    message, srv = fails(kind, [drop()], monkeypatch)
    assert "dropped" in message and srv.root in message
    assert len(srv.requests) == 1  # a reply that had started is not sent again


def test_an_error_event_inside_a_started_reply(kind, monkeypatch):
    message, srv = fails(kind, [error(529, "Overloaded", mid_stream=True)], monkeypatch)
    assert "Overloaded" in message and "try again" in message
    assert len(srv.requests) == 1


def test_a_connection_dropped_before_the_reply_is_retried(kind, monkeypatch):
    with SERVERS[kind]([drop(mid_stream=False), text("second try")]) as srv:
        reply = call(kind, srv, monkeypatch)
    assert reply.text == "second try" and len(srv.requests) == 2


def test_nothing_listening_names_the_address(kind, monkeypatch):
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with SERVERS[kind]() as srv:
        srv.env = {k: v.replace(str(srv.root.rsplit(":", 1)[1]), str(port))
                   for k, v in srv.env.items()}
        with pytest.raises(ProviderError) as info:
            call(kind, srv, monkeypatch, max_retries=0)
    assert "cannot reach" in str(info.value) and f"127.0.0.1:{port}" in str(info.value)


def test_a_reply_that_is_not_json(kind, monkeypatch):
    message, _ = fails(kind, [garbage()], monkeypatch)
    assert "cannot read" in message


def test_an_unknown_provider_lists_the_known_ones():
    with pytest.raises(ProviderError, match="anthropic, gemini, ollama, openai, openai-responses"):
        get_provider("mistral", Settings())
