"""``silica serve`` against clients without the token who try to starve it: connections that
never finish their headers, slow bodies, Socket.IO handshakes that never connect, and large
JSON bodies sent at once. A real daemon in a child process, real sockets on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx2
from serve_daemon import SioListener, start_daemon

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
    with start_daemon(home, token=TOKEN, cwd=tmp_path) as daemon, \
            socket.create_connection(("127.0.0.1", daemon.port)) as sock:
        request = b"GET /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        sock.sendall(request * 2)  # two requests at once, on one connection
        sock.settimeout(WAIT)
        answers = b""
        while chunk := sock.recv(65536):  # until the daemon closes it
            answers += chunk
        assert answers.startswith(b"HTTP/1.1 401 ")
        assert answers.count(b"HTTP/1.1 ") == 1  # the second is not answered
        assert b"connection: close" in answers.lower()


def engineio_open(http: httpx2.Client) -> str:
    """A Socket.IO handshake without the token (Engine.IO polling): its session id."""
    answer = http.get("/socket.io/", params={"EIO": "4", "transport": "polling"})
    assert answer.status_code == 200, answer.text
    return json.loads(answer.text[1:])["sid"]


def engineio_alive(http: httpx2.Client, sid: str) -> bool:
    """Whether the daemon still holds the Engine.IO session ``sid`` (a pong is taken)."""
    answer = http.post("/socket.io/", params={"EIO": "4", "transport": "polling",
                                              "sid": sid}, content=b"3")
    return answer.status_code == 200


def test_socketio_handshakes_without_the_token_are_few_and_brief(tmp_path):
    home = tmp_path / "home"
    config(home, max_pending_socketio=4, header_timeout=2)
    with start_daemon(home, token=TOKEN, cwd=tmp_path) as daemon, \
            httpx2.Client(base_url=daemon.url, timeout=WAIT) as anonymous:
        opened = [engineio_open(anonymous) for _ in range(20)]
        alive = [sid for sid in opened if engineio_alive(anonymous, sid)]
        assert len(alive) <= 4
        with daemon.client() as http:
            sid = http.post("/sessions", json={}).json()["session_id"]

        async def join() -> object:  # a client with the token still gets in
            async with SioListener(daemon, sid) as listener:
                return listener.joined

        assert asyncio.run(join())["ok"] is True
        last = engineio_open(anonymous)
        for _ in range(int(WAIT / 0.5)):  # and one that never connects is let go
            if not engineio_alive(anonymous, last):
                break
            time.sleep(0.5)
        assert not engineio_alive(anonymous, last)
    assert "Traceback" not in daemon.stderr()


def vm_hwm(pid: int) -> int:
    """The peak resident memory of process ``pid`` so far, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_large_json_bodies_sent_at_once_are_read_within_a_budget(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # ten images of almost 10 MB each, base64: a body of about 140 MB, under the cap
    image = {"data": "A" * 13_900_000, "mime": "image/png"}
    body = json.dumps({"message": "look", "images": [image] * 10}).encode()
    with start_daemon(home, token=TOKEN, cwd=tmp_path) as daemon:
        with daemon.client() as http:
            sids = [http.post("/sessions", json={}).json()["session_id"] for _ in range(4)]
        before = vm_hwm(daemon.proc.pid)
        answers: list[tuple[int, dict]] = []

        def send(sid: str) -> None:
            with httpx2.Client(base_url=daemon.url, headers=daemon.headers,
                               timeout=300) as client:
                answer = client.post(f"/sessions/{sid}/messages", content=body,
                                     headers={"Content-Type": "application/json"})
                answers.append((answer.status_code, answer.json()))

        threads = [threading.Thread(target=send, args=(sid,)) for sid in sids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        peak = vm_hwm(daemon.proc.pid)
        print(f"VmHWM {before / 1e6:.0f} MB before, {peak / 1e6:.0f} MB after four "
              f"{len(body) / 1e6:.0f} MB bodies: {sorted(s for s, _ in answers)}")
        assert len(answers) == 4
        for status, answer in answers:  # zeros are no image: each is read, or told to wait
            assert status in (422, 503), answer
            if status == 503:
                assert "multipart/form-data" in answer["error"]["message"]
        assert any(status == 422 for status, _ in answers)
        assert peak - before < 4 * len(body)  # one body parsed at a time, not four
    assert "Traceback" not in daemon.stderr()


def test_running_out_of_file_descriptors_is_one_line_and_passes(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with start_daemon(home, token=TOKEN, cwd=tmp_path, fds=256) as daemon:
        with daemon.client() as http:
            sid = http.post("/sessions", json={}).json()["session_id"]
        request = (f"GET /sessions/{sid}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {TOKEN}\r\n\r\n").encode()
        streams = []  # event streams with the token, one after another, until one waits
        try:
            for _ in range(300):
                sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
                streams.append(sock)
                sock.sendall(request)
                try:
                    assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
                except TimeoutError:  # not accepted: the daemon has no descriptor left
                    break
        finally:
            for sock in streams:
                sock.close()
        with daemon.client(timeout=WAIT) as http:  # once they are gone, it answers again
            assert http.get("/sessions").status_code == 200
        assert daemon.stop() == 0
    err = daemon.stderr()
    assert "Traceback" not in err
    assert err.count("cannot accept connections") == 1, err
