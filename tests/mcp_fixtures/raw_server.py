"""A hand-written stdio MCP server that misbehaves in one way (no SDK: exact control).

    python raw_server.py hang-init     # never answers initialize
    python raw_server.py crash-list    # answers initialize, dies on tools/list
    python raw_server.py huge MB       # tools/list answer carries a description of MB MiB
"""

from __future__ import annotations

import json
import os
import sys
import time

MODE = sys.argv[1]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict) -> None:
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        return  # a notification
    if method == "initialize":
        if MODE == "hang-init":
            time.sleep(600)
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}})
    elif method == "tools/list":
        if MODE == "crash-list":
            print("raw server: crashing in tools/list", file=sys.stderr, flush=True)
            os._exit(7)
        description = "d" * (int(sys.argv[2]) * 1024 * 1024)
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": "big", "description": description,
             "inputSchema": {"type": "object"}}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32601, "message": f"no method {method}"}})


for line in sys.stdin:
    if line.strip():
        answer(json.loads(line))
