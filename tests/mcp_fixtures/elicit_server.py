"""A small MCP server (stdio, official SDK) whose tool asks the client for values.

Run as ``python elicit_server.py [--log FILE] [--legacy]``. The tool ``fill(schema,
message, times)`` asks ``times`` times for values matching the JSON ``schema`` and returns
what came back, one line per request: ``accept {...}``, ``decline``, ``cancel`` or
``error <code> <message>``; with ``--log`` each line is also appended to FILE, so a test
sees what the server got whatever the model did with the result.

On a 2026-07-28 connection the requests go out in one ``InputRequiredResult`` and the
answers come back with the client's retry; ``--legacy`` makes the server take no
2026-07-28 envelope, so the client falls back to the 2025-11-25 handshake and each request
is an ``elicitation/create`` sent during the call.
"""

from __future__ import annotations

import argparse
import json

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    TextContent,
)

parser = argparse.ArgumentParser()
parser.add_argument("--log")
parser.add_argument("--legacy", action="store_true")
options = parser.parse_args()

server = MCPServer("asker")


def _said(result) -> str:
    line = result.action
    if result.action == "accept":
        line += " " + json.dumps(result.content, sort_keys=True)
    return line


def _done(lines: list[str]) -> CallToolResult:
    if options.log:
        with open(options.log, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    return CallToolResult(content=[TextContent(type="text", text="\n".join(lines) or "-")])


@server.tool()
async def fill(schema: str, ctx: Context, message: str = "Please fill in the form",
               times: int = 1) -> CallToolResult | InputRequiredResult:
    """Ask the client ``times`` times for values matching ``schema`` (JSON)."""
    requested = json.loads(schema)
    if options.legacy:
        lines = []
        for _ in range(times):
            try:
                result = await ctx.session.elicit_form(message=message,
                                                       requested_schema=requested,
                                                       related_request_id=ctx.request_id)
                lines.append(_said(result))
            except MCPError as exc:
                lines.append(f"error {exc.error.code} {exc.error.message}")
        return _done(lines)
    answers = ctx.input_responses
    if answers is None:
        ask = ElicitRequest(params=ElicitRequestFormParams(message=message,
                                                           requested_schema=requested))
        return InputRequiredResult(input_requests={f"q{i:04d}": ask for i in range(times)},
                                   request_state="asked")
    return _done([_said(answers[key]) for key in sorted(answers)])


@server.tool()
def ping() -> str:
    """Answer at once: the session is still there."""
    return "pong"


if options.legacy:  # a server of the 2025-11-25 era: every connection opens legacy
    import mcp.server.runner

    mcp.server.runner._has_modern_envelope = lambda params: False


if __name__ == "__main__":
    server.run()
