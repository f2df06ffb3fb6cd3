"""silica as an MCP client, to the letter of the protocol, against servers that answer as
the revisions allow: a real HTTP server in a thread, the real ``silica tools run``.

The conformance harness checks the rest of the client (``tests/conformance/client.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


def answers_without_result_type() -> type[BaseHTTPRequestHandler]:
    """A 2026-07-28 server (stateless, JSON answers) whose ``tools/call`` result names no
    ``resultType``, which the revision says means ``"complete"``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            method = body.get("method")
            if method == "server/discover":
                result = {"resultType": "complete", "supportedVersions": ["2026-07-28"],
                          "capabilities": {"tools": {}},
                          "serverInfo": {"name": "plain", "version": "1"}}
            elif method == "tools/list":
                result = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                          "tools": [{"name": "plain", "inputSchema": {"type": "object"}}]}
            elif method == "tools/call":
                result = {"content": [{"type": "text", "text": "done, no resultType"}]}
            else:
                self.send_response(202)
                self.end_headers()
                return
            out = json.dumps({"jsonrpc": "2.0", "id": body.get("id"), "result": result}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    return Handler


@pytest.fixture
def server_url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), answers_without_result_type())
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    finally:
        httpd.shutdown()
        httpd.server_close()


def run_tool(home: Path, url: str, tool: str) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"[mcp.servers.test]\nurl = {json.dumps(url)}\n")
    done = subprocess.run([sys.executable, "-m", "silica", "tools", "run", tool, "--json"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SILICA_RESIDENT": "0"})
    assert "Traceback" not in done.stderr, done.stderr
    return {"status": done.returncode, **json.loads(done.stdout)}


def test_a_result_without_result_type_is_a_complete_result(home, server_url):
    got = run_tool(home, server_url, "test__plain")
    assert got["status"] == 0 and got["is_error"] is False
    assert got["content"] == [{"type": "text", "text": "done, no resultType"}]


def test_only_a_missing_result_type_is_filled_in():
    import asyncio

    import anyio
    from mcp.shared.message import SessionMessage
    from mcp_types.jsonrpc import JSONRPCNotification, JSONRPCResponse

    from silica.mcp.client import CompleteByDefault

    async def read() -> list:
        send, receive = anyio.create_memory_object_stream(10)
        items = [SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=1, result={"content": []})),
                 SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=2, result={
                     "resultType": "input_required", "inputRequests": {}})),
                 SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="x")),
                 ValueError("not MCP")]
        async with send:
            for item in items:
                await send.send(item)
        async with CompleteByDefault(receive) as stream:
            return [item async for item in stream]

    first, second, note, error = asyncio.run(read())
    assert first.message.result == {"content": [], "resultType": "complete"}
    assert second.message.result["resultType"] == "input_required"
    assert note.message.method == "x" and isinstance(error, ValueError)
