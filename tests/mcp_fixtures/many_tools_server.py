"""A hand-written stdio MCP server that offers many tools (no SDK: it costs little itself).

    python many_tools_server.py N            # N tools, all in one tools/list answer
    python many_tools_server.py N --page P   # N tools, P to a page (nextCursor for the rest)
    python many_tools_server.py N --log F    # append each tools/list cursor asked for to F
    python many_tools_server.py N --http P   # streamable HTTP (JSON answers) on 127.0.0.1:P/mcp
    python many_tools_server.py N --answer-mb M  # a call of t0 answers M MiB of text
    python many_tools_server.py N --id-last  # each answer's "id" after its "result"

Each tool is about 250 bytes, like a real one: a name, a sentence of description and an
input schema with two properties. ``call`` of any of them answers ``ok <name>``.
"""

from __future__ import annotations

import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("count", type=int)
parser.add_argument("--page", type=int, default=0)
parser.add_argument("--log")
parser.add_argument("--http", type=int)
parser.add_argument("--answer-mb", type=int, default=0)
parser.add_argument("--id-last", action="store_true")
options = parser.parse_args()


def tool(i: int) -> dict:
    return {"name": f"t{i}",
            "description": f"Tool number {i}: looks a thing up and says what it found there.",
            "inputSchema": {"type": "object", "properties": {
                "query": {"type": "string", "description": "what to look up"},
                "limit": {"type": "integer", "description": "how many answers"}},
                "required": ["query"]}}


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tools_page(cursor: str | None) -> dict:
    if options.log:
        with open(options.log, "a") as f:
            f.write(f"{cursor}\n")
    start = int(cursor or 0)
    end = options.count if not options.page else min(options.count, start + options.page)
    page: dict = {"tools": [tool(i) for i in range(start, end)]}
    if end < options.count:
        page["nextCursor"] = str(end)
    return page


def answer(request: dict) -> dict | None:
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        return None
    if method == "initialize":
        result: dict = {"protocolVersion": request["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "many", "version": "1"}}
    elif method == "tools/list":
        result = tools_page((request.get("params") or {}).get("cursor"))
    elif method == "tools/call":
        name = request["params"]["name"]
        text = "x" * (options.answer_mb * 1024 * 1024) if name == "t0" else f"ok {name}"
        result = {"content": [{"type": "text", "text": text}]}
    else:
        return {"jsonrpc": "2.0", "id": rid,
                "error": {"code": -32601, "message": f"no method {method}"}}
    if options.id_last:
        return {"jsonrpc": "2.0", "result": result, "id": rid}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def serve_http(port: int) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            reply = answer(json.loads(body))
            if reply is None:
                self.send_response(202)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - no stream of server messages
            self.send_response(405)
            self.send_header("content-length", "0")
            self.end_headers()

        do_DELETE = do_GET  # noqa: N815

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on {port}", flush=True)
    server.serve_forever()


if options.http:
    serve_http(options.http)
else:
    for line in sys.stdin:
        if line.strip() and (reply := answer(json.loads(line))) is not None:
            send(reply)
