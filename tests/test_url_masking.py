"""One masking rule for every URL silica prints or sends: a password (or token) in a
provider's base URL never reaches the terminal, an HTTP answer or an event."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from serve_daemon import SioListener, SseReader, start_daemon

from silica.security.urls import mask_urls

SECRET = "hunter2SECRET"

# Each provider and the variable that holds its address (``--provider`` name first).
URL_VARS = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "openai-responses": "OPENAI_BASE_URL",
    "gemini": "GEMINI_BASE_URL",
    "ollama": "OLLAMA_HOST",
}
KEYS = {"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k", "GEMINI_API_KEY": "k"}


def dead_port() -> int:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing answers
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("provider", sorted(URL_VARS))
def test_ask_never_prints_the_password_in_a_providers_url(provider, tmp_path):
    port = dead_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_BASE_URL", "_HOST"))}
    env.update(KEYS)
    env[URL_VARS[provider]] = f"http://me:{SECRET}@127.0.0.1:{port}"
    done = subprocess.run([sys.executable, "-m", "silica", "ask", "--provider", provider,
                           "hi"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert f"127.0.0.1:{port}" in done.stderr  # the message still says where
    assert SECRET not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_serve_sends_no_password_of_a_providers_url(home):
    port = dead_port()
    env = {"ANTHROPIC_API_KEY": "k",
           "ANTHROPIC_BASE_URL": f"http://me:{SECRET}@127.0.0.1:{port}/?api_key={SECRET}"}
    with start_daemon(home, env=env) as daemon, daemon.client() as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        answer = http.post(f"/sessions/{sid}/messages?wait=true", json={"message": "hi"})
        assert answer.status_code == 502, answer.text
        assert f"127.0.0.1:{port}" in answer.text and SECRET not in answer.text

        async def events() -> list:
            async with SseReader(daemon, sid) as sse, SioListener(daemon, sid) as sio:
                async with daemon.async_client() as client:
                    sent = await client.post(f"/sessions/{sid}/messages",
                                             json={"message": "again"})
                    assert sent.status_code == 202, sent.text
                return [*await sse.until("turn_end"), *await sio.until("turn_end")]

        seen = asyncio.run(events())
        errors = [data for name, data in seen if name == "error"]
        assert len(errors) == 2 and all(f"127.0.0.1:{port}" in e["message"] for e in errors)
        assert SECRET not in json.dumps(seen)
        assert SECRET not in http.get(f"/sessions/{sid}/history").text
    assert SECRET not in daemon.stdout() + daemon.stderr()


@pytest.mark.parametrize("source", ["http://me:{s}@127.0.0.1:{p}/pack.tar.gz",
                                    "https://{s}@127.0.0.1:{p}/team/pack.git"])
def test_packs_never_print_a_password_in_a_source(source):
    source = source.format(s=SECRET, p=dead_port())
    done = subprocess.run([sys.executable, "-m", "silica", "packs", "install", source],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    assert done.returncode != 0 and "127.0.0.1" in done.stderr
    assert SECRET not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("shown", [
    ("http://me:pw@host:8080/v1", "http://***@host:8080/v1"),
    ("redis://:pw@localhost:6379/0", "redis://***@localhost:6379/0"),
    ("https://TOKEN@github.example/x.git", "https://***@github.example/x.git"),
    ("cannot reach http://u:p@ss@h/x (refused)", "cannot reach http://***@h/x (refused)"),
    ("http://h/?api_key=abc&x=1", "http://h/?api_key=***&x=1"),
    ("redis://h/0?password=abc", "redis://h/0?password=***"),
    ("https://h/p?X-Amz-Signature=abc#frag", "https://h/p?X-Amz-Signature=***#frag"),
    ("http://[::1]:8700/?token=abc", "http://[::1]:8700/?token=***"),
    ("no url here: a=b", "no url here: a=b"),
    ("http://plain.example/path?q=1", "http://plain.example/path?q=1"),
])
def test_the_masking_rule(shown):
    given_text, expected = shown
    assert mask_urls(given_text) == expected
    assert mask_urls(expected) == expected


_USERINFO_CHARS = st.text(alphabet=st.characters(
    blacklist_categories=("Cs", "Zs", "Cc"), blacklist_characters="/?#[]@ \n"),
    min_size=1, max_size=20)


@given(user=_USERINFO_CHARS, password=_USERINFO_CHARS,
       before=st.text(max_size=30), after=st.sampled_from(["", "/", "/v1 x", ":1/", " (x)"]),
       scheme=st.sampled_from(["http", "https", "redis", "rediss", "postgresql", "s3"]))
def test_no_password_survives_in_any_text(user, password, before, after, scheme):
    secret = "PW" + password
    text = f"{before} {scheme}://{user}:{secret}@example.org{after}"
    assert secret not in mask_urls(text)


def test_an_mcp_servers_url_is_listed_without_its_password(home):
    port = dead_port()
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[mcp.servers.remote]\nurl = "http://me:{SECRET}@127.0.0.1:{port}/mcp?token={SECRET}"'
        '\nstartup_timeout = 5\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "silica", "tools", "list", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert f"127.0.0.1:{port}" in done.stdout + done.stderr  # the listing says where
    assert SECRET not in done.stdout + done.stderr
