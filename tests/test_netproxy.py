"""silica's network proxy for a granted tool: real Unix and TCP sockets, real asyncio servers
on 127.0.0.1 as the granted hosts, no network.

The proxy runs on an event loop in a thread of its own (as it runs on silica's loop), and the
tests talk to it as the sandbox's forwarder does: through its Unix socket, or through a TCP
port relayed to it, with a plain socket or a real HTTP client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from silica.security.netproxy import MAX_NOTED, HostRules, InvalidHostGrant, NetworkProxy
from silica.security.proxy_head import BadRequest, HeadScanner, parse_head

GRANT_HELP = ('is not a host name: grant a host such as api.example.org, *.example.org, an IP '
              'address, or "*" for every host')


class LoopThread:
    """An event loop running in a thread, as silica's loop runs beside a tool's I/O."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close_server(self, server: asyncio.AbstractServer) -> None:
        async def close() -> None:
            server.close()
            await server.wait_closed()

        self.run(close())

    def stop(self) -> None:
        async def end_tasks() -> None:  # the hosts' and forwarders' connections
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(end_tasks())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Host:
    """A granted host (on 127.0.0.1 unless told): ``http`` answers one request and records
    what reached it; ``echo`` sends back every byte until the client closes."""

    def __init__(self, loop: LoopThread, kind: str, address: str = "127.0.0.1",
                 tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[bytes] = []
        self.ended = threading.Event()
        handler = self._http if kind == "http" else self._echo
        self.server = loop.run(asyncio.start_server(handler, address, 0, ssl=tls))
        self.port = self.server.sockets[0].getsockname()[1]

    async def _http(self, reader, writer) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        self.requests.append(head + await reader.readexactly(length))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        await writer.drain()
        writer.close()

    async def _echo(self, reader, writer) -> None:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        self.ended.set()
        writer.close()


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.stop()


@pytest.fixture
def socket_dir(tmp_path):
    folder = tmp_path / "net"
    folder.mkdir(mode=0o700)
    return folder


@contextlib.contextmanager
def running(loop: LoopThread, socket_dir, grants: list[str], **bounds) -> Iterator[NetworkProxy]:
    proxy = NetworkProxy(HostRules.parse(grants), socket_dir / "proxy.sock", tool="weather",
                         **bounds)
    loop.run(proxy.start())
    try:
        yield proxy
    finally:
        loop.run(proxy.close())


def connect(proxy: NetworkProxy) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(20)
    client.connect(str(proxy.socket_path))
    return client


def read_to_end(client: socket.socket) -> bytes:
    data = bytearray()
    with contextlib.suppress(ConnectionResetError):  # closed with our bytes unread
        while chunk := client.recv(65536):
            data += chunk
    return bytes(data)


def ask(proxy: NetworkProxy, data: bytes) -> bytes:
    with connect(proxy) as client:
        with contextlib.suppress(BrokenPipeError):  # answered before all was sent
            client.sendall(data)
        return read_to_end(client)


def read_head(client: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(1)
        if not chunk:
            break
        data += chunk
    return data


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def body(answer: bytes) -> str:
    return answer.partition(b"\r\n\r\n")[2].decode()


def tunnel(proxy: NetworkProxy, target: str) -> socket.socket:
    client = connect(proxy)
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert read_head(client) == b"HTTP/1.1 200 Connection established\r\n\r\n"
    return client


# --- HTTP through the proxy -----------------------------------------------------------------

def test_absolute_form_request_reaches_the_granted_host_in_origin_form(loop, socket_dir):
    host = Host(loop, "http")
    with running(loop, socket_dir, [f"127.0.0.1:{host.port}"]) as proxy:
        answer = ask(proxy, (f"POST http://127.0.0.1:{host.port}/v1/weather?city=Oslo HTTP/1.1\r\n"
                             "Host: elsewhere.example\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
                             "Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\n"
                             "User-Agent: weather-tool\r\nContent-Length: 11\r\n\r\n"
                             "temperature").encode())
    assert status(answer) == 200 and body(answer) == "hello"
    [request] = host.requests
    head, _, sent_body = request.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/weather?city=Oslo HTTP/1.1"
    assert f"Host: 127.0.0.1:{host.port}".encode() in lines
    assert b"User-Agent: weather-tool" in lines and b"Connection: close" in lines
    assert not any(line.lower().startswith((b"proxy-", b"connection: keep")) for line in lines)
    assert b"elsewhere.example" not in head and sent_body == b"temperature"
    assert proxy.used == [f"127.0.0.1:{host.port}"] and proxy.denied == []


def test_a_client_that_stops_sending_still_gets_its_answer(loop, socket_dir):
    host = Host(loop, "http")
    with running(loop, socket_dir, ["127.0.0.1"]) as proxy, connect(proxy) as client:
        client.sendall(f"GET http://127.0.0.1:{host.port} HTTP/1.0\r\n\r\n".encode())
        client.shutdown(socket.SHUT_WR)
        answer = read_to_end(client)
    assert status(answer) == 200 and body(answer) == "hello"
    assert host.requests[0].startswith(b"GET / HTTP/1.0\r\n")


@contextlib.contextmanager
def forwarder(loop: LoopThread, proxy: NetworkProxy) -> Iterator[int]:
    """What the sandbox runs inside: a TCP port relaying every connection to the proxy."""

    async def relay(reader, writer):
        up_reader, up_writer = await asyncio.open_unix_connection(str(proxy.socket_path))

        async def pump(src, dst):
            while chunk := await src.read(65536):
                dst.write(chunk)
                await dst.drain()
            with contextlib.suppress(OSError):
                dst.write_eof()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer),
                             return_exceptions=True)
        writer.close()
        up_writer.close()

    server = loop.run(asyncio.start_server(relay, "127.0.0.1", 0))
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        loop.close_server(server)


def test_an_http_client_reaches_a_granted_name_and_is_refused_its_address(loop, socket_dir):
    """The grant names ``localhost``: that name is reached although it resolves to a loopback
    address, while the address itself, not granted, is refused with the grant to add."""
    host = Host(loop, "http")
    with running(loop, socket_dir, ["localhost"]) as proxy, forwarder(loop, proxy) as port:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(
            {"http": f"http://127.0.0.1:{port}"}))
        with opener.open(f"http://LocalHost.:{host.port}/forecast", timeout=20) as reply:
            assert reply.read() == b"hello"
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(f"http://127.0.0.1:{host.port}/forecast", timeout=20)
    assert refused.value.code == 403
    assert refused.value.read().decode() == (
        "silica: weather may not reach 127.0.0.1 (not granted). Grant it in config.toml: "
        '[tools.network_grant] weather = ["127.0.0.1"]\n')
    assert host.requests[0].startswith(b"GET /forecast HTTP/1.1\r\n")
    assert proxy.used == [f"localhost:{host.port}"]
    assert proxy.denied == [f"127.0.0.1:{host.port}"]


def test_an_https_client_reaches_a_granted_name_through_a_tunnel(loop, socket_dir, tmp_path):
    """TLS runs end to end between the tool and the host: the proxy sees only the name."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    host = Host(loop, "http", tls=server_side)
    with running(loop, socket_dir, ["localhost"]) as proxy, forwarder(loop, proxy) as port, \
            httpx2.Client(proxy=f"http://127.0.0.1:{port}", trust_env=False, timeout=20,
                          verify=ssl.create_default_context(cafile=str(cert))) as client:
        reply = client.get(f"https://localhost:{host.port}/forecast")
        assert reply.status_code == 200 and reply.text == "hello"
        with pytest.raises(httpx2.ProxyError, match="403"):
            client.get(f"https://127.0.0.1:{host.port}/forecast")
    assert host.requests[0].startswith(b"GET /forecast HTTP/1.1\r\n")
    assert proxy.used == [f"localhost:{host.port}"]
    assert proxy.denied == [f"127.0.0.1:{host.port}"]


# --- CONNECT tunnels ------------------------------------------------------------------------

def test_connect_relays_bytes_both_ways(loop, socket_dir):
    echo = Host(loop, "echo")
    payload = bytes(range(256)) * 2048  # 512 KiB: more than the buffers hold at once
    with running(loop, socket_dir, [f"127.0.0.1:{echo.port}"]) as proxy:
        with connect(proxy) as client:
            # the first bytes of the tunnel come in the same packet as the request
            client.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode()
                           + b"\x16\x03\x01hello")
            assert read_head(client) == b"HTTP/1.1 200 Connection established\r\n\r\n"
            sender = threading.Thread(target=client.sendall, args=(payload,))
            sender.start()
            received = b""
            while len(received) < 8 + len(payload):
                received += client.recv(65536)
            sender.join()
        assert received == b"\x16\x03\x01hello" + payload
        assert proxy.used == [f"127.0.0.1:{echo.port}"]


def test_a_client_that_does_not_read_holds_the_host_back(loop, socket_dir):
    """Backpressure: what the proxy holds for a slow client is bounded, so a host sending fast
    waits for the client instead of filling silica's memory."""
    total, sent = 48 * 1024 * 1024, [0]

    async def source(reader, writer):
        chunk = b"x" * 65536
        while sent[0] < total:
            writer.write(chunk)
            await writer.drain()
            sent[0] += len(chunk)
        writer.close()

    server = loop.run(asyncio.start_server(source, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    with running(loop, socket_dir, ["127.0.0.1"]) as proxy, \
            tunnel(proxy, f"127.0.0.1:{port}") as client:
        seen = []
        while sent[0] < total and seen[-3:] != [sent[0]] * 3:  # until the host stalls
            seen.append(sent[0])
            threading.Event().wait(0.2)
        assert sent[0] < 16 * 1024 * 1024
        assert len(read_to_end(client)) == total  # and it all arrives once read
    loop.close_server(server)


def test_an_ungranted_host_gets_403_naming_the_grant(loop, socket_dir):
    with running(loop, socket_dir, ["api.example.org"]) as proxy:
        answer = ask(proxy, b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        assert status(answer) == 403
        assert body(answer) == ("silica: weather may not reach evil.example (not granted). Grant "
                                'it in config.toml: [tools.network_grant] weather = '
                                '["evil.example"]\n')
        assert proxy.denied == ["evil.example:443"] and proxy.used == []


def test_the_refused_hosts_noted_are_bounded(loop, socket_dir):
    with running(loop, socket_dir, []) as proxy:
        for n in [*range(150), 0]:
            ask(proxy, f"CONNECT host{n}.example:443 HTTP/1.1\r\n\r\n".encode())
    assert proxy.denied == [f"host{n}.example:443" for n in range(MAX_NOTED)]


def test_subdomain_grants_reach_subdomains_only(loop, socket_dir):
    with running(loop, socket_dir, ["*.example.invalid"], connect_timeout=3) as proxy:
        for target in ("example.invalid:443", "example.invalid.evil.org:443",
                       "aexample.invalid:443"):
            assert status(ask(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())) == 403
        # granted: the proxy tries it, and the name does not resolve (.invalid never does)
        answer = ask(proxy, b"CONNECT A.Example.Invalid.:443 HTTP/1.1\r\n\r\n")
        assert status(answer) == 502 and body(answer).count("\n") == 1
        assert proxy.used == ["a.example.invalid:443"]
        assert proxy.denied == ["example.invalid:443", "example.invalid.evil.org:443",
                                "aexample.invalid:443"]


def test_an_ipv6_grant_reaches_that_address(loop, socket_dir):
    port = Host(loop, "echo", address="::1").port
    with running(loop, socket_dir, [f"[::1]:{port}"]) as proxy:
        with tunnel(proxy, f"[0::1]:{port}") as client:
            client.sendall(b"six")
            assert client.recv(3) == b"six"
        assert status(ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())) == 403
    assert proxy.used == [f"[::1]:{port}"] and proxy.denied == [f"127.0.0.1:{port}"]


def test_slow_name_lookups_leave_the_loops_shared_threads_free(loop, socket_dir, monkeypatch):
    """A tool asking for names whose lookup hangs ties up the proxy's own resolver threads,
    never the thread pool the rest of silica's loop works in."""
    release, real, hanging = threading.Event(), socket.getaddrinfo, []

    def getaddrinfo(host, *args, **kwargs):
        if str(host).endswith(".slow.invalid"):
            hanging.append(host)
            release.wait(60)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with running(loop, socket_dir, ["*"], connect_timeout=60) as proxy:
        clients = [connect(proxy) for _ in range(2 * (os.cpu_count() or 1) + 8)]
        for n, client in enumerate(clients):
            client.sendall(f"CONNECT h{n}.slow.invalid:443 HTTP/1.1\r\n\r\n".encode())
        try:
            while len(hanging) < 2:  # lookups have started; give the rest time to queue
                threading.Event().wait(0.05)
            threading.Event().wait(0.5)
            assert loop.run(asyncio.to_thread(lambda: "free"), timeout=5) == "free"
        finally:
            release.set()
        for client in clients:
            with client:
                assert status(read_to_end(client)) == 502


def test_a_name_whose_first_address_hangs_is_reached_through_its_next(loop, socket_dir,
                                                                       monkeypatch):
    """A host with a dead address first (an IPv6 route that drops everything, say) is still
    reached through its next address well before the connect timeout."""
    echo = Host(loop, "echo")
    with socket.socket() as dead, socket.socket() as filler:
        dead.bind(("127.0.0.2", echo.port))
        dead.listen(0)  # never accepts: once its queue holds one, connections hang
        filler.connect(("127.0.0.2", echo.port))
        real = socket.getaddrinfo

        def getaddrinfo(host, port, *args, **kwargs):
            if host == "dual.invalid":
                return [info for address in ("127.0.0.2", "127.0.0.1")
                        for info in real(address, port, *args, **kwargs)]
            return real(host, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        with running(loop, socket_dir, ["dual.invalid"], connect_timeout=600) as proxy, \
                tunnel(proxy, f"dual.invalid:{echo.port}") as client:
            client.sendall(b"reached")
            assert client.recv(7) == b"reached"


def test_port_limited_grant_and_the_grant_of_everything(loop, socket_dir):
    echo, other = Host(loop, "echo"), Host(loop, "echo")
    with running(loop, socket_dir, [f"127.0.0.1:{echo.port}"]) as proxy:
        tunnel(proxy, f"127.0.0.1:{echo.port}").close()
        answer = ask(proxy, f"CONNECT 127.0.0.1:{other.port} HTTP/1.1\r\n\r\n".encode())
        assert status(answer) == 403
    with running(loop, socket_dir, ["*"]) as proxy:
        for port in (echo.port, other.port):
            with tunnel(proxy, f"127.0.0.1:{port}") as client:
                client.sendall(b"ping")
                assert client.recv(4) == b"ping"


def test_an_unreachable_port_gets_502(loop, socket_dir):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    with running(loop, socket_dir, ["127.0.0.1"]) as proxy:
        answer = ask(proxy, f"GET http://127.0.0.1:{closed_port}/ HTTP/1.1\r\n\r\n".encode())
    assert status(answer) == 502
    assert body(answer) == f"silica: cannot reach 127.0.0.1:{closed_port}: connection refused\n"


# --- bad requests and bounds ----------------------------------------------------------------

@pytest.mark.parametrize("request_bytes", [
    b"GET /weather HTTP/1.1\r\nHost: api.example.org\r\n\r\n",   # origin form: not a proxy ask
    b"GET https://api.example.org/ HTTP/1.1\r\n\r\n",             # https goes through CONNECT
    b"CONNECT api.example.org HTTP/1.1\r\n\r\n",                  # no port
    b"CONNECT user@api.example.org:443 HTTP/1.1\r\n\r\n",
    b"GET http://127.1/ HTTP/1.1\r\n\r\n",                        # a number read as an address
    b"GET http://api.example.org/ HTTP/1.1\r\nBad Header\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",              # TLS without CONNECT
    b"SSH-2.0-OpenSSH_9.6\r\n",                                   # another protocol
])
def test_what_is_not_a_proxy_request_gets_400(loop, socket_dir, request_bytes):
    with running(loop, socket_dir, ["*"]) as proxy:
        answer = ask(proxy, request_bytes)  # answered without waiting for more bytes
        assert status(answer) == 400 and proxy.used == [] and proxy.denied == []


def test_a_head_over_16_kib_gets_431(loop, socket_dir):
    head = b"GET http://api.example.org/ HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20 * 1024 + b"\r\n\r\n"
    with running(loop, socket_dir, ["*"]) as proxy:
        assert status(ask(proxy, head)) == 431


def test_a_slow_head_is_closed_after_the_head_timeout(loop, socket_dir):
    with running(loop, socket_dir, ["*"], head_timeout=0.5) as proxy, connect(proxy) as client:
        client.sendall(b"GET http://api.example.org/ HTTP/1.1\r\nHost: api")
        answer = read_to_end(client)  # no more is sent: the proxy ends it
    assert status(answer) == 408


def test_an_idle_tunnel_is_closed_after_the_idle_timeout(loop, socket_dir):
    echo = Host(loop, "echo")
    with running(loop, socket_dir, ["127.0.0.1"], idle_timeout=0.5) as proxy:
        with tunnel(proxy, f"127.0.0.1:{echo.port}") as client:
            client.sendall(b"once")
            assert client.recv(4) == b"once"
            assert read_to_end(client) == b""
        assert echo.ended.wait(20)


def test_the_65th_connection_gets_503(loop, socket_dir):
    echo = Host(loop, "echo")
    with running(loop, socket_dir, ["127.0.0.1"]) as proxy:
        tunnels = [tunnel(proxy, f"127.0.0.1:{echo.port}") for _ in range(64)]
        for client in tunnels:  # every one is open and relaying
            client.sendall(b"up")
            assert client.recv(2) == b"up"
        answer = ask(proxy, f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode())
        assert status(answer) == 503
        tunnels.pop().close()
        for _ in range(200):  # a closed tunnel frees its place once the proxy sees the close
            with contextlib.suppress(AssertionError), tunnel(proxy, f"127.0.0.1:{echo.port}"):
                break
            threading.Event().wait(0.05)
        else:
            pytest.fail("no place was freed by closing a tunnel")
        for client in tunnels:
            client.close()


def test_closing_the_proxy_closes_a_live_tunnel_and_removes_the_socket(loop, socket_dir,
                                                                        caplog):
    echo = Host(loop, "echo")
    with caplog.at_level(logging.ERROR), running(loop, socket_dir, ["127.0.0.1"]) as proxy:
        client = tunnel(proxy, f"127.0.0.1:{echo.port}")
        client.sendall(b"live")
        assert client.recv(4) == b"live"
        assert stat.S_IMODE(os.stat(proxy.socket_path).st_mode) == 0o600
    with client:
        assert read_to_end(client) == b""
    assert echo.ended.wait(20)  # the host's side is closed too
    assert not proxy.socket_path.exists()
    assert caplog.records == []  # a closing proxy is not an error


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to act as another user")
def test_another_user_cannot_connect_to_the_socket(loop):
    folder = Path(tempfile.mkdtemp(prefix="silica-proxy-"))  # open to all: only the mode guards
    folder.chmod(0o755)
    try:
        with running(loop, folder, ["*"]) as proxy:
            probe = ("import socket, sys; s = socket.socket(socket.AF_UNIX); "
                     "s.connect(sys.argv[1])")
            other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                                    "--clear-groups", sys.executable, "-c", probe,
                                    str(proxy.socket_path)], capture_output=True, text=True)
            assert other.returncode != 0 and "PermissionError" in other.stderr
            assert status(ask(proxy, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")) == 502  # its own
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("existing", ["file", "stale socket", "symlink"])
def test_an_existing_path_is_refused_and_left_alone(loop, socket_dir, existing):
    path = socket_dir / "proxy.sock"
    if existing == "file":
        path.write_text("not mine")
    elif existing == "stale socket":  # one a crashed call left behind: still not replaced
        with socket.socket(socket.AF_UNIX) as old:
            old.bind(str(path))
    else:
        path.symlink_to(socket_dir / "elsewhere.sock")
    before = os.lstat(path)
    proxy = NetworkProxy(HostRules.parse(["*"]), path, tool="weather")
    with pytest.raises(OSError, match="already exists"):
        loop.run(proxy.start())
    assert os.lstat(path) == before and not (socket_dir / "elsewhere.sock").exists()


def test_a_socket_path_too_long_for_unix_sockets_is_refused_saying_so(loop, tmp_path):
    proxy = NetworkProxy(HostRules.parse(["*"]), tmp_path / ("x" * 120), tool="weather")
    with pytest.raises(OSError, match="longer than 107 bytes: give a shorter folder"):
        loop.run(proxy.start())


# --- host rules -----------------------------------------------------------------------------

@pytest.mark.parametrize(("grant", "host", "port", "allowed"), [
    ("api.example.org", "api.example.org", 443, True),
    ("api.example.org", "API.Example.ORG.", 80, True),
    ("API.example.org.", "api.example.org", 80, True),
    ("api.example.org", "example.org", 443, False),
    ("api.example.org", "x.api.example.org", 443, False),
    ("*.example.com", "a.example.com", 443, True),
    ("*.example.com", "a.b.example.com", 443, True),
    ("*.example.com", "example.com", 443, False),
    ("*.example.com", "example.com.evil.org", 443, False),
    ("*.example.com", "evilexample.com", 443, False),
    ("127.0.0.1", "127.0.0.1", 9, True),
    ("127.0.0.1", "127.1", 9, False),
    ("127.0.0.1", "2130706433", 9, False),
    ("127.0.0.1", "localhost", 9, False),
    ("localhost", "127.0.0.1", 9, False),
    ("[::1]", "::1", 9, True),
    ("::1", "[0:0::1]", 9, True),
    ("[::1]", "127.0.0.1", 9, False),
    ("127.0.0.1:8080", "127.0.0.1", 8080, True),
    ("127.0.0.1:8080", "127.0.0.1", 8081, False),
    ("[::1]:8080", "[::1]", 8080, True),
    ("api.example.org:443", "api.example.org", 80, False),
    ("*", "anything.example", 1, True),
    ("*", "10.0.0.1", 65535, True),
    ("*:443", "anything.example", 80, False),
    ("bücher.example", "xn--bcher-kva.example", 443, True),
    ("*", "not a host", 80, False),
])
def test_host_rules(grant, host, port, allowed):
    assert HostRules.parse([grant]).allows(host, port) is allowed


@pytest.mark.parametrize("grant", [
    "http://api.example.org/", "api.example.org/v1", "user@api.example.org", "api example.org",
    "", "*.", "a.*.example.org", "*example.org", "127.1", "0x7f000001", "*.10.0.0.1", "*.[::1]",
    "api.example.org:0", "api.example.org:65536", "api.example.org:https", "[::1]:", "fe80::1%eth0",
    "a..example.org", "-a.example.org", "x" * 64 + ".example.org",
])
def test_a_grant_that_is_not_a_host_is_refused_with_what_to_grant(grant):
    with pytest.raises(InvalidHostGrant) as refused:
        HostRules.parse(["api.example.org", grant])
    assert str(refused.value) == f"{grant!r} {GRANT_HELP}"


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=40), st.text("*.[]:0123456789abcdefx-_/@ü",
                                                        max_size=30))),
       st.text(max_size=40), st.integers(1, 65535))
def test_parsing_grants_raises_only_invalid_host_grant(grants, host, port):
    try:
        rules = HostRules.parse(grants)
    except InvalidHostGrant:
        return
    rules.allows(host, port)
    # a rule written back reads as the same rule
    assert HostRules.parse(str(rule) for rule in rules.rules) == rules


# --- request heads --------------------------------------------------------------------------

HEAD_PIECES = st.sampled_from([
    b"GET ", b"CONNECT ", b"POST ", b"http://", b"https://", b"127.0.0.1", b"[::1]", b"example.org",
    b":", b":80", b"/", b"?q", b"@", b" HTTP/1.1", b" HTTP/1.0", b"\r\n", b"\n", b"\r\n\r\n",
    b"Host: x", b"Proxy-Authorization: y", b"Connection: close", b" ", b"\t", b"\x00", b"\xff",
])
HEADS = st.one_of(st.binary(max_size=200),
                  st.lists(st.one_of(HEAD_PIECES, st.binary(max_size=4)), max_size=20)
                  .map(b"".join))


@pytest.mark.parametrize(("head", "target", "forward"), [
    (b"CONNECT api.example.org:443 HTTP/1.1\r\nHost: api.example.org:443\r\n\r\n",
     "api.example.org:443", b""),
    (b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", "[::1]:8443", b""),
    (b"GET http://[::1]/x HTTP/1.1\n\n", "[::1]:80",
     b"GET /x HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n"),
    (b"HEAD HTTP://Api.Example.org.:8080?q=1 HTTP/1.0\r\nX-A:  b \r\nproxy-authorization: c"
     b"\r\nKeep-Alive: 5\r\nUpgrade: h2c\r\nHost: other\r\n\r\n", "api.example.org:8080",
     b"HEAD /?q=1 HTTP/1.0\r\nHost: Api.Example.org.:8080\r\nX-A: b\r\nConnection: close"
     b"\r\n\r\n"),
])
def test_a_request_head_names_its_target_and_what_is_sent_on(head, target, forward):
    request = parse_head(head)
    assert request.target == target and request.forward == forward
    assert request.tunnel is head.startswith(b"CONNECT")


@settings(max_examples=500, deadline=None)
@given(HEADS)
def test_parsing_a_head_raises_only_bad_request(data):
    try:
        request = parse_head(data)
    except BadRequest as err:
        assert "\n" not in str(err)
        return
    assert HostRules.parse(["*"]).allows(request.host, request.port)


def scan(pieces: list[bytes]) -> int | str:
    scanner = HeadScanner()
    end = -1
    try:
        for piece in pieces:
            end = scanner.feed(piece)
            if end != -1:
                return end
    except BadRequest:
        return "bad"
    return end


@settings(max_examples=500, deadline=None)
@given(HEADS, st.lists(st.integers(0, 200), max_size=8))
def test_a_head_scans_alike_however_it_is_split(data, cuts):
    bounds = [0, *sorted(cut for cut in cuts if cut <= len(data)), len(data)]
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    whole = scan([data])
    assert scan(pieces) == whole
    if isinstance(whole, int) and whole != -1:
        try:
            request = parse_head(data[:whole])
        except BadRequest:
            return
        assert request.port > 0 and (request.tunnel or request.forward.endswith(b"\r\n\r\n"))


def test_random_bytes_never_stop_the_proxy(loop, socket_dir, caplog):
    echo = Host(loop, "echo")
    pieces = st.one_of(HEAD_PIECES, st.just(f"127.0.0.1:{echo.port}".encode()),
                       st.binary(max_size=4))
    heads = st.one_of(HEADS, st.lists(pieces, max_size=20).map(b"".join))

    with running(loop, socket_dir, [f"127.0.0.1:{echo.port}"]) as proxy:
        @settings(max_examples=150, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(heads)
        def check(data: bytes) -> None:
            with connect(proxy) as client:
                client.sendall(data)
                client.shutdown(socket.SHUT_WR)
                answer = read_to_end(client)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 ")

        with caplog.at_level(logging.ERROR, logger="silica.security.netproxy"):
            check()
        with tunnel(proxy, f"127.0.0.1:{echo.port}") as client:  # still serving
            client.sendall(b"after")
            assert client.recv(5) == b"after"
    assert [r for r in caplog.records if r.name.startswith("silica.security")] == []
