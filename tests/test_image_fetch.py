"""``fetch_image``: an image URL fetched from a real HTTP server on 127.0.0.1, and every URL,
address, redirect, reply and body that must be refused. Ends with ``silica ask --image URL``
through the real CLI and the Anthropic wire server.

Addresses are checked before any connection: the servers here count the requests they get,
so a refusal is seen to have happened before anything reached them. No test asserts a time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import ipaddress
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import images_corpus as corpus
import pytest
from PIL import Image
from wire import anthropic_server, text

from silica.images.fetch import MAX_REDIRECTS, FetchError, address_refusal, fetch_image

MB = 1024 * 1024
LOOPBACK = [ipaddress.ip_network("127.0.0.1/32")]  # allow our server, nothing else private


class ImageServer:
    """A threaded HTTP server whose paths are the test's answers; ``hits`` counts requests
    per path, ``hosts`` the Host headers received."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.hits: dict[str, int] = {}
        self.hosts: list[str] = []
        self.stopped_writing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                server.hits[path] = server.hits.get(path, 0) + 1
                server.hosts.append(self.headers.get("host", ""))
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    server.answer(self, path)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.root = f"http://{host}:{self.port}"
        self.redirects: dict[str, str] = {}

    def answer(self, handler: BaseHTTPRequestHandler, path: str) -> None:
        if path in self.redirects:
            return self.send(handler, 302, b"", "text/plain",
                             {"Location": self.redirects[path]})
        if path.startswith("/hop/"):  # /hop/N redirects to /hop/N-1, /hop/0 is the image
            left = int(path.rsplit("/", 1)[1])
            if left:
                return self.send(handler, 302, b"", "text/plain",
                                 {"Location": f"/hop/{left - 1}"})
            path = "/shot.png"
        if path == "/shot.png":
            return self.send(handler, 200, corpus.screenshot_png(), "image/png")
        if path == "/page.html":
            return self.send(handler, 200, b"<html>no image</html>", "text/html; charset=utf-8")
        if path == "/declared-big.png":
            handler.send_response(200)
            handler.send_header("Content-Type", "image/png")
            handler.send_header("Content-Length", str(50 * MB))
            handler.end_headers()
            return None
        if path == "/endless.png":  # no length: bytes until the client stops reading
            return self.stream(handler, bytes(256 * 1024), pause=0.0)
        if path == "/trickle.png":  # one byte at a time, forever
            return self.stream(handler, b"\x89", pause=0.05)
        if path == "/gzip.png":
            return self.send(handler, 200, corpus.small_png(), "image/png",
                             {"Content-Encoding": "gzip"})
        return self.send(handler, 404, b"not here", "text/plain")

    def send(self, handler, status, body, mime, headers=None) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", mime)
        handler.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(body)

    def stream(self, handler, piece: bytes, pause: float) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "image/png")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(b"\x89PNG\r\n\x1a\n")
        try:
            for _ in range(4096):  # a bound, so a broken test cannot hang the suite
                handler.wfile.write(piece)
                handler.wfile.flush()
                if pause:
                    time.sleep(pause)
        finally:
            self.stopped_writing.set()

    @contextlib.contextmanager
    def running(self) -> Iterator[ImageServer]:
        thread = threading.Thread(target=self.httpd.serve_forever,
                                  kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
            thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[ImageServer]:
    with ImageServer().running() as running:
        yield running


def fetch(url: str, *, max_bytes: int = 10 * MB, timeout: float = 20.0,
          allow_private=False, resolve=None):
    return asyncio.run(fetch_image(url, max_bytes=max_bytes, timeout=timeout,
                                   allow_private=allow_private, resolve=resolve))


def refusal(url: str, **options) -> FetchError:
    with pytest.raises(FetchError) as caught:
        fetch(url, **options)
    return caught.value


# -- a good fetch ---------------------------------------------------------------------------


def test_an_image_on_loopback_is_refused_by_default(server):
    err = refusal(f"{server.root}/shot.png")
    assert err.reason == "refused" and "loopback" in str(err)
    assert f"{server.root}/shot.png" in str(err) and "fetch_private" in str(err)
    assert server.hits == {}  # refused before connecting


def test_an_image_is_fetched_when_private_addresses_are_allowed(server):
    fetched = fetch(f"{server.root}/shot.png?size=full", allow_private=True)
    assert fetched.data == corpus.screenshot_png()
    assert fetched.mime == "image/png" and fetched.name == "shot.png"
    with Image.open(io.BytesIO(fetched.data)) as img:
        assert img.size == (1920, 1080)


def test_allowed_networks_let_through_only_what_they_hold(server):
    assert fetch(f"{server.root}/shot.png", allow_private=LOOPBACK).mime == "image/png"
    other = [ipaddress.ip_network("10.0.0.0/8")]
    assert "loopback" in str(refusal(f"{server.root}/shot.png", allow_private=other))


# -- addresses ------------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "kind"), [
    ("10.0.0.1", "private"), ("192.168.1.20", "private"), ("172.16.0.1", "private"),
    ("169.254.169.254", "link-local"), ("127.0.0.1", "loopback"), ("::1", "loopback"),
    ("::ffff:127.0.0.1", "127.0.0.1, a loopback"), ("::ffff:10.0.0.1", "10.0.0.1, a private"),
    ("::ffff:169.254.169.254", "link-local"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("fe80::1", "link-local"), ("fc00::1", "private"), ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"), ("240.0.0.1", "reserved"), ("100.64.0.1", "non-public"),
    ("192.0.2.10", "private"), ("2002:7f00:1::", "127.0.0.1"), ("64:ff9b::a00:1", "10.0.0.1"),
])
def test_non_public_addresses_are_refused(address, kind):
    found = address_refusal(address)
    assert found is not None and kind in found
    assert address_refusal(address, allow_private=True) is None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700::1111"])
def test_public_addresses_are_allowed(address):
    assert address_refusal(address) is None


@pytest.mark.parametrize("host", ["10.0.0.1", "169.254.169.254", "[::1]", "[::ffff:127.0.0.1]",
                                  "0.0.0.0"])
def test_a_url_naming_a_private_address_is_refused_before_connecting(host):
    err = refusal(f"http://{host}/latest/meta-data")
    assert err.reason == "refused" and "fetch_private" in str(err)
    assert f"http://{host}/latest/meta-data" in str(err)


def test_a_host_name_is_checked_by_what_it_resolves_to(server):
    err = refusal(f"http://localhost:{server.port}/shot.png")
    assert "localhost resolves to 127.0.0.1, a loopback address" in str(err)
    assert server.hits == {}


def test_a_name_with_any_private_address_is_refused(server):
    async def mixed(host, port):
        return ["8.8.8.8", "10.1.2.3"]

    err = refusal(f"http://images.test:{server.port}/shot.png", resolve=mixed)
    assert "10.1.2.3, a private address" in str(err)


def test_the_connection_goes_to_the_checked_address_without_a_second_lookup(server):
    answers = iter([["127.0.0.1"], ["10.0.0.1"], ["10.0.0.1"]])  # a rebinding DNS server
    calls = []

    async def rebinding(host, port):
        calls.append((host, port))
        return next(answers)

    fetched = fetch(f"http://images.test:{server.port}/shot.png", allow_private=LOOPBACK,
                    resolve=rebinding)
    assert fetched.data == corpus.screenshot_png()
    assert calls == [("images.test", server.port)]  # resolved once, and that was used
    assert server.hosts == [f"images.test:{server.port}"]  # the name still went as Host


@pytest.fixture
def tls_server(tmp_path, monkeypatch) -> Iterator[ImageServer]:
    """The image server over HTTPS with a certificate for ``images.test`` only (made by the
    openssl command), trusted through ``SSL_CERT_FILE``."""
    import ssl

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=images.test",
                    "-addext", "subjectAltName=DNS:images.test", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server = ImageServer()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.httpd.socket = context.wrap_socket(server.httpd.socket, server_side=True)
    with server.running() as running:
        yield running


def test_https_verifies_the_host_name_while_connecting_to_the_checked_address(tls_server):
    async def to_loopback(host, port):
        return ["127.0.0.1"]

    url = f"https://images.test:{tls_server.port}/shot.png"
    fetched = fetch(url, allow_private=LOOPBACK, resolve=to_loopback)
    assert fetched.data == corpus.screenshot_png()
    wrong = refusal(f"https://other.test:{tls_server.port}/shot.png", allow_private=LOOPBACK,
                    resolve=to_loopback)
    assert wrong.reason == "failed" and "certificate" in str(wrong).lower()
    assert tls_server.hits == {"/shot.png": 1}  # the other name never got a request through


# -- redirects ------------------------------------------------------------------------------


def test_redirects_are_followed_and_each_is_checked(server):
    fetched = fetch(f"{server.root}/hop/{MAX_REDIRECTS}", allow_private=True)
    assert fetched.data == corpus.screenshot_png() and fetched.url == f"{server.root}/hop/0"
    err = refusal(f"{server.root}/hop/{MAX_REDIRECTS + 1}", allow_private=True)
    assert err.reason == "refused" and f"more than {MAX_REDIRECTS} times" in str(err)


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/",
                                    "http://10.0.0.1/x.png", "http://[::ffff:127.0.0.1]/x.png",
                                    "http://0.0.0.0/x.png"])
def test_a_redirect_into_a_private_address_is_refused(server, target):
    server.redirects["/go"] = target
    err = refusal(f"{server.root}/go", allow_private=LOOPBACK)
    assert err.reason == "refused" and f"redirected from {server.root}/go" in str(err)
    assert server.hits == {"/go": 1}


def test_a_redirect_to_another_loopback_server_never_reaches_it(server):
    with ImageServer("127.0.0.2").running() as inner:
        server.redirects["/go"] = f"{inner.root}/shot.png"
        err = refusal(f"{server.root}/go", allow_private=LOOPBACK)
        assert "127.0.0.2 is a loopback address" in str(err)
        assert inner.hits == {}  # checked before connecting


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://example.com/x.png",
                                    "gopher://127.0.0.1:6379/_INFO"])
def test_a_redirect_to_another_scheme_is_refused(server, target):
    server.redirects["/go"] = target
    err = refusal(f"{server.root}/go", allow_private=True)
    assert "not an http or https URL" in str(err)


# -- URLs and replies -----------------------------------------------------------------------


@pytest.mark.parametrize(("url", "words"), [
    ("ftp://example.com/x.png", "not an http or https URL"),
    ("file:///etc/passwd", "not an http or https URL"),
    ("javascript:alert(1)", "not an http or https URL"),
    ("http://user:secret@example.com/x.png", "user name or password"),
    ("http://256.1.1.1/x.png", "not a valid URL"),
    ("http:///x.png", "names no host"),
])
def test_bad_urls_are_refused(url, words):
    err = refusal(url, allow_private=True)
    assert err.reason == "refused" and words in str(err)


def test_a_page_that_is_not_an_image_is_refused(server):
    err = refusal(f"{server.root}/page.html", allow_private=True)
    assert err.reason == "refused" and "text/html, not an image" in str(err)


def test_a_missing_image_names_the_status(server):
    err = refusal(f"{server.root}/nothing.png", allow_private=True)
    assert err.reason == "failed" and "HTTP 404" in str(err)


def test_a_compressed_reply_is_refused(server):
    assert "compressed (gzip)" in str(refusal(f"{server.root}/gzip.png", allow_private=True))


def test_a_body_declared_over_the_cap_is_refused_unread(server):
    err = refusal(f"{server.root}/declared-big.png", allow_private=True, max_bytes=MB)
    assert err.reason == "too_large" and "1,048,576 bytes" in str(err)


def test_an_endless_body_is_cut_off_at_the_cap(server):
    err = refusal(f"{server.root}/endless.png", allow_private=True, max_bytes=MB)
    assert err.reason == "too_large" and "max_size_bytes" in str(err)
    assert server.stopped_writing.wait(10)  # the server saw the client go


def test_a_server_that_trickles_forever_hits_the_time_limit(server):
    err = refusal(f"{server.root}/trickle.png", allow_private=True, timeout=1.0)
    assert err.reason == "failed" and "longer than 1 s" in str(err)
    assert "fetch_timeout" in str(err)


def test_a_refused_connection_says_what_to_do():
    with contextlib.closing(__import__("socket").socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once closed
    err = refusal(f"http://127.0.0.1:{port}/x.png", allow_private=True)
    assert err.reason == "failed" and "could not fetch" in str(err)


def test_escape_sequences_in_a_url_never_reach_the_message():
    err = refusal("ftp://\x1b]0;pwned\x07/x.png", allow_private=True)
    assert "\x1b" not in str(err) and "\x07" not in str(err) and "␛]0;pwned␇" in str(err)


# -- silica ask --image URL -------------------------------------------------------------------


def silica(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silica", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_ask_with_an_image_url_sends_the_fetched_image(server, home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[serve]\nfetch_private = true\n")
    with anthropic_server([text("A screenshot of an editor.")]) as srv:
        done = silica("ask", "what is this?", "--image", f"{server.root}/shot.png",
                      env={**os.environ, **srv.env})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "A screenshot of an editor."
    [message] = srv.requests[0]["messages"]
    [image] = [b for b in message["content"] if b["type"] == "image"]
    assert image["source"]["media_type"] == "image/png"
    with Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))) as img:
        assert img.size == (1429, 804)  # fitted exactly as a tool's image would be
    assert len(list(home.glob("images/*/*.png"))) == 1  # stored with the session


def test_ask_refuses_a_private_image_url_without_fetch_private(server, home):
    with anthropic_server([text("never")]) as srv:
        done = silica("ask", "what is this?", "--image", f"{server.root}/shot.png",
                      env={**os.environ, **srv.env})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "loopback" in done.stderr and "fetch_private = true" in done.stderr
    assert "nothing saved" in done.stderr
    assert srv.requests == [] and server.hits == {}


def test_ask_refuses_a_bad_image_behind_a_url(server, home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[serve]\nfetch_private = true\n")
    with anthropic_server([text("never")]) as srv:
        page = silica("ask", "look", "--image", f"{server.root}/page.html",
                      env={**os.environ, **srv.env})
        ftp = silica("ask", "look", "--image", "ftp://example.com/x.png",
                     env={**os.environ, **srv.env})
    assert page.returncode == 1 and "text/html, not an image" in page.stderr
    assert ftp.returncode == 1 and "not an http or https URL" in ftp.stderr
    assert "Traceback" not in page.stderr + ftp.stderr and srv.requests == []
