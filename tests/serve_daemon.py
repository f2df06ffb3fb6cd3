"""A real ``silica serve`` for tests: a uvicorn process on 127.0.0.1, and clients for it.

    from serve_daemon import start_daemon, SseReader, SioListener

    with anthropic_server([text("Hi.")]) as srv, \\
            start_daemon(home, env={**srv.env, "SILICA_PROVIDER": "anthropic"}) as daemon:
        with daemon.client() as http:                      # httpx2.Client, token sent
            sid = http.post("/sessions", json={}).json()["session_id"]
        async with SseReader(daemon, sid) as sse, SioListener(daemon, sid) as sio:
            ...post a message...
            events = await sse.until("turn_end")           # [(name, data), ...]

``start_daemon(home, env=..., args=(), cwd=None, token=None)`` runs ``python -m silica serve
--port P`` (a free port) with ``SILICA_HOME=home`` and ``env`` on top of this environment
(every provider's key, URL and host taken out first, so only ``env`` points anywhere), and
returns once the daemon answers HTTP (``fds=N``: with RLIMIT_NOFILE N). The daemon gets
``token`` (default: a random one) in ``$SILICA_SERVE_TOKEN``, as a user should give it;
``--token`` or ``--no-token`` in ``args`` are passed as they are. ``Daemon``: ``url``
(``http://127.0.0.1:P``, no trailing slash), ``port``, ``home``, ``proc``, ``token``,
``start_line`` (what it printed), ``headers`` (the ``Authorization`` header when there is a
token), ``client()`` / ``async_client()``, ``stderr()``, ``stop()`` (SIGTERM, then its exit
code) and ``kill()`` (SIGKILL). It is a context manager that stops the daemon; the daemon's
stderr is printed when a test using it fails (pytest shows what a test printed).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from conftest import script_tool, simple_spec

PROVIDER_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                 "ANTHROPIC_PROFILE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OLLAMA_HOST",
                 "GEMINI_API_KEY", "GOOGLE_API_KEY", "SILICA_SERVE_TOKEN", "SILICA_PROVIDER",
                 "SILICA_MODEL")
START_TIMEOUT = 120.0  # seconds: a loaded machine imports the SDKs slowly
EVENT_TIMEOUT = 60.0


def gate_tool(folder: Path) -> None:
    """Tool ``gate``: waits (at most 60 s) until the file ``path`` exists, then prints
    ``opened``: a tool call a test holds open for as long as it needs a turn running."""
    script_tool(folder, "gate.py", simple_spec("gate", path="string"), body="""
        import os, sys, time
        # silica passes every value as one token, --path=VALUE
        path = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--path="))
        for _ in range(1200):
            if os.path.exists(path):
                break
            time.sleep(0.05)
        print("opened")
    """)


def picture_tool(folder: Path, png: bytes, *, label: str | None = None) -> None:
    """Tool ``picture``: prints ``png`` as a JSON image (with ``label`` when given, and then
    a ``label`` input)."""
    data = base64.b64encode(png).decode()
    said = {"label": label} if label is not None else {}
    spec = simple_spec("picture", label="string") if label is not None else \
        simple_spec("picture")
    script_tool(folder, "picture.py", spec, body=f"""
        import json
        print(json.dumps({{**{said!r}, "media_type": "image/png", "base64": {data!r}}}))
    """)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Daemon:
    """A running ``silica serve`` (see the module docstring)."""

    def __init__(self, home: Path, port: int, proc: subprocess.Popen, token: str | None,
                 logs: Path) -> None:
        self.home, self.port, self.proc, self.token = home, port, proc, token
        self.url = f"http://127.0.0.1:{port}"
        self.start_line = ""
        self._logs = logs

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, **kwargs: Any) -> httpx2.Client:
        kwargs.setdefault("timeout", EVENT_TIMEOUT)
        return httpx2.Client(base_url=self.url, headers=self.headers, **kwargs)

    def async_client(self, **kwargs: Any) -> httpx2.AsyncClient:
        kwargs.setdefault("timeout", EVENT_TIMEOUT)
        return httpx2.AsyncClient(base_url=self.url, headers=self.headers, **kwargs)

    def stdout(self) -> str:
        return (self._logs / "stdout").read_text(errors="replace")

    def stderr(self) -> str:
        return (self._logs / "stderr").read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; its exit code (SIGKILL after ``timeout`` seconds: -9)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: the daemon dies mid-whatever, as in a crash."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        err = self.stderr()
        if err.strip():
            sys.stderr.write(f"--- silica serve on port {self.port}, stderr ---\n{err}")


def daemon_env(home: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without provider settings, with ``SILICA_HOME`` and ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARS}
    base.update({"SILICA_HOME": str(home), "PYTHONUNBUFFERED": "1"})
    base.update(env or {})
    return base


def start_daemon(home: Path, *, env: dict[str, str] | None = None, args: Any = (),
                 cwd: Path | None = None, token: str | None = None,
                 port: int | None = None, fds: int | None = None) -> Daemon:
    """Start ``silica serve`` and wait until it answers (see the module docstring);
    ``fds``: its limit of open file descriptors (RLIMIT_NOFILE)."""
    args, env = list(args), dict(env or {})
    if "--token" in args:
        token = args[args.index("--token") + 1]
    elif "--no-token" in args:
        token = None
    else:
        token = token or env.get("SILICA_SERVE_TOKEN") or secrets.token_urlsafe(16)
        env["SILICA_SERVE_TOKEN"] = token
    return launch(home, args, env, cwd=cwd, port=port, token=token, fds=fds)


def launch(home: Path, args: list[str], env: dict[str, str] | None, *,
           cwd: Path | None = None, port: int | None = None, token: str | None = None,
           stdin: bytes | None = None, fds: int | None = None) -> Daemon:
    """``silica serve --port P ARGS`` with exactly ``args`` and ``env`` (``token`` is what the
    returned ``Daemon`` sends; ``stdin`` is written to the daemon, then closed), once it
    answers HTTP."""
    port = port or free_port()
    logs = Path(tempfile.mkdtemp(prefix="silica-serve-"))
    with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "silica", "serve", "--port", str(port), *args],
            cwd=cwd or home.parent, env=daemon_env(home, env), stdout=out, stderr=err,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            preexec_fn=_fd_limit(fds) if fds else None)
    if stdin is not None:
        proc.stdin.write(stdin)
        proc.stdin.close()
    daemon = Daemon(home, port, proc, token, logs)
    try:
        wait_until_ready(daemon)
    except BaseException:
        daemon.kill()
        raise
    daemon.start_line = daemon.stdout().strip()
    return daemon


def _fd_limit(fds: int):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))
    return limit


def wait_until_ready(daemon: Daemon, timeout: float = START_TIMEOUT) -> None:
    """Wait until the daemon answers an HTTP request (any status)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.proc.poll() is not None:
            raise AssertionError(f"silica serve exited with {daemon.proc.returncode}:\n"
                                 f"{daemon.stdout()}{daemon.stderr()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
            conn.request("GET", "/sessions", headers=daemon.headers)
            conn.getresponse().read()
            conn.close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"silica serve did not answer on port {daemon.port}:\n"
                         f"{daemon.stderr()}")


# -- event clients ------------------------------------------------------------------------


def new_session(daemon: Daemon) -> str:
    """A new session of ``daemon`` (``POST /sessions``); its id."""
    with daemon.client() as http:
        made = http.post("/sessions", json={})
    assert made.status_code == 201, made.text
    return made.json()["session_id"]


async def post(daemon: Daemon, sid: str, message: str, **query: Any) -> Any:
    """``POST /sessions/{sid}/messages`` with ``message`` (``query``: e.g. ``wait="true"``);
    the response."""
    async with daemon.async_client() as client:
        return await client.post(f"/sessions/{sid}/messages", params=query,
                                 json={"message": message})


def names(events: list) -> list[str]:
    """The names of ``(name, data)`` events, in order."""
    return [name for name, _ in events]


class SseReader:
    """``GET /sessions/{sid}/events`` read as events arrive: ``async with`` returns once the
    stream is subscribed (its ``: ready`` comment); ``until(name)`` reads up to and
    including the first event called ``name``, ``events`` holds every one read."""

    def __init__(self, daemon: Daemon, session_id: str, *, inline: bool = False,
                 headers: dict[str, str] | None = None) -> None:
        self.daemon, self.session_id = daemon, session_id
        self.params = {"inline_images": "true"} if inline else {}
        self.headers = daemon.headers if headers is None else headers
        self.events: list[tuple[str, Any]] = []
        self.comments: list[str] = []
        self._stack = contextlib.AsyncExitStack()
        self._lines: Any = None
        self.response: httpx2.Response | None = None

    async def __aenter__(self) -> SseReader:
        client = await self._stack.enter_async_context(httpx2.AsyncClient(
            base_url=self.daemon.url, timeout=httpx2.Timeout(EVENT_TIMEOUT)))
        self.response = await self._stack.enter_async_context(client.stream(
            "GET", f"/sessions/{self.session_id}/events", params=self.params,
            headers=self.headers))
        if self.response.status_code != 200:
            await self.response.aread()
            return self
        self._lines = self.response.aiter_lines()
        while True:  # the first comment says the stream is subscribed
            line = await asyncio.wait_for(self._lines.__anext__(), EVENT_TIMEOUT)
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                break
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def next(self, timeout: float = EVENT_TIMEOUT) -> tuple[str, Any]:
        """The next event (comments are kept in ``comments``) within ``timeout`` seconds:
        the daemon's pings do not extend the wait."""
        name, data = "message", []
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = max(0.0, deadline - asyncio.get_running_loop().time())
            line = await asyncio.wait_for(self._lines.__anext__(), left)
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif line == "" and data:
                event = (name, json.loads("\n".join(data)))
                self.events.append(event)
                return event

    async def until(self, name: str, timeout: float = EVENT_TIMEOUT) -> list[tuple[str, Any]]:
        """Events read until (and with) the first ``name``."""
        read: list[tuple[str, Any]] = []
        while True:
            event = await self.next(timeout)
            read.append(event)
            if event[0] == name:
                return read


class SioListener:
    """A Socket.IO client (python-socketio's ``AsyncClient``) joined to a session: every
    event it gets lands in ``events``; ``until(name)`` waits for the first ``name`` not yet
    waited for. ``joined`` is the join's ack; ``after``: join with it (resume after that id)."""

    EVENTS = ("message", "text_delta", "tool_call", "tool_result", "tool_note", "image",
              "turn_end", "error", "reset")

    def __init__(self, daemon: Daemon, session_id: str | None, *, inline: bool = False,
                 auth: Any = None, transports: list[str] | None = None,
                 after: str | None = None) -> None:
        import socketio

        self.daemon, self.session_id, self.inline = daemon, session_id, inline
        self.after = after  # joins with it: the events after this id first
        self.auth = auth if auth is not None else (
            {"token": daemon.token} if daemon.token else None)
        self.transports = transports or ["websocket"]
        self.client = socketio.AsyncClient(reconnection=False)
        self.events: list[tuple[str, Any]] = []
        self.joined: Any = None
        self._seen = 0
        self._arrived = asyncio.Event()
        for name in self.EVENTS:
            self.client.on(name, self._handler(name), namespace="/events")

    def _handler(self, name: str):
        async def heard(data: Any = None) -> None:
            self.events.append((name, data))
            self._arrived.set()
        return heard

    async def __aenter__(self) -> SioListener:
        await self.client.connect(self.daemon.url, namespaces=["/events"], auth=self.auth,
                                  transports=self.transports, wait_timeout=EVENT_TIMEOUT)
        if self.session_id is not None:
            self.joined = await self.join(self.session_id)
        return self

    async def join(self, session_id: str) -> Any:
        body: dict[str, Any] = {"session_id": session_id, "inline_images": self.inline}
        if self.after is not None:
            body["after"] = self.after
        return await self.client.call("join", body, namespace="/events",
                                      timeout=EVENT_TIMEOUT)

    async def __aexit__(self, *exc: object) -> None:
        await self.client.disconnect()

    async def until(self, name: str, timeout: float = EVENT_TIMEOUT) -> list[tuple[str, Any]]:
        """The events after the last ``until`` up to (and with) the next ``name``."""
        deadline = time.monotonic() + timeout
        while True:
            for i in range(self._seen, len(self.events)):
                if self.events[i][0] == name:
                    read, self._seen = self.events[self._seen:i + 1], i + 1
                    return read
            self._arrived.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {name} event; got {[e[0] for e in self.events]}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)
