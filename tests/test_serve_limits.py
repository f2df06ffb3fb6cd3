"""``silica serve`` against clients without the token who try to starve it: connections that
never finish their headers, slow bodies, Socket.IO handshakes that never connect, and large
JSON bodies sent at once. A real daemon in a child process, real sockets on loopback."""

from __future__ import annotations

import http.client
import socket

import httpx2
import pytest
from serve_daemon import start_daemon

TOKEN = "a-long-test-token-0123456789"
WAIT = 60.0  # seconds a test waits for what must happen (never asserted as a time)


def config(home, **serve) -> None:
    home.mkdir(parents=True, exist_ok=True)
    lines = [f"{key} = {value}" for key, value in serve.items()]
    (home / "config.toml").write_text("[serve]\n" + "\n".join(lines) + "\n")


def half_open(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each send half a request line and stall (a connection
    the daemon refuses to take is skipped)."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.settimeout(10)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET /sess")
        except OSError:
            sock.close()
            continue
        held.append(sock)
    return held


def closed_by_daemon(sock: socket.socket, timeout: float = WAIT) -> bool:
    """Whether the daemon closes ``sock`` within ``timeout`` (whatever it sent first)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:  # reset
        return True
    return True


def test_half_open_connections_do_not_starve_a_client_with_the_token(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with start_daemon(home, token=TOKEN, cwd=tmp_path, fds=256) as daemon:
        held = half_open(daemon.port, 300)
        try:
            with httpx2.Client(base_url=daemon.url, headers=daemon.headers,
                               timeout=WAIT) as http:
                answer = http.get("/sessions")
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"sessions": []}
        finally:
            for sock in held:
                sock.close()
        assert daemon.stop() == 0
        assert "Traceback" not in daemon.stderr()


def test_slow_headers_and_slow_bodies_are_closed(tmp_path):
    home = tmp_path / "home"
    config(home, header_timeout=1, body_timeout=1)
    with start_daemon(home, token=TOKEN, cwd=tmp_path) as daemon:
        silent = socket.create_connection(("127.0.0.1", daemon.port))
        partial = socket.create_connection(("127.0.0.1", daemon.port))
        partial.sendall(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        body = socket.create_connection(("127.0.0.1", daemon.port))
        body.sendall(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                     + TOKEN.encode() + b"\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"agent\"")
        for sock in (silent, partial, body):
            with sock:
                assert closed_by_daemon(sock)
        # a trickle of header bytes does not keep a connection open either
        with socket.create_connection(("127.0.0.1", daemon.port)) as trickle:
            trickle.settimeout(0.2)
            closed = False
            for _ in range(int(WAIT / 0.2)):
                try:
                    trickle.sendall(b"X")
                    if trickle.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                    break
            assert closed
        with daemon.client() as http:  # and the daemon still answers
            assert http.get("/sessions").status_code == 200
        assert "Traceback" not in daemon.stderr()


def test_a_request_without_the_token_does_not_keep_its_connection(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with start_daemon(home, token=TOKEN, cwd=tmp_path) as daemon:
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=WAIT)
        conn.request("GET", "/sessions")
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 401
        with pytest.raises(OSError):  # closed after the answer: a second request gets none
            conn.request("GET", "/sessions")
            conn.getresponse()
        conn.close()
